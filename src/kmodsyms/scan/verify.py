"""``kmodsyms verify``: check our module attribution of every System.map
symbol against two independent answers from the build tree.

* **linker maps** (``vmlinux.map`` + ``vmlinux`` and, when vmlinux was
  linked from vmlinux.o, ``vmlinux.o.map``): the object whose bytes lie at
  each address (:func:`kmodsyms.linkmap.vmlinux_object_map`),
  mapped to its module(s) through the dtrace_syms objects table.  This is
  the reference: any disagreement fails verification.
* **modules.builtin.ranges** (CONFIG_BUILTIN_MODULE_RANGES, written by
  upstream's ``scripts/generate_builtin_ranges.awk``): per output section,
  offset ranges of built-in modules.  Upstream's ranges have known gaps
  (per-cpu data and a few other sections are never listed, ranges may be
  inverted), so disagreements with them are reported but do not fail.

System.map is kallsyms without KASLR, so our side is a :class:`Resolver`
over System.map's lines; every line is compared.

The ranges file (as ``generate_builtin_ranges.awk`` writes it, and as its
companion ``verify_builtin_ranges.awk`` reads it)::

    .text 00000000-00000000 = _text            anchor: section base = addr(_text) - 0
    .text 0000b720-0000bfd9 rapl               [base+0xb720, base+0xbfd9) is rapl
    .init.data 000008e0-000008e0 = late_time_init
    .foo 00000010-00000020 mod_a mod_b         a range shared by several modules

Offsets are relative to the start of the vmlinux output section named in
the first column (its address in vmlinux.map, i.e. its section header).
An anchor line ``SECT OFF-OFF = SYM`` says SYM lies at offset OFF, which
fixes the base even under KASLR.  Sections without an anchor line (the awk
only writes one when the map shows a symbol there) take their base from
vmlinux's section headers.  A range whose end is below its start covers
nothing (as in upstream's own consumer); it is counted as inverted.

A zero-size symbol lying exactly where one object's bytes end and a
different object's (or no object's) begin is an *edge*: either neighbour
is a defensible answer, so edges are counted apart and never fail.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from kmodsyms.errors import KmodsymsError, shown
from kmodsyms.scan.modmap.thick import kernel_spelling
from kmodsyms.scan.sysmap import read_text

VMLINUX = "vmlinux"
NO_SECTION = "(none)"
EXAMPLES = 10
_U64 = np.uint64

# Outcome of one line in one comparison.
AGREE, DIFFER, ONLY_OURS, ONLY_THEIRS, EDGE = "agree", "differ", "only_ours", "only_theirs", "edge"
OUTCOMES = (AGREE, DIFFER, ONLY_OURS, ONLY_THEIRS, EDGE)


# --------------------------------------------------------------------- ranges
@dataclass
class BuiltinRange:
    section: str
    start: int          # absolute address (section base + start offset)
    end: int            # absolute, exclusive
    modules: tuple[str, ...]
    line: int           # 1-based line in the ranges file


@dataclass
class BuiltinRanges:
    """modules.builtin.ranges resolved to absolute addresses."""

    ranges: list[BuiltinRange] = field(default_factory=list)     # valid, sorted by start
    inverted: list[dict] = field(default_factory=list)           # end below start: cover nothing
    anchors: dict[str, int] = field(default_factory=dict)        # section -> base used
    anchor_mismatches: list[dict] = field(default_factory=list)  # anchor base != section header
    unanchored: list[str] = field(default_factory=list)          # sections without a base: skipped

    def lookup(self, addresses: np.ndarray) -> np.ndarray:
        """Index into ``ranges`` of the range holding each address, or -1.
        Where ranges overlap, the one starting last wins."""
        addresses = np.asarray(addresses, dtype=_U64)
        if not self.ranges:
            return np.full(len(addresses), -1, dtype=np.int64)
        start = np.array([r.start for r in self.ranges], dtype=_U64)
        end = np.array([r.end for r in self.ranges], dtype=_U64)
        i = np.searchsorted(start, addresses, side="right") - 1
        ok = i >= 0
        ok[ok] = addresses[ok] < end[i[ok]]
        out = np.where(ok, i, -1)
        # Rare: an address past the end of the last-starting range but inside
        # an earlier, longer one.  Walk back for those.
        reach = np.maximum.accumulate(end)
        for k in np.flatnonzero(~ok & (i >= 0)).tolist():
            a = int(addresses[k])
            j = int(i[k])
            while j >= 0 and int(reach[j]) > a:
                if int(start[j]) <= a < int(end[j]):
                    out[k] = j
                    break
                j -= 1
        return out


def parse_ranges(text: str, symbol_address, section_address=None,
                 source: str = "modules.builtin.ranges") -> BuiltinRanges:
    """Parse a modules.builtin.ranges text.

    ``symbol_address(name, section)`` returns the address of an anchor
    symbol (or None when absent); ``section_address`` maps an output section
    name to its address in vmlinux (used for sections without an anchor
    line, and to cross-check anchors).  Raises :class:`KmodsymsError` on a
    malformed line or an anchor symbol that cannot be found.
    """
    section_address = section_address or {}
    out = BuiltinRanges()
    pending: list[tuple[str, int, int, tuple[str, ...], int]] = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        fields = line.split()
        if len(fields) < 3 or "-" not in fields[1]:
            raise KmodsymsError(f"{source}:{lineno}: expected 'SECTION START-END MODULE...': '{shown(line[:80])}'")
        sect = fields[0]
        lo, _, hi = fields[1].partition("-")
        try:
            start, end = int(lo, 16), int(hi, 16)
        except ValueError:
            raise KmodsymsError(f"{source}:{lineno}: bad offsets '{shown(fields[1])}'") from None
        if fields[2] == "=":
            if len(fields) != 4:
                raise KmodsymsError(f"{source}:{lineno}: expected 'SECTION OFF-OFF = SYMBOL': '{shown(line[:80])}'")
            addr = symbol_address(fields[3], sect)
            if addr is None:
                raise KmodsymsError(f"{source}:{lineno}: anchor symbol {fields[3]} of {sect} is not in "
                                    "System.map; is the ranges file from the same build?")
            base = addr - start
            out.anchors[sect] = base
            if sect in section_address and section_address[sect] != base:
                out.anchor_mismatches.append({"section": sect, "anchor": fields[3],
                                              "anchor_base": f"{base:#x}",
                                              "section_header": f"{section_address[sect]:#x}"})
            continue
        mods = tuple(kernel_spelling(m) for m in fields[2:])
        pending.append((sect, start, end, mods, lineno))
    for sect, start, end, mods, lineno in pending:
        base = out.anchors.get(sect, section_address.get(sect))
        if base is None:
            if sect not in out.unanchored:
                out.unanchored.append(sect)
            continue
        if end < start:
            out.inverted.append({"section": sect, "line": lineno, "modules": list(mods),
                                 "start": f"{base + start:#x}", "end": f"{base + end:#x}"})
            continue
        if end > start:
            out.ranges.append(BuiltinRange(sect, base + start, base + end, mods, lineno))
    out.ranges.sort(key=lambda r: (r.start, r.end))
    return out


# --------------------------------------------------------------------- vmlinux
@dataclass
class ElfInfo:
    """What verify needs from vmlinux: its loaded sections and symbol sizes."""

    section_name: list[str]
    section_start: np.ndarray
    section_end: np.ndarray
    addresses: dict[str, int]               # section name -> address
    sizes: dict[tuple[bytes, int], int]     # (name, value) -> st_size

    def section_of(self, addresses: np.ndarray) -> list[str]:
        """Name of the loaded section holding each address (a zero-size
        symbol at a section's very end counts as in it when no section
        holds it), else ``(none)``."""
        addresses = np.asarray(addresses, dtype=_U64)
        i = np.searchsorted(self.section_start, addresses, side="right") - 1
        safe = np.maximum(i, 0)
        inside = (i >= 0) & (addresses < self.section_end[safe])
        at_end = (i >= 0) & (addresses == self.section_end[safe])
        names = self.section_name
        return [names[j] if (a or b) else NO_SECTION
                for j, a, b in zip(safe.tolist(), inside.tolist(), at_end.tolist())]


def read_elf_info(path: str) -> ElfInfo:
    from kmodsyms.scan.elf.elfimage import read_image, read_symbols
    image = read_image(path)
    sizes: dict[tuple[bytes, int], int] = {}
    table = read_symbols(path, image)
    if table is not None:
        symbols, strings = table
        find = strings.find
        for off, value, size in zip(symbols["name"].tolist(), symbols["value"].tolist(),
                                    symbols["size"].tolist()):
            if off:
                key = (strings[off:find(b"\0", off)], value)
                sizes[key] = max(size, sizes.get(key, 0))
    starts = np.array([a for a, _ in image.sections], dtype=_U64)
    ends = np.array([b for _, b in image.sections], dtype=_U64)
    return ElfInfo(list(image.section_names), starts, ends,
                   {name: a for (a, _), name in zip(image.sections, image.section_names)}, sizes)


# --------------------------------------------------------------------- report
@dataclass
class Comparison:
    """Our answers against one reference ("theirs")."""

    against: str
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    per_section: dict[str, dict[str, int]] = field(default_factory=dict)
    edge_disagreements: int = 0
    examples: list[dict] = field(default_factory=list)
    notes: dict = field(default_factory=dict)

    def add(self, outcome: str, section: str) -> None:
        self.counts[outcome] += 1
        per = self.per_section.get(section)
        if per is None:
            per = self.per_section[section] = dict.fromkeys(OUTCOMES, 0)
        per[outcome] += 1

    @property
    def disagreements(self) -> int:
        c = self.counts
        return c[DIFFER] + c[ONLY_OURS] + c[ONLY_THEIRS]

    @property
    def compared(self) -> int:
        return self.counts[AGREE] + self.disagreements

    def agreement(self) -> float:
        return self.counts[AGREE] / self.compared if self.compared else 1.0

    def format_notes(self) -> list[str]:
        """The notes as lines a person reads (``to_json`` has them as data)."""
        notes, out = self.notes, []
        if "ranges" in notes:
            inverted = notes.get("inverted_ranges", [])
            out.append(f"    ranges: {notes['ranges']}"
                       + (f" ({len(inverted)} inverted, covering nothing)" if inverted else ""))
            out += [f"      inverted: {r['section']} {r['start']}-{r['end']} {' '.join(r['modules'])} "
                    f"(modules.builtin.ranges line {r['line']})" for r in inverted]
        if notes.get("unanchored_sections"):
            out.append("    sections with no base (not in vmlinux, no anchor line), skipped: "
                       + ", ".join(notes["unanchored_sections"]))
        out += [f"    anchor {m['anchor']} puts {m['section']} at {m['anchor_base']}, its section header "
                f"at {m['section_header']}" for m in notes.get("anchor_mismatches", [])]
        if notes.get("objects_without_module_entry"):
            out.append("    objects of the linker maps not in dtrace_syms (counted as vmlinux): "
                       + ", ".join(notes["objects_without_module_entry"]))
        return out

    def to_json(self) -> dict:
        return {"against": self.against, "counts": dict(self.counts),
                "compared": self.compared, "disagreements": self.disagreements,
                "agreement": round(self.agreement(), 6),
                "edge_disagreements": self.edge_disagreements,
                "per_section": {k: dict(v) for k, v in sorted(self.per_section.items())},
                "examples": list(self.examples), "notes": dict(self.notes)}


@dataclass
class Report:
    kbuild: str
    syms: str
    lines: int = 0
    ambiguous: int = 0
    ambiguous_same_modules: int = 0     # of those, every candidate has the same modules
    ambiguous_examples: list[dict] = field(default_factory=list)
    comparisons: dict[str, Comparison] = field(default_factory=dict)

    @property
    def linker_maps(self) -> Comparison | None:
        return self.comparisons.get("linker_maps")

    @property
    def ranges(self) -> Comparison | None:
        return self.comparisons.get("ranges")

    def exit_status(self) -> int:
        """1 on any non-edge disagreement with the linker maps or any
        ambiguous line; disagreements with the ranges alone do not fail."""
        maps = self.linker_maps
        if self.ambiguous or (maps is not None and maps.disagreements):
            return 1
        return 0

    def to_json(self) -> dict:
        return {"kbuild": self.kbuild, "syms": self.syms, "lines": self.lines,
                "ambiguous": self.ambiguous, "ambiguous_same_modules": self.ambiguous_same_modules,
                "ambiguous_examples": list(self.ambiguous_examples),
                "comparisons": {k: c.to_json() for k, c in self.comparisons.items()},
                "ok": self.exit_status() == 0}

    def format(self) -> str:
        out = [f"verify {self.syms} against {self.kbuild}: {self.lines} System.map lines"]
        if self.ambiguous:
            out.append(f"  ambiguous (ours): {self.ambiguous} "
                       f"({self.ambiguous_same_modules} with one module answer, unknown object)")
            for ex in self.ambiguous_examples:
                out.append(f"    {ex['address']} {ex['name']}: one of "
                           + " | ".join(",".join(c) for c in ex["candidates"]))
        for comp in self.comparisons.values():
            c = comp.counts
            out.append(f"  vs {comp.against}: agree {c[AGREE]}, differ {c[DIFFER]}, only-ours {c[ONLY_OURS]}, "
                       f"only-theirs {c[ONLY_THEIRS]}, edge {c[EDGE]} ({comp.edge_disagreements} disagree); "
                       f"{100 * comp.agreement():.3f}% of {comp.compared} agree")
            for sect, per in sorted(comp.per_section.items()):
                bad = per[DIFFER] + per[ONLY_OURS] + per[ONLY_THEIRS]
                if bad:
                    out.append(f"    {sect}: agree {per[AGREE]}, differ {per[DIFFER]}, "
                               f"only-ours {per[ONLY_OURS]}, only-theirs {per[ONLY_THEIRS]}, edge {per[EDGE]}")
            out += comp.format_notes()
            for ex in comp.examples:
                out.append(f"    {ex['address']} {ex['name']} [{ex['section']}]: ours {','.join(ex['ours'])}"
                           f" ({ex.get('our_object') or '-'}), theirs {','.join(ex['theirs'])}"
                           + (f" ({ex['their_object'] or '-'})" if "their_object" in ex else ""))
        out.append("OK" if self.exit_status() == 0 else "FAILED")
        return "\n".join(out)


# --------------------------------------------------------------------- verify
def _require(path: str, what: str) -> str:
    if not os.path.isfile(path):
        raise KmodsymsError(f"{path} is missing: {what}")
    return path


def _classify(ours: tuple, theirs: tuple) -> str:
    if ours == theirs:
        return AGREE
    if theirs == (VMLINUX,):
        return ONLY_OURS
    if ours == (VMLINUX,):
        return ONLY_THEIRS
    return DIFFER


def _modules_key(mods) -> tuple:
    """Module list as a comparable key (order-free; core = ``vmlinux``)."""
    return tuple(sorted(kernel_spelling(m) for m in mods)) if mods else (VMLINUX,)


def our_answers(resolver) -> tuple[list, list, list]:
    """For every kallsyms line of ``resolver`` (:mod:`kmodsyms.binding`):
    our module key (None: ambiguous), object, and the ambiguity
    candidates.  Only a line of no object can be ambiguous: its own record
    says whether it is."""
    keys, objects, cands = [], [], []
    for line in resolver.lines():
        candidates = None
        if line.object is None:
            rec = resolver.record(line.address, line.index)
            candidates = rec.candidates if rec.ambiguous else None
        keys.append(None if candidates is not None else _modules_key(line.modules))
        objects.append(line.object)
        cands.append(candidates)
    return keys, objects, cands


def verify(kbuild: str, syms_path: str | None = None) -> Report:
    """Compare our attribution of every System.map line with the linker
    maps and/or modules.builtin.ranges of the build tree ``kbuild``."""
    from kmodsyms.binding import load
    from kmodsyms.format.symsfile import read_syms

    if not os.path.isdir(kbuild):
        raise KmodsymsError(f"{kbuild} is not a directory: pass the kernel build tree (objtree)")
    syms_path = syms_path or os.path.join(kbuild, "dtrace_syms")
    path = lambda name: os.path.join(kbuild, name)  # noqa: E731
    _require(path("System.map"), "verify needs the build's System.map; run 'make' in the tree first")
    _require(syms_path, "build it with 'kmodsyms build --kbuild DIR' or pass --syms")
    have_ranges = os.path.isfile(path("modules.builtin.ranges"))
    map_files = [path(n) for n in ("vmlinux.map", "vmlinux.o.map", "vmlinux")]
    present = [os.path.isfile(p) for p in map_files]
    if not have_ranges and not any(present[:2]):
        raise KmodsymsError(f"{kbuild} has neither modules.builtin.ranges nor vmlinux.map + vmlinux.o.map: "
                            "build the kernel with CONFIG_BUILTIN_MODULE_RANGES or CONFIG_VMLINUX_MAP")
    # vmlinux alone (section headers, symbol sizes) only helps the ranges check.
    have_maps = any(present[:2])
    if have_maps:
        from kmodsyms.scan.linkmap import links_vmlinux_o
        # vmlinux.o.map only matters when the final link took vmlinux.o.
        needed = [True, present[1] or not present[0] or links_vmlinux_o(map_files[0]), True]
        missing = [os.path.basename(p) for p, ok, need in zip(map_files, present, needed) if need and not ok]
        if missing:
            raise KmodsymsError(f"{kbuild} lacks {' and '.join(missing)}: the linker-map check needs "
                                "vmlinux.map and vmlinux, and vmlinux.o.map when vmlinux is linked from "
                                "vmlinux.o (CONFIG_VMLINUX_MAP builds write the maps)")

    syms = read_syms(syms_path)
    # System.map read as a kallsyms of the kernel at its link addresses:
    # the library attributes its lines as it does a running kernel's.
    resolver = load(syms=syms_path, kallsyms=path("System.map"))
    lines = resolver.lines()
    ours, our_objects, candidates = our_answers(resolver)
    n = len(lines)
    addresses = np.array([line.address for line in lines], dtype=np.uint64)
    names = [line.name for line in lines]

    elf = read_elf_info(path("vmlinux")) if os.path.isfile(path("vmlinux")) else None
    sections = elf.section_of(addresses) if elf else ["?"] * n
    sizes = [elf.sizes.get((names[i].encode("utf-8", "surrogateescape"), int(a)), 0)
             for i, a in enumerate(addresses.tolist())] if elf else [None] * n

    report = Report(kbuild, syms_path, lines=n)
    for line in range(n):
        if ours[line] is None:
            report.ambiguous += 1
            cands = sorted({tuple(c) for c in candidates[line] or []})
            if len(cands) == 1:
                report.ambiguous_same_modules += 1
            if len(report.ambiguous_examples) < EXAMPLES:
                report.ambiguous_examples.append({"name": names[line], "address": f"{int(addresses[line]):#x}",
                                                  "candidates": [list(c) for c in cands]})

    def compare(name: str, against: str, theirs, their_objects, edge) -> Comparison:
        comp = Comparison(against)
        for line in range(n):
            mine = ours[line]
            if mine is None:
                continue
            outcome = _classify(mine, theirs[line])
            if edge[line]:
                comp.add(EDGE, sections[line])
                comp.edge_disagreements += outcome != AGREE
                continue
            comp.add(outcome, sections[line])
            if outcome != AGREE and len(comp.examples) < EXAMPLES:
                ex = {"name": names[line], "address": f"{int(addresses[line]):#x}", "section": sections[line],
                      "ours": list(mine), "theirs": list(theirs[line]), "our_object": our_objects[line]}
                if their_objects is not None:
                    ex["their_object"] = their_objects[line]
                comp.examples.append(ex)
        report.comparisons[name] = comp
        return comp

    object_edge = None
    if have_maps:
        from kmodsyms.scan.linkmap import vmlinux_object_map
        om = vmlinux_object_map(map_files[0], map_files[1] if present[1] else None, map_files[2])
        module_of = {syms.object_path(i): _modules_key(syms.modset_names(int(m)))
                     for i, m in enumerate(syms.objects["modset"].tolist())}
        their_objects = [om.object_at(a) for a in addresses.tolist()]
        theirs = [module_of.get(o, (VMLINUX,)) if o else (VMLINUX,) for o in their_objects]
        # Edges: zero-size symbols that more than one object may hold (where
        # one's bytes end and another's, or none's, begin; an empty section).
        edge = [sizes[i] in (0, None) and len(om.zero_size_objects(a)) > 1
                for i, a in enumerate(addresses.tolist())]
        object_edge = edge
        comp = compare("linker_maps", f"linker maps ({om.source})", theirs, their_objects, edge)
        comp.notes["objects_without_module_entry"] = sorted(
            {o for o in their_objects if o and o not in module_of})[:EXAMPLES]

    if have_ranges:
        first_at: dict[str, list[int]] = {}
        for i, nm in enumerate(names):
            first_at.setdefault(nm, []).append(i)

        def symbol_address(name: str, sect: str):
            lines = first_at.get(name)
            if not lines:
                return None
            if elf and len(lines) > 1:   # prefer the copy inside the section
                inside = [i for i in lines if sections[i] == sect]
                lines = inside or lines
            return min(int(addresses[i]) for i in lines)

        text = read_text(path("modules.builtin.ranges")).decode("utf-8", "surrogateescape")
        parsed = parse_ranges(text, symbol_address, elf.addresses if elf else None,
                              path("modules.builtin.ranges"))
        hit = parsed.lookup(addresses)
        theirs = [tuple(sorted(parsed.ranges[h].modules)) if h >= 0 else (VMLINUX,) for h in hit.tolist()]
        if object_edge is not None:     # the objects' boundaries, as truth.tsv
            edge = object_edge
        else:                           # no maps: the ranges' own boundaries
            bounds = {r.start for r in parsed.ranges} | {r.end for r in parsed.ranges}
            edge = [sizes[i] == 0 and a in bounds for i, a in enumerate(addresses.tolist())]
        comp = compare("ranges", "modules.builtin.ranges", theirs, None, edge)
        comp.notes.update({"ranges": len(parsed.ranges), "inverted_ranges": parsed.inverted,
                           "unanchored_sections": parsed.unanchored,
                           "anchor_mismatches": parsed.anchor_mismatches})
    return report
