"""libkmodsyms as DTrace builds it: with make, plainly and under
AddressSanitizer and UndefinedBehaviorSanitizer, and its program
``kmodsyms-c``.

The library is the one resolver; tests/test_resolver.py, test_corpora.py
and test_loadable.py hold its answers (through the binding) to the linker
maps and ELF tables.  Here the sanitized build answers the same questions,
held to the same truth, so that a memory error shows:

* every kallsyms line's attribution against truth.tsv (object, modules,
  ELF size), full and text-only;
* every line's start, end-1 and end, and random addresses, without a
  sanitizer report, and each answer as the bound library gives it (the
  program's JSON is ``kmodsyms resolve --json``'s, the same front end in C);
* loaded modules' .ko files against their own ELF symbol tables
  (pyelftools, readelf), on every ELF class and byte order;
* damaged dtrace_syms and kallsyms (tests/test_fuzz.py's mutations): a
  clean answer or one error line, never a sanitizer report;
* the build itself: exports, soname, install.
"""

from __future__ import annotations

import bisect
import json
import os
import re
import shutil
import struct
import subprocess
import sys

import numpy as np
import pytest
from conftest import FIXTURE, ROOT
from hypothesis import given, settings
from kallsyms_variants import text_only
from test_fuzz import _COMMON, kallsyms_mutation, mutate_kallsyms, mutate_syms, syms_mutation
from test_loadable import (
    CORPUS_MODULES,
    FUSE_CORE,
    FUSE_KO,
    OTHER_FUSE_KO,
    ByStart,
    distro_tree,
    elf_symbols,
    fake_sysfs,
    innermost,
    module_lines,
    module_name,
    readelf_symbols,
    runtime_symbols,
    sample_module_lines,
)

from kmodsyms import load

CSRC = os.path.join(ROOT, "libkmodsyms")
FIXTURE_KALLSYMS = os.path.join(FIXTURE, "kallsyms")
N_RANDOM = 200_000
SANITIZER_ENV = {"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0:exitcode=99",
                 "UBSAN_OPTIONS": "halt_on_error=1:exitcode=99:print_stacktrace=1"}
FUZZ_CASES = settings(max_examples=40, **_COMMON)
FUZZ_CASES_SLOW = settings(max_examples=2_000, **_COMMON)


def run_c(clib, args, stdin=None, sanitized=False, check=True):
    prog = os.path.join(clib["asan" if sanitized else "plain"], "kmodsyms-c")
    env = dict(os.environ, **SANITIZER_ENV) if sanitized else None
    proc = subprocess.run([prog] + args, input=stdin, capture_output=True, env=env, timeout=300)
    assert proc.returncode != 99, proc.stderr.decode(errors="replace")[-3000:]
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


# ------------------------------------------------------------------ inputs
def text_only_file(tree: str, kallsyms: str, dest: str) -> str:
    """kallsyms as the same kernel built without CONFIG_KALLSYMS_ALL prints
    it (tests/kallsyms_variants.py), written to ``dest``."""
    with open(kallsyms, "rb") as f:
        text = text_only(os.path.join(tree, "System.map"), f.read())
    with open(dest, "wb") as f:
        f.write(text)
    return dest


# ------------------------------------------------------------------ answering
def json_lines(data: bytes) -> list[dict]:
    return [json.loads(line) for line in data.decode("utf-8").splitlines()]


def probes_of(lines: list[dict], random_count: int, seed: int = 20261201) -> list[int]:
    """Every line's start, end-1 and end (end: address + size, or + 1
    unsized), random addresses over their span, and the extremes."""
    starts = np.array([int(d["address"], 16) for d in lines], dtype=np.uint64)
    ends = starts + np.maximum(np.array([d["size"] for d in lines], dtype=np.uint64), 1)
    rng = np.random.default_rng(seed)
    rand = rng.integers(int(starts.min()), int(starts.max()) + 0x10000, size=random_count,
                        dtype=np.uint64, endpoint=True)
    return np.unique(np.concatenate([starts, ends - np.uint64(1), ends, rand, np.array(
        [0, 1, 2**64 - 1], dtype=np.uint64)])).tolist()


def sanitized_answers(clib, syms, kallsyms, random_count, sources=()) -> tuple[list, dict]:
    """The sanitized program's every line ('lines') and its answers for
    :func:`probes_of` them: each answer is the bound library's (no
    sanitizer report, no difference between the builds).  Returns (lines,
    {address: record})."""
    base = ["--syms", syms, "--kallsyms", kallsyms, *sources]
    lines = json_lines(run_c(clib, ["lines"] + base, sanitized=True).stdout)
    addrs = probes_of(lines, random_count)
    stdin = "".join(f"{a:x}\n" for a in addrs).encode()
    records = json_lines(run_c(clib, ["resolve", "--json"] + base, stdin=stdin, sanitized=True).stdout)
    assert len(records) == len(addrs)
    r = load(syms, kallsyms, **dict(zip(("modules_dir", "sysfs_root", "proc_modules"),
                                        _source_values(sources))))
    batch = r.resolve_many(addrs)
    for a, line, rec in zip(addrs, batch.lines.tolist(), records):
        assert rec == r.record(a, line).to_json(), (hex(a), rec)
    assert run_c(clib, ["kallmodsyms"] + base, sanitized=True).stdout == r.kallmodsyms()
    return lines, dict(zip(addrs, records))


def _source_values(sources) -> list:
    values = dict(zip(sources[::2], sources[1::2]))
    return [values.get(flag) for flag in ("--modules-dir", "--sysfs-root", "--proc-modules")]


def check_lines_against_truth(tree: str, lines: list[dict]) -> int:
    """Every ok row of truth.tsv among the lines: the object and modules the
    linker maps give it, and its ELF size where the line has one.  Returns
    how many rows were checked."""
    truth = {}
    for line in open(os.path.join(tree, "truth.tsv")):
        if not line.startswith("#"):
            addr, _t, name, obj, mods, size, flag = line.rstrip("\n").split("\t")
            truth[(int(addr, 16), name)] = (obj, mods, int(size), flag)
    checked, wrong = 0, []
    for d in lines:
        row = truth.get((int(d["address"], 16), d["name"]))
        if row is None or row[3] != "ok" or d["origin"] in ("loadable", "pseudo"):
            continue
        checked += 1
        mods = ",".join(d["modules"] or []) or "vmlinux"
        if (d["object"] or "-", mods) != row[:2] or (d["size"] and d["size"] != row[2]):
            wrong.append((d, row))
    assert wrong == []
    return checked


def test_fixture_sanitized(clib, fixture_syms):
    lines, records = sanitized_answers(clib, fixture_syms, FIXTURE_KALLSYMS, 20_000)
    assert len(lines) == len(open(FIXTURE_KALLSYMS).read().splitlines())


def test_fixture_text_only_sanitized(clib, fixture_syms):
    sanitized_answers(clib, fixture_syms, os.path.join(FIXTURE, "kallsyms.text-only"), 20_000)


def test_fixture_ambiguous_sanitized(clib, fixture_syms, tmp_path):
    """Sections the build could not place: their symbols' lines are
    ambiguous, with candidates."""
    from test_corpora import _unplace_sections_of
    out = str(tmp_path / "dtrace_syms")
    assert _unplace_sections_of(fixture_syms, "init_once", out) == 3
    _lines, records = sanitized_answers(clib, out, FIXTURE_KALLSYMS, 20_000)
    assert sum(rec["ambiguous"] for rec in records.values()) >= 3


@pytest.mark.slow
def test_corpora_sanitized(clib, any_corpus, any_corpus_syms, tmp_path):
    """Every corpus (x86_64, arm64), with its full and its text-only kallsyms."""
    kallsyms = os.path.join(any_corpus, "kallsyms")
    lines, _records = sanitized_answers(clib, any_corpus_syms, kallsyms, N_RANDOM)
    assert check_lines_against_truth(any_corpus, lines) > 45_000
    text = text_only_file(any_corpus, kallsyms, str(tmp_path / "ks"))
    lines, _records = sanitized_answers(clib, any_corpus_syms, text, N_RANDOM)
    assert check_lines_against_truth(any_corpus, lines) > 15_000
    assert check_module_ranges(clib, any_corpus, any_corpus_syms) > 40_000


def test_corpus_lines_against_truth(clib, corpus_syms, corpus):
    """The x86_64 corpus in the default run: the sanitized program's every
    line against truth.tsv."""
    lines = json_lines(run_c(clib, ["lines", "--syms", corpus_syms, "--kallsyms",
                                    os.path.join(corpus, "kallsyms")], sanitized=True).stdout)
    assert check_lines_against_truth(corpus, lines) > 180_000


