"""Degraded mode: without a usable dtrace_syms for the running kernel the
CLI still answers, from kallsyms alone, with one warning line; the API
only when asked (``load(fallback=True)``); a file the user names, and
``--strict``, stay errors; ``--force`` over a mismatched file always warns.

Checked on this host's real /proc/kallsyms (skipped when it hides its
addresses), where no dtrace_syms of the running kernel is installed
(skipped if one is)."""

from __future__ import annotations

import bisect
import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT

from kmodsyms import load
from kmodsyms.errors import KmodsymsError


def default_syms_path() -> str:
    return f"/lib/modules/{os.uname().release}/kernel/dtrace_syms"


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
                          capture_output=True, text=True, cwd=ROOT)


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
    assert [(d["symbol"], d["offset"], d["builtin_modules_known"]) for d in docs] == \
        [(name, 1, False) for _, name in picks]
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
    # The size: none is exact without dtrace_syms or a .ko; each is the
    # estimate (R49): the gap to the next line of its module (the core
    # kernel's: the next core line), bounded, so never past that line.
    above: dict = {}
    for a, _letter, _name, module in shown:
        above.setdefault(module, set()).add(a)
    order = {m: sorted(s) for m, s in above.items()}
    equal = core_text = 0
    for line, (a, letter, name, module) in zip(lines, shown):
        address, size, rest = line.split(" ", 2)
        assert (address, rest) == (f"{a:016x}", f"{letter} {name}" + (f"\t[{module}]" if module else ""))
        later = [b for b in order[module][bisect.bisect_right(order[module], a):][:1]]
        if letter in "aA" or not later:
            continue
        assert int(size, 16) <= later[0] - a, line
        if not module and letter in "tT":
            core_text += 1
            equal += int(size, 16) == later[0] - a
    assert equal > core_text * 9 // 10, (equal, core_text)


def test_strict_and_named_files_stay_errors(tmp_path):
    _live_kallsyms()
    strict = _run("resolve", "--strict", "0xffffffff81000000")
    assert strict.returncode == 2 and strict.stdout == ""
    assert strict.stderr.startswith("kmodsyms: error: ") and len(strict.stderr.splitlines()) == 1
    named = _run("lookup", "--syms", str(tmp_path / "absent"), "do_syscall_64")
    assert named.returncode == 2 and named.stdout == ""
    assert str(tmp_path / "absent") in named.stderr and len(named.stderr.splitlines()) == 1


def test_api_is_strict_unless_asked():
    _live_kallsyms()
    with pytest.raises(KmodsymsError):
        load()
    warnings = []
    degraded = load(fallback=True, warn=warnings.append)
    assert len(warnings) == 1 and default_syms_path() in warnings[0]
    assert degraded.builtin_modules_known is False


def test_text_output_claims_no_module_it_does_not_know():
    """Issue 24.2: without dtrace_syms a symbol outside the loaded modules
    may be core kernel or any built-in module: every text format says
    '?', not vmlinux (JSON says builtin_modules_known: false)."""
    rows = _live_kallsyms()
    (address, name), = _unique_core_functions(rows, 1)
    verbose = _run("resolve", hex(address + 1))
    assert verbose.stdout == f"{address + 1:#x} ?`{name}+0x1 (unsized)\n"
    dtrace = _run("resolve", "--format", "dtrace", hex(address + 1))
    assert dtrace.stdout == f"?`{name}+0x1\n"
    kernel = _run("resolve", "--format", "kernel", hex(address + 1))
    gap = min(a for a, *_ in rows if a > address) - address     # %pS's size
    assert kernel.stdout == f"{name}+0x1/{gap:#x} [?]\n"


