"""A CONFIG_KALLSYMS_ALL=n kernel (x86_64 defconfig's default): its
kallsyms lists only the text ranges, so the file's data anchors are absent.
The bundled case: fixtures/kbuild/kallsyms.text-only, the fixture kernel's
kallsyms as scripts/kallsyms.c would have written it without --all-symbols
(the corpora's text-only variants are in tests/test_corpora.py)."""

import os

import pytest
from conftest import FIXTURE
from kallsyms_variants import text_only

from kmodsyms import load
from kmodsyms.binding.records import SizeKind
from kmodsyms.errors import KmodsymsError, StaleError

TEXT_ONLY = os.path.join(FIXTURE, "kallsyms.text-only")


def test_bundled_text_only_kallsyms_is_the_kernels_rule():
    """The committed file is what the rule derives (it cannot drift)."""
    derived = text_only(os.path.join(FIXTURE, "System.map"),
                        open(os.path.join(FIXTURE, "kallsyms"), "rb").read())
    assert open(TEXT_ONLY, "rb").read() == derived
    letters = {line.split()[1] for line in derived.splitlines() if len(line.split()) == 3
               and not line.split()[2].startswith((b"__start_", b"__stop_"))}
    assert letters <= {b"t", b"T", b"w", b"W"}      # no data, no per-cpu 'A'


def exact(rec):
    """An answer's ELF size; None where it is estimated from the gap to the
    next line, which a text-only kallsyms, lacking the data lines, widens."""
    return rec.size if rec.size_kind == SizeKind.EXACT else None


def test_text_only_answers_as_the_full_kallsyms(fixture_syms):
    """Every line of the text-only kallsyms gets what the full kallsyms
    gives the same line: the absent data anchors do not refuse the file."""
    full = load(syms=fixture_syms, kallsyms=os.path.join(FIXTURE, "kallsyms"))
    text = load(syms=fixture_syms, kallsyms=TEXT_ONLY)
    assert len(text) < len(full)
    for line in text.lines():
        address, name = line.address, line.name
        ours = [rec for rec in text.lookup(name) if rec.start == address]
        theirs = [rec for rec in full.lookup(name) if rec.start == address]
        if all(exact(r) is None for r in theirs):
            # a linker-made symbol: on the first byte of an object's section
            # in a segment text-only kallsyms cannot place, it is core
            assert all(exact(r) is None for r in ours), name
            continue
        assert [(r.modules, r.object, exact(r)) for r in ours] == \
            [(r.modules, r.object, exact(r)) for r in theirs], name
        got = text.resolve(address + 1)
        assert got.symbol == full.resolve(address + 1).symbol or not got.sized


def test_text_only_kallsyms_of_another_kernel_is_refused(fixture_syms, tmp_path):
    """Every text symbol moved by 0x40 past the first tenth: a rebuilt kernel."""
    lines = open(TEXT_ONLY, "rb").read().splitlines(keepends=True)
    moved = [b"%016x" % (int(ln[:16], 16) + 0x40) + ln[16:] if i > len(lines) // 10 and ln.count(b" ") == 2
             and b"\t" not in ln else ln for i, ln in enumerate(lines)]
    with pytest.raises(StaleError, match="does not match .*different kernels"):
        load(syms=fixture_syms, kallsyms_text=b"".join(moved), kallsyms_name="moved")


def test_truncated_text_only_kallsyms_blames_kallsyms(fixture_syms):
    lines = open(TEXT_ONLY, "rb").read().splitlines(keepends=True)
    with pytest.raises(KmodsymsError, match="^cut lacks .*truncated"):
        load(syms=fixture_syms, kallsyms_text=b"".join(lines[:len(lines) // 2]), kallsyms_name="cut")


def test_r41_a_truncated_kallsyms_forced_is_said(fixture_syms):
    """R41 with R37: force uses a truncated kallsyms as it is, and says so
    in the one warning line, with R37's words (never silently)."""
    lines = open(TEXT_ONLY, "rb").read().splitlines(keepends=True)
    with pytest.warns(UserWarning, match=r"used anyway \(--force\), answers may be wrong: cut lacks .*truncated"):
        r = load(syms=fixture_syms, kallsyms_text=b"".join(lines[:len(lines) // 2]), kallsyms_name="cut",
                 force=True)
    assert "truncated" in r.info.warning
