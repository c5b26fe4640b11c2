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


def test_bench_quick_c_load_compressed(tmp_path):
    """The rows of a host with 150 loaded modules installed as .ko.xz and
    .ko.zst, on the synthetic corpus: 150 copies of fixtures/kbuild's
    fuse.ko, each decompressed and matched (else the row fails) with every
    one of its kallsyms lines sized; cold, again, deferred and the first
    module read each timed; the rows' ids those bench/README.md's Rows table
    lists (issue 21)."""
    if not (shutil.which("make") and shutil.which(os.environ.get("CC", "cc"))):
        pytest.skip("cc or make is not installed")
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--only", "c_load_compressed", "--synthetic",
         "2", "--json", str(out)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    rows = {row["id"]: row for row in json.loads(out.read_text())["rows"]}
    assert sorted(rows) == ["c_load_compressed_xz", "c_load_compressed_zst"]
    with open(os.path.join(ROOT, "bench", "README.md"), encoding="utf-8") as f:
        listed = f.read()
    fuse_lines = sum(1 for line in open(os.path.join(ROOT, "fixtures", "kbuild", "kallsyms"))
                     if line.rstrip("\n").endswith("\t[fuse]"))
    assert "| `c_load_compressed_xz`, `c_load_compressed_zst` (15) |" in listed
    for rid, tool in (("c_load_compressed_xz", "xz"), ("c_load_compressed_zst", "zstd")):
        row = rows[rid]
        if not shutil.which(tool):
            assert row["status"] == "skipped" and row["note"] == f"no {tool} tool", row
            continue
        assert row["status"] == "ok", row
        assert [len(row["samples"][k]) for k in ("ours", "again", "baseline", "deferred",
                                                 "first_module")] == [3] * 5
        assert "150 copies of the corpus's loaded modules" in row["note"]
        assert f"{150 * fuse_lines:,} lines sized" in row["note"], row["note"]
        assert "kms_read_modules() of one (fuse_c000)" in row["note"], row["note"]
