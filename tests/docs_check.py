#!/usr/bin/env python3
"""The documentation check (part of tests/run.sh; python3, stdlib only).

README.md is the front door and docs/ holds one file per topic. This check
fails (exit 1, one line per problem) when:
  - README.md is longer than MAX_README_LINES lines;
  - a file in docs/ is not linked from README.md;
  - a relative link in README.md or docs/*.md names a file that does not
    exist, or a #section that the Markdown file it names has no heading for.
It prints "docs: ... passed" or "docs: ... FAILED" as its last line.

Usage: tests/docs_check.py [REPO_ROOT]   (default: the folder above tests/)
"""
import os
import re
import sys

MAX_README_LINES = 400

# [text](target) -- target up to the closing parenthesis, without spaces.
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def strip_code(text):
    """The text without fenced code blocks and inline code spans."""
    out, fenced = [], False
    for line in text.split("\n"):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            out.append("")
            continue
        out.append("" if fenced else re.sub(r"`[^`]*`", "", line))
    return "\n".join(out)


def anchor(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text only
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path):
    """Every anchor the Markdown file at `path` defines (duplicates numbered)."""
    seen, found = {}, set()
    with open(path, encoding="utf-8") as f:
        text = f.read()
    fenced = False
    for line in text.split("\n"):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        m = None if fenced else HEADING.match(line)
        if not m:
            continue
        a = anchor(m.group(2))
        n = seen.get(a, 0)
        seen[a] = n + 1
        found.add(a if n == 0 else "%s-%d" % (a, n))
    return found


def check_links(root, md_path, problems):
    """Appends a problem for each relative link of `md_path` that does not resolve.

    Returns the set of resolved target files (absolute, normalised)."""
    with open(md_path, encoding="utf-8") as f:
        text = strip_code(f.read())
    targets = set()
    rel_md = os.path.relpath(md_path, root)
    for lineno, line in enumerate(text.split("\n"), 1):
        for target in LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            path_part, _, fragment = target.partition("#")
            if path_part:
                dest = os.path.normpath(os.path.join(os.path.dirname(md_path), path_part))
            else:
                dest = md_path
            where = "%s:%d: link %s" % (rel_md, lineno, target)
            if not os.path.exists(dest):
                problems.append("%s: no such file %s" % (where, os.path.relpath(dest, root)))
                continue
            targets.add(os.path.abspath(dest))
            if fragment and dest.endswith(".md") and fragment not in anchors(dest):
                problems.append("%s: %s has no section #%s" %
                                (where, os.path.relpath(dest, root), fragment))
    return targets


def main(argv):
    root = os.path.abspath(argv[1] if len(argv) > 1 else
                           os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    readme = os.path.join(root, "README.md")
    docs = os.path.join(root, "docs")
    problems = []

    with open(readme, encoding="utf-8") as f:
        lines = f.read().count("\n")
    if lines > MAX_README_LINES:
        problems.append("README.md: %d lines, more than %d: move a topic into docs/" %
                        (lines, MAX_README_LINES))

    doc_files = sorted(os.path.join(docs, n) for n in os.listdir(docs)) if os.path.isdir(docs) else []
    linked = check_links(root, readme, problems)
    for path in doc_files:
        if path.endswith(".md"):
            check_links(root, path, problems)
        if os.path.isfile(path) and os.path.abspath(path) not in linked:
            problems.append("%s: not linked from README.md" % os.path.relpath(path, root))

    for p in problems:
        print("docs: " + p)
    summary = "README.md %d lines, %d files in docs/" % (lines, len(doc_files))
    if problems:
        print("docs: %s; %d problems: check FAILED" % (summary, len(problems)))
        return 1
    print("docs: %s; every docs file linked, every link resolves: check passed" % summary)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
