"""Catching the report's figures instead of writing them, for the plot tests
(test_report_plots.py, test_report_traffic.py, test_report_studies.py, test_report_legibility.py),
and reading a drawn line back."""
from unittest import mock


def figures_of(module, draw, runs):
    """The figures draw(runs, None) makes, caught at module._save instead of written."""
    figs = []
    with mock.patch.object(module, "_save", lambda fig, out_dir, name: figs.append(fig) or name):
        draw(runs, None)
    return figs


def line_points(ax, label_start):
    """{x: y} of the one line of `ax` whose label starts with `label_start` (x rounded to 6
    places); an AssertionError naming the labels when there is not exactly one."""
    lines = [l for l in ax.get_lines() if l.get_label().startswith(label_start)]
    assert len(lines) == 1, [l.get_label() for l in ax.get_lines()]
    return dict(zip((round(x, 6) for x in lines[0].get_xdata()), lines[0].get_ydata()))