def check_module_ranges(clib, tree, syms) -> int:
    """kms_module_ranges() against the linker maps (truth.tsv): every sized
    symbol of an object lies in the ranges of each of its modules, text
    symbols in text ranges; per-cpu symbols ('A': offsets, not addresses)
    in none.  Returns how many rows were checked."""
    kallsyms = os.path.join(tree, "kallsyms")
    rows = []
    for line in open(os.path.join(tree, "truth.tsv")):
        if line.startswith("#"):
            continue
        addr, letter, _name, obj, mods, size, flag = line.rstrip("\n").split("\t")
        if flag == "ok" and obj != "-" and int(size) > 0 and letter != "A":
            rows.append((int(addr, 16), letter in "tT", mods.split(",")))
    modules = sorted({m for _a, _t, mods in rows for m in mods})
    ranges: dict[str, list] = {m: [] for m in modules}
    for rec in json_lines(run_c(clib, ["ranges", "--syms", syms, "--kallsyms", kallsyms, "--"]
                                + modules).stdout):
        ranges[rec["module"]].append((int(rec["start"], 16), int(rec["end"], 16), rec["text"]))
    ranges = {m: sorted(rs) for m, rs in ranges.items()}
    starts = {m: [r[0] for r in rs] for m, rs in ranges.items()}
    outside = []
    for addr, is_text, mods in rows:
        for m in mods:
            rs = ranges[m]
            k = bisect.bisect_right(starts[m], addr) - 1
            if k < 0 or not addr < rs[k][1] or (is_text and not rs[k][2]):
                outside.append((hex(addr), m))
    assert outside == []
    return len(rows)


def test_module_ranges_hold_every_symbol(clib, corpus, corpus_syms):
    assert check_module_ranges(clib, corpus, corpus_syms) > 100_000


def test_in_tree_build_outputs_are_ignored_by_git():
    """Every file that make writes in libkmodsyms itself (O=., the default):
    'all', 'check' (DTrace's and perf's consumers included) and the
    README's staged 'make install DESTDIR=$PWD/stage', as make's dry run
    names them, is ignored by git (issue 24 item 16: kms-dt-module,
    test_dlfilter and stage/ showed as untracked)."""
    if not (shutil.which("make") and shutil.which("git")) or subprocess.run(
            ["git", "-C", CSRC, "rev-parse"], capture_output=True).returncode:
        pytest.skip("needs make and a git checkout")
    dry = subprocess.run(["make", "-n", "--no-print-directory", "O=.", "all", "check", "install",
                          "PREFIX=/usr", "DESTDIR=stage"], cwd=CSRC, capture_output=True, text=True,
                         check=True).stdout.replace("\\\n", " ")
    written = set(re.findall(r"(?:-o|ar rcs|ln -sf \S+|>) (\S+)", dry)) - {"/dev/null"}
    written |= {d + "/x" for d in re.findall(r"mkdir -p (\S+)", dry) if d != "."}
    for source, dest in re.findall(r"install -m \d+ (\S+) (\S+)", dry):
        written.add(dest + os.path.basename(source) if dest.endswith("/") else dest)
    written = {os.path.normpath(w) for w in written}
    assert {"kms-dt-module", "kmodsyms-c", "stage/usr/include/kmodsyms.h"} <= written
    check = subprocess.run(["git", "check-ignore", "--stdin", "--non-matching", "--verbose"],
                           cwd=CSRC, input="\n".join(sorted(written)) + "\n",
                           capture_output=True, text=True)
    assert [line.split("\t")[1] for line in check.stdout.splitlines()
            if line.startswith("::")] == []


# ------------------------------------------------------------------ the program
def test_resolve_arguments_and_errors(clib, fixture_syms):
    base = ["--syms", fixture_syms, "--kallsyms", FIXTURE_KALLSYMS]
    out = json_lines(run_c(clib, ["resolve", "--json"] + base + ["0xffffffffab600400", "ffffffffab600a98"]).stdout)
    r = load(fixture_syms, FIXTURE_KALLSYMS)
    assert out == [r.resolve(0xffffffffab600400).to_json(), r.resolve(0xffffffffab600a98).to_json()]
    # a bad line of stdin is answered in place, the rest still are (exit 1)
    batch = run_c(clib, ["resolve", "--json"] + base, stdin=b"0xffffffffab600400\n zz \n0x1\n", check=False)
    got = json_lines(batch.stdout)
    assert batch.returncode == 1 and len(got) == 3
    assert got[0] == r.resolve(0xffffffffab600400).to_json() and got[2] == r.resolve(1).to_json()
    assert got[1]["input"] == "zz" and "bad address" in got[1]["error"]
    bad = run_c(clib, ["resolve"] + base + ["0xzz"], check=False)
    assert bad.returncode == 2 and bad.stdout == b"" and bad.stderr.count(b"\n") == 1
    missing = run_c(clib, ["resolve", "--syms", "/nonexistent", "--kallsyms", FIXTURE_KALLSYMS,
                           "0x1"], check=False)
    assert missing.returncode == 2 and b"cannot read /nonexistent" in missing.stderr


def test_resolve_dash_reads_stdin_in_its_place(clib, fixture_syms):
    """``-`` among the addresses reads stdin there, as ``kmodsyms resolve``
    does (and, with no address at all, stdin is read too)."""
    base = ["--syms", fixture_syms, "--kallsyms", FIXTURE_KALLSYMS]
    r = load(fixture_syms, FIXTURE_KALLSYMS)
    got = json_lines(run_c(clib, ["resolve", "--json"] + base + ["0x1", "-", "0xffffffffab600a98"],
                           stdin=b"0xffffffffab600400\n").stdout)
    assert got == [r.resolve(a).to_json() for a in (1, 0xffffffffab600400, 0xffffffffab600a98)]
    assert json_lines(run_c(clib, ["resolve", "--json"] + base + ["-"], stdin=b"0x1\n").stdout) \
        == [r.resolve(1).to_json()]


@pytest.mark.parametrize("command", ["ranges", "spans", "symbols"])
def test_a_module_that_is_not_there_is_an_error(clib, fixture_syms, command):
    """``ranges``, ``spans`` and ``symbols`` of a module that is not there
    say so, as ``kmodsyms lookup 'nosuch`x'`` does, and exit 1; the known
    ones are still answered (issue 24 item 12: ``symbols nosuch`` printed
    nothing and exited 0)."""
    base = ["--syms", fixture_syms, "--kallsyms", FIXTURE_KALLSYMS]
    proc = run_c(clib, [command] + base + ["no-such", "ext4"], check=False)
    assert proc.returncode == 1
    assert proc.stderr.decode() == ("kmodsyms-c: no module 'no_such': not vmlinux, a built-in "
                                    "module or a loaded module\n")
    records = json_lines(proc.stdout)
    assert records and all(rec.get("module", "ext4") == "ext4" and
                           (rec.get("modules") or ["ext4"]) == ["ext4"] for rec in records)


def _cli(args, stdin: bytes) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kmodsyms", *args], input=stdin,
                          capture_output=True, cwd=ROOT)


# Every format of 'resolve' and 'lookup' (the default, verbose, first).
FORMATS = ([], ["--json"], ["--format", "kernel"], ["--format", "dtrace"])


def test_resolve_stdin_line_for_line_as_the_cli(clib, fixture_syms):
    """``kmodsyms-c resolve -`` answers every line of stdin as ``kmodsyms
    resolve -`` does, byte for byte: a blank line in its place, each bad
    one with the CLI's error (quoted as ascii() quotes it), in every
    format (the text formats write 'LINE N:' on stderr too); the same exit
    status (issue 24 item 12: blank lines were dropped)."""
    base = ["--syms", fixture_syms, "--kallsyms", FIXTURE_KALLSYMS]
    stdin = (b"0xffffffffab600155\n\n  \t \n-1\nzz\n0x1ffffffffffffffff\n-0x1ffffffffffffffff\n"
             b"it's\n\"q'\\\n\xc3\xa9\xe4\xb8\xad\xff\x7f\n 0XFFFFFFFFC0A00010 \n0x\n0xffffffffc0a00014")
    for fmt in FORMATS:
        c = run_c(clib, ["resolve"] + base + fmt + ["-"], stdin=stdin, sanitized=True,
                  check=False)
        cli = _cli(["resolve"] + base + fmt + ["-"], stdin)
        assert (c.returncode, c.stdout, c.stderr) == (cli.returncode, cli.stdout, cli.stderr)
        assert c.returncode == 1 and c.stdout.count(b"\n") == stdin.count(b"\n") + 1
    bad = run_c(clib, ["resolve"] + base + ["0x1", "-0x1"], check=False)
    assert (bad.returncode, bad.stdout, bad.stderr) == \
        (2, b"", b"kmodsyms-c: error: bad address '-0x1': negative\n")


