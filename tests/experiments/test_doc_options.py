#!/usr/bin/env python3
"""The options the README, docs/*.md and the experiment files' comments show a user, against the
programs that take them:
  test_doc_options.py --bin build/bin/starring
- every command line the docs show (in code spans and code blocks: `build/bin/starring train ...`,
  `scripts/sweep.sh NAME --quick`, `scripts/smpi_bench.sh ... -- -b 1M`, ...) uses only long
  options its program's `--help` lists: a renamed or removed option shows up here, not when a
  reader pastes the line;
- every option of `starring train|bench|bench-model|env --help` is named in docs/REFERENCE.md,
  in that command's own section (the README sends readers there for "every option");
- every default the docs state is the one `--help` shows: `--opt X` (default V), `--opt V` (the
  default), `(defaults `-b 1M -e 64M ...`)`, and the values in the README's table of train options
  (`--bucket-mb 25`, `--seed 42`: a reader takes them for the defaults).
One `--help` per program (a few seconds); nothing is trained."""
import os
import re
import subprocess
import sys
import unittest

import bin_main
from test_doc_links import code_texts, doc_files, ini_files

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BIN = None  # set from --bin

COMMANDS = ("train", "bench", "bench-model", "env")
# the heading of each command's section in docs/REFERENCE.md
SECTIONS = {"train": "Options of `starring train`", "bench": "The bench table",
            "bench-model": "`starring bench-model`", "env": "`starring env`"}
# scripts a doc line may call, with how to get their usage: their --help (a Python script's
# argparse, a shell script's usage text), whose `--option` words are the options they take
SCRIPTS = ("sweep.sh", "report.py", "add_run.py", "cost_model.py", "smpi_compare.py",
           "torch_baseline.py", "merge_traces.py", "smpi_bench.sh", "quickstart.sh", "test.sh",
           "build.sh", "setup.sh", "device_check.sh", "device_bundle.sh")
PROGRAM = re.compile(r"(?:(?<=\s)|^)(?:\S*/)?(?:starring (train|bench-model|bench|env)\b"
                     r"|scripts/([\w.]+))")
# where a command line ends: a pipe, a list, a redirection, a comment, the next program
END = re.compile(r"\s(?:\||\|\||&&|;|>|2>|&|#)(?:\s|$)|;\s|\)\s*$")
OPTION = re.compile(r"(?:(?<=\s)|(?<=\[)|^)--([a-z][a-z0-9-]*)")


def command_lines(text):
    """(program, the text of its arguments) for each program the text calls. A program is
    `starring COMMAND` or `scripts/NAME`; its arguments end where END says or at the next
    program; after a bare `--`, scripts/smpi_bench.sh passes them to `starring bench`."""
    hits = list(PROGRAM.finditer(text))
    for i, m in enumerate(hits):
        stop = hits[i + 1].start() if i + 1 < len(hits) else len(text)
        args = text[m.end():stop]
        end = END.search(args)
        if end:
            args = args[:end.start()]
        args = re.sub(r"'[^']*'|\"[^\"]*\"", "''", args)  # a quoted argument is a value
        prog = m.group(1) or m.group(2)
        if prog == "smpi_bench.sh" and re.search(r"(?:^|\s)--(?:\s|$)", args):
            own, _, rest = re.split(r"(?:^|\s)(--)(?:\s|$)", args, maxsplit=1)
            yield prog, own
            yield "bench", rest
        else:
            yield prog, args


def help_options(argv):
    """The long options a --help lists: for `starring`, its option lines; for a script, every
    `--option` word of its usage text."""
    p = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=REPO,
                       stdin=subprocess.DEVNULL)
    text = p.stdout + p.stderr
    if argv[0] == BIN:
        assert p.returncode == 0, (argv, text)
        return set(re.findall(r"^\s{2}(?:-\w \[ )?--([a-z0-9-]+)", text, re.M))
    return set(re.findall(r"--([a-z][a-z0-9-]*)", text)) | {"help"}


