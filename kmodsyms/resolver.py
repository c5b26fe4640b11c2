"""Place every object of dtrace_syms in the running kernel and answer
address -> ``mod`sym+off`` and ``mod`name`` -> address.

Placement works on *object sections* (an object's ``.text``, ``.data``...),
because once linked each occupies one contiguous interval of vmlinux:

1. Anchors: a name occurring exactly once among the core kallsyms lines and
   exactly once in dtrace_syms fixes its section's load address
   (kallsyms address - value in section).  A section's anchors vote; KASLR
   cancels out because only differences are used.
2. Elimination: for a duplicated name, copies in already-placed sections are
   matched to their kallsyms lines by address; when one unplaced copy and one
   unmatched line remain, they are paired, which places that section too.
   Repeated until nothing changes.
3. Each kallsyms line then takes the object, module(s), size and binding of
   the placed symbol it is, or, if it is in no object's table but lies inside
   a placed section (objtool's ``__pfx_*``/``__cfi_*`` padding), that object.
   Everything else is core kernel (linker-made symbols), unsized.
   A line whose name matches only unplaced copies in different modules is
   *ambiguous*: reported with every candidate, never guessed.

Answering an address: the innermost sized symbol holding it (greatest start;
ties: smaller size, FUNC/OBJECT over NOTYPE, GLOBAL over WEAK over LOCAL,
then name), else the nearest symbol below it, marked unsized, but never
across a module boundary or out of the placed section holding the address.
docs/resolver.md states the rules in full.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from .errors import KmodsymsError, StaleError
from .kallsyms import Kallsyms, is_pseudo_module, read_kallsyms
from .symsfile import BINDING_NAMES, SymsFile, read_syms

NO = -1
_U64 = np.uint64
# Placement methods, per object section.
UNPLACED, BY_ANCHOR, BY_ELIMINATION, BY_NEIGHBOURS = 0, 1, 2, 3
# How a kallsyms line got its object.
LINE_NONE, LINE_SYMBOL, LINE_EXTENT, LINE_AMBIGUOUS = 0, 1, 2, 3
# Tie-break ranks (higher wins).
_TYPE_RANK = {0: 0, 1: 1, 2: 1, 6: 1}          # NOTYPE < OBJECT, FUNC, TLS
_BIND_RANK = {0: 0, 2: 1, 1: 2}                # LOCAL < WEAK < GLOBAL
_PADDING_PREFIXES = (b"__pfx_", b"__cfi_")
SHF_LINK_ORDER = 0x80


@dataclass
class Symbolization:
    """One answered address, modelled on perf's dlfilter address record.

    ``module`` is the first module (``vmlinux`` for core kernel);
    ``modules`` all of them in thick-file order; ``origin`` is ``builtin``,
    ``core``, ``loadable`` or ``pseudo``; ``size`` is None when unknown and
    ``sized`` says whether ``[start, start+size)`` holds the address;
    ``object`` is the build-tree path of the object, None when the symbol
    comes from no object.  ``candidates`` lists the possible module lists
    when the object could not be placed uniquely (``ambiguous``).
    An address in no symbol has ``symbol`` None.
    """

    address: int
    module: str | None = None
    modules: list[str] | None = None
    origin: str | None = None
    symbol: str | None = None
    offset: int | None = None
    start: int | None = None
    size: int | None = None
    sized: bool = False
    type: str | None = None
    binding: str | None = None
    object: str | None = None
    ambiguous: bool = False
    candidates: list[list[str]] = field(default_factory=list)

    def to_json(self) -> dict:
        doc = dict(self.__dict__)
        doc["address"] = f"{self.address:#x}"
        doc["start"] = None if self.start is None else f"{self.start:#x}"
        if not self.ambiguous:
            del doc["candidates"]
        return doc

    def __str__(self) -> str:
        """DTrace's notation: ``0xADDR mod`sym+0xoff (0xSIZE bytes, object)``."""
        head = f"{self.address:#x}"
        if self.symbol is None:
            where = f" {self.module}`?" if self.module else " ?"
            return head + where + (f" ({self.object})" if self.object else "")
        text = f"{head} {self.module}`{self.symbol}"
        if self.offset:
            text += f"+{self.offset:#x}"
        notes = []
        if self.sized:
            notes.append(f"{self.size:#x} bytes")
        else:
            notes.append("unsized")
        if self.object:
            notes.append(self.object)
        if self.ambiguous:
            notes.append("ambiguous: " + " | ".join(",".join(c) for c in self.candidates))
        return f"{text} ({', '.join(notes)})"


@dataclass
class PlacementStats:
    """How the kallsyms lines got their objects."""

    core_lines: int = 0
    sections_by_anchor: int = 0
    sections_by_elimination: int = 0
    sections_by_neighbours: int = 0
    sections_unplaced: int = 0
    anchors: int = 0
    conflicting_anchors: int = 0
    lines_by_anchor: int = 0        # matched a symbol of a section placed by anchors
    lines_by_elimination: int = 0   # ... of a section placed by elimination
    lines_by_neighbours: int = 0    # ... of a section placed by link order
    lines_by_extent: int = 0        # in no object's table, inside a placed section
    lines_core_unknown: int = 0     # in no object: linker-made symbols etc.
    lines_ambiguous: int = 0