def test_the_warning_says_what_the_output_shows():
    """The degraded warning's claim, held to every output format, on the
    fixture's kallsyms (any host without the running kernel's dtrace_syms):
    built-in modules unknown.  ext4's init_once, which dtrace_syms places in
    ext4, is then no module's to the text formats ('?'), and JSON names no
    built-in module and says builtin_modules_known: false."""
    if os.path.exists(default_syms_path()):
        pytest.skip(f"{default_syms_path()} is installed: not degraded here")
    kallsyms = os.path.join(ROOT, "fixtures", "kbuild", "kallsyms")
    address = "0xffffffffab600400"               # init_once+0x10, fs/ext4/super.o
    outputs = {fmt: _run("resolve", "--kallsyms", kallsyms, "--format", fmt, address)
               for fmt in ("verbose", "dtrace", "kernel", "json")}
    for out in outputs.values():
        assert out.returncode == 0
        warning, = out.stderr.splitlines()
        assert warning.startswith(f"kmodsyms: warning: answering from {kallsyms} alone, "
                                  "built-in modules unknown: ")
    assert outputs["verbose"].stdout == f"{address} ?`init_once+0x10 (unsized)\n"
    assert outputs["dtrace"].stdout == "?`init_once+0x10\n"
    assert outputs["kernel"].stdout.endswith(" [?]\n")
    doc = json.loads(outputs["json"].stdout)
    assert (doc["symbol"], doc["origin"], doc["builtin_modules_known"]) == ("init_once", "core", False)
    assert "ext4" not in doc["modules"]


def test_annotate_and_kallmodsyms_claim_no_module_they_do_not_know():
    """Issue 24 item 2, on the fixture's kallsyms without dtrace_syms:
    annotate leaves a frame whose module it does not know as it was (no
    'vmlinux`' folded, no ' [mod]'), names what it knows (a loaded module,
    a perf '[unknown]' frame's symbol) and prints '?' where it writes a
    module itself, as the text formats do; kallmodsyms prints kallsyms'
    own lines, a suffix only for loaded and pseudo-modules."""
    if os.path.exists(default_syms_path()):
        pytest.skip(f"{default_syms_path()} is installed: not degraded here")
    kallsyms = os.path.join(ROOT, "fixtures", "kbuild", "kallsyms")
    base = ("annotate", "--quiet", "--kallsyms", kallsyms)
    perf_and_oops = ("\tffffffffab600684 ext4_file_open+0x4 ([kernel.kallsyms])\n"
                     "\tffffffffab600684 [unknown] ([kernel.kallsyms])\n"
                     "\tffffffffc0a00014 fuse_dev_open+0x4 ([fuse])\n"
                     "RIP: 0010:ext4_file_open+0x4/0x10\n"
                     " init_once+0x10/0x30\n"
                     " [<ffffffffab600404>]\n")
    out = _run(*base, stdin=perf_and_oops)
    assert (out.returncode, out.stderr) == (0, "")
    assert out.stdout == perf_and_oops.replace("[unknown]", "ext4_file_open+0x4").replace(
        "[<ffffffffab600404>]", "[<ffffffffab600404>] init_once+0x14/0x30 [?]")
    folded = "bash;main;ext4_file_open_[k];memcpy 3\nbash;fuse_dev_open;rest_init 2\n"
    out = _run(*base, "--folded", stdin=folded)
    assert out.stdout == "bash;main;ext4_file_open_[k];memcpy 3\nbash;fuse`fuse_dev_open;rest_init 2\n"
    out = _run("kallmodsyms", "--quiet", "--kallsyms", kallsyms)
    shown = [line.split(" ", 1) for line in open(kallsyms).read().splitlines()]
    assert [line.split(" ", 2)[::2] for line in out.stdout.splitlines()] == shown


def test_modules_needs_no_dtrace_syms_and_quiet_is_quiet():
    """Issue 24.10: 'kmodsyms modules' reads no dtrace_syms, so it does not
    warn about one; --quiet silences the degraded warning of the others."""
    rows = _live_kallsyms()
    out = _run("modules")
    assert out.returncode == 0 and "dtrace_syms" not in out.stderr
    (address, _name), = _unique_core_functions(rows, 1)
    quiet = _run("resolve", "--quiet", hex(address))
    assert quiet.returncode == 0 and quiet.stderr == "" and quiet.stdout
    assert _run("kallmodsyms", "--quiet").stderr == ""


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


def test_degraded_run_imports_no_numpy():
    rows = _live_kallsyms()
    picks = [f"{a + 2:#x}" for a, _ in _unique_core_functions(rows, 5)]
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "kmodsyms", "resolve",
                          "--json", *picks], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0
    imported = {line.rsplit("|", 1)[-1].strip() for line in out.stderr.splitlines()}
    assert "numpy" not in imported and "typer" not in imported
    assert _run("resolve", "--strict", *picks).returncode == 2
    assert _run("resolve", "--syms", default_syms_path(), *picks).returncode == 2
