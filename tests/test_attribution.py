"""R20-R25 and R62: the attribution of System.map's lines that the build
records from (the library's, libkmodsyms/kms_attr.c, run by
kmsi_attribute_at_link over the built file's sections at their link
addresses, src/kmodsyms/scan/layout/attribute.py) held to the linker maps
(vmlinux.map, composed with vmlinux.o.map where vmlinux is linked from
vmlinux.o) and to System.map, on the fixture and on both corpora: each line
that is an entry is that symbol (its name at its address), each line given
an object gets the one whose bytes are at its address (R22: a zero-size
copy of its name at a section's end is never the line of another object's
bytes), and the anchors and R56's table the build recorded are taken from
those lines."""

from __future__ import annotations

import os
from collections import Counter

import numpy as np

from kmodsyms.binding import _kms
from kmodsyms.format.symsfile import read_syms
from kmodsyms.scan.layout.attribute import Attribution, kallsyms_text
from kmodsyms.scan.linkmap import links_vmlinux_o, vmlinux_object_map
from kmodsyms.scan.sysmap import read_kallsyms


def attribution(kbuild: str, syms_path: str):
    """(file, System.map, its lines' attribution, the linker maps' ObjectMap):
    the attribution the build ran (its tables' sections and segments are
    the file's; its anchors and R56's table change no line's entry, section
    or ambiguity)."""
    path = lambda n: os.path.join(kbuild, n)  # noqa: E731
    sysmap = read_kallsyms(path("System.map"), zero_is_hidden=False)
    entry, section, ambiguous = _kms.attribute_at_link(os.fsencode(syms_path), kallsyms_text(sysmap),
                                                       len(sysmap))
    attr = Attribution(np.frombuffer(entry, np.int32), np.frombuffer(section, np.int32),
                       np.frombuffer(ambiguous, np.uint8).astype(bool))
    om = vmlinux_object_map(path("vmlinux.map"), path("vmlinux.o.map") if links_vmlinux_o(path("vmlinux.map"))
                            else None, path("vmlinux"))
    return read_syms(syms_path), sysmap, attr, om


def object_paths(syms) -> list[str]:
    return [syms.raw_string(int(p)).decode("utf-8", "surrogateescape") for p in syms.objects["path"]]


def check_against_maps(kbuild: str, syms_path: str) -> dict:
    """Assert R21-R23 against System.map and the linker maps; return counts."""
    syms, sysmap, attr, om = attribution(kbuild, syms_path)
    objects, sections, symbols = object_paths(syms), syms.sections, syms.symbols
    core = np.flatnonzero(sysmap.module == 0)
    entry, section = attr.entry, attr.section
    counts = {"lines": len(core), "entries": 0, "at_end": 0, "inside": 0, "r22": 0}
    # R22's lines: a zero-size copy of the line's name in a placed section at
    # or past its end is at the line's address, where another object's bytes are
    at_or_past_end = symbols["value"] >= sections["size"][symbols["section"]]
    placed = sections["placement"][symbols["section"]] != 0
    end_copies = {(syms.raw_string(int(symbols["name"][e])),
                   int(sections["address"][symbols["section"][e]] + symbols["value"][e])):
                  objects[int(sections["object"][symbols["section"][e]])]
                  for e in np.flatnonzero(at_or_past_end & placed).tolist()}
    wrong = []
    for i in core.tolist():
        address, name = int(sysmap.address[i]), sysmap.name_bytes(i)
        bytes_of = om.object_at(address)
        copy_of = end_copies.get((name, address))
        if copy_of is not None and bytes_of is not None and bytes_of != copy_of:
            counts["r22"] += 1
        if entry[i] >= 0:                                        # R21: the symbol it is
            e = int(entry[i])
            sec = int(symbols["section"][e])
            assert syms.raw_string(int(symbols["name"][e])) == name
            assert int(sections["address"][sec] + symbols["value"][e]) == address
            assert section[i] == sec
            counts["entries"] += 1
        if section[i] < 0:
            continue
        ours = objects[int(sections["object"][section[i]])]
        if bytes_of is None:                                     # R22: at the end of its own bytes
            counts["at_end"] += 1
            if entry[i] < 0 or ours not in om.ends_at(address):
                wrong.append((name, hex(address), ours, "ends", sorted(om.ends_at(address))))
        elif ours != bytes_of:                                   # R21-R23: the object whose bytes are there
            wrong.append((name, hex(address), ours, bytes_of))
        elif entry[i] < 0:
            counts["inside"] += 1
    assert wrong == []
    assert counts["entries"] > len(core) // 2                    # not vacuous
    return counts