# an option line of `starring CMD --help`: `  -b [ --min-bytes ] arg (=1M)   text`
HELP_LINE = re.compile(r"^\s{2}(?:-(\w) \[ )?--([a-z0-9-]+)(?: \])?(?: \[=arg\(=[^)]*\)\])?"
                       r"(?: arg)?(?: \(=([^)]*)\))?", re.M)
# a default a doc states: "`--timeout S` (default 60", "`--metrics-loss all`, the default",
# "`--ps-shared-memory on` (the default)"
DEFAULT_AFTER = re.compile(r"`--([a-z][a-z0-9-]*)[^`]*`\s+\(default\s+([^\s),;]+)")
DEFAULT_GIVEN = re.compile(r"`--([a-z][a-z0-9-]*)\s+([^`\s|]+)`(?:,|\s+\()\s*the\s+default")
DEFAULTS_LIST = re.compile(r"\(defaults\s+`([^`]+)`")  # bench's `-b 1M -e 64M ...`
# the README's table of train options: `--opt VALUE` reads as the default, except these
# (an alternative to the default, not the default)
TABLE_EXAMPLES = {"hidden"}


def help_defaults(text):
    """{long option: default} and {short: long} of a `starring CMD --help`."""
    defaults, shorts = {}, {}
    for short, name, default in HELP_LINE.findall(text):
        if default:
            defaults[name] = default
        if short:
            shorts[short] = name
    return defaults, shorts


def same_value(doc, shown):
    try:
        return float(doc) == float(shown)  # 1e-8 and 1e-08, 25 and 25.0
    except ValueError:
        return doc == shown


def readme_table_options(readme):
    """(line, option, value) of each `--opt VALUE` in the README's table of train options, VALUE
    a literal (not a placeholder such as N or DIR, not a list of choices a|b)."""
    lines = readme.split("\n")
    start = lines.index("## Training and its options")
    for n, line in enumerate(lines[start:], start + 1):
        if line.startswith("## ") and n > start + 1:
            return
        if not line.startswith("| "):
            continue
        for m in re.finditer(r"`--([a-z][a-z0-9-]*) ([^`\s]+)`", line):
            value = m.group(2)
            if "|" in value or re.fullmatch(r"[A-Z_]+", value) or m.group(1) in TABLE_EXAMPLES:
                continue
            yield n, m.group(1), value


