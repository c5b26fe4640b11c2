"""The tables of a dtrace_syms file, from object scans: strings, modules,
module sets, objects, sections and the name-sorted symbol array, plus the
link layout (section addresses, load segments, anchors) when the tree has
vmlinux and System.map.  Imported only when a file is actually written (it
needs numpy)."""

from __future__ import annotations

import itertools
import os

import numpy as np

from kmodsyms.errors import KmodsymsError, StaleError
from kmodsyms.format.fileformat import NO_ADDRESS
from kmodsyms.format.symsfile import (
    ANCHOR_DTYPE,
    MODSET_DTYPE,
    MODULE_DTYPE,
    OBJECT_DTYPE,
    OBJECT_MISSING,
    SECNAME_DTYPE,
    SECTION_DTYPE,
    SEGMENT_DTYPE,
    SYMBOL_DTYPE,
    VMLINUX_SYMBOL_DTYPE,
    Meta,
    StringTable,
    pick,
)
from kmodsyms.scan.elf.elfdefs import STT_FUNC
from kmodsyms.scan.elf.elfimage import Image, missing_symbols, symbol_sizes
from kmodsyms.scan.elf.elfscan import ObjectScan
from kmodsyms.scan.modmap.thick import ThickMap
from kmodsyms.scan.sysmap import Kallsyms, never_listed


def assemble(thick: ThickMap, owners: dict[str, tuple[int, ...]], objects: list[str],
             scans: list[ObjectScan], missing: list[str],
             shown_names: set[bytes] | None = None) -> tuple[StringTable, dict]:
    """Turn scans into the file's string table and tables (no layout yet).
    Symbols no kallsyms line can ever be are left out: with ``shown_names``
    (the names of the build's System.map, of which kallsyms lists a part)
    those of other names (an ``EXPORT_SYMBOL``'s ``__export_symbol_*``,
    ``.modinfo``'s ``__UNIQUE_ID_*``, what ``/DISCARD/`` drops), else those
    ``scripts/mksysmap`` deletes (:func:`kmodsyms.scan.sysmap.never_listed`)."""
    strings = StringTable()
    modsets: dict[tuple[int, ...], int] = {(): 0}
    for obj in objects + missing:
        modsets.setdefault(owners.get(obj, ()), len(modsets))
    modset_list = list(modsets)
    members = [m for ms in modset_list for m in ms]
    firsts = np.cumsum([0] + [len(ms) for ms in modset_list[:-1]], dtype=np.uint64)

    all_objects = objects + missing
    obj_table = np.zeros(len(all_objects), dtype=OBJECT_DTYPE)
    obj_table["path"] = [strings.add(o) for o in all_objects]
    obj_table["modset"] = [modsets[owners.get(o, ())] for o in all_objects]
    obj_table["flags"][len(objects):] = OBJECT_MISSING

    chain = itertools.chain.from_iterable
    secname_index: dict[str, int] = {}
    sec_counts = [len(scan.sec_name) for scan in scans]
    sec_base = np.concatenate(([0], np.cumsum(sec_counts)[:-1])).astype(np.uint32)
    sections = np.zeros(sum(sec_counts), dtype=SECTION_DTYPE)
    sections["object"] = np.repeat(np.arange(len(scans), dtype=np.uint32), sec_counts)
    sections["name"] = [secname_index.setdefault(name, len(secname_index))
                        for name in chain(scan.sec_name for scan in scans)]
    sections["flags"] = _column(scans, "sec_flags", np.uint64) & 0xFFFFFFFF
    sections["align"] = np.minimum(_column(scans, "sec_align", np.uint64), 0xFFFFFFFF)
    sections["size"] = _column(scans, "sec_size", np.uint64)
    sections["address"] = NO_ADDRESS
    secnames = np.array([strings.add(n) for n in secname_index], dtype=SECNAME_DTYPE)

    counts = [len(scan.sym_info) for scan in scans]
    n = sum(counts)
    names = b"".join(scan.sym_names for scan in scans).split(b"\0")[:-1]
    obj_col = np.repeat(np.arange(len(scans), dtype=np.uint32), counts)
    sec_col = _column(scans, "sym_section", np.uint32) + np.repeat(sec_base, counts)
    value = _column(scans, "sym_value", np.uint64)
    size = _column(scans, "sym_size", np.uint64)
    info = _column(scans, "sym_info", np.uint8)
    if n:
        # Only what kallsyms may show: System.map's names when known, else
        # whatever scripts/mksysmap would not delete.
        shown = np.fromiter(map(shown_names.__contains__, names), bool, n) if shown_names is not None \
            else ~np.fromiter(map(never_listed, names), bool, n)
        names = pick(names, np.flatnonzero(shown))
        obj_col, sec_col, value, size, info = (column[shown] for column in (obj_col, sec_col, value, size, info))
        n = len(names)
    modset_col = obj_table["modset"][obj_col] if n else np.zeros(0, np.uint32)

    # Sort by name, then module names, then object path (docs/format.md).
    # Every key compares as bytes, as a C reader's strcmp/memcmp does.  One
    # sort by name; the runs of equal names (few) are then ordered by the
    # rank of their (module names, object path).
    module_key = [tuple(thick.modules[m].encode() for m in ms) for ms in modset_list]
    object_key = [(module_key[modsets[owners.get(o, ())]], o.encode("utf-8", "surrogateescape"))
                  for o in all_objects]
    object_rank = np.empty(len(all_objects), dtype=np.int64)
    object_rank[sorted(range(len(all_objects)), key=object_key.__getitem__)] = np.arange(len(all_objects))
    order = sorted(range(n), key=names.__getitem__)
    sorted_names = pick(names, order)
    first = np.ones(n, dtype=bool)
    first[1:] = np.fromiter(map(bytes.__ne__, sorted_names[1:], sorted_names[:-1]), bool, n - 1 if n else 0)
    tie = np.flatnonzero(~first[1:])      # name i equals name i + 1
    if len(tie):
        rank = object_rank[obj_col].tolist()
        for run in np.split(tie, np.flatnonzero(np.diff(tie) != 1) + 1):
            span = slice(int(run[0]), int(run[-1]) + 2)
            order[span] = sorted(order[span], key=rank.__getitem__)
    symbols = np.zeros(n, dtype=SYMBOL_DTYPE)
    symbols["name"] = strings.add_sorted(sorted_names, first)
    order = np.asarray(order, dtype=np.int64)
    symbols["modset"] = modset_col[order]
    symbols["object"] = obj_col[order]
    symbols["section"] = sec_col[order]
    symbols["value"] = value[order]
    symbols["size"] = size[order]
    symbols["type"] = info[order] & 0xF
    symbols["binding"] = info[order] >> 4

    modules = np.array([strings.add(m) for m in thick.modules], dtype=MODULE_DTYPE)
    modset_table = np.zeros(len(modset_list), dtype=MODSET_DTYPE)
    modset_table["first"] = firsts
    modset_table["count"] = [len(ms) for ms in modset_list]
    tables = {"modules": modules, "modset_members": np.array(members, dtype=np.uint32),
              "modsets": modset_table, "objects": obj_table, "section_names": secnames,
              "sections": sections, "symbols": symbols,
              "segments": np.zeros(0, SEGMENT_DTYPE), "anchors": np.zeros(0, ANCHOR_DTYPE),
              "vmlinux_symbols": np.zeros(0, VMLINUX_SYMBOL_DTYPE)}
    return strings, tables


