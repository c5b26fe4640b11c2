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


def _fixture_transcript_outputs() -> set[str]:
    """The paths that the fixture transcripts of README.md and
    getting-started.md write, run from the checkout: each `-o FILE` (and the
    build's scan cache next to it, FILE.cache) and each `--mod-path DIR`."""
    outputs = set()
    for page in ("README.md", os.path.join("docs", "getting-started.md")):
        for command in re.findall(r"^\$ (kmodsyms .*fixtures/.*)$", _read(page), re.M):
            words = command.split()
            for flag, value in zip(words, words[1:]):
                if flag in ("-o", "--output"):
                    outputs |= {value, value + ".cache"}
                elif flag == "--mod-path":
                    outputs.add(value + "/")
    return outputs


def test_transcript_outputs_are_ignored_by_git():
    """What a reader who follows the docs from the checkout writes there does
    not show up in `git status`."""
    if not os.path.isdir(os.path.join(ROOT, ".git")) and not os.path.isfile(os.path.join(ROOT, ".git")):
        import pytest
        pytest.skip("not a git checkout")
    outputs = sorted(_fixture_transcript_outputs())
    assert "stage/" in outputs and "dtrace_syms" in outputs
    checked = subprocess.run(["git", "check-ignore", "--no-index", "--", *outputs], cwd=ROOT,
                             capture_output=True, text=True).stdout.split()
    assert sorted(set(outputs) - set(checked)) == []


def test_readme_says_where_the_corpora_are_read_and_unpacked():
    """The corpus tests write hundreds of MB: README names the place and
    how to move it, and the place it names by default is the code's."""
    text = _read("README.md")
    for words in ("KMODSYMS_CORPUS_CACHE", "KMODSYMS_KERNELS", "${XDG_CACHE_HOME:-~/.cache}/kmodsyms-corpus",
                  "../shared/kernels"):
        assert words in text, words
    env = {k: v for k, v in os.environ.items() if k not in ("KMODSYMS_CORPUS_CACHE", "XDG_CACHE_HOME")}
    default = subprocess.run([sys.executable, "-c", "from bench.corpus import _corpus_cache_dir; "
                              "print(_corpus_cache_dir())"], cwd=ROOT, env=env, check=True,
                             capture_output=True, text=True).stdout.strip()
    assert default == os.path.expanduser("~/.cache/kmodsyms-corpus")


def test_pytest_says_where_it_unpacks_once(tmp_path):
    """A test run names, once, where it reads the corpora and where it
    unpacks them, as the environment sets them, and that the corpus tests
    skip when the first does not exist (issue 31 item 9)."""
    env = {**os.environ, "KMODSYMS_CORPUS_CACHE": str(tmp_path / "cache"),
           "KMODSYMS_KERNELS": str(tmp_path / "kernels")}
    for absent in (" (absent: corpus tests skip)", ""):
        out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-p", "no:cacheprovider",
                              os.path.join(ROOT, "tests", "test_spans.py")], cwd=ROOT, env=env,
                             capture_output=True, text=True).stdout
        said = [line for line in out.splitlines() if line.startswith("kmodsyms corpora:")]
        assert said == [f"kmodsyms corpora: read from {tmp_path / 'kernels'}{absent} (KMODSYMS_KERNELS), "
                        f"unpacked into {tmp_path / 'cache'} (KMODSYMS_CORPUS_CACHE)"], out
        assert not os.path.exists(tmp_path / "cache")
        (tmp_path / "kernels").mkdir(exist_ok=True)


def test_corpus_skips_name_the_path_looked_for(tmp_path):
    """A corpus test skipped for want of its corpus names the tarball it
    looked for, where KMODSYMS_KERNELS puts it, for each corpus (issue 24
    item 15: one skip named ../shared/kernels whatever was looked for)."""
    env = {**os.environ, "KMODSYMS_KERNELS": str(tmp_path / "kernels"),
           "KMODSYMS_CORPUS_CACHE": str(tmp_path / "cache")}
    tests = ["tests/test_verify.py::test_arm64_corpus_linker_map_names_the_objects",
             "tests/test_corpora.py::test_every_ok_row", "tests/test_elfimage.py::test_corpus_vmlinux",
             "tests/test_loadable.py::test_corpus_every_loadable_size"]
    out = subprocess.run([sys.executable, "-m", "pytest", "-rs", "-q", "-p", "no:cacheprovider", *tests],
                         cwd=ROOT, env=env, capture_output=True, text=True).stdout
    reasons = sorted(set(re.findall(r"^SKIPPED \[\d+\] \S+: (.*)$", out, re.M)))
    assert reasons == [f"{tmp_path / 'kernels' / name}.tar.xz is absent"
                       for name in ("linux-6.12-arm64", "linux-6.12-defconfig")], out


def _c_api() -> tuple[list[str], list[str], str]:
    """libkmodsyms' exported functions (the version script's globals), the
    other public names of kmodsyms.h (types, enum constants, macros), and
    the header's text."""
    script = _read("libkmodsyms", "libkmodsyms.map")
    script = re.sub(r"/\*.*?\*/", "", script, flags=re.S)
    exported = [name for block in re.findall(r"global:(.*?)(?:local:|\})", script, re.S)
                for name in re.findall(r"\b(kms_\w+)\s*;", block)]
    header = _read("libkmodsyms", "kmodsyms.h")
    code = re.sub(r"/\*.*?\*/", "", header, flags=re.S)
    names = set(re.findall(r"^#define (KMS_\w+)", code, re.M))
    names |= set(re.findall(r"\b(?:struct|enum) (kms_\w+) \{", code))
    names |= set(re.findall(r"\}\s*(kms_\w+);", code))          # typedef ... } kms_error;
    names |= set(re.findall(r"typedef struct \w+ (kms_\w+);", code))
    for body in re.findall(r"\benum kms_\w+ \{(.*?)\}", code, re.S):
        names |= set(re.findall(r"\b(KMS_\w+)\s*(?:=|,|$)", body, re.M))
    return exported, sorted(names), header


def test_c_api_is_documented_in_its_header_and_readme():
    """Every function libkmodsyms exports is declared in kmodsyms.h, right
    below a comment saying what it does, and the header declares no other;
    libkmodsyms/README.md's API table names every function, type, flag and
    constant of the header."""
    exported, names, header = _c_api()
    assert len(exported) == len(set(exported)) > 20
    declared = set(re.findall(r"^[\w ]+?\**\b(kms_\w+)\(", re.sub(r"/\*.*?\*/", "", header, flags=re.S),
                              re.M))
    assert declared == set(exported)
    undocumented = [name for name in exported if not re.search(
        r"\*/\n(?:[^\n;]*\n)?[^\n;]*?\**\b" + name + r"\(", header)]
    assert undocumented == [], "functions of kmodsyms.h without a comment above them"
    readme = _read("libkmodsyms", "README.md")
    listed = set(re.findall(r"`(?:struct |enum )?(\w+)(?:\(\))?`", readme))
    missing = [n for n in exported + names if n not in listed]
    assert missing == [], "names of kmodsyms.h that libkmodsyms/README.md does not list"
    assert {"kms_resolve_lines", "kms_line_sym", "KMS_FILE_GUESSED_MODULES", "KMS_E_NO_SYMS",
            "KMS_LOAD_FALLBACK", "KMS_LOAD_DEFER_MODULES"} <= set(exported + names)
