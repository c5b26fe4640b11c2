"""Place every object section of dtrace_syms in a kernel's address space.

Placement works on *object sections* (an object's ``.text``, ``.data``...),
because once linked each occupies one contiguous interval of vmlinux.  Input:
a :class:`~kmodsyms.symsfile.SymsFile` and a symbol list of the kernel, as
:class:`~kmodsyms.kallsyms.Kallsyms` (``/proc/kallsyms``, or ``System.map``
at build time, which is the same list before KASLR).

1. Anchors: a name occurring exactly once among the core kallsyms lines and
   exactly once in dtrace_syms fixes its section's load address
   (kallsyms address - value in section), if the kallsyms type letter agrees
   with the ELF binding.  A section's anchors vote; KASLR cancels out because
   only differences are used.
2. Elimination and shape: for duplicated names, copies in placed sections
   are matched by address; the last unplaced copy and the last unmatched line
   are paired; a section whose symbols match free lines at exactly one base
   is placed there.
3. Blocks: ``ld -r`` lays the sections of one name out in link order, so one
   placed section places its whole block; blocks with no symbol at all are
   placed by the linker-made symbols that bracket them.
4. Each line then takes the object, module(s), size and binding of the
   placed symbol it is, or, in no object's table but inside a placed section
   (objtool's ``__pfx_*``/``__cfi_*`` padding), that object.  Everything
   else is core kernel.  A line whose name matches only unplaced copies in
   different modules is ambiguous: reported with every candidate.

docs/resolver.md states the rules in full.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import StaleError
from .kallsyms import Kallsyms
from .spans import equal_spans, hash_spans
from .symsfile import SymsFile

NO = -1
_U64 = np.uint64
# Placement methods, per object section (stored in dtrace_syms too).
UNPLACED, BY_ANCHOR, BY_ELIMINATION, BY_NEIGHBOURS = 0, 1, 2, 3
# How a kallsyms line got its object.
LINE_NONE, LINE_SYMBOL, LINE_EXTENT, LINE_AMBIGUOUS = 0, 1, 2, 3
SHF_LINK_ORDER = 0x80


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
    # False when no usable dtrace_syms was given (load(fallback=True)):
    # kallsyms alone, built-in modules shown as vmlinux; ``degraded`` says why.
    builtin_modules_known: bool = True
    degraded: str = ""


class Placement:
    """Search placement of ``syms`` against ``ks`` (see the module doc).

    Results: ``section_base`` (uint64 load address per object section) and
    ``section_how``; per kallsyms line ``line_entry`` (dtrace_syms entry, -1),
    ``line_section`` (object section holding it, -1) and ``line_how``;
    ``ambiguous`` (line -> candidate entries); ``stats``; ``core_lines``.
    """

    def __init__(self, syms: SymsFile, ks: Kallsyms, check_anchors: bool = True):
        syms.check_sorted()   # equal names must be neighbours
        self.syms = syms
        self.ks = ks
        self.stats = PlacementStats()
        self._place()
        if check_anchors:
            self._check_consistency()
        self._attribute_lines()

    def _name_groups(self):
        """Group dtrace_syms entries by name (they are sorted by name and
        names are deduplicated in the string table, so equal name offsets are
        contiguous) and map each core kallsyms line to its group, by a hash
        of the bytes confirmed by comparing them."""
        syms, ks = self.syms, self.ks
        name_off = syms.symbols["name"]
        n = len(name_off)
        change = np.ones(n, dtype=bool)
        change[1:] = name_off[1:] != name_off[:-1]
        first = np.flatnonzero(change)
        # An offset may point into the middle of a stored string (format.md),
        # so one name may be stored at two offsets: still one group.
        starts = name_off[first].astype(np.int64)
        lengths = syms.name_lengths()[first]
        same = np.zeros(len(first), dtype=bool)
        same[1:] = equal_spans(syms.strings, starts[1:], syms.strings, starts[:-1],
                               lengths[1:], lengths[:-1])
        change[first[same]] = False
        group_start = first[~same]
        self.group_start = group_start
        self.group_count = np.diff(np.append(group_start, n))
        self.entry_group = np.cumsum(change) - 1
        self.core_lines = np.flatnonzero(ks.module == 0)
        self.line_group = np.full(len(ks), NO, dtype=np.int64)
        self.line_group[self.core_lines] = _match_names(
            ks.text, ks.name_start[self.core_lines], ks.name_end[self.core_lines],
            syms.strings, starts[~same], lengths[~same])

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
            by_pair = np.lexsort((bases, sections))
            sections, bases = sections[by_pair], bases[by_pair]
            new_pair = np.ones(len(by_pair), dtype=bool)
            new_pair[1:] = (sections[1:] != sections[:-1]) | (bases[1:] != bases[:-1])
            firsts = np.flatnonzero(new_pair)
            uniq = np.stack([sections[firsts].astype(_U64), bases[firsts]])
            votes = np.diff(np.append(firsts, len(by_pair)))
            order = np.lexsort((votes, uniq[0]))          # by section, then votes
            uniq, votes = uniq[:, order], votes[order]
            last = np.ones(uniq.shape[1], dtype=bool)
            last[:-1] = uniq[0, 1:] != uniq[0, :-1]
            chosen_sec = uniq[0, last].astype(np.int64)
            self.section_base[chosen_sec] = uniq[1, last]
            self.section_how[chosen_sec] = BY_ANCHOR
            self.stats.conflicting_anchors = int(len(sections) - votes[last].sum())
        self._eliminate()

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
        is_dup = np.zeros(len(self.group_start), dtype=bool)
        is_dup[dup] = True
        lines = self.core_lines[self.line_group[self.core_lines] >= 0]
        lines = lines[is_dup[self.line_group[lines]]]
        mask = (1 << 64) - 1
        address = ks.address.tolist()
        free_lines: dict[int, set[int]] = {}
        line_at: dict[tuple[int, int], int] = {}
        for line, g in zip(lines.tolist(), self.line_group[lines].tolist()):
            free_lines.setdefault(g, set()).add(line)
            line_at[(g, address[line])] = line
        # The same lines as arrays, per name sorted by address, for scoring.
        free = np.ones(len(ks), dtype=bool)
        by_group = lines[np.lexsort((ks.address[lines], self.line_group[lines]))]
        cuts = np.flatnonzero(np.diff(self.line_group[by_group])) + 1
        group_lines = {int(self.line_group[chunk[0]]): chunk for chunk in np.split(by_group, cuts)
                       if len(chunk)}
        group_address = {g: ks.address[chunk] for g, chunk in group_lines.items()}

        def free_hits(g: int, targets: np.ndarray) -> np.ndarray:
            """Which ``targets`` addresses hold a free line called ``g``."""
            addrs = group_address[g]
            i = np.minimum(np.searchsorted(addrs, targets), len(addrs) - 1)
            return (addrs[i] == targets) & free[group_lines[g][i]]
        sym = syms.symbols
        dup_entries = np.flatnonzero(is_dup[self.entry_group])
        by_section: dict[int, list[tuple[int, int, int]]] = {}   # (entry, group, value)
        for e, sec, g, v in zip(dup_entries.tolist(), sym["section"][dup_entries].tolist(),
                                self.entry_group[dup_entries].tolist(),
                                sym["value"][dup_entries].tolist()):
            by_section.setdefault(sec, []).append((e, g, v))
        how = self.section_how
        unplaced_copies = dict.fromkeys(dup.tolist(), 0)
        for sec, entries in by_section.items():
            for _e, g, _v in entries:
                if how[sec] == UNPLACED:
                    unplaced_copies[g] += 1

        # A section is re-examined only when one of its names changed
        # (a line claimed, a copy placed) since it was last looked at.
        clock = [1]
        changed_at = dict.fromkeys(dup.tolist(), 1)
        looked_at: dict[int, int] = {}
        last_candidates: dict[int, list] = {}

        def claim(sec: int, base: int) -> None:
            """Lines that the symbols of placed ``sec`` are, no longer free."""
            for _e, g, v in by_section.get(sec, ()):
                line = line_at.get((g, (base + v) & mask))
                if line is not None:
                    free_lines[g].discard(line)
                    free[line] = False
                    changed_at[g] = clock[0]

        def place(sec: int, base: int, method: int) -> None:
            clock[0] += 1
            self.section_base[sec] = _U64(base & mask)
            how[sec] = method
            for _e, g, _v in by_section.get(sec, ()):
                unplaced_copies[g] -= 1
                changed_at[g] = clock[0]
            claim(sec, base)

        for sec in by_section:
            if how[sec] != UNPLACED:
                claim(sec, int(self.section_base[sec]))
        changed = True
        while changed:
            changed = False
            candidates: dict[int, list] = {}
            for sec, entries in by_section.items():
                if how[sec] != UNPLACED:
                    continue
                if sec in looked_at and all(changed_at[g] <= looked_at[sec] for _e, g, _v in entries):
                    if sec in last_candidates:
                        candidates[sec] = last_candidates[sec]
                    continue
                looked_at[sec] = clock[0]
                last_candidates.pop(sec, None)
                # Elimination: the last unplaced copy of a name and its last line.
                for _e, g, v in entries:
                    if unplaced_copies[g] == 1 and len(free_lines[g]) == 1:
                        place(sec, address[next(iter(free_lines[g]))] - v, BY_ELIMINATION)
                        changed = True
                        break
                if how[sec] != UNPLACED:
                    continue
                # Shape: try every free line of the rarest name as the anchor.
                _pe, pivot_group, pivot_value = min(entries, key=lambda t: len(free_lines[t[1]]))
                if not free_lines[pivot_group]:
                    continue
                pivot_lines = group_lines[pivot_group]
                bases = ks.address[pivot_lines[free[pivot_lines]]] - _U64(pivot_value)
                score = np.zeros(len(bases), dtype=np.int64)
                for _e, g, v in entries:
                    score += free_hits(g, bases + _U64(v))
                best = int(score.max())
                if best >= 2 and (score == best).sum() == 1:
                    place(sec, int(bases[int(score.argmax())]), BY_ELIMINATION)
                    changed = True
                elif best >= 1:
                    candidates[sec] = last_candidates[sec] = bases[score == best].tolist()
            if not changed:
                for sec, base in self._forced_by_neighbours(candidates):
                    place(sec, int(base), BY_NEIGHBOURS)
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
        name them: a common run of at least half the name (and 6
        characters), longer than any other candidate's (``.smp_locks``/``__smp_locks``,
        ``__bug_table``/``__start___bug_table``).  ``.discard*`` blocks are
        never placed.  Returns whether anything was placed."""
        if self.syms.meta_object_source != "vmlinux.a" or not len(loose):
            return False
        points = np.unique(loose)
        all_sorted = self.ks.address[self.ks.by_address()]
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
            if length >= 1 << 64:
                continue  # larger than the address space: not a real block
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
            wanted = max(6, (len(block.strip("._")) + 1) // 2)
            starts = [a for score, a in scored[:1]
                      if score >= wanted and (len(scored) == 1 or scored[1][0] < score)]
            if len(starts) != 1:
                continue
            for sec, off in zip(members.tolist(), offsets.tolist()):
                self.section_base[sec] = _U64((starts[0] + off) % (1 << 64))
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
        self.line_entry = np.full(n, NO, dtype=np.int32)
        self.line_section = np.full(n, NO, dtype=np.int32)
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
        # Duplicated names: the first placed copy at the line's address, else
        # (no copy there) the unplaced copies are its candidates.
        multi = core[(groups >= 0) & ~single]
        open_line = open_entry = np.zeros(0, dtype=np.int64)   # (line, unplaced copy) pairs
        if len(multi):
            count = self.group_count[self.line_group[multi]]
            pair_line = np.repeat(np.arange(len(multi)), count)
            pair_entry = np.repeat(self.group_start[self.line_group[multi]] - (np.cumsum(count) - count),
                                   count) + np.arange(int(count.sum()))
            placed = placed_entry[pair_entry]
            match = np.flatnonzero(placed & (entry_addr[pair_entry] == ks.address[multi][pair_line]))
            first = match[np.flatnonzero(np.diff(pair_line[match], prepend=-1) != 0)]
            self.line_entry[multi[pair_line[first]]] = pair_entry[first]
            found = np.zeros(len(multi), dtype=bool)
            found[pair_line[first]] = True
            open_pairs = np.flatnonzero(~placed & ~found[pair_line])
            open_line, open_entry = multi[pair_line[open_pairs]], pair_entry[open_pairs]
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
        # A line left in no section with unplaced copies is ambiguous, unless
        # every copy has size zero: a zero-size symbol owns no byte, so
        # whichever copy it is, its object is the one whose bytes are at its
        # address (none, here).
        self.ambiguous: dict[int, list[int]] = {}
        keep = self.line_section[open_line] == NO
        open_line, open_entry = open_line[keep], open_entry[keep]
        sized_lines = np.unique(open_line[sym["size"][open_entry] > 0])
        keep = np.isin(open_line, sized_lines)
        open_line, open_entry = open_line[keep], open_entry[keep]
        for run in np.split(np.arange(len(open_line)), np.flatnonzero(np.diff(open_line)) + 1):
            if len(run):
                self.ambiguous[int(open_line[run[0]])] = open_entry[run].tolist()
        self.line_how[sized_lines] = LINE_AMBIGUOUS
        _count(self)

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
        if not len(self.extent_section):      # nothing placed (e.g. no symbols)
            return np.full(addresses.shape, NO, dtype=np.int64)
        i = np.searchsorted(self.extent_start, addresses, side="right") - 1
        ok = i >= 0
        ok[ok] = addresses[ok] < self.extent_end[i[ok]]
        return np.where(ok, self.extent_section[np.maximum(i, 0)], NO)

    # ------------------------------------------------------------------ index
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




class LinkedPlacement:
    """Placement from the link addresses ``kmodsyms build`` recorded.

    Each of vmlinux's load segments moves as a whole (KASLR), so one shift
    per segment places every section in it.  The shift comes from the
    segment's anchor symbols: the first one found by name in kallsyms gives
    it, and every anchor must then sit exactly at its link address plus the
    shift (the staleness check).  Lines are then attributed by address alone:
    the placed section holding the line, and the symbol entry at that offset
    of that section with that name.  Same results as :class:`Placement`.
    """

    def __init__(self, syms: SymsFile, ks: Kallsyms, check_anchors: bool = True):
        self.syms = syms
        self.ks = ks
        self.stats = PlacementStats()
        self.ambiguous: dict[int, list[int]] = {}
        self.core_lines = np.flatnonzero(ks.module == 0)
        self._shift_segments(check_anchors)
        self._build_extents()
        self._attribute_lines()

    def _shift_segments(self, check: bool) -> None:
        syms, ks = self.syms, self.ks
        sections, symbols = syms.sections, syms.symbols
        by_address = ks.by_address()
        core_by_address = by_address[ks.module[by_address] == 0]
        sorted_address = ks.address[core_by_address]
        n_segments = len(syms.segments)
        shift = np.zeros(n_segments, dtype=_U64)
        known = np.zeros(n_segments, dtype=bool)
        verified = total = 0
        for seg in range(n_segments):
            anchors = syms.anchors["symbol"][syms.anchors["segment"] == seg].tolist()
            names = [syms.raw_string(int(symbols["name"][e])) for e in anchors]
            links = [(int(sections["address"][symbols["section"][e]]) + int(symbols["value"][e]))
                     & 0xFFFFFFFFFFFFFFFF for e in anchors]  # link addresses wrap as the linker's do
            for name, link in zip(names, links):
                line = self._find_core_line(name)
                if line is not None:
                    shift[seg] = ks.address[line] - _U64(link)
                    known[seg] = True
                    break
            total += len(anchors)
            if not known[seg]:
                continue
            for name, link in zip(names, links):
                at = (_U64(link) + shift[seg]) & _U64(0xFFFFFFFFFFFFFFFF)
                i = int(np.searchsorted(sorted_address, at))
                while i < len(sorted_address) and sorted_address[i] == at:
                    if ks.name_bytes(int(core_by_address[i])) == name:
                        verified += 1
                        break
                    i += 1
        self.stats.anchors = verified
        self.stats.conflicting_anchors = total - verified
        if check and (not known.any() or total - verified > max(2, total // 10)):
            raise StaleError(
                f"{syms.source} does not match {ks.source}: {verified} of its {total} anchor "
                "symbols are where its link addresses say; rebuild dtrace_syms for this kernel")
        # Each section moves with the segment holding its link address.
        address = sections["address"]
        has = address != _U64(0xFFFFFFFFFFFFFFFF)
        seg_of = np.full(len(sections), NO, dtype=np.int64)
        for seg, (start, end) in enumerate(zip(syms.segments["start"], syms.segments["end"])):
            if known[seg]:
                seg_of[has & (address >= start) & (address <= end)] = seg
        self.section_how = np.where(seg_of >= 0, sections["placement"], UNPLACED).astype(np.int8)
        self.section_base = np.where(seg_of >= 0, address + shift[np.maximum(seg_of, 0)], _U64(0))

    def _find_core_line(self, name: bytes) -> int | None:
        """The core kallsyms line called ``name`` (its first), by one search
        of the text: core lines end right after the name."""
        ks = self.ks
        text = ks.text
        pos = text.find(b" " + name + b"\n")
        while pos >= 0:
            i = int(np.searchsorted(ks.name_start, pos + 1))
            if i < len(ks) and ks.name_start[i] == pos + 1 and ks.module[i] == 0:
                return i
            pos = text.find(b" " + name + b"\n", pos + 1)
        return None

    def _attribute_lines(self) -> None:
        syms, ks = self.syms, self.ks
        n = len(ks)
        sym = syms.symbols
        core = self.core_lines
        self.line_entry = np.full(n, NO, dtype=np.int32)
        self.line_section = np.full(n, NO, dtype=np.int32)
        self.line_how = np.zeros(n, dtype=np.int8)
        inside = self.extent_of(ks.address[core])
        held = core[inside >= 0]
        sec = inside[inside >= 0]
        self.line_section[held] = sec
        self.line_how[held] = LINE_EXTENT
        # The entry at (section, offset) with the line's name is the symbol.
        if len(sym) and int(sym["value"].max()) < 1 << 32:
            entry_key = (sym["section"].astype(_U64) << _U64(32)) | sym["value"]
            by_key = np.argsort(entry_key, kind="stable")
            sorted_key = entry_key[by_key]
            offset = ks.address[held] - self.section_base[sec]
            key = (sec.astype(_U64) << _U64(32)) | offset
            lo = np.searchsorted(sorted_key, key, side="left")
            hi = np.searchsorted(sorted_key, key, side="right")
            single = (hi - lo) == 1
            cand = by_key[np.minimum(lo, len(by_key) - 1)]
            same = np.zeros(len(held), dtype=bool)
            same[single] = _same_names(ks, held[single], syms, cand[single])
            self.line_entry[held[same]] = cand[same]
            for k in np.flatnonzero((hi - lo) > 1).tolist():   # aliases at one address
                name = ks.name_bytes(int(held[k]))
                for j in by_key[lo[k]:hi[k]].tolist():
                    if syms.raw_string(int(sym["name"][j])) == name:
                        self.line_entry[held[k]] = j
                        break
        self.line_how[self.line_entry >= 0] = LINE_SYMBOL
        _count(self)

    _build_extents = Placement._build_extents
    extent_of = Placement.extent_of


def _match_names(text, name_start: np.ndarray, name_end: np.ndarray, strings,
                 group_start: np.ndarray, group_length: np.ndarray) -> np.ndarray:
    """For each name ``text[name_start:name_end]``, the index of the equal one
    among the distinct names ``strings[group_start:+group_length]``, or -1."""
    length = (name_end - name_start).astype(np.int64)
    group_hash = hash_spans(strings, group_start, group_length)
    order = np.argsort(group_hash, kind="stable")
    sorted_hash = group_hash[order]
    name_hash = hash_spans(text, name_start, length)
    at = np.minimum(np.searchsorted(sorted_hash, name_hash), max(len(order) - 1, 0))
    result = np.full(len(length), NO, dtype=np.int64)
    if not len(order):
        return result
    cand = order[at]
    hit = sorted_hash[at] == name_hash
    hit[hit] = equal_spans(text, name_start[hit], strings, group_start[cand[hit]],
                           length[hit], group_length[cand[hit]])
    result[hit] = cand[hit]
    # Two distinct names with one hash: try the others of that hash.
    collided = np.flatnonzero(~hit & (sorted_hash[at] == name_hash))
    for k in collided.tolist():
        j = int(at[k]) + 1
        while j < len(order) and sorted_hash[j] == name_hash[k]:
            g = int(order[j])
            if equal_spans(text, name_start[k:k + 1], strings, group_start[g:g + 1],
                           length[k:k + 1], group_length[g:g + 1])[0]:
                result[k] = g
                break
            j += 1
    return result


class SavedPlacement:
    """A placement read back from a snapshot (:mod:`kmodsyms.snapshot`):
    its stats and placed extents, with :meth:`extent_of`."""

    def __init__(self, stats: dict, extent_start, extent_end, extent_section):
        self.stats = PlacementStats(**stats)
        self.extent_start, self.extent_end = extent_start, extent_end
        self.extent_section = extent_section

    extent_of = Placement.extent_of


def _same_names(ks: Kallsyms, lines: np.ndarray, syms: SymsFile, entries: np.ndarray) -> np.ndarray:
    """Whether each kallsyms line's name equals its entry's (vectorised)."""
    if not len(lines):
        return np.zeros(0, dtype=bool)
    k_start = ks.name_start[lines]
    return equal_spans(ks.text, k_start, syms.strings,
                       syms.symbols["name"][entries].astype(np.int64),
                       ks.name_end[lines] - k_start, syms.name_lengths()[entries])


def _count(p) -> None:
    """Fill ``p.stats`` from a finished placement; every core line counts
    once: as a symbol of a section placed by some method, inside a placed
    section, ambiguous, or core kernel."""
    st, core, how = p.stats, p.core_lines, p.section_how
    st.sections_by_anchor = int((how == BY_ANCHOR).sum())
    st.sections_by_elimination = int((how == BY_ELIMINATION).sum())
    st.sections_by_neighbours = int((how == BY_NEIGHBOURS).sum())
    st.sections_unplaced = int((how == UNPLACED).sum())
    section = p.line_section[core]
    line_how = p.line_how[core]
    symbol = (line_how == LINE_SYMBOL) & (section >= 0)
    by = how[section[symbol]]
    st.core_lines = len(core)
    st.lines_by_anchor = int((by == BY_ANCHOR).sum())
    st.lines_by_elimination = int((by == BY_ELIMINATION).sum())
    st.lines_by_neighbours = int((by == BY_NEIGHBOURS).sum())
    st.lines_by_extent = int((line_how == LINE_EXTENT).sum())
    st.lines_ambiguous = int((line_how == LINE_AMBIGUOUS).sum())
    st.lines_core_unknown = int(((section < 0) & (line_how != LINE_AMBIGUOUS)).sum())


def place(syms: SymsFile, ks: Kallsyms, check_anchors: bool = True):
    """Place ``syms`` in the kernel whose symbols ``ks`` lists: from the
    recorded link addresses when the file has them, else by search."""
    if syms.has_layout:
        return LinkedPlacement(syms, ks, check_anchors)
    return Placement(syms, ks, check_anchors)
