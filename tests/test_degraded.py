"""Degraded mode: without a usable dtrace_syms for the running kernel the
CLI still answers, from kallsyms alone, with one warning line; the API
only when asked (``load(fallback=True)``); a file the user names, and
``--strict``, stay errors; ``--force`` over a mismatched file always warns.

Checked on this host's real /proc/kallsyms (skipped when it hides its
addresses), where no dtrace_syms of the running kernel is installed
(skipped if one is)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT
from kmodsyms import load
from kmodsyms.build.layout import Placed
from kmodsyms.errors import KmodsymsError, StaleError
from kmodsyms.live import default_syms_path


def _live_kallsyms() -> list[tuple[int, str, str, str]]:
    """This host's /proc/kallsyms: (address, letter, name, module)."""
    try:
        with open("/proc/kallsyms") as f:
            lines = f.read().splitlines()
    except OSError as e:
        pytest.skip(f"/proc/kallsyms: {e.strerror}")
    rows = []
    for line in lines:
        address, letter, rest = line.split(" ", 2)
        name, _, module = rest.partition("\t")
        rows.append((int(address, 16), letter, name, module.strip("[]")))
    if not any(a for a, *_ in rows):
        pytest.skip("/proc/kallsyms hides its addresses from this user (kptr_restrict)")
    if os.path.exists(default_syms_path()):
        pytest.skip(f"{default_syms_path()} is installed: not degraded here")
    return rows


def _run(*args, stdin=None):
    return subprocess.run([sys.executable, "-m", "kmodsyms", *args], input=stdin,
                          capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": ROOT})


def _unique_core_functions(rows, count=50):
    seen = {}
    for a, letter, name, module in rows:
        seen.setdefault(a, []).append((letter, name, module))
    picks = [(a, entries[0][1]) for a, entries in sorted(seen.items())
             if len(entries) == 1 and entries[0][0] in "tT" and not entries[0][2]]
    return picks[::max(1, len(picks) // count)][:count]


def test_cli_answers_from_the_real_kallsyms_alone():
    rows = _live_kallsyms()
    picks = _unique_core_functions(rows)
    out = _run("resolve", "--json", *[f"{a + 1:#x}" for a, _ in picks])
    assert out.returncode == 0, out.stderr
    warning, = out.stderr.splitlines()
    assert warning.startswith("kmodsyms: warning: answering from /proc/kallsyms alone") and \
        default_syms_path() in warning and "No such file" in warning
    docs = [json.loads(line) for line in out.stdout.splitlines()]
    assert [(d["symbol"], d["offset"], d["module"], d["builtin_modules_known"]) for d in docs] == \
        [(name, 1, "vmlinux", False) for _, name in picks]
    # A loaded module's symbol keeps its module.
    loaded = [(a, name, module) for a, letter, name, module in rows if module
              and letter in "tT" and not module.startswith("__builtin__") and module != "bpf"]
    if loaded:
        a, name, module = loaded[0]
        doc = json.loads(_run("resolve", "--json", hex(a)).stdout)
        assert (doc["module"], doc["origin"]) == (module, "loadable")


def test_kallmodsyms_keeps_its_shape():
    rows = _live_kallsyms()
    out = _run("kallmodsyms")
    assert out.returncode == 0 and len(out.stderr.splitlines()) == 1
    lines = out.stdout.splitlines()
    shown = [r for r in rows if r[0] or r[1] in "aA"]
    assert len(lines) == len(shown)
    for line, (a, letter, name, module) in zip(lines, shown):
        assert line == f"{a:016x} 0 {letter} {name}" + (f"\t[{module}]" if module else "")


def test_strict_and_named_files_stay_errors(tmp_path):
    _live_kallsyms()
    strict = _run("resolve", "--strict", "0xffffffff81000000")
    assert strict.returncode == 2 and strict.stdout == ""
    assert strict.stderr.startswith("kmodsyms: error: ") and len(strict.stderr.splitlines()) == 1
    named = _run("lookup", "--syms", str(tmp_path / "absent"), "do_syscall_64")
    assert named.returncode == 2 and named.stdout == ""
    assert str(tmp_path / "absent") in named.stderr and len(named.stderr.splitlines()) == 1


def test_api_is_strict_unless_asked(monkeypatch, fixture_syms):
    _live_kallsyms()
    with pytest.raises(KmodsymsError):
        load()
    warnings = []
    degraded = load(fallback=True, warn=warnings.append)
    assert len(warnings) == 1
    assert degraded.stats.builtin_modules_known is False
    assert default_syms_path() in degraded.stats.degraded
    # Stale, not missing: another kernel's file where the running one's should be.
    monkeypatch.setattr("kmodsyms.resolver.default_syms_path", lambda: fixture_syms)
    with pytest.raises(StaleError):
        load()
    warnings.clear()
    stale = load(fallback=True, warn=warnings.append)
    assert stale.stats.builtin_modules_known is False and "6.12.0-kmodsyms-fixture" in warnings[0]


def test_force_over_another_kernels_file_warns_every_run(fixture_syms):
    rows = _live_kallsyms()
    (address, name), = _unique_core_functions(rows, 1)
    for _ in range(2):
        out = _run("resolve", "--syms", fixture_syms, "--force", hex(address))
        assert out.returncode == 0
        warning, = out.stderr.splitlines()
        assert "--force" in warning and "6.12.0-kmodsyms-fixture" in warning
    warnings = []
    load(fixture_syms, force=True, warn=warnings.append)
    assert len(warnings) == 1


def test_degraded_answers_come_from_a_snapshot_too():
    """With the default file missing, the first run saves a snapshot of
    kallsyms alone; later runs answer from it without numpy, with the same
    words; --strict and a named file still refuse."""
    rows = _live_kallsyms()
    picks = [f"{a + 2:#x}" for a, _ in _unique_core_functions(rows, 5)]
    first = _run("resolve", "--json", *picks)
    full = _run("resolve", "--no-cache", "--json", *picks)
    quick = subprocess.run([sys.executable, "-X", "importtime", "-m", "kmodsyms", "resolve",
                            "--json", *picks], capture_output=True, text=True, cwd=ROOT,
                           env={**os.environ, "PYTHONPATH": ROOT})
    assert first.returncode == full.returncode == quick.returncode == 0
    assert first.stdout == full.stdout == quick.stdout
    warning = [line for line in quick.stderr.splitlines() if line.startswith("kmodsyms:")]
    assert warning == full.stderr.splitlines()
    imported = {line.rsplit("|", 1)[-1].strip() for line in quick.stderr.splitlines()}
    assert "numpy" not in imported
    assert _run("resolve", "--strict", *picks).returncode == 2
    assert _run("resolve", "--syms", default_syms_path(), *picks).returncode == 2
    warnings = []
    restored = load(fallback=True, warn=warnings.append)
    assert type(restored.placement) is Placed
    assert restored.stats.builtin_modules_known is False and len(warnings) == 1
    cold = load(fallback=True, cache=False, warn=warnings.append)
    assert [restored.resolve(int(p, 16)) for p in picks] == [cold.resolve(int(p, 16)) for p in picks]