def assert_clis_agree(clib, base: list, addresses: list, names: list) -> None:
    """Both CLIs, 'kmodsyms' (its fast path) and kmodsyms-c, on the same
    inputs: the same bytes on stdout and the same exit status for resolve of
    ADDRESSES on stdin and as arguments, and lookup of NAMES, in every
    format, and for kallmodsyms (one formatter: libkmodsyms' kms_format_sym()
    and kms_format_line())."""
    stdin = "".join(f"{a:#x}\n" for a in addresses).encode()
    runs = [["resolve", *fmt, "-"] for fmt in FORMATS] + \
        [["resolve", *fmt, *(f"{a:#x}" for a in addresses[:50])] for fmt in FORMATS] + \
        [["lookup", *fmt, *names] for fmt in FORMATS] + [["kallmodsyms"]]
    for args in runs:
        c = run_c(clib, args[:1] + base + args[1:], stdin=stdin, check=False)
        cli = _cli(args[:1] + base + args[1:], stdin)
        assert (c.returncode, c.stdout) == (cli.returncode, cli.stdout), args[:2]
        assert c.returncode in (0, 1) and c.stdout, (args[:2], c.stderr[-500:])
    out = run_c(clib, ["resolve", "--json"] + base, stdin=stdin).stdout
    assert out.isascii() and len(json_lines(out)) == len(addresses)


def lookup_names(lines: list[dict], count: int, seed: int = 20261201) -> list[str]:
    """Names to look up among LINES: bare, MOD`NAME of each of their modules
    (vmlinux for the core kernel), and +0xOFF into them; one not there."""
    import random
    rng = random.Random(seed)
    names = []
    for d in rng.sample(lines, min(count, len(lines))):
        mod = (d["modules"] or ["vmlinux"])[0]
        names += [d["name"], f"{mod}`{d['name']}", f"{mod}`{d['name']}+0x{rng.randrange(64):x}"]
    return names + ["no_such_symbol"]


def test_clis_agree_on_the_fixture(clib, fixture_syms, tmp_path):
    """The fixture's every line probed (R: resolve, lookup, kallmodsyms in
    every format), with its dtrace_syms, with sections left unplaced
    (ambiguous answers and their candidates), and from kallsyms alone
    (built-in modules not known: '?')."""
    from test_corpora import _unplace_sections_of
    base = ["--syms", fixture_syms, "--kallsyms", FIXTURE_KALLSYMS]
    lines = json_lines(run_c(clib, ["lines"] + base).stdout)
    addresses, names = probes_of(lines, 2_000), lookup_names(lines, 60)
    assert_clis_agree(clib, base, addresses, names)
    unplaced = str(tmp_path / "dtrace_syms")
    assert _unplace_sections_of(fixture_syms, "init_once", unplaced) == 3
    assert_clis_agree(clib, ["--syms", unplaced, "--kallsyms", FIXTURE_KALLSYMS], addresses, names)
    # no --syms: the running kernel's file, which this host does not have (the C
    # program's --fallback is the CLI's default then)
    if not os.path.exists(f"/lib/modules/{os.uname().release}/kernel/dtrace_syms"):
        stdin = "".join(f"{a:#x}\n" for a in addresses).encode()
        for fmt in FORMATS:
            c = run_c(clib, ["resolve", "--fallback", "--kallsyms", FIXTURE_KALLSYMS, *fmt, "-"],
                      stdin=stdin)
            cli = _cli(["resolve", "--kallsyms", FIXTURE_KALLSYMS, *fmt, "-"], stdin)
            unknown = {"--json": b'"builtin_modules_known": false',
                       "kernel": b"init_once+0x0/0x30 [?]\n"}.get(fmt[-1] if fmt else "",
                                                                  b"?`init_once")
            assert c.stdout == cli.stdout and unknown in c.stdout, fmt


def test_clis_agree_on_odd_names(clib, fixture_syms, tmp_path):
    """Names are bytes: the text formats and kallmodsyms write them as they
    are, JSON escapes them (ASCII, \\u of UTF-8, \\udcXX of a byte that is
    not UTF-8, read back by surrogateescape), the same in both CLIs."""
    odd = b'fuse_\xff"q\\\x01\x7f\xc3\xa9\xf0\x9f\x98\x80\xed\xa0\x80'
    text = open(FIXTURE_KALLSYMS, "rb").read().replace(b" fuse_dev_open\t", b" " + odd + b"\t")
    kallsyms = tmp_path / "kallsyms"
    kallsyms.write_bytes(text)
    base = ["--syms", fixture_syms, "--kallsyms", str(kallsyms)]
    assert_clis_agree(clib, base, [0xffffffffc0a00010, 0xffffffffc0a00014],
                      [os.fsdecode(odd), "fuse`" + os.fsdecode(odd) + "+0x4"])
    verbose = run_c(clib, ["resolve"] + base + ["0xffffffffc0a00014"]).stdout
    assert verbose == b"0xffffffffc0a00014 fuse`" + odd + b"+0x4 (unsized)\n"
    assert (b" " + odd + b"\t[fuse]\n") in run_c(clib, ["kallmodsyms"] + base).stdout
    rec = json_lines(run_c(clib, ["resolve", "--json"] + base + ["0xffffffffc0a00014"]).stdout)[0]
    assert rec["symbol"].encode("utf-8", "surrogateescape") == odd


@pytest.mark.slow
def test_clis_agree_on_the_corpora(clib, any_corpus, any_corpus_syms):
    """Every corpus, probed as the fixture is, in the slow run."""
    base = ["--syms", any_corpus_syms, "--kallsyms", os.path.join(any_corpus, "kallsyms")]
    lines = json_lines(run_c(clib, ["lines"] + base).stdout)
    assert_clis_agree(clib, base, probes_of(lines, 20_000)[::7], lookup_names(lines, 200))


def test_clis_agree_on_the_corpus(clib, corpus, corpus_syms):
    """The x86_64 corpus in the default run: a sample of its lines."""
    base = ["--syms", corpus_syms, "--kallsyms", os.path.join(corpus, "kallsyms")]
    lines = json_lines(run_c(clib, ["lines"] + base).stdout)
    assert_clis_agree(clib, base, probes_of(lines, 5_000)[::97], lookup_names(lines, 40))


def test_resolve_stdin_that_is_not_text_is_named(clib, fixture_syms):
    """Compressed or binary stdin: one error line naming it as the CLI
    does (libkmodsyms' kms_data_kind()), exit 2, after what the arguments
    before '-' answered (issue 24 item 7)."""
    import gzip
    base = ["--syms", fixture_syms, "--kallsyms", FIXTURE_KALLSYMS]
    r = load(fixture_syms, FIXTURE_KALLSYMS)
    for data, what in ((gzip.compress(open(FIXTURE_KALLSYMS, "rb").read()),
                        "gzip data: decompress it first"),
                       (b"\x01\x02\n0x1\n", "binary data, not addresses: give one hex address a line")):
        c = run_c(clib, ["resolve", "--json"] + base + ["0x1", "-"], stdin=data, sanitized=True, check=False)
        assert (c.returncode, c.stderr.decode()) == (2, f"kmodsyms-c: error: <stdin>: {what}\n")
        assert json_lines(c.stdout) == [r.resolve(1).to_json()]
        cli = _cli(["resolve"] + base + ["--json", "0x1", "-"], data)
        assert (cli.returncode, cli.stdout, cli.stderr.decode()) == \
            (2, c.stdout, f"kmodsyms: error: <stdin>: {what}\n")


def test_no_layout_is_refused_with_its_code(clib, fixture_syms, tmp_path):
    from test_fuzz import _without_layout
    path = tmp_path / "no-layout"
    path.write_bytes(_without_layout(open(fixture_syms, "rb").read()))
    proc = run_c(clib, ["resolve", "--syms", str(path), "--kallsyms", FIXTURE_KALLSYMS, "0x1"],
                 check=False)
    assert proc.returncode == 2
    assert b"no link layout" in proc.stderr and b"rebuild it" in proc.stderr


