"""The benchmark harness runs (no timing assertions): ``python -m bench``
on a small synthetic corpus made from fixtures/kbuild."""

from __future__ import annotations

import json
import os
import subprocess
import sys

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
