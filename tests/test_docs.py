"""The documentation cannot drift from the code: docs/cli.md is regenerated
from --help and the examples of the README, getting-started.md and format.md
from the fixture (docs/gen_examples.py), and compared; the README's set-up
commands are the ones CI runs."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from conftest import ROOT

README = os.path.join(ROOT, "README.md")
SETUP_COMMAND = ("pip install . && kmodsyms build --kbuild fixtures/kbuild -o dtrace_syms && "
                 "kmodsyms info dtrace_syms && kmodsyms resolve --syms dtrace_syms "
                 "--kallsyms fixtures/kbuild/kallsyms 0xffffffffab600400")
TEST_COMMAND = "pip install '.[test]' && python -m pytest"


def _read(*parts: str) -> str:
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as f:
        return f.read()


def _setup_blocks() -> list[str]:
    """The fenced code blocks of README.md's "Set up" section."""
    text = _read("README.md")
    m = re.search(r"^## Set up[^\n]*\n(.*?)(?=^## )", text, re.S | re.M)
    assert m, "README.md has no '## Set up' section"
    return re.findall(r"^```[a-z]*\n(.*?)^```", m.group(1), re.S | re.M)


def test_cli_md_is_generated_from_help():
    generated = subprocess.run([sys.executable, os.path.join(ROOT, "docs", "gen_cli.py")],
                               cwd=ROOT, check=True, capture_output=True, text=True,
                               env={**os.environ, "COLUMNS": "37"}).stdout
    assert generated == _read("docs", "cli.md"), \
        "docs/cli.md is stale: run 'python docs/gen_cli.py > docs/cli.md'"


def test_examples_are_generated_from_the_fixture():
    """Every transcript, Python session and generated region of README.md,
    getting-started.md and format.md is what the fixture gives today."""
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "docs", "gen_examples.py"), "--check"],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr


def test_cli_md_covers_every_command():
    from typer.main import get_command
    from kmodsyms.cli.app import app
    text = _read("docs", "cli.md")
    for name in get_command(app).commands:
        assert f"## `kmodsyms {name}`" in text


def test_readme_setup_commands_verbatim():
    lines = [line for block in _setup_blocks() for line in block.splitlines()]
    assert SETUP_COMMAND in lines
    assert TEST_COMMAND in lines


def test_ci_runs_the_readme_test_command():
    ci = _read(".ci", "run")
    m = re.search(r'^test_command=\$\(grep -m1 "(.*)" README\.md\)$', ci, re.M)
    assert m, ".ci/run no longer takes its test command from README.md"
    pattern = m.group(1)  # no \\, \", \$ or \` inside: bash passes it to grep as is
    first = subprocess.run(["grep", "-m1", pattern, "README.md"], cwd=ROOT, check=True,
                           capture_output=True, text=True).stdout.rstrip("\n")
    assert first == TEST_COMMAND


def test_license_matches_the_declared_licence():
    """LICENSE, pyproject.toml and the SPDX headers name one licence, and
    LICENSE carries the full text of each licence of the expression."""
    expression = "GPL-2.0-only OR UPL-1.0"
    licence = _read("LICENSE")
    assert licence.splitlines()[0] == f"SPDX-License-Identifier: {expression}"
    assert f'license = {{text = "{expression}"}}' in _read("pyproject.toml")
    assert f"# SPDX-License-Identifier: {expression}" in _read("contrib", "kbuild",
                                                               "Makefile.dtrace_syms")
    assert "GNU GENERAL PUBLIC LICENSE\n                       Version 2, June 1991" in licence
    assert "TERMS AND CONDITIONS FOR COPYING, DISTRIBUTION AND MODIFICATION" in licence
    assert "The Universal Permissive License (UPL), Version 1.0" in licence
    assert "a reference to the UPL must be included" in licence


def _anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives the headings of a Markdown text: lower
    case, punctuation dropped, spaces as '-', a repeated one suffixed -1,
    -2, ... (code blocks hold no headings)."""
    anchors, seen = set(), {}
    for line in re.sub(r"^```.*?^```", "", markdown, flags=re.S | re.M).splitlines():
        m = re.match(r"#{1,6} +(.*?) *#*$", line)
        if m:
            slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            count = seen[slug] = seen.get(slug, -1) + 1
            anchors.add(f"{slug}-{count}" if count else slug)
    return anchors


def test_every_relative_link_lands():
    """Every link of the repository's Markdown to a file of it names a file
    there, and a heading of it when it has an anchor (two headings alike,
    such as two "Cost" sections, would make the second one '#cost-1')."""
    pages = []
    for d, dirs, files in os.walk(ROOT):
        dirs[:] = [sub for sub in dirs if not sub.startswith(".")]     # .git, caches
        pages += [os.path.join(d, f) for f in files if f.endswith(".md")]
    broken = []
    for page in pages:
        text = re.sub(r"^```.*?^```", "", _read(page), flags=re.S | re.M)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):        # https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
            if not os.path.exists(dest) or (anchor and dest.endswith(".md")
                                            and anchor not in _anchors(_read(dest))):
                broken.append(f"{os.path.relpath(page, ROOT)}: {target}")
    assert len(pages) > 10 and broken == []
