"""kmodsyms.scan.verify: the modules.builtin.ranges parser, verify on the fixture
tree (linker maps only) and on the real 6.12 corpus (maps and ranges)."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

from kmodsyms.errors import KmodsymsError
from kmodsyms.scan.verify import parse_ranges, read_elf_info, verify

# Sections where upstream's modules.builtin.ranges is known to miss built-in
# module data (generate_builtin_ranges.awk skips .percpu and non-dot output
# sections such as __param and __modver), and the sections of the corpus's
# two inverted ranges (.text: cpuidle_haltpoll, .init.data: 8250).
RANGES_GAPS = {".data..percpu", "__param", "__modver"}
INVERTED_SECTIONS = {".text", ".init.data"}
KASLR = 0x2A600000  # corpus kallsyms shift (../shared/kernels/README.md)


# ------------------------------------------------------------------ parser
SYNTHETIC = """\
.text 00000000-00000000 = _text
.text 00000100-00000200 alpha
.text 00000200-00000280 beta gamma
.text 00000400-00000300 delta
.rodata 00000010-00000010 = some_rodata_sym
.rodata 00000020-00000040 alpha
.altinstr_aux 00000004-00000008 epsilon
"""


def _parse_synthetic(section_address=None):
    symbols = {"_text": 0x1000, "some_rodata_sym": 0x5010}
    return parse_ranges(SYNTHETIC, lambda name, sect: symbols.get(name), section_address)


def test_parse_ranges_synthetic():
    p = _parse_synthetic({".altinstr_aux": 0x9000})
    assert p.anchors == {".text": 0x1000, ".rodata": 0x5000}
    got = [(r.section, r.start, r.end, r.modules) for r in p.ranges]
    assert got == [(".text", 0x1100, 0x1200, ("alpha",)),
                   (".text", 0x1200, 0x1280, ("beta", "gamma")),
                   (".rodata", 0x5020, 0x5040, ("alpha",)),
                   (".altinstr_aux", 0x9004, 0x9008, ("epsilon",))]
    # The inverted range covers nothing but is reported.
    assert len(p.inverted) == 1
    assert p.inverted[0]["modules"] == ["delta"] and p.inverted[0]["section"] == ".text"
    hit = p.lookup(np.array([0x10ff, 0x1100, 0x11ff, 0x1200, 0x127f, 0x1280, 0x1350,
                             0x5020, 0x9006], dtype=np.uint64))
    mods = [p.ranges[h].modules if h >= 0 else None for h in hit.tolist()]
    assert mods == [None, ("alpha",), ("alpha",), ("beta", "gamma"), ("beta", "gamma"),
                    None, None, ("alpha",), ("epsilon",)]


def test_parse_ranges_unanchored_section_without_headers():
    p = _parse_synthetic()
    assert p.unanchored == [".altinstr_aux"]
    assert all(r.section != ".altinstr_aux" for r in p.ranges)


def test_parse_ranges_anchor_mismatch_reported():
    p = _parse_synthetic({".text": 0x1000, ".rodata": 0x4000})
    assert [m["section"] for m in p.anchor_mismatches] == [".rodata"]


@pytest.mark.parametrize("text", [".text 0-0 = missing_symbol\n", ".text zz-10 foo\n",
                                  ".text 00000010 foo\n", ".text 0-0 = a b\n"])
def test_parse_ranges_errors(text):
    with pytest.raises(KmodsymsError):
        parse_ranges(text, lambda name, sect: None)


# ----------------------------------------------------------- fixture tree
def test_verify_fixture_maps_only(fixture_tree, fixture_syms):
    assert not os.path.exists(os.path.join(fixture_tree, "modules.builtin.ranges"))
    report = verify(fixture_tree, fixture_syms)
    assert report.ranges is None
    maps = report.linker_maps
    assert maps is not None and maps.compared > 100
    assert maps.disagreements == 0, report.format()
    assert report.ambiguous == 0
    assert report.exit_status() == 0
    doc = json.loads(json.dumps(report.to_json()))
    assert doc["ok"] and doc["comparisons"]["linker_maps"]["disagreements"] == 0
    assert "OK" in report.format()


def test_verify_missing_inputs(tmp_path, fixture_tree, fixture_syms):
    with pytest.raises(KmodsymsError, match="not a directory"):
        verify(str(tmp_path / "nope"), fixture_syms)
    tree = tmp_path / "tree"
    tree.mkdir()
    with pytest.raises(KmodsymsError, match="System.map"):
        verify(str(tree), fixture_syms)
    shutil.copy(os.path.join(fixture_tree, "System.map"), tree / "System.map")
    with pytest.raises(KmodsymsError, match="dtrace_syms"):
        verify(str(tree))
    with pytest.raises(KmodsymsError, match="neither modules.builtin.ranges nor"):
        verify(str(tree), fixture_syms)
    shutil.copy(os.path.join(fixture_tree, "vmlinux.map"), tree / "vmlinux.map")
    # The fixture's vmlinux is linked from vmlinux.o: its map alone cannot say.
    with pytest.raises(KmodsymsError, match="lacks vmlinux.o.map and vmlinux"):
        verify(str(tree), fixture_syms)


def test_verify_fixture_with_synthetic_ranges(tmp_path, fixture_tree, fixture_syms):
    """Ranges only (no maps): a ranges file derived from the fixture's own
    maps must agree with our attribution."""
    from kmodsyms.format.symsfile import read_syms
    from kmodsyms.scan.linkmap import vmlinux_object_map
    tree = tmp_path / "tree"
    tree.mkdir()
    for name in ("System.map", "vmlinux"):
        shutil.copy(os.path.join(fixture_tree, name), tree / name)
    om = vmlinux_object_map(*(os.path.join(fixture_tree, n) for n in ("vmlinux.map", "vmlinux.o.map", "vmlinux")))
    syms = read_syms(fixture_syms)
    module_of = {syms.object_path(i): syms.modset_names(int(m))
                 for i, m in enumerate(syms.objects["modset"].tolist())}
    elf = read_elf_info(os.path.join(fixture_tree, "vmlinux"))
    lines = []
    for start, end, obj in zip(om.start.tolist(), om.end.tolist(), om.object):
        mods = module_of.get(obj)
        if not mods:
            continue
        sect = elf.section_of(np.array([start], dtype=np.uint64))[0]
        base = elf.addresses[sect]
        lines.append(f"{sect} {start - base:08x}-{end - base:08x} {' '.join(mods)}")
    assert lines
    (tree / "modules.builtin.ranges").write_text("\n".join(lines) + "\n")
    report = verify(str(tree), fixture_syms)
    assert report.linker_maps is None
    assert report.ranges.compared > 100
    assert report.ranges.counts["agree"] > 0.9 * report.ranges.compared, report.format()
    assert report.ranges.counts["differ"] == 0


def test_verify_text_is_for_people_json_for_scripts(tmp_path, fixture_tree, fixture_syms):
    """The text report says each finding in words (no Python list or dict
    reprs); --json carries the same findings as data."""
    import subprocess
    import sys
    tree = tmp_path / "tree"
    tree.mkdir()
    for name in ("System.map", "vmlinux", "vmlinux.map", "vmlinux.o.map"):
        shutil.copy(os.path.join(fixture_tree, name), tree / name)
    elf = read_elf_info(os.path.join(fixture_tree, "vmlinux"))
    text_base = elf.addresses[".text"]
    sysmap = {line.split()[2]: int(line.split()[0], 16)
              for line in open(os.path.join(fixture_tree, "System.map"))}
    # an anchor 0x10 off its section header, an inverted range, a section
    # vmlinux does not have (no base)
    (tree / "modules.builtin.ranges").write_text(
        f".text {sysmap['_text'] - text_base + 0x10:08x}-{sysmap['_text'] - text_base + 0x10:08x} = _text\n"
        ".text 00000400-00000300 ext4 isofs\n"
        ".nosuch 00000000-00000010 msr\n")
    proc = subprocess.run([sys.executable, "-m", "kmodsyms", "verify", "--kbuild", str(tree),
                           "--syms", fixture_syms], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert not any(repr_mark in text for repr_mark in ("[{", "{'", "['", "': ")), text
    base = text_base - 0x10      # what the anchor gives: _text 0x10 into .text
    assert "    ranges: 0 (1 inverted, covering nothing)\n" in text
    assert (f"      inverted: .text {base + 0x400:#x}-{base + 0x300:#x} ext4 isofs "
            f"(modules.builtin.ranges line 2)\n") in text
    assert "    sections with no base (not in vmlinux, no anchor line), skipped: .nosuch\n" in text
    assert (f"    anchor _text puts .text at {base:#x}, its section header at "
            f"{text_base:#x}\n") in text
    doc = json.loads(subprocess.run([sys.executable, "-m", "kmodsyms", "verify", "--kbuild", str(tree),
                                     "--syms", fixture_syms, "--json"],
                                    capture_output=True, text=True, check=True).stdout)
    notes = doc["comparisons"]["ranges"]["notes"]
    assert notes["inverted_ranges"] == [{"section": ".text", "line": 2, "modules": ["ext4", "isofs"],
                                         "start": f"{base + 0x400:#x}", "end": f"{base + 0x300:#x}"}]
    assert notes["unanchored_sections"] == [".nosuch"]
    assert notes["anchor_mismatches"][0]["anchor"] == "_text"


# ------------------------------------------------------------------ corpus
@pytest.fixture(scope="module")
def corpus_report(corpus, corpus_syms):
    return verify(corpus, corpus_syms)


def _bad(per: dict) -> int:
    return per["differ"] + per["only_ours"] + per["only_theirs"]


def test_corpus_ranges_plausible(corpus_report):
    ranges = corpus_report.ranges
    assert ranges is not None
    assert ranges.compared > 180_000
    assert ranges.agreement() > 0.995, corpus_report.format()
    assert ranges.counts["differ"] == 0
    bad = {sect: _bad(per) for sect, per in ranges.per_section.items() if _bad(per)}
    assert set(bad) <= RANGES_GAPS | INVERTED_SECTIONS, bad
    # Outside the known gaps, only the symbols of the inverted ranges.
    assert sum(bad.get(s, 0) for s in INVERTED_SECTIONS) <= 4, bad
    assert bad.get("__param", 0) > 100          # upstream never lists __param
    inverted = ranges.notes["inverted_ranges"]
    assert {(r["section"], tuple(r["modules"])) for r in inverted} == \
        {(".text", ("cpuidle_haltpoll",)), (".init.data", ("8250",))}
    assert ranges.notes["anchor_mismatches"] == []
    assert ranges.notes["unanchored_sections"] == []


def test_corpus_ranges_parse_matches_truth(corpus):
    """Parse the ranges with anchors taken from the KASLR-shifted kallsyms
    and check truth.tsv's rows: where upstream's ranges cover the data at
    all, they must give truth's module(s)."""
    first: dict[str, int] = {}
    with open(os.path.join(corpus, "kallsyms")) as f:
        for line in f:
            if "\t" in line:
                continue
            addr, _t, name = line.split()[:3]
            first.setdefault(name, int(addr, 16))
    elf = read_elf_info(os.path.join(corpus, "vmlinux"))
    shifted = {s: (a + KASLR if a >= 0xFFFFFFFF00000000 else a) for s, a in elf.addresses.items()}
    with open(os.path.join(corpus, "modules.builtin.ranges")) as f:
        parsed = parse_ranges(f.read(), lambda name, sect: first.get(name), shifted)
    assert parsed.anchor_mismatches == [] and parsed.unanchored == []
    assert len(parsed.inverted) == 2
    rows = []
    with open(os.path.join(corpus, "truth.tsv")) as f:
        for line in f:
            if not line.startswith("#"):
                rows.append(line.rstrip("\n").split("\t"))
    kaddr = np.array([int(r[0], 16) for r in rows], dtype=np.uint64)
    unshifted = np.where(kaddr >= np.uint64(0xFFFFFFFF00000000), kaddr - np.uint64(KASLR), kaddr)
    sections = elf.section_of(unshifted)
    hit = parsed.lookup(kaddr).tolist()
    agree = 0
    differ: dict[str, int] = {}
    for row, h, sect in zip(rows, hit, sections):
        if row[6] != "ok":
            continue
        theirs = tuple(sorted(parsed.ranges[h].modules)) if h >= 0 else ("vmlinux",)
        if tuple(sorted(row[4].split(","))) == theirs:
            agree += 1
        else:
            differ[sect] = differ.get(sect, 0) + 1
    assert agree > 181_000
    assert set(differ) <= RANGES_GAPS | INVERTED_SECTIONS, differ
    assert sum(differ.get(s, 0) for s in INVERTED_SECTIONS) <= 4, differ


