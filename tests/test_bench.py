"""The benchmark harness runs (no timing assertions): ``python -m bench``
on a small synthetic corpus made from fixtures/kbuild."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_bench_quick_resolve_many(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--only", "resolve_many",
         "--synthetic", "2", "--json", str(out)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "resolve_many" in proc.stdout
    doc = json.loads(out.read_text())
    assert doc["corpus"]["kind"] == "synthetic"
    assert {"nproc", "cpu", "python", "kernel"} <= set(doc["machine"])
    [row] = doc["rows"]
    assert row["id"] == "resolve_many" and row["status"] == "ok"
    assert row["ours"] > 0 and len(row["samples"]["seconds"]) == 3


def test_bench_quick_c_load_modules(tmp_path):
    """The C row that reads loaded modules' .ko files: on the synthetic
    corpus (fixtures/kbuild, its fuse.ko) the file is matched, else the
    row fails."""
    if not (shutil.which("make") and shutil.which(os.environ.get("CC", "cc"))):
        pytest.skip("cc or make is not installed")
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--only", "12", "--synthetic", "2",
         "--json", str(out)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    [row] = json.loads(out.read_text())["rows"]
    assert row["id"] == "c_load_modules" and row["status"] == "ok", row
    assert len(row["samples"]["ours"]) == len(row["samples"]["baseline"]) == 3
    assert "the .ko of 1 of the 1 loaded modules" in row["note"]
    assert "22 module lines sized" in row["note"]


def test_bench_quick_c_dtrace_update(tmp_path):
    """DTrace's module table from libkmodsyms against the kallmodsyms text
    read loop, on the synthetic corpus (fixtures/kbuild)."""
    if not (shutil.which("make") and shutil.which(os.environ.get("CC", "cc"))):
        pytest.skip("cc or make is not installed")
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--only", "c_dtrace_update", "--synthetic", "2",
         "--json", str(out)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    [row] = json.loads(out.read_text())["rows"]
    assert row["id"] == "c_dtrace_update" and row["status"] == "ok", row
    assert len(row["samples"]["ours"]) == len(row["samples"]["baseline"]) == 3
    assert "symbols in 10 modules" in row["note"], row["note"]