class Resolver:
    """Answers for one kernel: built from a :class:`SymsFile` and a
    :class:`Kallsyms` of the same kernel (see :func:`load`)."""

    def __init__(self, syms: SymsFile, ks: Kallsyms, check_anchors: bool = True):
        self.syms = syms
        self.ks = ks
        self.stats = PlacementStats()
        self._place()
        if check_anchors:
            self._check_consistency()
        self._attribute_lines()
        self._build_index()

    # ------------------------------------------------------------------ place
    def _name_groups(self):
        """Group dtrace_syms entries by name (they are sorted by name and
        names are deduplicated in the string table, so equal name offsets are
        contiguous) and map each core kallsyms line to its group."""
        syms, ks = self.syms, self.ks
        name_off = syms.symbols["name"]
        n = len(name_off)
        change = np.ones(n, dtype=bool)
        change[1:] = name_off[1:] != name_off[:-1]
        group_start = np.flatnonzero(change)
        self.group_start = group_start
        self.group_count = np.diff(np.append(group_start, n))
        self.entry_group = np.cumsum(change) - 1
        # Decode every group's name once, from one split of the string table.
        pieces = syms.strings.split(b"\0")
        piece_off = np.zeros(len(pieces), dtype=np.int64)
        np.cumsum([len(p) + 1 for p in pieces[:-1]], out=piece_off[1:])
        which = np.searchsorted(piece_off, name_off[group_start].astype(np.int64))
        group_names = [pieces[w] for w in which.tolist()]
        # The file promises names sorted (bytewise); lookups bisect on it.
        if any(a >= b for a, b in zip(group_names, group_names[1:])):
            raise KmodsymsError(f"{syms.source}: symbol names are not sorted; "
                                "rebuild it with 'kmodsyms build'")
        group_of_name = {name: g for g, name in enumerate(group_names)}
        self.core_lines = np.flatnonzero(ks.module == 0)
        names = ks.names_bytes(self.core_lines)
        get = group_of_name.get
        self.line_group = np.full(len(ks), NO, dtype=np.int64)
        self.line_group[self.core_lines] = [get(nm, NO) for nm in names]

    def _place(self) -> None:
        syms, ks = self.syms, self.ks
        self._name_groups()
        n_sections = len(syms.sections)
        self.section_base = np.zeros(n_sections, dtype=_U64)
        self.section_how = np.zeros(n_sections, dtype=np.int8)
        core_groups = self.line_group[self.core_lines]
        valid = core_groups >= 0
        lines_per_group = np.bincount(core_groups[valid], minlength=len(self.group_start))
        self.lines_per_group = lines_per_group
        # 1. Anchors: unique in both.
        unique = (self.group_count == 1) & (lines_per_group == 1)
        anchor_lines = self.core_lines[valid][unique[core_groups[valid]]]
        anchor_entries = self.group_start[self.line_group[anchor_lines]]
        # A same-named line of another binding is another symbol (e.g. a weak
        # definition overridden by a strong one from outside vmlinux.a).
        same = _letter_compatible(ks.type[anchor_lines], syms.symbols["binding"][anchor_entries])
        anchor_lines, anchor_entries = anchor_lines[same], anchor_entries[same]
        sections = syms.symbols["section"][anchor_entries].astype(np.int64)
        bases = ks.address[anchor_lines] - syms.symbols["value"][anchor_entries]
        self.stats.anchors = len(anchor_lines)
        if len(sections):
            # Majority vote per section over (section, base) pairs.
            pairs = np.stack([sections.astype(_U64), bases])
            uniq, votes = np.unique(pairs, axis=1, return_counts=True)
            order = np.lexsort((votes, uniq[0]))          # by section, then votes
            uniq, votes = uniq[:, order], votes[order]
            last = np.ones(uniq.shape[1], dtype=bool)
            last[:-1] = uniq[0, 1:] != uniq[0, :-1]
            chosen_sec = uniq[0, last].astype(np.int64)
            self.section_base[chosen_sec] = uniq[1, last]
            self.section_how[chosen_sec] = BY_ANCHOR
            self.stats.conflicting_anchors = int(len(sections) - votes[last].sum())
        self._eliminate()
        placed = self.section_how != UNPLACED
        self.stats.sections_by_anchor = int((self.section_how == BY_ANCHOR).sum())
        self.stats.sections_by_elimination = int((self.section_how == BY_ELIMINATION).sum())
        self.stats.sections_by_neighbours = int((self.section_how == BY_NEIGHBOURS).sum())
        self.stats.sections_unplaced = int((~placed).sum())

    def _eliminate(self) -> None:
        """Place sections whose names are all duplicated, until nothing changes:

        * elimination: when one copy of a name is still unplaced and one of
          its kallsyms lines is still unmatched, they are the same symbol;
        * shape: a section whose symbols, at their offsets, match free
          kallsyms lines at exactly one candidate base is placed there (the
          pattern of names and distances identifies it even when no name
          does).
        """
        syms, ks = self.syms, self.ks
        dup = np.flatnonzero(((self.group_count > 1) | (self.lines_per_group > 1))
                             & (self.lines_per_group > 0))
        if not len(dup):
            return
        is_dup = np.zeros(len(self.group_start), dtype=bool)
        is_dup[dup] = True
        lines = self.core_lines[self.line_group[self.core_lines] >= 0]
        lines = lines[is_dup[self.line_group[lines]]]
        address = ks.address
        mask = _U64(0xFFFFFFFFFFFFFFFF)
        lines_of: dict[int, list[int]] = {}
        line_at: dict[tuple[int, int], int] = {}
        for line, g, a in zip(lines.tolist(), self.line_group[lines].tolist(),
                              address[lines].tolist()):
            lines_of.setdefault(g, []).append(line)
            line_at[(g, a)] = line
        sym = syms.symbols
        dup_entries = np.flatnonzero(is_dup[self.entry_group])
        by_section: dict[int, list[int]] = {}
        for e, sec in zip(dup_entries.tolist(), sym["section"][dup_entries].tolist()):
            by_section.setdefault(sec, []).append(e)
        entry_group = self.entry_group
        value = sym["value"]
        matched: set[int] = set()

        def place(sec: int, base, how: int) -> None:
            self.section_base[sec] = base
            self.section_how[sec] = how
            for e in by_section.get(sec, ()):
                line = line_at.get((int(entry_group[e]), int((base + value[e]) & mask)))
                if line is not None:
                    matched.add(line)

        for sec in by_section:
            if self.section_how[sec] != UNPLACED:
                place(sec, self.section_base[sec], int(self.section_how[sec]))
        changed = True
        while changed:
            changed = False
            candidates: dict[int, list] = {}
            for sec, entries in by_section.items():
                if self.section_how[sec] != UNPLACED:
                    continue
                free = {e: [l for l in lines_of[int(entry_group[e])] if l not in matched]
                        for e in entries}
                # Elimination: the last unplaced copy of a name and its last line.
                for e in entries:
                    g = int(entry_group[e])
                    start = int(self.group_start[g])
                    copies = [c for c in range(start, start + int(self.group_count[g]))
                              if self.section_how[sym["section"][c]] == UNPLACED]
                    if len(copies) == 1 and len(free[e]) == 1:
                        place(sec, address[free[e][0]] - value[e], BY_ELIMINATION)
                        changed = True
                        break
                if self.section_how[sec] != UNPLACED:
                    continue
                # Shape: try every free line of the rarest name as the anchor.
                pivot = min(entries, key=lambda e: len(free[e]))
                if not free[pivot]:
                    continue
                scores = []
                for line in free[pivot]:
                    base = address[line] - value[pivot]
                    score = 0
                    for e in entries:
                        hit = line_at.get((int(entry_group[e]), int((base + value[e]) & mask)))
                        if hit is not None and hit not in matched:
                            score += 1
                    scores.append((score, base))
                scores.sort(key=lambda t: t[0], reverse=True)
                best = scores[0][0]
                if best >= 2 and (len(scores) == 1 or scores[1][0] < best):
                    place(sec, scores[0][1], BY_ELIMINATION)
                    changed = True
                elif best >= 1:
                    candidates[sec] = [b for score, b in scores if score == best]
            if not changed:
                for sec, base in self._forced_by_neighbours(candidates):
                    place(sec, base, BY_NEIGHBOURS)
                    changed = True

    def _block_offsets(self) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """For each section name: its sections in link order and their offsets
        in the block ``ld -r`` makes of them.

        ``ld -r`` builds vmlinux.o by concatenating the input sections of one
        name in link order (vmlinux.a's order, the order of the objects
        table), each at the next multiple of its alignment, and the final link
        moves each block as a whole.  So one placed section places the whole
        block.  SHF_LINK_ORDER sections are ordered by the sections they link
        to instead, and are left out.  Computed once, lazily.
        """
        blocks = getattr(self, "_blocks", None)
        if blocks is None:
            sections = self.syms.sections
            usable = np.flatnonzero(((sections["flags"] & SHF_LINK_ORDER) == 0)
                                    & (sections["size"] > 0))
            names = sections["name"][usable]
            order = np.argsort(names, kind="stable")
            usable, names = usable[order], names[order]
            cuts = np.flatnonzero(np.diff(names)) + 1
            size = sections["size"].astype(object)
            align = sections["align"].astype(object)
            blocks = {}
            for members in np.split(usable, cuts):
                offsets, off = [], 0
                for sec in members.tolist():
                    a = max(int(align[sec]), 1)
                    off = -(-off // a) * a
                    offsets.append(off)
                    off += int(size[sec])
                blocks[int(sections["name"][members[0]])] = (members, np.array(offsets, dtype=object))
            self._blocks = blocks
        return blocks

    def _forced_by_neighbours(self, candidates: dict[int, list]):
        """Sections placed by their block (see :meth:`_block_offsets`).

        A block's placed sections each imply where the block starts; when they
        all agree, every other section of the block is placed from it.  A
        block with no placed section is placed when the candidate positions
        of its sections imply exactly one start.  A section whose candidate
        positions do not include its place in the block is left alone.
        Only used when the object order is vmlinux.a's link order.
        """
        if self.syms.meta_object_source != "vmlinux.a":
            return []
        forced = []
        wrap = 1 << 64
        for members, offsets in self._block_offsets().values():
            how = self.section_how[members]
            todo = np.flatnonzero(how == UNPLACED)
            if not len(todo):
                continue
            placed = np.flatnonzero(how != UNPLACED)
            if len(placed):
                starts = {(int(self.section_base[members[k]]) - offsets[k]) % wrap for k in placed.tolist()}
                if len(starts) != 1:
                    continue  # the block is not laid out as modelled: trust nothing
            else:
                implied = None
                for k in todo.tolist():
                    sec = int(members[k])
                    if sec in candidates:
                        options = {(int(c) - offsets[k]) % wrap for c in candidates[sec]}
                        implied = options if implied is None else implied & options
                if not implied or len(implied) != 1:
                    continue
                starts = implied
            start = starts.pop()
            for k in todo.tolist():
                sec = int(members[k])
                pos = (start + offsets[k]) % wrap
                if sec in candidates and not any(int(c) == pos for c in candidates[sec]):
                    continue
                forced.append((sec, _U64(pos)))
        return forced

    def _place_bare_blocks(self, loose: np.ndarray) -> bool:
        """Place blocks that hold no symbol at all (``__bug_table``,
        ``.smp_locks``, ``.pci_fixup_*``...) by the linker-made symbols that
        bracket them: the linker script defines one at the start of such a
        block and one after its end, possibly after aligning
        (``__smp_locks_end`` follows ``. = ALIGN(PAGE_SIZE)``).

        A start candidate is a loose symbol (in no placed section) at the
        alignment of the block's first section, with no symbol inside the
        block and the next symbol exactly at its end (else at its end rounded
        up to a page).  Lengths alone match chance gaps, so the start symbol
        must also carry the block's name, as the kernel's linker scripts
        name them: a common run of at least 6 characters, longer than any
        other candidate's (``.smp_locks``/``__smp_locks``,
        ``__bug_table``/``__start___bug_table``).  ``.discard*`` blocks are
        never placed.  Returns whether anything was placed."""
        if self.syms.meta_object_source != "vmlinux.a" or not len(loose):
            return False
        points = np.unique(loose)
        all_sorted = self.sorted_lines_address()
        following = np.searchsorted(all_sorted, points, side="right")
        has_next = following < len(all_sorted)
        points, nxt = points[has_next], all_sorted[following[has_next]]
        loose_enough = self.extent_of(points) < 0
        points, nxt = points[loose_enough], nxt[loose_enough]
        sizes = self.syms.sections["size"]
        aligns = self.syms.sections["align"]
        placed_any = False
        for key, (members, offsets) in self._block_offsets().items():
            if (self.section_how[members] != UNPLACED).any():
                continue
            length = int(offsets[-1]) + int(sizes[int(members[-1])])
            first_align = max(int(aligns[members[0]]), 1)
            end = points + _U64(length)
            gap = nxt - end                      # wraps (huge) when next < end
            low_bit = nxt & (~nxt + _U64(1))    # largest power of two dividing next
            fits = (points % _U64(first_align) == 0) & (nxt >= end)
            # An exact end is preferred; else one rounded up to at most a
            # 64 KiB page (the largest PAGE_SIZE), as "__smp_locks_end" is.
            exact = fits & (gap == 0)
            ok = exact if exact.any() else fits & (gap < np.minimum(low_bit, _U64(1 << 16)))
            block = self.syms.string(int(self.syms.section_names["name"][key]))
            if block.startswith(".discard"):
                continue  # every kernel linker script discards these
            scored = sorted(((self._name_affinity(block, a), a) for a in points[ok].tolist()),
                            reverse=True)
            starts = [a for score, a in scored[:1]
                      if score >= 6 and (len(scored) == 1 or scored[1][0] < score)]
            if len(starts) != 1:
                continue
            for sec, off in zip(members.tolist(), offsets.tolist()):
                self.section_base[sec] = _U64(starts[0] + off)
                self.section_how[sec] = BY_NEIGHBOURS
            placed_any = True
        return placed_any

    def _name_affinity(self, block: str, address: int) -> int:
        """Longest run of characters shared by a block's name and a kallsyms
        name at ``address`` (``.smp_locks`` and ``__smp_locks``: 9)."""
        from difflib import SequenceMatcher
        lines = np.flatnonzero(self.ks.address == _U64(address))
        best = 0
        for name in self.ks.names_bytes(lines):
            text = name.decode("utf-8", "surrogateescape")
            m = SequenceMatcher(None, block, text).find_longest_match(0, len(block), 0, len(text))
            best = max(best, m.size)
        return best

    def sorted_lines_address(self) -> np.ndarray:
        """Every kallsyms address, sorted."""
        cached = getattr(self, "_sorted_all", None)
        if cached is None:
            cached = self._sorted_all = np.sort(self.ks.address)
        return cached

    def _check_consistency(self) -> None:
        """Refuse a dtrace_syms that is not for this kernel: anchors must be
        plentiful and agree."""
        s = self.stats
        if s.anchors < 16 or s.conflicting_anchors > max(8, s.anchors // 20):
            raise StaleError(
                f"{self.syms.source} does not match {self.ks.source}: "
                f"{s.anchors} unique names match, {s.conflicting_anchors} of them disagree "
                "about where their object was loaded; rebuild dtrace_syms for this kernel")

    # -------------------------------------------------------------- attribute
    def _attribute_lines(self) -> None:
        syms, ks = self.syms, self.ks
        n = len(ks)
        sym = syms.symbols
        self.line_entry = np.full(n, NO, dtype=np.int64)
        self.line_section = np.full(n, NO, dtype=np.int64)
        self.line_how = np.zeros(n, dtype=np.int8)
        placed_entry = self.section_how[sym["section"]] != UNPLACED
        entry_addr = self.section_base[sym["section"]] + sym["value"]
        core = self.core_lines
        groups = self.line_group[core]
        # Unique dtrace names: one candidate entry, check its address.
        single = groups >= 0
        single[single] = self.group_count[groups[single]] == 1
        cand = self.group_start[groups[single]]
        hit = placed_entry[cand] & (entry_addr[cand] == ks.address[core[single]])
        self.line_entry[core[single][hit]] = cand[hit]
        # Duplicated names: look among the group's placed copies by address.
        multi = core[(groups >= 0) & ~single]
        ambiguous_candidates: dict[int, list[int]] = {}
        for line, g in zip(multi.tolist(), self.line_group[multi].tolist()):
            start = int(self.group_start[g])
            entries = range(start, start + int(self.group_count[g]))
            addr = ks.address[line]
            found = NO
            unplaced = []
            for e in entries:
                if placed_entry[e]:
                    if entry_addr[e] == addr:
                        found = e
                        break
                else:
                    unplaced.append(e)
            if found != NO:
                self.line_entry[line] = found
            elif unplaced:
                ambiguous_candidates[line] = unplaced
        has_entry = self.line_entry >= 0
        self.line_section[has_entry] = sym["section"][self.line_entry[has_entry]]
        self.line_how[has_entry] = LINE_SYMBOL
        # Placed extents, for lines in no object's table, and for symbols
        # that occupy no byte of their own section (a zero-size symbol in an
        # empty section or at its end): an address belongs to the object
        # whose bytes are there, as the linker map says.
        self._build_extents()
        held = self.line_section[core] >= 0
        held[held] = ks.address[core[held]] < (self.section_base[self.line_section[core[held]]]
                                              + sym["section"].dtype.type(0)
                                              + self.syms.sections["size"][self.line_section[core[held]]])
        self.line_section[core[~held & has_entry[core]]] = NO
        rest = core[self.line_section[core] < 0]
        inside = self.extent_of(ks.address[rest])
        if self._place_bare_blocks(ks.address[rest[inside < 0]]):
            self._build_extents()
            inside = self.extent_of(ks.address[rest])
        self.line_section[rest] = inside
        self.line_how[rest[inside >= 0]] = LINE_EXTENT
        self.ambiguous: dict[int, list[int]] = {}
        sizes = sym["size"]
        for line, entries in ambiguous_candidates.items():
            # A zero-size symbol owns no byte: whichever copy it is, its object
            # is the one whose bytes are at its address (none, here).
            if self.line_section[line] == NO and any(sizes[e] for e in entries):
                self.ambiguous[line] = entries
                self.line_how[line] = LINE_AMBIGUOUS
        st = self.stats
        st.core_lines = len(core)
        how = self.section_how[self.line_section[core[has_entry[core]]]]
        st.lines_by_anchor = int((how == BY_ANCHOR).sum())
        st.lines_by_elimination = int((how == BY_ELIMINATION).sum())
        st.lines_by_neighbours = int((how == BY_NEIGHBOURS).sum())
        st.lines_by_extent = int((self.line_how[core] == LINE_EXTENT).sum())
        st.lines_ambiguous = len(self.ambiguous)
        st.lines_core_unknown = int((self.line_how[core] == LINE_NONE).sum())

    def _build_extents(self) -> None:
        sec = self.syms.sections
        ok = np.flatnonzero((self.section_how != UNPLACED) & (sec["size"] > 0))
        base = self.section_base[ok]
        order = np.argsort(base, kind="stable")
        self.extent_section = ok[order]
        self.extent_start = base[order]
        self.extent_end = self.extent_start + sec["size"][self.extent_section]

    def extent_of(self, addresses) -> np.ndarray:
        """Object section (index) whose placed extent holds each address, or -1."""
        addresses = np.asarray(addresses, dtype=_U64)
        i = np.searchsorted(self.extent_start, addresses, side="right") - 1
        ok = i >= 0
        ok[ok] = addresses[ok] < self.extent_end[i[ok]]
        return np.where(ok, self.extent_section[np.maximum(i, 0)], NO)

    # ------------------------------------------------------------------ index
    def _build_index(self) -> None:
        """Arrays for answering addresses: every line's size and module set,
        the sized intervals sorted for innermost-first search, and all lines
        sorted by address for the unsized fallback."""
        ks, syms = self.ks, self.syms
        n = len(ks)
        sym = syms.symbols
        size = np.full(n, NO, dtype=np.int64)
        has_entry = self.line_entry >= 0
        size[has_entry] = sym["size"][self.line_entry[has_entry]].astype(np.int64)
        by_address = np.lexsort((np.arange(n), ks.address))
        self.by_address = by_address
        self.sorted_address = ks.address[by_address]
        # Padding symbols: size is the distance to the function they prefix,
        # the next distinct address above.
        pad = np.flatnonzero(~has_entry & (self.line_section >= 0))
        if len(pad):
            names = ks.names_bytes(pad)
            pad = pad[[nm.startswith(_PADDING_PREFIXES) for nm in names]]
            nxt = np.searchsorted(self.sorted_address, ks.address[pad], side="right")
            ok = nxt < n
            pad, nxt = pad[ok], nxt[ok]
            size[pad] = (self.sorted_address[nxt] - ks.address[pad]).astype(np.int64)
        self.line_size = size
        # Region of every line: the placed section holding it, else a per-
        # module marker, so that the unsized fallback never crosses either.
        # Outside placed sections the region is the line's module, with the
        # per-cpu offsets ('A') apart from real addresses.  The core kernel's
        # ends at its highest symbol, as the kernel's is_ksym_addr() bounds
        # lookups; a module's (whose size kallsyms does not give) just
        # before the next symbol of anything else above it.
        loose = -1 - (2 * ks.module.astype(np.int64) + (ks.type == ord("A")))
        self.line_region = np.where(self.line_section >= 0, self.line_section, loose)
        region_end = np.zeros(int(-loose.min()) + 1, dtype=_U64)
        np.maximum.at(region_end, -1 - loose, ks.address)
        for group in range(2, len(region_end)):     # groups 0, 1: core kernel
            above = np.searchsorted(self.sorted_address, region_end[group], side="right")
            region_end[group] = (self.sorted_address[above] - _U64(1) if above < n
                                 else _U64(0xFFFFFFFFFFFFFFFF))
        self.region_end = region_end
        sized = np.flatnonzero(size > 0)
        start = ks.address[sized]
        end = start + size[sized].astype(_U64)
        types = np.zeros(len(sized), dtype=np.int64)
        binds = np.zeros(len(sized), dtype=np.int64)
        e = self.line_entry[sized]
        he = e >= 0
        t = sym["type"][e[he]]
        b = sym["binding"][e[he]]
        types[he] = np.where(t == 0, 0, 1)
        binds[he] = np.select([b == 1, b == 2], [2, 1], 0)
        letters = ks.type[sized[~he]]
        binds[~he] = np.where((letters >= 65) & (letters <= 90), 2, 0)
        # Preferred last among equal starts: smaller size, typed, stronger binding.
        name_rank = np.argsort(np.argsort(np.array(ks.names_bytes(sized), dtype=object),
                                          kind="stable"), kind="stable") if len(sized) else sized
        order = np.lexsort((-name_rank, binds, types, -(end - start).astype(np.int64), start))
        self.iv_line = sized[order]
        self.iv_start = start[order]
        self.iv_end = end[order]
        self.iv_parent = _containers(self.iv_start, self.iv_end)

    # ---------------------------------------------------------------- answers
    def resolve_many(self, addresses) -> tuple[np.ndarray, np.ndarray]:
        """Vectorised core of :meth:`resolve`: for each address, the kallsyms
        line that answers it (-1: none) and whether it is a sized hit."""
        q = np.asarray(addresses, dtype=_U64)
        j = np.searchsorted(self.iv_start, q, side="right") - 1
        out = np.full(len(q), NO, dtype=np.int64)
        live = j >= 0
        jj = j.copy()
        for _ in range(64):  # walk out to the innermost interval still holding q
            miss = live & (self.iv_end[np.maximum(jj, 0)] <= q)
            if not miss.any():
                break
            jj[miss] = self.iv_parent[jj[miss]]
            live &= jj >= 0
        sized = live.copy()
        out[sized] = self.iv_line[jj[sized]]
        # Unsized fallback: nearest line at or below, same region as the address.
        rest = np.flatnonzero(~sized)
        if len(rest):
            k = np.searchsorted(self.sorted_address, q[rest], side="right") - 1
            ok = k >= 0
            cand = np.where(ok, self.by_address[np.maximum(k, 0)], NO)
            region_of_q = self.extent_of(q[rest])
            cand_region = self.line_region[np.maximum(cand, 0)]
            # Inside a placed section: the candidate must be in it.  Outside
            # any: the candidate must be outside every placed section too.
            ok &= np.where(region_of_q >= 0, cand_region == region_of_q,
                           (cand_region < 0) & (q[rest] <= self.region_end[np.maximum(-1 - cand_region, 0)]))
            out[rest[ok]] = cand[ok]
        return out, sized

    def resolve(self, address: int) -> Symbolization:
        """Answer one address (see :class:`Symbolization`)."""
        line, sized = self.resolve_many(np.array([address], dtype=_U64))
        return self.record(address, int(line[0]), bool(sized[0]))

    def record(self, address: int, line: int, sized: bool) -> Symbolization:
        """Build the answer record for ``address`` answered by ``line``."""
        if line < 0:
            result = Symbolization(address)
            sec = int(self.extent_of(np.array([address], dtype=_U64))[0])
            if sec >= 0:
                self._fill_object(result, int(self.syms.sections["object"][sec]))
            return result
        ks = self.ks
        start = int(ks.address[line])
        size = int(self.line_size[line])
        letter = chr(ks.type[line])
        result = Symbolization(address, symbol=ks.name(line), offset=address - start,
                               start=start, size=size if size >= 0 else None,
                               sized=sized, type=letter)
        entry = int(self.line_entry[line])
        mod = int(ks.module[line])
        if mod:
            name = ks.module_names[mod]
            result.module, result.modules = name, [name]
            result.origin = "pseudo" if is_pseudo_module(name) else "loadable"
        elif line in self.ambiguous:
            cands = [self.syms.modset_names(int(self.syms.symbols["modset"][e])) or ["vmlinux"]
                     for e in self.ambiguous[line]]
            result.ambiguous = True
            result.candidates = cands
            if all(c == cands[0] for c in cands):   # same module(s): only the object is unknown
                result.modules = cands[0]
                result.module = cands[0][0]
                result.origin = "core" if cands[0] == ["vmlinux"] else "builtin"
        else:
            sec = int(self.line_section[line])
            if sec >= 0:
                self._fill_object(result, int(self.syms.sections["object"][sec]))
            else:
                result.module, result.modules, result.origin = "vmlinux", ["vmlinux"], "core"
        if entry >= 0:
            result.binding = BINDING_NAMES.get(int(self.syms.symbols["binding"][entry]))
        else:
            result.binding = _binding_from_letter(letter)
        return result

    def _fill_object(self, result: Symbolization, obj: int) -> None:
        syms = self.syms
        mods = syms.modset_names(int(syms.objects["modset"][obj]))
        result.object = syms.object_path(obj)
        result.modules = mods or ["vmlinux"]
        result.module = result.modules[0]
        result.origin = "builtin" if mods else "core"

    def line_objects(self) -> np.ndarray:
        """Object index (into the dtrace_syms objects table) of every kallsyms
        line; -1 when it comes from no object (or a loadable module)."""
        objects = np.full(len(self.ks), NO, dtype=np.int64)
        has = self.line_section >= 0
        objects[has] = self.syms.sections["object"][self.line_section[has]]
        return objects

    def line_modsets(self) -> np.ndarray:
        """Module set of every kallsyms line: an index into the dtrace_syms
        module sets (0, the empty set, is core kernel, also for lines from no
        object), -1 for a loadable or pseudo-module line (see ``ks.module``),
        -2 where the candidates' modules differ (ambiguous)."""
        objects = self.line_objects()
        modsets = np.zeros(len(self.ks), dtype=np.int64)
        has = objects >= 0
        modsets[has] = self.syms.objects["modset"][objects[has]]
        modsets[self.ks.module != 0] = -1
        for line, entries in self.ambiguous.items():
            sets = {int(self.syms.symbols["modset"][e]) for e in entries}
            modsets[line] = sets.pop() if len(sets) == 1 else -2
        return modsets

    # --------------------------------------------------------------- reverse
    def _name_index(self) -> dict[bytes, list[int]]:
        index = getattr(self, "_by_name", None)
        if index is None:
            index = {}
            for line, nm in enumerate(self.ks.names_bytes(slice(None))):
                index.setdefault(nm, []).append(line)
            self._by_name = index
        return index

    def lookup(self, name: str, module: str | None = None) -> list[Symbolization]:
        """Every symbol called ``name`` (in ``module`` if given: a built-in
        module, a loadable module, or ``vmlinux`` for core kernel), as records
        whose ``address``/``start`` is the symbol's address."""
        if module is not None:
            module = module.replace("-", "_")
        results = []
        for line in self._name_index().get(name.encode("utf-8", "surrogateescape"), []):
            addr = int(self.ks.address[line])
            rec = self.record(addr, line, self.line_size[line] > 0)
            if module is None or (rec.modules and module in rec.modules) or \
                    (rec.ambiguous and any(module in c for c in rec.candidates)):
                results.append(rec)
        return results

    def modules(self) -> list[str]:
        """Every module name: ``vmlinux``, the built-in modules, the loaded ones."""
        return ["vmlinux"] + self.syms.module_names + self.ks.module_names[1:]

    def symbols(self, module: str) -> list[Symbolization]:
        """Every kallsyms symbol of ``module``, in address order."""
        module = module.replace("-", "_")
        out = []
        for line in self.by_address.tolist():
            rec = self.record(int(self.ks.address[line]), line, self.line_size[line] > 0)
            if rec.modules and module in rec.modules:
                out.append(rec)
        return out

    def kallmodsyms_lines(self):
        """Lines as UEK's /proc/kallmodsyms printed them:
        ``%016x %x %c %s`` then ``\\t[mod]`` (several: ``\\t[a] [b]``);
        core kernel symbols have no suffix."""
        ks = self.ks
        modsets = self.line_modsets()
        suffix = ["" if not mods else "\t" + " ".join(f"[{m}]" for m in mods)
                  for mods in (self.syms.modset_names(i) for i in range(len(self.syms.modsets)))]
        loadable = [""] + [f"\t[{m}]" for m in ks.module_names[1:]]
        sizes = np.maximum(self.line_size, 0).tolist()
        for line, (addr, letter, modset, mod) in enumerate(zip(
                ks.address.tolist(), ks.type.tolist(), modsets.tolist(), ks.module.tolist())):
            tail = loadable[mod] if mod else (suffix[modset] if modset >= 0 else "")
            yield f"{addr:016x} {sizes[line]:x} {chr(letter)} {ks.name(line)}{tail}"


def _letter_compatible(letters: np.ndarray, bindings: np.ndarray) -> np.ndarray:
    """Whether kallsyms type letters agree with ELF bindings: weak symbols
    print as W/V (w/v), other globals upper case, locals lower case.  'A'/'a'
    (per-cpu data printed as absolute) and '?' say nothing."""
    letters = np.asarray(letters)
    weak_letter = np.isin(letters, np.frombuffer(b"WwVv", dtype=np.uint8))
    upper = (letters >= 65) & (letters <= 90)
    wildcard = np.isin(letters, np.frombuffer(b"Aa?", dtype=np.uint8))
    ok = np.where(bindings == 2, weak_letter,
                  ~weak_letter & np.where(bindings == 1, upper, ~upper))
    return ok | wildcard


def _binding_from_letter(letter: str) -> str:
    if letter in "wWvV":
        return "weak"
    return "global" if letter.isupper() else "local"


def _containers(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """For intervals sorted by start (preferred last among equal starts), the
    index of the nearest earlier interval containing each one, or -1.  Only
    runs of overlapping intervals need the stack walk."""
    n = len(start)
    parent = np.full(n, NO, dtype=np.int64)
    if n == 0:
        return parent
    reach = np.maximum.accumulate(end)
    nested = np.zeros(n, dtype=bool)
    nested[1:] = start[1:] < reach[:-1]
    for i in np.flatnonzero(nested).tolist():
        # Walk back through candidates: the previous interval, then its
        # containers, until one holds interval i.
        j = i - 1
        while j >= 0 and end[j] < end[i]:
            j = parent[j]
        parent[i] = j
    return parent


# ------------------------------------------------------------------- loading
def default_syms_path() -> str:
    return f"/lib/modules/{os.uname().release}/kernel/dtrace_syms"


def running_build_id() -> str:
    """The running kernel's build-id from /sys/kernel/notes, or ""."""
    from .elfnotes import parse_notes
    try:
        with open("/sys/kernel/notes", "rb") as f:
            return parse_notes(f.read())
    except OSError:
        return ""


def check_live(syms: SymsFile) -> None:
    """Refuse a dtrace_syms built for another kernel than the running one."""
    release = os.uname().release
    if syms.meta_kernel_release and syms.meta_kernel_release != release:
        raise StaleError(f"{syms.source} is for kernel {syms.meta_kernel_release}, but "
                         f"{release} is running; use the file of the running kernel "
                         "or pass --force")
    live_id = running_build_id()
    if syms.meta_build_id and live_id and syms.meta_build_id != live_id:
        raise StaleError(f"{syms.source} is for vmlinux build-id {syms.meta_build_id}, but the "
                         f"running kernel's is {live_id}; rebuild it or pass --force")


def load(syms: str | SymsFile | None = None, kallsyms: str | Kallsyms | None = None,
         force: bool = False) -> Resolver:
    """Load dtrace_syms (default ``/lib/modules/$(uname -r)/kernel/dtrace_syms``)
    and kallsyms (default ``/proc/kallsyms``) and place every object.

    With the live ``/proc/kallsyms``, the file's kernel release and build-id
    must be the running kernel's; with a kallsyms file given by path the
    anchor check guards instead.  ``force`` skips both checks.  Raises
    :class:`KmodsymsError` (or its :class:`StaleError`) with a one-line
    message on bad or mismatched input.
    """
    if not isinstance(syms, SymsFile):
        syms = read_syms(syms or default_syms_path())
    live = kallsyms is None or kallsyms == "/proc/kallsyms"
    if not isinstance(kallsyms, Kallsyms):
        kallsyms = read_kallsyms(kallsyms or "/proc/kallsyms")
    if live and not force:
        check_live(syms)
    return Resolver(syms, kallsyms, check_anchors=not force)