def test_corpus_linker_maps_nearly_all_agree(corpus_report):
    maps = corpus_report.linker_maps
    assert maps is not None
    assert maps.compared > 180_000
    assert maps.counts["edge"] > 1000                # truth.tsv flags 1,278 kallsyms lines
    assert maps.disagreements <= maps.compared // 1000, corpus_report.format()
    assert corpus_report.ambiguous < 500


def test_corpus_linker_maps_exact(corpus_report):
    """The target: no disagreement and no ambiguous line at all.  Fails
    while the resolver still leaves some lines ambiguous."""
    maps = corpus_report.linker_maps
    assert maps.disagreements == 0, corpus_report.format()
    assert corpus_report.ambiguous == 0, corpus_report.format()
    assert corpus_report.exit_status() == 0


def test_arm64_corpus_linker_map_names_the_objects(tmp_path):
    """arm64 links vmlinux straight from vmlinux.a: vmlinux.map names the
    objects, and the vmlinux.o.map beside it (modpost's ld -r) is not the
    layout of vmlinux.  Every line agrees with the map."""
    from bench.corpus import ARM64_CORPUS_NAME, cached_corpus, corpus_tarball
    from kmodsyms.scan.modmap.thick import read_thick
    from kmodsyms.scan.writer import build
    tree = cached_corpus(log=lambda *_: None, name=ARM64_CORPUS_NAME)
    if tree is None:
        pytest.skip(f"{corpus_tarball(ARM64_CORPUS_NAME)} is absent")
    syms = str(tmp_path / "dtrace_syms")
    thick = os.path.join(tree, "modules_thick.builtin.reference")
    build(tree, read_thick(thick), thick, syms, use_cache=False)
    report = verify(tree, syms)
    maps = report.linker_maps
    assert maps.against == "linker maps (vmlinux.map)"
    assert maps.compared > 48_000 and maps.disagreements == 0, report.format()
    assert report.ambiguous == 0 and report.exit_status() == 0
