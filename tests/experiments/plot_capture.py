"""Catching the report's figures instead of writing them, for the plot tests
(test_report_plots.py, test_report_studies.py, test_report_legibility.py)."""
from unittest import mock


def figures_of(module, draw, runs):
    """The figures draw(runs, None) makes, caught at module._save instead of written."""
    figs = []
    with mock.patch.object(module, "_save", lambda fig, out_dir, name: figs.append(fig) or name):
        draw(runs, None)
    return figs