@pytest.mark.parametrize("program", ["test_kms", "test_kms_modules", "test_kms_errors"])
def test_c_unit_tests_under_sanitizers(clib, fixture_syms, tmp_path, program):
    """libkmodsyms/test_kms*.c (what 'make check' runs: loads and answers,
    loaded modules, bad inputs), built with ASan+UBSan."""
    prog = os.path.join(clib["asan"], program)
    proc = subprocess.run([prog, fixture_syms, FIXTURE_KALLSYMS, str(tmp_path)],
                          capture_output=True, env=dict(os.environ, **SANITIZER_ENV), timeout=600)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-3000:]


def test_c_loads_out_of_memory_under_sanitizers(clib, fixture_syms):
    """libkmodsyms/test_nomem.c (what 'make check' runs): every allocation of a
    load failing in turn, alone and with every one after it."""
    prog = os.path.join(clib["asan"], "test_nomem")
    proc = subprocess.run([prog, fixture_syms, FIXTURE_KALLSYMS],
                          capture_output=True, env=dict(os.environ, **SANITIZER_ENV), timeout=600)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-3000:]


def test_shared_library_exports_only_the_api(clib):
    if not shutil.which("nm"):
        pytest.skip("nm is not installed")
    lib = os.path.join(clib["plain"], "libkmodsyms.so")
    out = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, text=True,
                         check=True).stdout
    exported = sorted(line.split()[-1].split("@")[0] for line in out.splitlines()
                      if line.split()[1] == "T")
    header = open(os.path.join(CSRC, "kmodsyms.h")).read()
    assert exported and all(name.startswith("kms_") and name + "(" in header for name in exported)
    soname = subprocess.run(["readelf", "-d", lib], capture_output=True, text=True).stdout
    assert "libkmodsyms.so.3" in soname


