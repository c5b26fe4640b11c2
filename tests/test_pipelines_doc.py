"""docs/pipelines.md cannot drift: every ``$`` line of its console blocks
runs with bash, in a directory holding the fixture's dtrace_syms and
kallsyms, and must print exactly the lines under it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest
from conftest import FIXTURE, ROOT

DOC = os.path.join(ROOT, "docs", "pipelines.md")


def _examples() -> list[tuple[str, str]]:
    text = open(DOC, encoding="utf-8").read()
    examples = []
    for block in re.findall(r"^```console\n(.*?)^```", text, re.S | re.M):
        for command, output in re.findall(r"^\$ (.*)\n((?:(?!\$ ).*\n)*)", block, re.M):
            examples.append((command, output))
    return examples


EXAMPLES = _examples()


def test_the_doc_has_examples():
    assert len(EXAMPLES) >= 9


@pytest.fixture(scope="module")
def workdir(fixture_syms, tmp_path_factory):
    path = tmp_path_factory.mktemp("pipelines")
    shutil.copy(fixture_syms, path / "dtrace_syms")
    shutil.copy(os.path.join(FIXTURE, "kallsyms"), path / "kallsyms")
    return path


@pytest.mark.parametrize("command,output", EXAMPLES, ids=[c[:60] for c, _ in EXAMPLES])
def test_example(workdir, command, output):
    script = f'kmodsyms() {{ "{sys.executable}" -m kmodsyms "$@"; }}\n{command}\n'
    run = subprocess.run(["bash", "-c", script], cwd=workdir, capture_output=True, text=True)
    assert run.stdout == output, run.stderr