def test_r21_r23_each_line_is_the_linker_maps_on_the_fixture(fixture_tree, fixture_syms):
    counts = check_against_maps(fixture_tree, fixture_syms)
    assert counts["inside"] > 0 and counts["r22"] == 0


def test_r22_zero_size_copies_at_a_section_end_on_the_corpora(any_corpus, any_corpus_syms):
    """The corpora have R22's lines (282 on x86_64, 147 on arm64): a
    zero-size copy of the line's name ends another object's section there,
    and the line gets the object whose bytes are there, as the map says."""
    counts = check_against_maps(any_corpus, any_corpus_syms)
    assert counts["r22"] > 100 and counts["inside"] > 200


def _symtab(vmlinux: str) -> dict[tuple[bytes, int], set[int]]:
    """(name, address) -> the sizes vmlinux's own .symtab gives it."""
    from elftools.elf.elffile import ELFFile
    found: dict = {}
    with open(vmlinux, "rb") as f:
        for sym in ELFFile(f).get_section_by_name(".symtab").iter_symbols():
            found.setdefault((sym.name.encode("utf-8", "surrogateescape"), sym["st_value"]),
                             set()).add(sym["st_size"])
    return found


def check_recorded(kbuild: str, syms_path: str) -> None:
    """R6 and R56 as the build recorded them, from the lines' attribution:
    each anchor is a line's entry, of a name once in the file and once in
    System.map; each row of R56's table is a core line that no entry is,
    with the size vmlinux's .symtab gives it (pyelftools), and every such
    line with a size there has its row."""
    syms, sysmap, attr, _om = attribution(kbuild, syms_path)
    core = np.flatnonzero(sysmap.module == 0)
    line_of = {int(attr.entry[i]): i for i in core.tolist() if attr.entry[i] >= 0}
    in_map = Counter(sysmap.name_bytes(i) for i in core.tolist())
    in_file = Counter(syms.raw_string(int(n)) for n in syms.symbols["name"].tolist())
    for e in syms.anchors["symbol"].tolist():
        assert e in line_of
        name = sysmap.name_bytes(line_of[e])
        assert in_map[name] == 1 and in_file[name] == 1
    assert len(syms.anchors) >= 16
    symtab = _symtab(os.path.join(kbuild, "vmlinux"))
    rows = {(syms.raw_string(int(r["name"])), int(r["address"])): int(r["size"]) for r in syms.vmlinux_symbols}
    unmatched = {(sysmap.name_bytes(i), int(sysmap.address[i])) for i in core.tolist()
                 if attr.entry[i] < 0 and not attr.ambiguous[i]}
    for key, size in rows.items():
        assert key in unmatched and size in symtab[key] and size > 0
    assert {k for k in unmatched if max(symtab.get(k, {0})) > 0} == set(rows)


def test_r6_r56_recorded_from_the_attribution_on_the_fixture(fixture_tree, fixture_syms):
    check_recorded(fixture_tree, fixture_syms)


def test_r6_r56_recorded_from_the_attribution_on_the_corpora(any_corpus, any_corpus_syms):
    check_recorded(any_corpus, any_corpus_syms)