def test_install(clib, tmp_path):
    dest = tmp_path / "root"
    proc = subprocess.run(["make", "-s", "-C", CSRC, f"O={clib['plain']}", "install",
                           "PREFIX=/usr", f"DESTDIR={dest}"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    for path in ("usr/include/kmodsyms.h", "usr/lib/libkmodsyms.a", "usr/lib/libkmodsyms.so",
                 "usr/lib/libkmodsyms.so.3", "usr/lib/pkgconfig/kmodsyms.pc", "usr/bin/kmodsyms-c"):
        assert (dest / path).exists(), path
    # DTrace's example is its source among the docs, not a program in bin (issue 31 item 8).
    assert not (dest / "usr/bin/kms-dt-module").exists()
    example = dest / "usr/share/doc/kmodsyms/examples/kms-dt-module.c"
    assert example.read_bytes() == open(os.path.join(ROOT, "contrib/dtrace/kms-dt-module.c"), "rb").read()
    pc = (dest / "usr/lib/pkgconfig/kmodsyms.pc").read_text()
    assert "prefix=/usr\n" in pc and "libdir=${prefix}/lib\n" in pc and "-lkmodsyms" in pc


def test_make_check_needs_no_python(tmp_path):
    """make check runs the C tests on the committed fixture file: none of
    its commands runs Python or kmodsyms (the comparisons with Python are
    this file's)."""
    if shutil.which("make") is None:
        pytest.skip("make is absent")
    commands = subprocess.run(["make", "-n", "-B", "-C", CSRC, f"O={tmp_path}", "check"],
                              capture_output=True, text=True, check=True).stdout
    assert "test_kms" in commands and "fixtures/kbuild/dtrace_syms.expected" in commands
    assert not re.search(r"python|-m kmodsyms|kmodsyms build", commands), commands


# A program of a user of the installed library: the fixture's first text
# address, as kms_resolve() answers it.
USER_PROGRAM = r"""
#include <stdio.h>
#include <kmodsyms.h>
int main(int argc, char **argv)
{
    kms_error err;
    struct kms_sym s = {.size = sizeof s};
    kms_handle *h = kms_load(argv[1], argv[2], 0, &err);
    if (!h)
        return 1;
    kms_resolve(h, 0xffffffffab600400ULL, &s);
    printf("%s`%.*s+0x%llx\n", s.dso, (int)s.sym_len, s.sym, (unsigned long long)s.symoff);
    kms_free(h);
    return 0;
}
"""


@pytest.mark.skipif(shutil.which("pkg-config") is None, reason="pkg-config is absent")
@pytest.mark.parametrize("how", ["--define-prefix", "PKG_CONFIG_SYSROOT_DIR"])
def test_installed_into_destdir_builds_a_program(clib, tmp_path, how):
    """make install DESTDIR=..., then cc $(pkg-config ...) of a program
    compiles, links and runs against the staged copy: the .pc file is
    relocatable (pkg-config --define-prefix) or read with a sysroot."""
    dest = tmp_path / "root"
    subprocess.run(["make", "-s", "-C", CSRC, f"O={clib['plain']}", "install", "PREFIX=/usr",
                    f"DESTDIR={dest}"], capture_output=True, text=True, check=True)
    env = {**os.environ, "PKG_CONFIG_LIBDIR": str(dest / "usr/lib/pkgconfig")}
    env.pop("PKG_CONFIG_PATH", None)
    args = ["pkg-config", "--cflags", "--libs", "kmodsyms"]
    if how == "--define-prefix":
        args.insert(1, "--define-prefix")
    else:
        env["PKG_CONFIG_SYSROOT_DIR"] = str(dest)
    flags = subprocess.run(args, env=env, capture_output=True, text=True, check=True).stdout.split()
    assert f"-I{dest}/usr/include" in flags and f"-L{dest}/usr/lib" in flags, flags
    (tmp_path / "user.c").write_text(USER_PROGRAM)
    cc = os.environ.get("CC", "cc")
    build = subprocess.run([cc, "-o", str(tmp_path / "user"), str(tmp_path / "user.c"), *flags],
                           capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    run = subprocess.run([str(tmp_path / "user"), os.path.join(ROOT, "fixtures", "kbuild",
                                                               "dtrace_syms.expected"), FIXTURE_KALLSYMS],
                         capture_output=True, text=True, env={**os.environ,
                                                              "LD_LIBRARY_PATH": str(dest / "usr/lib")})
    assert run.returncode == 0 and run.stdout == "ext4`init_once+0x10\n", run.stdout + run.stderr


# ------------------------------------------------------------------ damaged input
def check_clean_decision(clib, syms_path: str, kallsyms_path: str, probes) -> None:
    """The sanitized program on damaged input: its answers with exit 0, or
    one error line with exit 2; never a sanitizer report (exit 99)."""
    base = ["--syms", syms_path, "--kallsyms", kallsyms_path]
    stdin = "".join(f"{a:#x}\n" for a in probes).encode()
    proc = run_c(clib, ["resolve", "--json"] + base, stdin=stdin, check=False)
    if proc.returncode == 2:
        assert proc.stdout == b"" and proc.stderr.count(b"\n") == 1, proc
        return
    assert proc.returncode == 0, proc.stderr
    assert len(json_lines(proc.stdout)) == len(probes)
    run_c(clib, ["kallmodsyms"] + base, sanitized=True)
    run_c(clib, ["lines"] + base, sanitized=True)


@pytest.fixture(scope="session")
def probe_addresses():
    addrs = set()
    for line in open(FIXTURE_KALLSYMS, "rb"):
        a = int(line.split()[0], 16)
        addrs.update({a, a + 1, max(a - 1, 0)})
    return sorted(addrs)[::3] + [0, 2**64 - 1]


@FUZZ_CASES
@given(mutation=syms_mutation)
def test_damaged_dtrace_syms_clean_decision(clib, fixture_syms, probe_addresses, tmp_path_factory,
                                           mutation):
    path = str(tmp_path_factory.mktemp("fuzz") / "dtrace_syms")
    with open(fixture_syms, "rb") as f:
        open(path, "wb").write(mutate_syms(f.read(), mutation))
    check_clean_decision(clib, path, FIXTURE_KALLSYMS, probe_addresses)


@FUZZ_CASES
@given(ops=kallsyms_mutation)
def test_damaged_kallsyms_clean_decision(clib, fixture_syms, probe_addresses, tmp_path_factory, ops):
    path = str(tmp_path_factory.mktemp("fuzz") / "kallsyms")
    with open(FIXTURE_KALLSYMS, "rb") as f:
        open(path, "wb").write(mutate_kallsyms(f.read(), ops))
    check_clean_decision(clib, fixture_syms, path, probe_addresses)


@pytest.mark.slow
@FUZZ_CASES_SLOW
@given(mutation=syms_mutation)
def test_damaged_dtrace_syms_clean_decision_slow(clib, fixture_syms, probe_addresses,
                                                tmp_path_factory, mutation):
    test_damaged_dtrace_syms_clean_decision.hypothesis.inner_test(
        clib, fixture_syms, probe_addresses, tmp_path_factory, mutation)


@pytest.mark.slow
@FUZZ_CASES_SLOW
@given(ops=kallsyms_mutation)
def test_damaged_kallsyms_clean_decision_slow(clib, fixture_syms, probe_addresses,
                                             tmp_path_factory, ops):
    test_damaged_kallsyms_clean_decision.hypothesis.inner_test(
        clib, fixture_syms, probe_addresses, tmp_path_factory, ops)


# ------------------------------------------------------------------ loaded modules' .ko files
CROSS = os.path.join(ROOT, "fixtures", "cross")
CROSS_ARCHES = ("aarch64", "arm", "mips", "powerpc64", "s390x")   # ELF64/32, both byte orders


def source_args(modules_dir=None, sysfs_root=None, proc_modules=None) -> list[str]:
    """kmodsyms-c's options for what load(modules_dir=, sysfs_root=, proc_modules=) reads."""
    given = {"--modules-dir": modules_dir, "--sysfs-root": sysfs_root,
             "--proc-modules": proc_modules}
    return [arg for flag, value in given.items() if value for arg in (flag, value)]


def module_answers(clib, syms, kallsyms, random_count, **sources):
    """The sanitized program reading the module sources: each loaded
    module's stats (and its warnings on stderr), every line, and the answers
    for every module line's start, end-1 and end plus random addresses in
    the modules' span (as :func:`sanitized_answers`).  Returns (stats,
    {address: record}, lines)."""
    base = ["--syms", syms, "--kallsyms", kallsyms] + source_args(**sources)
    proc = run_c(clib, ["modules"] + base, sanitized=True)
    stats = json_lines(proc.stdout)
    warned = [w for w in proc.stderr.decode().splitlines()]
    assert len(warned) == sum(st["status"] in ("refused", "unsupported") for st in stats)
    lines = json_lines(run_c(clib, ["lines"] + base, sanitized=True).stdout)
    mine = [d for d in lines if d["origin"] == "loadable"]
    addrs = probes_of(mine, random_count)
    stdin = "".join(f"{a:x}\n" for a in addrs).encode()
    records = json_lines(run_c(clib, ["resolve", "--json"] + base, stdin=stdin, sanitized=True).stdout)
    assert len(records) == len(addrs)
    return stats, dict(zip(addrs, records)), lines


def check_against_elf(got_lines, records, kallsyms, module, ko_path, rel, truth) -> int:
    """C's answers held to the .ko's own symbol table (pyelftools or
    readelf -sW, as tests/test_loadable.py): every line of a symbol gets its
    ELF size, binding and the .ko as object; every probe inside the module
    gets the innermost sized symbol the table implies.  Returns how many
    lines have a nonzero ELF size (all of them got it)."""
    placed = runtime_symbols(truth(ko_path), module_lines(kallsyms, module))
    at = {(name, addr): (size, bind) for name, addr, size, _t, bind in placed}
    sized = 0
    for c in got_lines:
        key = (c["name"], int(c["address"], 16))
        if c["modules"] == [module] and key in at:
            assert (c["size"], c["binding"], c["object"]) == (at[key][0], at[key][1], rel), c
            sized += at[key][0] > 0
    by_start = ByStart([s for s in placed if s[2]])
    for addr, rec in records.items():
        want = innermost(by_start, addr)
        if want is None:
            assert not (rec["sized"] and rec["module"] == module), (hex(addr), rec)
        else:
            assert rec["sized"] and (rec["symbol"], int(rec["start"], 16)) == want[:2], \
                (hex(addr), rec, want)
            assert rec["module"] == module and rec["object"] == rel, rec
    return sized


def test_fixture_module_ko_equal(clib, fixture_syms, fixture_tree):
    _stats, records, got = module_answers(clib, fixture_syms, FIXTURE_KALLSYMS, 5_000,
                                       modules_dir=fixture_tree)
    assert check_against_elf(got, records, FIXTURE_KALLSYMS, "fuse", FUSE_KO, "fs/fuse/fuse.ko",
                             elf_symbols) == 22


def test_fixture_other_build_refused_equal(clib, fixture_syms):
    stats, records, _got = module_answers(clib, fixture_syms, FIXTURE_KALLSYMS, 2_000,
                                       modules_dir=os.path.join(FIXTURE, "otherbuild"))
    assert [st["status"] for st in stats] == ["refused"]
    assert not any(rec["sized"] and rec["module"] == "fuse" for rec in records.values())


@pytest.mark.parametrize("case, status", [
    ("sections", "matched"), ("own build-id", "matched"), ("other build-id", "refused"),
    ("srcversion", "refused"), (".text elsewhere", "refused")])
def test_fixture_sysfs_equal(clib, fixture_syms, fixture_tree, tmp_path, case, status):
    """What /sys/module/fuse says (tests/test_loadable.py's cases) decides
    alike on both sides."""
    sysfs = fake_sysfs(tmp_path, FUSE_KO, module_lines(FIXTURE_KALLSYMS, "fuse"),
                       srcversion="6C29B5A8F4E1D0C3B2A1908" if case == "srcversion" else None,
                       build_id_of={"own build-id": FUSE_KO,
                                    "other build-id": OTHER_FUSE_KO}.get(case),
                       shift=0x40 if case == ".text elsewhere" else 0)
    stats, _records, _got = module_answers(clib, fixture_syms, FIXTURE_KALLSYMS, 1_000,
                                        modules_dir=fixture_tree, sysfs_root=sysfs)
    assert [st["status"] for st in stats] == [status]


@pytest.mark.parametrize("how", ["proc_modules", "proc_modules and .ko", "sysfs coresize"])
def test_fixture_module_core_equal(clib, fixture_syms, fixture_tree, tmp_path, how):
    """A module's core, from /proc/modules or /sys/module/NAME/coresize,
    bounds its unsized answers alike on both sides."""
    proc = tmp_path / "modules"
    proc.write_text(FUSE_CORE)
    sysfs = tmp_path / "sys" / "module" / "fuse"
    os.makedirs(sysfs / "sections")
    (sysfs / "coresize").write_text("8448\n")
    (sysfs / "sections" / ".text").write_text("0xffffffffc0a00000\n")
    sources = {"proc_modules": {"proc_modules": str(proc)},
               "proc_modules and .ko": {"proc_modules": str(proc), "modules_dir": fixture_tree},
               "sysfs coresize": {"sysfs_root": str(tmp_path / "sys")}}[how]
    _stats, records, _got = module_answers(clib, fixture_syms, FIXTURE_KALLSYMS, 2_000, **sources)
    if how != "proc_modules and .ko":   # the core's end, 0x...a02100, answers nothing
        assert records[0xFFFFFFFFC0A020B1]["symbol"] == "fuse_inode_count"


@pytest.mark.parametrize("signed", [False, True])
def test_installed_module_equal(clib, fixture_syms, tmp_path, signed):
    """A distribution's tree: kernel/ prefix, modules.dep, signature cut."""
    moddir = distro_tree(tmp_path, {"fs/fuse": FUSE_KO}, "", signed)
    stats, records, got = module_answers(clib, fixture_syms, FIXTURE_KALLSYMS, 1_000,
                                      modules_dir=moddir)
    assert [st["status"] for st in stats] == ["matched"]
    check_against_elf(got, records, FIXTURE_KALLSYMS, "fuse", FUSE_KO, "kernel/fs/fuse/fuse.ko",
                      elf_symbols)


@pytest.mark.parametrize("suffix", [".xz", ".zst", ".gz"])
@pytest.mark.parametrize("signed", [False, True])
def test_compressed_module_read(clib, fixture_syms, tmp_path, suffix, signed):
    """fuse.ko installed as a distribution does (signed, then compressed by
    the xz, zstd or gzip tool) is read as the plain file: its sizes those of
    the plain .ko's own symbol table."""
    moddir = distro_tree(tmp_path, {"fs/fuse": FUSE_KO}, suffix, signed)
    rel = f"kernel/fs/fuse/fuse.ko{suffix}"
    stats, records, got = module_answers(clib, fixture_syms, FIXTURE_KALLSYMS, 2_000,
                                         modules_dir=moddir)
    assert [(st["file"], st["status"]) for st in stats] == [(rel, "matched")]
    assert check_against_elf(got, records, FIXTURE_KALLSYMS, "fuse", FUSE_KO, rel,
                             elf_symbols) == 22


def test_deferred_modules_equal(clib, fixture_syms, tmp_path):
    """KMS_LOAD_DEFER_MODULES then kms_read_modules() (kmodsyms-c --defer)
    reaches exactly the answers of the bound library's load, which reads
    every .ko (and test_loadable.py holds to the .ko's ELF table)."""
    moddir = distro_tree(tmp_path, {"fs/fuse": FUSE_KO}, ".xz", True)
    r = load(fixture_syms, FIXTURE_KALLSYMS, modules_dir=moddir)
    base = ["--defer", "--syms", fixture_syms, "--kallsyms", FIXTURE_KALLSYMS, "--modules-dir",
            moddir]
    assert json_lines(run_c(clib, ["modules"] + base, sanitized=True).stdout) == \
        [st.to_json() for st in r.module_stats]
    got = json_lines(run_c(clib, ["lines"] + base, sanitized=True).stdout)
    assert [(d["address"], d["name"], d["object"]) for d in got] == \
        [(hex(ln.address), ln.name, ln.object) for ln in r.lines()]


def test_refresh_steps_equal_fresh_loads(clib, fixture_syms, fixture_tree, tmp_path):
    """kmodsyms-c refresh, one load told over stdin to follow fuse's
    unload, load and move (kms_refresh()): each step names what changed and
    reports the modules and lines a fresh load of the same files does, and
    the refreshed lines it writes are a fresh 'lines' run's, byte for byte;
    a refresh that fails names its error and exits 2.  Under the sanitizers."""
    text = open(FIXTURE_KALLSYMS, "rb").read()
    core = b"".join(ln for ln in text.splitlines(keepends=True) if b"\t[fuse]" not in ln)
    moved = b"".join(b"%016x" % (int(ln[:16], 16) + 0x1000) + ln[16:] if b"\t[fuse]" in ln else ln
                     for ln in text.splitlines(keepends=True))
    kallsyms = tmp_path / "kallsyms"
    kallsyms.write_bytes(text)
    base = ["--syms", fixture_syms, "--kallsyms", str(kallsyms), "--modules-dir", fixture_tree]
    prog = os.path.join(clib["asan"], "kmodsyms-c")
    proc = subprocess.Popen([prog, "refresh"] + base, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=dict(os.environ, **SANITIZER_ENV))

    def fresh(cmd):
        return run_c(clib, [cmd] + base).stdout

    def step(record, loaded=(), unloaded=(), reloaded=()):
        got = json.loads(record)
        assert (got["loaded"], got["unloaded"], got["reloaded"]) == \
            (list(loaded), list(unloaded), list(reloaded)), got
        assert got["modules"] == json_lines(fresh("modules")), got
        assert got["lines"] == len(json_lines(fresh("lines"))), got
        return got["step"]

    assert step(proc.stdout.readline()) == 0
    for n, (contents, change) in enumerate([(core, {"unloaded": ["fuse"]}), (text, {"loaded": ["fuse"]}),
                                            (moved, {"reloaded": ["fuse"]}), (moved, {})], 1):
        kallsyms.write_bytes(contents)
        out = tmp_path / f"lines-{n}"
        proc.stdin.write(f"{out}\n".encode())
        proc.stdin.flush()
        assert step(proc.stdout.readline(), **change) == n
        assert out.read_bytes() == fresh("lines")
    kallsyms.write_bytes(b"")
    proc.stdin.write(b"\n")
    proc.stdin.flush()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and out == b"", (proc.returncode, err)
    assert err == run_c(clib, ["lines"] + base, check=False).stderr, err   # a fresh load's error


@pytest.mark.parametrize("suffix", [".xz", ".zst", ".gz"])
def test_compressed_module_damaged(clib, fixture_syms, tmp_path, suffix):
    """A compressed file cut short: refused for fuse alone, the compression
    named as the fault, the module's lines answered as from kallsyms alone."""
    moddir = distro_tree(tmp_path, {"fs/fuse": FUSE_KO}, suffix, True)
    path = os.path.join(moddir, f"kernel/fs/fuse/fuse.ko{suffix}")
    data = open(path, "rb").read()
    with open(path, "wb") as f:
        f.write(data[:len(data) // 2])
    r = load(fixture_syms, FIXTURE_KALLSYMS, modules_dir=moddir)
    assert [s.status for s in r.module_stats] == ["refused"]
    base = ["--syms", fixture_syms, "--kallsyms", FIXTURE_KALLSYMS, "--modules-dir", moddir]
    (mod,) = json_lines(run_c(clib, ["modules"] + base, sanitized=True).stdout)
    assert mod["status"] == "refused" and mod["reason"].startswith(f"{path}: cannot decompress (")
    assert mod["reason"].endswith("; reinstall the module")
    plain = run_c(clib, ["lines", "--syms", fixture_syms, "--kallsyms", FIXTURE_KALLSYMS]).stdout
    assert run_c(clib, ["lines"] + base).stdout == plain


LIBRARY_OF = {".xz": "liblzma.so.5", ".zst": "libzstd.so.1", ".gz": "libz.so.1"}


@pytest.mark.parametrize("suffix", [".xz", ".zst", ".gz"])
def test_compressed_module_without_its_library(clib, fixture_syms, tmp_path, suffix):
    """On a machine without the decompressor's library (here hidden by an
    empty file bound over it in a private mount namespace), the module is
    found but unsupported, the reason naming the library; its lines are
    answered as from kallsyms alone and every other answer is unchanged."""
    lib = LIBRARY_OF[suffix]
    found = [os.path.join(d, lib) for d in ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu",
                                            "/lib64", "/usr/lib64", "/lib", "/usr/lib")
             if os.path.exists(os.path.join(d, lib))]
    if not found or not shutil.which("unshare") or os.geteuid() != 0:
        pytest.skip(f"hiding {lib} needs root, unshare and the library's path")
    moddir = distro_tree(tmp_path, {"fs/fuse": FUSE_KO}, suffix, True)
    prog = os.path.join(clib["asan"], "kmodsyms-c")
    base = ["--syms", fixture_syms, "--kallsyms", FIXTURE_KALLSYMS, "--modules-dir", moddir]
    hide = " && ".join(f"mount --bind /dev/null {os.path.realpath(p)}" for p in found)

    def hidden(cmd):
        script = f"{hide} && exec \"$@\""
        proc = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script,
                               "sh", prog] + cmd, capture_output=True,
                              env=dict(os.environ, **SANITIZER_ENV), timeout=300)
        if proc.returncode != 0 and b"mount" in proc.stderr:
            pytest.skip(f"cannot bind-mount over {lib}: {proc.stderr.decode()[:200]}")
        assert proc.returncode == 0, proc.stderr
        return proc
    proc = hidden(["modules"] + base)
    (mod,) = json_lines(proc.stdout)
    rel = f"kernel/fs/fuse/fuse.ko{suffix}"
    assert (mod["file"], mod["status"], mod["sized"]) == (rel, "unsupported", 0)
    assert lib in mod["reason"] and f"compressed ({suffix[1:]})" in mod["reason"]
    assert proc.stderr.count(b"\n") == 1 and b"module fuse:" in proc.stderr
    plain = run_c(clib, ["lines", "--syms", fixture_syms, "--kallsyms", FIXTURE_KALLSYMS]).stdout
    assert hidden(["lines"] + base).stdout == plain


def test_fallback_sanitized(clib, fixture_tree):
    """KMS_LOAD_FALLBACK with no default dtrace_syms on this host: the
    sanitized program answers from kallsyms alone as the bound library
    does (every line, kallmodsyms, probes), loaded modules still read, with
    the one warning load(fallback=True) gives."""
    default = f"/lib/modules/{os.uname().release}/kernel/dtrace_syms"
    if os.path.exists(default):
        pytest.skip(f"{default} is installed: not degraded here")
    warns = []
    r = load(None, FIXTURE_KALLSYMS, fallback=True, warn=warns.append, modules_dir=fixture_tree)
    assert not r.builtin_modules_known and len(warns) == 1
    base = ["--fallback", "--kallsyms", FIXTURE_KALLSYMS, "--modules-dir", fixture_tree]
    proc = run_c(clib, ["lines"] + base, sanitized=True)
    assert proc.stderr.decode().splitlines() == [f"kmodsyms-c: warning: {warns[0]}"]
    lines = json_lines(proc.stdout)
    assert [(d["address"], d["name"]) for d in lines] == \
        [(hex(ln.address), ln.name) for ln in r.lines()]
    assert run_c(clib, ["kallmodsyms"] + base).stdout == r.kallmodsyms()
    addrs = probes_of(lines, 2_000)
    records = json_lines(run_c(clib, ["resolve", "--json"] + base, stdin="".join(
        f"{a:x}\n" for a in addrs).encode(), sanitized=True).stdout)
    batch = r.resolve_many(addrs)
    for a, line, rec in zip(addrs, batch.lines.tolist(), records):
        assert rec == r.record(a, line).to_json(), hex(a)
    # strict: the same missing file is an error naming it
    proc = run_c(clib, ["lines", "--kallsyms", FIXTURE_KALLSYMS], check=False)
    assert proc.returncode == 2 and default.encode() in proc.stderr


@pytest.mark.parametrize("tool", [["gzip", "-c"], ["xz", "-c"], ["zstd", "-q", "-c"]])
def test_compressed_kallsyms_named(clib, fixture_syms, tmp_path, tool):
    """kallsyms compressed by the real tool: one line naming the file
    once and what it is, exit status 2 (issue 24 item 7)."""
    if not shutil.which(tool[0]):
        pytest.skip(f"{tool[0]} is not installed")
    path = tmp_path / "kallsyms.z"
    path.write_bytes(subprocess.run(tool, input=open(FIXTURE_KALLSYMS, "rb").read(),
                                    capture_output=True, check=True).stdout)
    proc = run_c(clib, ["lines", "--syms", fixture_syms, "--kallsyms", str(path)],
                 sanitized=True, check=False)
    name = {"gzip": "gzip", "xz": "xz", "zstd": "zstd"}[tool[0]]
    assert proc.returncode == 2
    assert proc.stderr.decode() == \
        f"kmodsyms-c: error: {path}: {name} data: decompress it first\n"


def test_empty_kallsyms_named_once(clib, fixture_syms, tmp_path):
    """An empty kallsyms file named ``empty``: its name once, then what is
    wrong, from C and from the Python CLI (issue 24 item 6: it said
    ``empty: empty: no symbols``)."""
    path = tmp_path / "empty"
    path.write_bytes(b"")
    want = f"{path}: no symbols: the file is empty or blank (is this a kallsyms file?)\n"
    proc = run_c(clib, ["lines", "--syms", fixture_syms, "--kallsyms", str(path)], check=False)
    assert (proc.returncode, proc.stdout, proc.stderr.decode()) == (2, b"", "kmodsyms-c: error: " + want)
    cli = subprocess.run([sys.executable, "-m", "kmodsyms", "resolve", "--syms", fixture_syms,
                          "--kallsyms", str(path), "0x1"], capture_output=True, text=True)
    assert (cli.returncode, cli.stdout, cli.stderr) == (2, "", "kmodsyms: error: " + want)


def _kernel_rule_hides(kptr: int, paranoid: int, cap_syslog: bool) -> bool:
    """kernel/ksyms_common.c kallsyms_show_value(), negated."""
    if kptr == 0 and paranoid <= 1:
        return False
    return not (kptr <= 1 and cap_syslog)


@pytest.mark.parametrize("who", ["nobody", "root without CAP_SYSLOG"])
def test_hidden_addresses_real_cause(clib, fixture_syms, who):
    """The running kernel's /proc/kallsyms read by a reader it hides
    addresses from: the error names the real cause from the sysctls the
    kernel's rule reads, and a sysctl only where setting it would show
    them (issue 24 item 9)."""
    if os.geteuid() != 0 or not shutil.which("setpriv") or not os.path.exists("/proc/kallsyms"):
        pytest.skip("needs root, setpriv and /proc/kallsyms")
    kptr = int(open("/proc/sys/kernel/kptr_restrict").read())
    paranoid = int(open("/proc/sys/kernel/perf_event_paranoid").read())
    if not _kernel_rule_hides(kptr, paranoid, False):
        pytest.skip(f"kptr_restrict={kptr}, perf_event_paranoid={paranoid}: shown to every reader")
    drop = (["--reuid=65534", "--regid=65534", "--clear-groups"] if who == "nobody" else
            ["--inh-caps=-syslog", "--bounding-set=-syslog"])
    import tempfile
    with tempfile.TemporaryDirectory() as shared:   # where the other user may read
        os.chmod(shared, 0o755)
        prog, syms = os.path.join(shared, "kmodsyms-c"), os.path.join(shared, "dtrace_syms")
        shutil.copy(os.path.join(clib["plain"], "kmodsyms-c"), prog)
        shutil.copy(fixture_syms, syms)
        os.chmod(syms, 0o644)
        proc = subprocess.run(["setpriv"] + drop + [prog, "lines", "--syms", syms],
                              capture_output=True, timeout=120)
        # The Python CLI says what the library says. It runs as root without
        # CAP_SYSLOG only: as nobody, the interpreter and the installed package
        # need not be readable (a pyenv under a 0700 /root, a umask-077 pip).
        cli = None if who == "nobody" else subprocess.run(
            ["setpriv"] + drop + [sys.executable, "-m", "kmodsyms", "resolve",
                                  "--syms", syms, "0xffffffff81000000"],
            capture_output=True, timeout=120, cwd=shared)
    msg = proc.stderr.decode()
    assert proc.returncode == 2 and msg.count("\n") == 1, msg
    assert msg.startswith("kmodsyms-c: error: /proc/kallsyms: every address is 0: "), msg
    if cli is not None:
        assert (cli.returncode, cli.stdout, cli.stderr.decode()) == \
            (2, b"", "kmodsyms: error: " + msg[len("kmodsyms-c: error: "):]), cli
    if kptr >= 2:
        assert f"kernel.kptr_restrict is {kptr}" in msg and "kptr_restrict=1" in msg
    elif kptr == 1:
        assert "kernel.kptr_restrict is 1" in msg and "CAP_SYSLOG" in msg
        assert ("kptr_restrict=0" in msg) == (paranoid <= 1)
    else:   # 0, with perf_event_paranoid above 1: kptr_restrict=0 already holds
        assert f"kernel.perf_event_paranoid is {paranoid}" in msg and "CAP_SYSLOG" in msg
        assert "kptr_restrict" not in msg and "perf_event_paranoid=1" in msg


def test_search_without_modules_dep_equal(clib, fixture_syms, tmp_path):
    """No modules.dep: updates/ over extra/ over the rest, as depmod; a
    wrong build lower in that order is never read."""
    moddir = tmp_path / "lib"
    for rel, source in (("kernel/fs/fuse/fuse.ko", OTHER_FUSE_KO), ("extra/fuse.ko", OTHER_FUSE_KO),
                        ("updates/dkms/fuse.ko", FUSE_KO)):
        os.makedirs(os.path.dirname(moddir / rel), exist_ok=True)
        shutil.copy(source, moddir / rel)
    stats, _records, _got = module_answers(clib, fixture_syms, FIXTURE_KALLSYMS, 500,
                                        modules_dir=str(moddir))
    assert [(st["file"], st["status"]) for st in stats] == [("updates/dkms/fuse.ko", "matched")]


def cross_module_kallsyms(obj: str, dest) -> str:
    """The fixture's kallsyms with ``obj`` loaded as module "sample"
    (test_loadable.sample_module_lines), written to ``dest``."""
    dest.write_bytes(open(FIXTURE_KALLSYMS, "rb").read() + sample_module_lines(obj))
    return str(dest)


@pytest.mark.parametrize("arch", CROSS_ARCHES)
def test_cross_object_as_module_equal(clib, fixture_syms, tmp_path, arch):
    """The .ko reader on every ELF class and byte order (fixtures/cross:
    ELF64 and ELF32, little- and big-endian), held to pyelftools."""
    obj = os.path.join(CROSS, arch, "sample.o")
    kallsyms = cross_module_kallsyms(obj, tmp_path / "kallsyms")
    os.makedirs(tmp_path / "lib" / "extra")
    shutil.copy(obj, tmp_path / "lib" / "extra" / "sample.ko")
    stats, records, got = module_answers(clib, fixture_syms, kallsyms, 2_000,
                                      modules_dir=str(tmp_path / "lib"))
    assert {st["name"]: st["status"] for st in stats}["sample"] == "matched"
    assert check_against_elf(got, records, kallsyms, "sample", obj, "extra/sample.ko",
                             elf_symbols) >= 7


def _damage_sections(data: bytearray, shoff: int, index: int, **fields) -> bytearray:
    """``data`` with fields (name: (offset in an ELF64 section header,
    struct format, value)) of section ``index``'s header changed."""
    for at, fmt, value in fields.values():
        struct.pack_into(fmt, data, shoff + 64 * index + at, value)
    return data


def _damaged_ko(data: bytearray, path: str, damage: str) -> bytes:
    """fuse.ko (ELF64, little-endian) damaged one way: each of the ways
    src/kmodsyms/elffile.py words a refusal, and a file without section headers."""
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    if damage == "bad section index":    # every symbol's st_shndx past the section count
        from elftools.elf.elffile import ELFFile
        with open(path, "rb") as f:
            symtab = ELFFile(f).get_section_by_name(".symtab")
            at, count = symtab["sh_offset"], symtab["sh_size"] // 24
        for k in range(1, count):
            struct.pack_into("<H", data, at + 24 * k + 6, 0x7000)
    if damage == "short section index table":   # the last symbol's index in an empty one
        from elftools.elf.elffile import ELFFile
        with open(path, "rb") as f:
            elf = ELFFile(f)
            symtab = elf.get_section_index(".symtab")
            empty = elf.get_section_index(".note.GNU-stack")
            at, size = elf.get_section(symtab)["sh_offset"], elf.get_section(symtab)["sh_size"]
        struct.pack_into("<H", data, at + size - 24 + 6, 0xFFFF)     # SHN_XINDEX
        _damage_sections(data, shoff, empty, type=(4, "<I", 18), link=(40, "<I", symtab))
    if damage == "contents past the end":
        _damage_sections(data, shoff, 16, offset=(24, "<Q", len(data)))
    header = {"no section headers": (0x28, "<Q", 0), "section header size": (0x3A, "<H", 32),
              "unknown class": (4, "B", 3)}.get(damage)
    if header:
        struct.pack_into(header[1], data, header[0], header[2])
    return {"truncated ELF": data[:2000], "cut section headers": data[:shoff + 100],
            "not ELF": b"\0" * 64 + data[64:], "empty": b"", "ELF magic alone": b"\x7fELF",
            "ar archive": b"!<arch>\n" + data[8:], "ELF header cut": data[:40]}.get(damage, data)


@pytest.mark.parametrize("damage", [
    "truncated ELF", "cut section headers", "not ELF", "empty", "bad section index",
    "ELF magic alone", "ar archive", "ELF header cut", "unknown class", "section header size",
    "contents past the end", "short section index table", "no section headers",
    "a directory"])
def test_damaged_module_file_equal(clib, fixture_syms, tmp_path, damage):
    """A damaged .ko costs its module's sizes on both sides, and nothing
    else; both refuse it in the same words."""
    moddir = distro_tree(tmp_path, {"fs/fuse": FUSE_KO}, "", False)
    path = os.path.join(moddir, "kernel", "fs", "fuse", "fuse.ko")
    if damage == "a directory":         # found, stat()ed, but not readable
        os.remove(path)
        os.mkdir(path)
    else:
        damaged = _damaged_ko(bytearray(open(path, "rb").read()), path, damage)
        open(path, "wb").write(damaged)
    stats, _records, _got = module_answers(clib, fixture_syms, FIXTURE_KALLSYMS, 500,
                                        modules_dir=moddir)
    assert [st["status"] for st in stats] == ["refused"]


def corpus_module_check(clib, tree, syms, random_count) -> dict:
    """A corpus with its .ko files (tests/test_loadable.py CORPUS_MODULES):
    the sanitized program's sizes and innermost answers held to readelf
    -sW of each .ko.  Returns {module: lines with an ELF size}."""
    arch = "arm64" if "arm64" in tree else "x86_64"
    kallsyms = os.path.join(tree, "kallsyms")
    stats, records, got = module_answers(clib, syms, kallsyms, random_count, modules_dir=tree)
    assert {st["status"] for st in stats} == {"matched"}
    sized = {}
    for rel in CORPUS_MODULES[arch]:
        module = module_name(os.path.basename(rel))
        sized[module] = check_against_elf(got, records, kallsyms, module, os.path.join(tree, rel),
                                          rel, readelf_symbols)
        stat = {st["name"]: st for st in stats}[module]
        assert sized[module] == stat["sized"] > 0
        check_loaded_module_ranges(clib, syms, kallsyms, tree, module, rel)
    return sized


def check_loaded_module_ranges(clib, syms, kallsyms, modules_dir, module, rel) -> None:
    """kms_module_ranges() of a loaded module holds every sized symbol of
    its .ko (readelf -sW) whole, a text line's in a text range: what
    dt_modsym_update() builds from the sizes."""
    ko_path = os.path.join(modules_dir, rel)
    out = run_c(clib, ["ranges", "--syms", syms, "--kallsyms", kallsyms, "--modules-dir",
                       modules_dir, module])
    ranges = [(int(d["start"], 16), int(d["end"], 16), d["text"]) for d in json_lines(out.stdout)]
    letter = {(name, addr): c for addr, c, name in module_lines(kallsyms, module)}
    placed = runtime_symbols(readelf_symbols(ko_path), module_lines(kallsyms, module))
    outside = [(name, hex(addr)) for name, addr, size, _t, _b in placed if size and not any(
        start <= addr and addr + size <= end and (text or letter[name, addr] not in "tT")
        for start, end, text in ranges)]
    assert ranges and outside == []


@pytest.mark.corpus
def test_corpus_module_ko_equal(clib, corpus, corpus_syms):
    """x86_64: xfs, fuse, isofs (11,985, 717 and 119 lines with an ELF size)."""
    assert corpus_module_check(clib, corpus, corpus_syms, 20_000) == \
        {"xfs": 11_985, "fuse": 717, "isofs": 119}


@pytest.mark.corpus
@pytest.mark.parametrize("suffix", [".xz", ".zst", ".gz"])
def test_corpus_compressed_modules_sized_as_plain(clib, corpus, corpus_syms, tmp_path, suffix):
    """x86_64's xfs, fuse and isofs, signed and compressed by the xz, zstd
    or gzip tool as a distribution installs them: C sizes every line as
    readelf -sW of the plain .ko does."""
    trees = {}
    for rel in CORPUS_MODULES["x86_64"]:
        trees[os.path.dirname(rel)] = os.path.join(corpus, rel)
    moddir = distro_tree(tmp_path, trees, suffix, True, prefix="")
    kallsyms = os.path.join(corpus, "kallsyms")
    stats, records, got = module_answers(clib, corpus_syms, kallsyms, 2_000, modules_dir=moddir)
    assert {st["status"] for st in stats} == {"matched"}
    sized = {}
    for rel in CORPUS_MODULES["x86_64"]:
        module = module_name(os.path.basename(rel))
        sized[module] = check_against_elf(got, records, kallsyms, module,
                                          os.path.join(corpus, rel), rel + suffix,
                                          readelf_symbols)
    assert sized == {"xfs": 11_985, "fuse": 717, "isofs": 119}


@pytest.mark.slow
@pytest.mark.corpus
def test_corpora_module_ko_equal(clib, any_corpus, any_corpus_syms):
    """Both corpora (arm64 loads its modules below the kernel image), with
    N_RANDOM random addresses in the modules."""
    sized = corpus_module_check(clib, any_corpus, any_corpus_syms, N_RANDOM)
    assert all(sized.values())


def test_c_modules_says_when_none_is_loaded(clib, fixture_syms, tmp_path):
    """As 'kmodsyms modules' (tests/test_frontend.py): no [MODULE] line in
    kallsyms is said on stderr, stdout empty, exit 0."""
    plain = tmp_path / "kallsyms.core"
    plain.write_text("".join(line for line in open(FIXTURE_KALLSYMS) if "\t[" not in line))
    out = run_c(clib, ["modules", "--syms", fixture_syms, "--kallsyms", str(plain)])
    assert (out.stdout, out.stderr.decode()) == \
        (b"", f"kmodsyms-c: no loaded modules (no '[MODULE]' line in {plain})\n")


@pytest.mark.parametrize("cli", ["python", "c"])
def test_only_a_missing_dtrace_syms_is_one_to_build(clib, cli):
    """A dtrace_syms that cannot be read for another reason than its absence
    (here a path through a regular file: ENOTDIR) is named with its error and
    no advice to build it; a missing one is advised to be built."""
    prog = [os.path.join(clib["plain"], "kmodsyms-c")] if cli == "c" else [sys.executable, "-m", "kmodsyms"]
    for syms, advice in (("/etc/passwd/dtrace_syms", False), ("/nonexistent/dtrace_syms", True)):
        out = subprocess.run(prog + ["resolve", "--syms", syms, "--kallsyms", FIXTURE_KALLSYMS, "0x1"],
                             capture_output=True, text=True)
        assert out.returncode != 0 and len(out.stderr.splitlines()) == 1, out.stderr
        assert f"cannot read {syms}: " in out.stderr
        assert ("build it with 'kmodsyms build'" in out.stderr) == advice, out.stderr
