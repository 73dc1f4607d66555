#!/usr/bin/env python3
"""The README and docs/*.md as a reader follows them: every relative link and image resolves to a
file of the repository, every `#anchor` to a heading of its target (GitHub's heading ids), every
repository path the text names in backticks (`scripts/sweep.sh`, `docs/main_breakdown.png`)
exists, and so does every one a command in a code span, a code block or an experiment file's
comment names (`--config experiments/fmnist_mlp.ini`), and the README's first commands are the
two it promises (scripts/quickstart.sh and scripts/test.sh, both executable). Standard library
only; no binary."""
import os
import re
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
# [text](target) and ![alt](target), a target with at most one (...) inside, an optional "title"
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]"
                  r"\(([^()\s]*(?:\([^()]*\))?[^()\s]*)(?:\s+\"[^\"]*\")?\)")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
CODE_SPAN_ACROSS = re.compile(r"(`+)(.+?)\1", re.S)  # a span may run over a line break
# repository paths named in backticks: a top-level folder of the project, then a plain path
REPO_PATH = re.compile(r"^(?:scripts|tests|common|allreduce|ps|trainer|experiments|cmake|docs|\.ci)"
                       r"/[A-Za-z0-9_./-]*[A-Za-z0-9_]$")


def doc_files():
    files = [os.path.join(REPO, "README.md")]
    docs = os.path.join(REPO, "docs")
    files += sorted(os.path.join(docs, f) for f in os.listdir(docs) if f.endswith(".md"))
    return files


def ini_files():
    out = []
    for folder in ("experiments", os.path.join("experiments", "sweeps")):
        d = os.path.join(REPO, folder)
        out += sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".ini"))
    return out


def code_texts(path):
    """(line, text) of what a file shows as code: each code block's lines (a `\\` continuation
    joined), each code span (which may run over a line break) and, in an INI file, each comment."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if path.endswith(".ini"):
        for n, line in enumerate(text.split("\n"), 1):
            if line.lstrip().startswith(("#", ";")):
                yield n, line.lstrip("#; ")
        return
    prose, inside, block, start = [], False, "", 0
    for n, line in enumerate(text.split("\n"), 1):
        if FENCE.match(line):
            inside = not inside
            prose.append("")
            continue
        if inside:
            if block == "":
                start = n
            block += line
            if line.endswith("\\"):
                block = block[:-1] + " "
                continue
            yield start, block
            block = ""
            prose.append("")
        else:
            prose.append(line)
    body = "\n".join(prose)
    # paragraph by paragraph, so that one stray backtick cannot pair with the next section's
    offset = 0
    for para in re.split(r"\n\s*\n", body):
        first = body.index(para, offset)
        offset = first + len(para)
        for m in CODE_SPAN_ACROSS.finditer(para):
            line = body.count("\n", 0, first + m.start()) + 1
            yield line, m.group(2).replace("\n", " ").replace("\\|", "|")


def prose_lines(text):
    """(line number, line) outside fenced code blocks."""
    inside = False
    for n, line in enumerate(text.split("\n"), 1):
        if FENCE.match(line):
            inside = not inside
            continue
        if not inside:
            yield n, line


def slug(title):
    """GitHub's id for a heading: the text without markup, lower case, punctuation dropped
    (hyphens and underscores kept), spaces to hyphens."""
    t = CODE_SPAN.sub(lambda m: m.group(2), title)
    t = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", t)  # a link's text
    t = t.replace("*", "")
    t = t.strip().lower()
    t = re.sub(r"[^\w\- ]", "", t)
    return t.replace(" ", "-")


def anchors(path, cache={}):
    if path not in cache:
        seen, ids = {}, set()
        with open(path, encoding="utf-8") as f:
            for _, line in prose_lines(f.read()):
                m = HEADING.match(line)
                if not m:
                    continue
                s = slug(m.group(2))
                k = seen.get(s, 0)
                seen[s] = k + 1
                ids.add(s if k == 0 else f"{s}-{k}")
        cache[path] = ids
    return cache[path]


def links(path):
    """(line, target) of every link and image outside code."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    for n, line in prose_lines(text):
        bare = CODE_SPAN.sub("", line)
        for m in LINK.finditer(bare):
            yield n, m.group(1)


