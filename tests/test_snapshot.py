"""Snapshots (kmodsyms.snapshot): a saved resolver answers exactly as the
full one (restored in process, or read in plain Python by ``kmodsyms
resolve``), is used only for the very inputs it was made from, and
``kmodsyms resolve`` then runs without numpy or typer."""

from __future__ import annotations

import os
import random
import struct
import subprocess
import sys

import pytest

from conftest import FIXTURE
from kmodsyms import load
from kmodsyms.cli.frontend import parse_args
from kmodsyms.build.layout import Placed
from kmodsyms.snapshot import Snapshot, open_saved, save, snapshot_path

FIXTURE_KALLSYMS = os.path.join(FIXTURE, "kallsyms")


def _probe_addresses(resolver, count: int, seed: int) -> list[int]:
    """Every line's address and its neighbours, the edges of every placed
    section and of every sized symbol, and random addresses in between."""
    ks = resolver.ks
    lines = ks.address.tolist()
    step = max(1, len(lines) // count)
    probes = set()
    for a in lines[::step]:
        probes.update((a - 1, a, a + 1))
    for start, end in zip(resolver.placement.extent_start.tolist()[::step],
                          resolver.placement.extent_end.tolist()[::step]):
        probes.update((start - 1, start, end - 1, end))
    for start, end in zip(resolver.iv_start.tolist()[::step], resolver.iv_end.tolist()[::step]):
        probes.update((end - 1, end))
    rng = random.Random(seed)
    core = [a for a in lines if a > 1 << 63]
    lo, hi = min(core), max(core) + 0x10000
    probes.update(rng.randrange(lo, hi) for _ in range(count))
    probes.update((0, 1, (1 << 64) - 1))
    return sorted(p for p in probes if 0 <= p < 1 << 64)


def _assert_same_answers(syms_path, kallsyms_path, count, seed):
    resolver = load(syms_path, kallsyms_path, cache=False)
    save(resolver, syms_path, kallsyms_path)
    saved = open_saved(syms_path, kallsyms_path)
    assert saved.doc["meta"]["kernel_release"] == resolver.syms.meta_kernel_release
    snapshot = Snapshot(saved)
    restored = load(syms_path, kallsyms_path)
    assert type(restored.placement) is Placed       # restored: extents only, nothing placed
    probes = _probe_addresses(resolver, count, seed)
    lines, sized = resolver.resolve_many(probes)
    again = restored.resolve_many(probes)
    assert (again[0].tolist(), again[1].tolist()) == (lines.tolist(), sized.tolist())
    for address, line, hit in zip(probes, lines.tolist(), sized.tolist()):
        want = resolver.record(address, line, hit)
        assert snapshot.resolve(address) == want, hex(address)
        assert restored.record(address, line, hit) == want, hex(address)
    # The rest of the API, restored.
    assert list(restored.kallmodsyms_lines()) == list(resolver.kallmodsyms_lines())
    assert restored.stats == resolver.stats and restored.modules() == resolver.modules()
    for module in resolver.modules()[:4] + resolver.modules()[-2:]:
        assert restored.symbols(module) == resolver.symbols(module), module
    names = sorted({resolver.ks.name(i) for i in range(0, len(resolver.ks), max(1, count // 50))})
    for name in names:
        assert restored.lookup(name) == resolver.lookup(name), name
    return len(probes)


def test_snapshot_answers_as_the_resolver_fixture(fixture_syms):
    assert _assert_same_answers(fixture_syms, FIXTURE_KALLSYMS, 1000, 1) > 100


def test_snapshot_answers_as_the_resolver_ambiguous(fixture_syms, tmp_path):
    """Lines whose copies the build could not place: their candidates'
    module lists come back from the snapshot as the resolver gives them."""
    from test_corpora import _unplace_sections_of
    out = str(tmp_path / "dtrace_syms")
    assert _unplace_sections_of(fixture_syms, "init_once", out) == 3
    assert load(out, FIXTURE_KALLSYMS, cache=False).stats.lines_ambiguous >= 3
    assert _assert_same_answers(out, FIXTURE_KALLSYMS, 1000, 3) > 100
    snapshot = Snapshot(open_saved(out, FIXTURE_KALLSYMS))
    assert [rec.candidates for rec in snapshot.lookup("init_once")] == \
        [rec.candidates for rec in load(out, FIXTURE_KALLSYMS, cache=False).lookup("init_once")]
    assert any(rec.ambiguous for rec in snapshot.lookup("init_once"))


def test_snapshot_answers_as_the_resolver_corpus(corpus, corpus_syms):
    assert _assert_same_answers(corpus_syms, os.path.join(corpus, "kallsyms"), 20000, 2) > 20000


def _resolve(args, stdin=None, importtime=False):
    cmd = [sys.executable] + (["-X", "importtime"] if importtime else []) + \
        ["-m", "kmodsyms", "resolve", *args]
    return subprocess.run(cmd, input=stdin, capture_output=True, text=True)


def test_second_resolve_runs_without_numpy_or_typer(fixture_syms, tmp_path):
    ks = tmp_path / "kallsyms"
    ks.write_bytes(open(FIXTURE_KALLSYMS, "rb").read())
    args = ["--syms", fixture_syms, "--kallsyms", str(ks), "0xffffffffab600400", "0x0"]
    first = _resolve(args, importtime=True)
    assert first.returncode == 0, first.stderr
    assert os.path.exists(snapshot_path(fixture_syms, str(ks)))
    second = _resolve(args, importtime=True)
    assert (second.returncode, second.stdout) == (0, first.stdout)
    imported = {line.rsplit("|", 1)[-1].strip() for line in second.stderr.splitlines()}
    assert "numpy" in {line.rsplit("|", 1)[-1].strip() for line in first.stderr.splitlines()}
    assert not imported & {"numpy", "typer", "kmodsyms.resolver", "kmodsyms.cli.app"}


def _damage(path, at, what):
    data = bytearray(open(path, "rb").read())
    if what == "truncate":
        data = data[:at]
    else:
        data[at] ^= 0x40
    open(path, "wb").write(bytes(data))


@pytest.mark.parametrize("change", ["kallsyms-edited", "kallsyms-one-byte", "syms-touched",
                                    "snapshot-truncated", "snapshot-empty", "snapshot-foreign"])
def test_snapshot_is_used_only_for_its_inputs(fixture_tree, fixture_syms, tmp_path, change):
    """Whatever changed, the answer is the full resolver's (and a fresh
    snapshot replaces the unusable one)."""
    syms = tmp_path / "dtrace_syms"
    syms.write_bytes(open(fixture_syms, "rb").read())
    ks = tmp_path / "kallsyms"
    text = open(FIXTURE_KALLSYMS, "rb").read()
    ks.write_bytes(text)
    args = ["--syms", str(syms), "--kallsyms", str(ks), "0xffffffffab600400",
            "0xffffffffc0a00010", "0xffffffffab600011"]
    assert _resolve(args).returncode == 0
    snap = snapshot_path(str(syms), str(ks))
    size = os.path.getsize(snap)
    if change == "kallsyms-edited":
        # The loaded module's lines go: the same addresses now answer otherwise.
        ks.write_bytes(b"".join(l for l in text.splitlines(True) if b"[fuse]" not in l))
    elif change == "kallsyms-one-byte":   # same length: only the checksums tell
        # (a duplicated name: never an anchor, so the file still matches)
        ks.write_bytes(text.replace(b" init_once\n", b" init_oncf\n", 1))
    elif change == "syms-touched":
        os.utime(syms, ns=(os.stat(syms).st_atime_ns, os.stat(syms).st_mtime_ns + 10**9))
    elif change == "snapshot-foreign":
        _damage(snap, 3, "flip")
    elif change == "snapshot-truncated":
        _damage(snap, size // 2, "truncate")
    else:
        _damage(snap, 0, "truncate")
    assert open_saved(str(syms), str(ks)) is None
    fresh = _resolve(["--no-cache"] + args)
    again = _resolve(args)
    assert fresh.returncode == 0, fresh.stderr
    assert (again.returncode, again.stdout, again.stderr) == (0, fresh.stdout, fresh.stderr)
    assert open_saved(str(syms), str(ks)) is not None


@pytest.mark.parametrize("form", [
    ["--syms", "{syms}", "--kallsyms", "{ks}", "{a}"],
    ["{a}", "--syms={syms}", "--kallsyms={ks}", "--json"],
    ["-s", "{syms}", "--json", "--kallsyms", "{ks}", "{a}", "{b}"],
    ["-s", "{syms}", "--kallsyms", "{ks}", "--", "{a}"],
    ["-s", "{syms}", "--kallsyms", "{ks}", "-", "{b}"],
    ["-s", "{syms}", "--kallsyms", "{ks}", "--force", "{a}"],
    ["-s", "{syms}", "--kallsyms", "{ks}", "nothex"],
    ["-s", "{syms}", "--kallsyms", "{ks}", "--bogus", "{a}"],
    ["-s", "{syms}", "--kallsyms", "{ks}"],
])
def test_quick_path_reads_arguments_as_typer_does(fixture_syms, tmp_path, form):
    """With a snapshot present, every form gives what the full CLI gives."""
    ks = tmp_path / "kallsyms"
    ks.write_bytes(open(FIXTURE_KALLSYMS, "rb").read())
    values = {"syms": fixture_syms, "ks": str(ks), "a": "0xffffffffab600400", "b": "ffffffffc0a00010"}
    args = [arg.format(**values) for arg in form]
    assert _resolve(["--syms", fixture_syms, "--kallsyms", str(ks), "0x1"]).returncode == 0
    stdin = "0xffffffffab600011\n\n0xffffffffab600400\n"
    quick = _resolve(args, stdin=stdin)
    full = _resolve(["--no-cache"] + args, stdin=stdin)
    assert (quick.returncode, quick.stdout, quick.stderr) == \
        (full.returncode, full.stdout, full.stderr)


@pytest.mark.parametrize("args", [["--help"], ["-h", "0x1"], ["--bogus", "0x1"], ["-s=x", "0x1"],
                                  ["--syms"], [], ["--json=1", "0x1"], ["--format", "bogus", "0x1"],
                                  ["--format"]])
def test_quick_path_declines_what_it_does_not_read(args):
    assert parse_args("resolve", args) is None


def test_quick_path_options():
    assert parse_args("resolve", ["-s", "S", "1", "--kallsyms=K", "--json", "-", "-f", "kernel",
                                  "--strict", "--", "2"]) == {
        "syms": "S", "kallsyms": "K", "format": "kernel", "json": True, "strict": True,
        "force": False, "no_cache": False, "modules_dir": None, "arguments": ["1", "-", "2"]}
    assert parse_args("lookup", ["--format=dtrace", "ext4`f+0x1c"])["format"] == "dtrace"
    assert parse_args("resolve", ["--modules-dir", "M", "1"])["modules_dir"] == "M"


def test_load_saves_only_when_asked_and_checked(fixture_syms, tmp_path):
    ks = tmp_path / "kallsyms"
    ks.write_bytes(open(FIXTURE_KALLSYMS, "rb").read())
    path = snapshot_path(fixture_syms, str(ks))
    load(fixture_syms, str(ks), cache=False)
    load(fixture_syms, str(ks), force=True)     # checks skipped: nothing saved
    assert not os.path.exists(path)
    first = load(fixture_syms, str(ks))
    assert os.path.exists(path) and type(first.placement) is not Placed
    again = load(fixture_syms, str(ks))
    assert type(again.placement) is Placed
    assert again.resolve(0xffffffffab600400) == first.resolve(0xffffffffab600400)


def test_damaged_snapshot_arrays_give_the_full_answer(fixture_syms, tmp_path):
    """Arrays are trusted, not checked, when read: an index gone out of range
    must not end in a traceback; the snapshot is dropped and the full CLI
    answers (and saves a new one)."""
    ks = tmp_path / "kallsyms"
    ks.write_bytes(open(FIXTURE_KALLSYMS, "rb").read())
    args = ["--syms", fixture_syms, "--kallsyms", str(ks), "0xffffffffab600400"]
    full = _resolve(["--no-cache"] + args)
    assert _resolve(args).returncode == 0
    saved = open_saved(fixture_syms, str(ks))
    at, code, count = saved.arrays["iv_line"]
    path = snapshot_path(fixture_syms, str(ks))
    del saved
    data = bytearray(open(path, "rb").read())
    size = struct.calcsize(code) * count
    data[at:at + size] = b"\x7f" * size    # every interval's line far out of range
    open(path, "wb").write(bytes(data))
    damaged = _resolve(args)
    assert (damaged.returncode, damaged.stdout, damaged.stderr) == (0, full.stdout, full.stderr)
    assert open_saved(fixture_syms, str(ks)).arrays["iv_line"] is not None