def _column(scans: list[ObjectScan], field: str, dtype) -> np.ndarray:
    """One field of every scan, end to end, as one array."""
    return np.frombuffer(b"".join(getattr(scan, field) for scan in scans), dtype=dtype).copy()


ANCHORS_PER_SEGMENT = 16


def record_layout(kbuild: str, image: Image, sysmap: Kallsyms, meta: Meta,
                  strings: StringTable, tables: dict) -> None:
    """Place every object section in vmlinux at build time (R6), by the
    search of docs/resolver.md section 2, against ``sysmap`` (System.map:
    kallsyms before KASLR), and record its link address, vmlinux's load
    segments and a few anchor symbols per segment by which the loader finds
    each segment's KASLR shift.  ``image`` is vmlinux's
    (:func:`kmodsyms.scan.elf.elfimage.read_image`): its PT_LOAD segments, and its
    output sections, within which the linker lays out same-named input
    sections in link order."""
    import json

    from kmodsyms.format.symsfile import SymsFile
    from kmodsyms.scan.layout import SearchPlacer
    from kmodsyms.scan.layout.attribute import attribute_at_link
    from kmodsyms.scan.layout.result import count_lines
    try:
        vmlinux = os.path.join(kbuild, "vmlinux")
        placer = SearchPlacer(SymsFile.from_tables(meta, strings, tables), sysmap,
                              output_sections=image.sections,
                              symbol_sizes=lambda wanted: symbol_sizes(vmlinux, image, wanted))
    except StaleError as e:
        raise KmodsymsError(f"{sysmap.source} does not match the objects of {kbuild} "
                            f"({e.evidence}): it is stale; run make in the tree again, "
                            "or pass --no-layout") from None
    placed = placer.result()
    sections = tables["sections"]
    is_placed = placed.section_how != 0
    sections["address"] = np.where(is_placed, placed.section_base, NO_ADDRESS)
    sections["placement"] = placed.section_how
    tables["segments"] = np.array(image.segments, dtype=SEGMENT_DTYPE)
    lines_are = attribute_at_link(meta, strings, tables, sysmap)
    count_lines(placed.stats, placed.section_how, placed.core_lines, lines_are.entry, lines_are.section,
                lines_are.ambiguous)
    # Anchors: lines whose name is unique on both sides, spread over each segment.
    entry = lines_are.entry
    lines = placer.unique_lines(entry)
    lines = lines[np.argsort(sysmap.address[lines], kind="stable")]
    # Every kallsyms lists the text ranges, and a CONFIG_KALLSYMS_ALL=n one
    # nothing else of the core kernel: anchors are taken in the text ranges
    # and outside them, and functions only in them, so that a loader can
    # tell a kallsyms missing lines (an absent function anchor) from one of
    # a text-only kernel (absent data anchors).
    address = sysmap.address[lines]
    in_text = np.zeros(len(lines), dtype=bool)
    for start, end in sysmap.text_ranges():
        in_text |= (address >= start) & (address < end)
    is_function = tables["symbols"]["type"][entry[lines]] == STT_FUNC
    anchors = []
    for index, (start, end) in enumerate(image.segments):
        in_segment = (address >= start) & (address < end)
        picked = []
        for kind in (in_text, ~in_text & ~is_function):
            inside = np.flatnonzero(in_segment & kind)     # in address order
            if len(inside):
                picked += inside[np.linspace(0, len(inside) - 1,
                                             min(ANCHORS_PER_SEGMENT, len(inside))).astype(int)].tolist()
        anchors += [(int(entry[lines[k]]), index) for k in sorted(set(picked))]
    # R39: System.map is vmlinux's symbol table, filtered: one left from another
    # build of the tree places every section off (consistently, when the
    # code only moved), so the anchors are looked up in vmlinux itself.
    wanted = [(int(sysmap.address[line]), sysmap.name_bytes(int(line))) for line in
              lines[np.isin(entry[lines], [e for e, _seg in anchors])].tolist()]
    absent = missing_symbols(os.path.join(kbuild, "vmlinux"), image, wanted)
    if absent:
        raise KmodsymsError(
            f"{sysmap.source} does not match {os.path.join(kbuild, 'vmlinux')}: {len(absent)} of "
            f"{len(wanted)} of its symbols checked are not at its addresses in vmlinux's symbol table "
            f"(such as {absent[0].decode('utf-8', 'backslashreplace')}): it is stale; run make in the "
            "tree again, or pass --no-layout")
    tables["anchors"] = np.array(anchors, dtype=ANCHOR_DTYPE)
    core = placed.core_lines
    unmatched = core[(entry[core] < 0) & ~lines_are.ambiguous[core]]
    tables["vmlinux_symbols"] = vmlinux_symbols(vmlinux, image, sysmap, unmatched, strings)
    meta.placement = json.dumps(placed.stats.__dict__)


def vmlinux_symbols(vmlinux: str, image: Image, sysmap: Kallsyms, lines: np.ndarray,
                    strings: StringTable) -> np.ndarray:
    """R56: of System.map's ``lines`` (those of the core kernel that no
    object's symbol is and that are not ambiguous: linked outside
    vmlinux.a, as scripts/link-vmlinux.sh links init/version-timestamp.o,
    or made by the linker), those with a size above 0 in vmlinux's own
    symbol table: (name, link address, size), sorted by address, then by
    name bytewise: the order of kallsyms' core lines, which the load walks
    beside them (and the names' strings added in it, so that walk reads
    them in order too)."""
    wanted = sorted({(int(sysmap.address[line]), sysmap.name_bytes(int(line))) for line in lines.tolist()})
    sizes = symbol_sizes(vmlinux, image, wanted)
    sized = [(name, address, size) for (address, name), size in zip(wanted, sizes) if size]
    table = np.zeros(len(sized), dtype=VMLINUX_SYMBOL_DTYPE)
    table["name"] = [strings.add(name) for name, _, _ in sized]
    table["address"] = [address for _, address, _ in sized]
    table["size"] = [size for *_, size in sized]
    return table