def stated_defaults(path):
    """(line, program or None, option, value, whether the option must have a default) of every
    default the file states. The README table's options without a default (`--metrics-file
    m.jsonl`) show a name to give, not a default."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    for rx in (DEFAULT_AFTER, DEFAULT_GIVEN):
        for m in rx.finditer(text):
            yield text.count("\n", 0, m.start()) + 1, None, m.group(1), m.group(2), True
    for m in DEFAULTS_LIST.finditer(text):
        words = m.group(1).split()
        for flag, value in zip(words[::2], words[1::2]):
            yield text.count("\n", 0, m.start()) + 1, "bench", flag.lstrip("-"), value, True
    if os.path.basename(path) == "README.md":
        for n, opt, value in readme_table_options(text):
            yield n, "train", opt, value, False


class DocOptions(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.known = {c: help_options([BIN, c, "--help"]) for c in COMMANDS}
        cls.defaults = {}
        for c in COMMANDS:
            p = subprocess.run([BIN, c, "--help"], capture_output=True, text=True, timeout=60)
            cls.defaults[c] = help_defaults(p.stdout)
        for s in SCRIPTS:
            path = os.path.join(REPO, "scripts", s)
            cls.known[s] = help_options(
                ([sys.executable] if s.endswith(".py") else ["bash"]) + [path, "--help"])

    def test_the_extraction_finds_what_it_should(self):
        found = list(command_lines(
            "scripts/mpirun.sh -np 4 build/bin/starring train --config x.ini --backend ring "
            "--summary-file s.json > out.txt; scripts/report.py mine --quiet  # --not-this"))
        self.assertEqual([(p, OPTION.findall(a)) for p, a in found],
                         [("mpirun.sh", []), ("train", ["config", "backend", "summary-file"]),
                          ("report.py", ["quiet"])])
        found = list(command_lines("scripts/smpi_bench.sh --np 4,16 -- -b 1M --backends ps"))
        self.assertEqual([(p, OPTION.findall(a)) for p, a in found],
                         [("smpi_bench.sh", ["np"]), ("bench", ["backends"])])
        found = list(command_lines("`--dataset fashion-mnist|mnist` and starring bench --json"))
        self.assertEqual([(p, OPTION.findall(a)) for p, a in found], [("bench", ["json"])])
        found = list(command_lines("scripts/sweep.sh s --launcher 'srun --mpi=pmix' --quick"))
        self.assertEqual([(p, OPTION.findall(a)) for p, a in found],
                         [("sweep.sh", ["launcher", "quick"])])
        self.assertIn("summary-file", self.known["train"])
        self.assertNotIn("summary-file", self.known["bench"])
        self.assertIn("quick", self.known["sweep.sh"])

    def test_every_option_a_doc_shows_exists(self):
        problems, seen = [], 0
        for path in doc_files() + ini_files():
            rel = os.path.relpath(path, REPO)
            for n, text in code_texts(path):
                for prog, args in command_lines(text):
                    if prog not in self.known:
                        continue
                    for opt in OPTION.findall(args):
                        seen += 1
                        if opt not in self.known[prog]:
                            name = prog if prog in SCRIPTS else f"starring {prog}"
                            problems.append(f"{rel}:{n}: {name} has no --{opt}: {text.strip()}")
        self.assertGreater(seen, 100)  # the extraction still reads the docs
        self.assertEqual(problems, [], "\n" + "\n".join(problems))

    def test_every_option_of_starring_is_in_its_section_of_the_reference(self):
        """Each command's options are named in that command's own section (a `## ` heading and
        what follows it up to the next): an option named only under another command's heading
        is not where a reader of this command looks. --help is left out: every command has it."""
        with open(os.path.join(REPO, "docs", "REFERENCE.md"), encoding="utf-8") as f:
            ref = f.read()
        sections = {}
        for part in re.split(r"^## ", ref, flags=re.M)[1:]:
            heading, _, body = part.partition("\n")
            sections[heading] = body
        missing = []
        for c, heading in SECTIONS.items():
            found = [body for h, body in sections.items() if heading in h]
            self.assertEqual(len(found), 1, f"docs/REFERENCE.md has no section on `starring {c}`")
            missing += [f"starring {c} --{o} (section '{heading}')"
                        for o in sorted(self.known[c] - {"help"})
                        if not re.search(rf"--{re.escape(o)}(?![a-z0-9-])", found[0])]
        self.assertEqual(missing, [], "options not in their command's section of docs/REFERENCE.md")

    def test_every_default_a_doc_states_is_the_one_help_shows(self):
        problems, seen = [], 0
        for path in doc_files():
            rel = os.path.relpath(path, REPO)
            for n, prog, opt, value, must in stated_defaults(path):
                # an option several commands take has one default (one Config): the first's
                progs = [prog] if prog else [c for c in COMMANDS if opt in self.defaults[c][0]][:1]
                if not progs:
                    problems.append(f"{rel}:{n}: no starring command has a default for --{opt}")
                for c in progs:
                    defaults, shorts = self.defaults[c]
                    name = shorts.get(opt, opt)
                    if name not in defaults:
                        if must:
                            problems.append(f"{rel}:{n}: starring {c} --{name} has no default")
                        continue
                    seen += 1
                    if not same_value(value, defaults[name]):
                        problems.append(f"{rel}:{n}: --{name} {value} is given as the default; "
                                        f"starring {c} --help says {defaults[name]}")
        self.assertGreater(seen, 15)  # the extraction still reads the docs
        self.assertEqual(problems, [], "\n" + "\n".join(problems))


if __name__ == "__main__":
    bin_main.main(sys.modules[__name__])
