"""Timing helpers and machine description."""

from __future__ import annotations

import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from typing import Callable, Optional, Sequence

from .corpus import ROOT


def median(xs: Sequence[float]) -> float:
    return statistics.median(xs)


def wall(cmd: Sequence[str], cwd: Optional[str] = None, stdout=subprocess.DEVNULL,
         env=None) -> float:
    """Wall seconds of one whole process; raises on a non-zero exit."""
    t0 = time.perf_counter()
    proc = subprocess.run(list(cmd), cwd=cwd, stdout=stdout, stderr=subprocess.PIPE, env=env)
    dt = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])}{' ...' if len(cmd) > 4 else ''} exited "
                           f"{proc.returncode}: {proc.stderr.decode(errors='replace').strip()[-500:]}")
    return dt


def interleaved(fns: Sequence[Callable[[], float]], runs: int, warmup: int = 1) -> list[list[float]]:
    """Run each of ``fns`` ``warmup`` times untimed, then ``runs`` rounds of
    all of them alternately (so drift hits ours and the baseline alike).
    Each fn returns its own measured seconds."""
    for _ in range(warmup):
        for fn in fns:
            fn()
    samples: list[list[float]] = [[] for _ in fns]
    for _ in range(runs):
        for i, fn in enumerate(fns):
            samples[i].append(fn())
    return samples


def kmodsyms_cmd() -> list[str]:
    """The ``kmodsyms`` console script of this interpreter (not a pyenv shim,
    whose bash start-up would be billed to us), else ``python -m kmodsyms``:
    the same entry point (kmodsyms.__main__, which runs resolve and lookup
    without typer), not the typer CLI behind it."""
    script = os.path.join(os.path.dirname(sys.executable), "kmodsyms")
    if os.path.exists(script):
        return [script]
    found = shutil.which("kmodsyms")
    if found and "shims" not in found:
        return [found]
    return [sys.executable, "-m", "kmodsyms"]


def machine() -> dict:
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        cpu = platform.processor()
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    commit = ""
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "src", "libkmodsyms"], cwd=ROOT, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL).stdout.strip()
        if commit and dirty:
            commit += "+dirty(src/, libkmodsyms/)"
    except OSError:
        pass
    import numpy
    return {
        "nproc": os.cpu_count(),
        "usable_cpus": usable,
        "cpu": cpu,
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "numpy": numpy.__version__,
        "kernel": platform.release(),
        "git": commit,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