def problems_in(path):
    out = []
    rel = os.path.relpath(path, REPO)
    for n, target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        dest = path if not file_part else os.path.normpath(
            os.path.join(os.path.dirname(path), file_part))
        if not os.path.exists(dest):
            out.append(f"{rel}:{n}: {target}: no such file {os.path.relpath(dest, REPO)}")
            continue
        if not os.path.realpath(dest).startswith(os.path.realpath(REPO) + os.sep):
            out.append(f"{rel}:{n}: {target}: outside the repository")
            continue
        if anchor:
            if not dest.endswith(".md"):
                out.append(f"{rel}:{n}: {target}: an anchor into a file that is not Markdown")
            elif anchor not in anchors(dest):
                out.append(f"{rel}:{n}: {target}: no heading with id #{anchor} in "
                           f"{os.path.relpath(dest, REPO)}")
    return out


def named_paths(path):
    """(line, path) of repository paths written in backticks in the prose."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    for n, line in prose_lines(text):
        for m in CODE_SPAN.finditer(line):
            word = m.group(2).strip()
            # placeholders (experiments/sweeps/NAME.ini) are not paths
            if REPO_PATH.match(word) and not re.search(r"\b(NAME|DIR|PATH|FILE)\b", word):
                yield n, word


def command_paths(path):
    """(line, path) of repository paths inside what a file shows as code: a command's script,
    config or fixture (`--config experiments/fmnist_mlp.ini`), in code spans, code blocks and
    an INI file's comments; not placeholders (NAME, DIR, PATH, FILE) or patterns (* { <)."""
    for n, text in code_texts(path):
        for word in re.split(r"[\s'\"`(),;=]+", text):
            word = word.rstrip(".:")
            if REPO_PATH.match(word) and not re.search(r"\b(NAME|DIR|PATH|FILE)\b|[*{<]", word):
                yield n, word


class DocLinks(unittest.TestCase):
    def test_every_relative_link_and_anchor_resolves(self):
        problems = [p for f in doc_files() for p in problems_in(f)]
        self.assertEqual(problems, [], "\n" + "\n".join(problems))

    def test_every_named_repository_path_exists(self):
        missing = [f"{os.path.relpath(f, REPO)}:{n}: {p}" for f in doc_files()
                   for n, p in named_paths(f) if not os.path.exists(os.path.join(REPO, p))]
        self.assertEqual(missing, [], "\n" + "\n".join(missing))

    def test_every_path_a_command_names_exists(self):
        paths = [(f, n, p) for f in doc_files() + ini_files() for n, p in command_paths(f)]
        self.assertGreater(len(paths), 100)  # the extraction still reads the docs
        missing = [f"{os.path.relpath(f, REPO)}:{n}: {p}" for f, n, p in paths
                   if not os.path.exists(os.path.join(REPO, p))]
        self.assertEqual(missing, [], "\n" + "\n".join(missing))

    def test_the_docs_link_back_to_the_readme(self):
        for f in doc_files()[1:]:
            targets = [t for _, t in links(f)]
            self.assertIn("../README.md", targets, os.path.relpath(f, REPO))

    def test_the_readme_opens_with_the_two_commands(self):
        with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
            text = f.read()
        block = re.search(r"^```sh\n(.*?)^```", text, re.S | re.M)
        self.assertTrue(block, "no sh code block in README.md")
        commands = [line.split("#")[0].strip() for line in block.group(1).splitlines()]
        self.assertEqual(commands, ["scripts/quickstart.sh", "scripts/test.sh"])
        for c in commands:
            self.assertTrue(os.access(os.path.join(REPO, c), os.X_OK), c)

    def test_the_checker_finds_what_it_should(self):
        # the checker itself: a broken file, a broken anchor and a good anchor in a scratch file
        import tempfile
        with tempfile.TemporaryDirectory(dir=os.path.join(REPO, "docs")) as tmp:
            page = os.path.join(tmp, "page.md")
            with open(page, "w", encoding="utf-8") as f:
                f.write("# A `code` title: yes\n\n## Same\n\n## Same\n\n"
                        "[ok](#a-code-title-yes) [ok](#same-1) [bad](#nothing) "
                        "[gone](missing.md) `[not a link](nowhere.md)`\n\n"
                        "```\n[in code](nowhere.md)\n```\n")
            found = problems_in(page)
            self.assertEqual(len(found), 2, found)
            self.assertIn("#nothing", found[0])
            self.assertIn("missing.md", found[1])


if __name__ == "__main__":
    unittest.main(verbosity=2)
