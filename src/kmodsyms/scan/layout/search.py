"""Search placement: every object section of dtrace_syms placed in a kernel's
address space by its names alone, at build time against System.map (R6),
the result recorded as the file's link layout.

Placement works on *object sections* (an object's ``.text``, ``.data``...),
because once linked each occupies one contiguous interval of vmlinux.  Input:
a :class:`~kmodsyms.format.symsfile.SymsFile` and a symbol list of the kernel, as
:class:`~kmodsyms.scan.sysmap.Kallsyms` (``/proc/kallsyms``, or ``System.map``
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

The lines are then attributed by the library itself, over the tables with
this placement (:mod:`.attribute`, R62): this module places, nothing more.

docs/resolver.md states the rules in full: R9-R19 (placing), R38 (the
search's anchor check, at build time).
"""

from __future__ import annotations

import numpy as np

from kmodsyms.errors import StaleError
from kmodsyms.format.spans import equal_spans
from kmodsyms.format.symsfile import SymsFile
from kmodsyms.scan.elf.elfdefs import SHF_LINK_ORDER
from kmodsyms.scan.layout.names import _match_names
from kmodsyms.scan.layout.result import (
    BY_ANCHOR,
    BY_ELIMINATION,
    BY_NEIGHBOURS,
    MASK,
    NO,
    U64,
    UNPLACED,
    Placed,
    PlacementStats,
    Placer,
)
from kmodsyms.scan.sysmap import Kallsyms

# The search's anchor check (R38): the unique names that match must be this
# many at least, and at most this share of them may disagree on their
# section's base.
MIN_SEARCH_ANCHORS = 16


def majority_vote(sections: np.ndarray, bases: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """R11, the one majority vote (the library's kmsi_majority(), through
    the binding), per section of SECTIONS (one per vote) over BASES.
    Returns the sections that have a winner, their bases, and how many
    votes were not for the most voted base of their section."""
    from kmodsyms.binding import _kms
    order = np.argsort(sections, kind="stable")
    sections = sections[order]
    votes = np.ascontiguousarray(bases[order], dtype=U64)
    firsts = np.flatnonzero(np.diff(sections, prepend=sections[:1] - 1) != 0)
    won, winner, most = _kms.majority(votes, np.append(firsts, len(votes)).astype(U64))
    won = np.frombuffer(won, np.uint8).astype(bool)
    return (sections[firsts][won].astype(np.int64), np.frombuffer(winner, U64)[won],
            int(len(votes) - np.frombuffer(most, U64).sum()))


def conflicting_votes_allowed(anchors: int) -> int:
    """R38: how many anchors may disagree in a file of this kernel."""
    return max(8, anchors // 20)




class SearchPlacer(Placer):
    """Search placement of ``syms`` against ``ks`` (see the module doc);
    :meth:`result` is the :class:`~kmodsyms.scan.layout.result.Placement`."""

    def __init__(self, syms: SymsFile, ks: Kallsyms, check_anchors: bool = True,
                 output_sections: list[tuple[int, int]] = (), symbol_sizes=None):
        syms.check_sorted()   # equal names must be neighbours
        self.syms = syms
        self.ks = ks
        # vmlinux's output sections [start, end), when known (at build time):
        # the link-order rule holds within one.
        self.output_sections = list(output_sections)
        # symbol_sizes([(address, name)...]) -> the size of each in vmlinux's
        # symbol table (None where absent), when known (at build time): which
        # copy of a name a line can be.
        self.symbol_sizes = symbol_sizes
        self.stats = PlacementStats()
        self._place()
        if check_anchors:
            self._check_consistency()

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
        """The steps of docs/resolver.md §2 in their order (R9): anchors,
        elimination and shape, blocks in link order, then bracketed blocks
        by the core lines in no placed section; a section placed by one is
        never moved by a later one."""
        syms, ks = self.syms, self.ks
        self._name_groups()
        n_sections = len(syms.sections)
        self.section_base = np.zeros(n_sections, dtype=U64)
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
            chosen_sec, chosen_base, conflicting = majority_vote(sections, bases)
            self.section_base[chosen_sec] = chosen_base
            self.section_how[chosen_sec] = BY_ANCHOR
            self.stats.conflicting_anchors = conflicting
        self._eliminate()
        self._build_extents()
        core = self.core_lines
        if self._place_bare_blocks(ks.address[core[self.placed.extent_of(ks.address[core]) < 0]]):
            self._build_extents()

    def _eliminate(self) -> None:
        """Place sections whose names are all duplicated, until nothing changes:

        * elimination (R12): when one copy of a name is still unplaced and one of
          its kallsyms lines is still unmatched, they are the same symbol;
        * shape (R13): a section whose symbols, at their offsets, match free
          kallsyms lines at exactly one candidate base is placed there (the
          pattern of names and distances identifies it even when no name
          does);
        * then, when neither places anything: link-order blocks
          (:meth:`_forced_by_neighbours`) and same-named copies in link order
          (:meth:`_by_link_order`).
        """
        names = _DuplicateNames(self)
        changed = True
        while changed:
            changed = False
            candidates: dict[int, list] = {}
            for sec, entries in names.by_section.items():
                if self.section_how[sec] != UNPLACED:
                    continue
                if not names.changed_since_looked(sec):
                    if sec in names.last_candidates:
                        candidates[sec] = names.last_candidates[sec]
                    continue
                names.look(sec)
                if names.by_elimination(sec, entries) or names.by_shape(sec, entries, candidates):
                    changed = True
            if not changed:
                for sec, base in self._forced_by_neighbours(candidates):
                    names.place(sec, int(base), BY_NEIGHBOURS)
                    changed = True
            if not changed:
                for sec, base in self._by_link_order(names.unplaced_copies_of_names(), names.free_lines,
                                                     names.address, names.by_section, names.line_at,
                                                     names.group_lines):
                    if self.section_how[sec] == UNPLACED:
                        names.place(sec, base, BY_NEIGHBOURS)
                        changed = True

    def _by_link_order(self, copies: dict, free_lines: dict, address: list, by_section: dict,
                       line_at: dict, group_lines: dict) -> list[tuple[int, int]]:
        """Sections placed by link order (docs/resolver.md R16).

        ld lays out the input sections that one output-section statement
        gathers in the order of its input files, vmlinux.a's order (the
        objects table's), whether into vmlinux.o's same-named section first
        or straight into vmlinux.  So a name's unplaced copies in sections of
        one name, each of another object, take in link order that name's
        lines of one output section in address order.  With copies in
        sections of several names (one order per section name, interleaved
        as their objects are), a copy takes only a line of its own size
        (vmlinux's symbol table); the copies are placed when exactly one
        such assignment takes every free line of the name.  A section so
        placed must also have every other symbol on a free line of its
        name, where kallsyms shows that name.  Needs vmlinux's output
        sections (known at build time) and objects in link order."""
        if self.syms.meta_object_source != "vmlinux.a" or not self.output_sections:
            return []
        import bisect
        starts = [start for start, _end in self.output_sections]

        def output_section(addr: int) -> int:
            i = bisect.bisect_right(starts, addr) - 1
            return i if i >= 0 and addr < self.output_sections[i][1] else NO

        sections, symbols = self.syms.sections, self.syms.symbols
        decidable = {}
        for g, mine in copies.items():
            lines = sorted(free_lines[g], key=lambda line: address[line])
            if len(lines) != len(mine) or len(lines) < 2:
                continue
            if NO in {output_section(address[line]) for line in lines}:
                continue
            decidable[g] = (lines, mine)
        line_sizes = self._line_sizes([line for lines, _m in decidable.values() for line in lines])
        proposals: dict[int, int] = {}
        refused: set[int] = set()
        for g, (lines, mine) in decidable.items():
            by_name: dict[int, list[tuple[int, int]]] = {}      # section name -> (object, copy)
            for k, (_e, sec, _v) in enumerate(mine):
                by_name.setdefault(int(sections["name"][sec]), []).append((int(sections["object"][sec]), k))
            orders = [[k for _obj, k in sorted(group)] for group in by_name.values()]
            if any(len({int(sections["object"][mine[k][1]]) for k in order}) != len(order)
                   for order in orders):
                continue                                         # two copies in one object
            taken = _only_link_order_assignment(
                orders, [output_section(address[line]) for line in lines],
                [line_sizes.get(line) for line in lines],
                [int(symbols["size"][e]) for e, _sec, _v in mine])
            for line, k in zip(lines, taken or ()):
                _e, sec, v = mine[k]
                base = (address[line] - v) & MASK
                if proposals.setdefault(sec, base) != base:
                    refused.add(sec)
        forced = []
        for sec, base in proposals.items():
            if sec in refused:
                continue
            if all((base + v) & MASK in [address[line] for line in free_lines[g]]
                   for _e, g, v in by_section.get(sec, ()) if g in group_lines):
                forced.append((sec, base))
        return forced

    def _line_sizes(self, lines: list[int]) -> dict[int, int]:
        """The size of each of ``lines`` in vmlinux's symbol table, where
        known (``symbol_sizes``)."""
        if not lines or self.symbol_sizes is None:
            return {}
        sizes = self.symbol_sizes([(int(self.ks.address[line]), self.ks.name_bytes(line)) for line in lines])
        return {line: size for line, size in zip(lines, sizes) if size is not None}

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
        """Sections placed by their block (R14, R15; see :meth:`_block_offsets`).

        A block's placed sections each imply where the block starts; when they
        all agree, every other section of the block is placed from it.  A
        block with no placed section is placed when the candidate positions
        of its sections imply exactly one start.  A section whose candidate
        positions do not include its place in the block is left alone.
        Only used when the object order is vmlinux.a's link order.

        When vmlinux was linked straight from the objects (no vmlinux.o), an
        output-section statement such as ``*(.data .data.[0-9a-zA-Z_]*)``
        takes each object's sections of several names together, so a block
        is not contiguous; some block whose sections placed by anchors or
        elimination disagree on its start shows it (:meth:`_interleaved`).
        Then a section is placed only between two placed sections of its
        block that agree: ld puts it between them (link order), and the
        block's sections between them fill the distance exactly, leaving
        room for nothing else.
        """
        if self.syms.meta_object_source != "vmlinux.a":
            return []
        forced = []
        wrap = 1 << 64
        interleaved = self._interleaved()
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
                if interleaved:
                    todo = todo[(todo > placed[0]) & (todo < placed[-1])]
            elif interleaved:
                continue
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
                forced.append((sec, U64(pos)))
        return forced

    def _interleaved(self) -> bool:
        """Whether some block's sections placed by anchors or elimination
        imply different block starts: the final link then gathered input
        sections object by object, not the blocks of vmlinux.o (``ld -r``
        keeps each block contiguous, so there they always agree)."""
        wrap = 1 << 64
        for members, offsets in self._block_offsets().values():
            how = self.section_how[members]
            known = np.flatnonzero((how == BY_ANCHOR) | (how == BY_ELIMINATION)).tolist()
            if len({(int(self.section_base[members[k]]) - offsets[k]) % wrap for k in known}) > 1:
                return True
        return False

    def _place_bare_blocks(self, loose: np.ndarray) -> bool:
        """Place blocks that hold no symbol at all (R17, R18: ``__bug_table``,
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
        loose_enough = self.placed.extent_of(points) < 0
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
            end = points + U64(length)
            gap = nxt - end                      # wraps (huge) when next < end
            low_bit = nxt & (~nxt + U64(1))    # largest power of two dividing next
            fits = (points % U64(first_align) == 0) & (nxt >= end)
            # An exact end is preferred; else one rounded up to at most a
            # 64 KiB page (the largest PAGE_SIZE), as "__smp_locks_end" is.
            exact = fits & (gap == 0)
            ok = exact if exact.any() else fits & (gap < np.minimum(low_bit, U64(1 << 16)))
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
                self.section_base[sec] = U64((starts[0] + off) % (1 << 64))
                self.section_how[sec] = BY_NEIGHBOURS
            placed_any = True
        return placed_any

    def _name_affinity(self, block: str, address: int) -> int:
        """Longest run of characters shared by a block's name and a kallsyms
        name at ``address`` (``.smp_locks`` and ``__smp_locks``: 9)."""
        from difflib import SequenceMatcher
        lines = np.flatnonzero(self.ks.address == U64(address))
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
        if s.anchors < MIN_SEARCH_ANCHORS or s.conflicting_anchors > conflicting_votes_allowed(s.anchors):
            evidence = (f"{s.anchors} unique names match, {s.conflicting_anchors} of them disagree "
                        "about where their object was loaded")
            raise StaleError(f"{self.syms.source} does not match {self.ks.source}: {evidence}; "
                             "rebuild dtrace_syms for this kernel", evidence)

    def _build_extents(self) -> None:
        self.placed = Placed.of_sections(self.stats, self.syms, self.section_base, self.section_how)

    def unique_lines(self, line_entry: np.ndarray) -> np.ndarray:
        """The lines that are (``line_entry``, the attribution's, R21) a
        symbol whose name occurs once in the file and once among the core
        lines: what a layout's anchors are taken from (R6)."""
        unique = line_entry >= 0
        unique[unique] = self.group_count[self.entry_group[line_entry[unique]]] == 1
        lines = np.flatnonzero(unique)
        return lines[self.lines_per_group[self.entry_group[line_entry[lines]]] == 1]


class _DuplicateNames:
    """The sections whose names are all duplicated, while they are placed
    (:meth:`SearchPlacer._eliminate`): which kallsyms lines of each name
    are still free, which copies are still unplaced, and when each name last
    changed, so that a section is looked at again only when one of its
    names changed (a line claimed, a copy placed) since it was last."""

    def __init__(self, placer: SearchPlacer):
        self.placer = placer
        ks, sym = placer.ks, placer.syms.symbols
        dup = np.flatnonzero(((placer.group_count > 1) | (placer.lines_per_group > 1))
                             & (placer.lines_per_group > 0))
        self.dup = dup.tolist()
        is_dup = np.zeros(len(placer.group_start), dtype=bool)
        is_dup[dup] = True
        lines = placer.core_lines[placer.line_group[placer.core_lines] >= 0]
        lines = lines[is_dup[placer.line_group[lines]]]
        self.address = ks.address.tolist()
        self.free_lines: dict[int, set[int]] = {}        # name -> its unmatched lines
        self.line_at: dict[tuple[int, int], int] = {}    # (name, address) -> line
        for line, g in zip(lines.tolist(), placer.line_group[lines].tolist()):
            self.free_lines.setdefault(g, set()).add(line)
            self.line_at[(g, self.address[line])] = line
        # The same lines as arrays, per name sorted by address, for scoring.
        self.free = np.ones(len(ks), dtype=bool)
        by_group = lines[np.lexsort((ks.address[lines], placer.line_group[lines]))]
        cuts = np.flatnonzero(np.diff(placer.line_group[by_group])) + 1
        self.group_lines = {int(placer.line_group[chunk[0]]): chunk for chunk in np.split(by_group, cuts)
                            if len(chunk)}
        self.group_address = {g: ks.address[chunk] for g, chunk in self.group_lines.items()}
        dup_entries = np.flatnonzero(is_dup[placer.entry_group])
        self.by_section: dict[int, list[tuple[int, int, int]]] = {}   # (entry, name, value)
        for e, sec, g, v in zip(dup_entries.tolist(), sym["section"][dup_entries].tolist(),
                                placer.entry_group[dup_entries].tolist(),
                                sym["value"][dup_entries].tolist()):
            self.by_section.setdefault(sec, []).append((e, g, v))
        self.copies: dict[int, list[tuple[int, int, int]]] = {}        # (entry, section, value)
        self.unplaced_copies = dict.fromkeys(self.dup, 0)
        how = placer.section_how
        for sec, entries in self.by_section.items():
            for e, g, v in entries:
                self.copies.setdefault(g, []).append((e, sec, v))
                if how[sec] == UNPLACED:
                    self.unplaced_copies[g] += 1
        self.clock = 1
        self.changed_at = dict.fromkeys(self.dup, 1)   # name -> clock of its last change
        self.looked_at: dict[int, int] = {}             # section -> clock when last looked at
        self.last_candidates: dict[int, list] = {}      # section -> its candidate bases then
        for sec in self.by_section:
            if how[sec] != UNPLACED:
                self.claim(sec, int(placer.section_base[sec]))

    # ------------------------------------------------------------ the steps
    def changed_since_looked(self, sec: int) -> bool:
        seen = self.looked_at.get(sec)
        return seen is None or any(self.changed_at[g] > seen for _e, g, _v in self.by_section[sec])

    def look(self, sec: int) -> None:
        self.looked_at[sec] = self.clock
        self.last_candidates.pop(sec, None)

    def by_elimination(self, sec: int, entries: list) -> bool:
        """The last unplaced copy of a name and its last free line."""
        for _e, g, v in entries:
            if self.unplaced_copies[g] == 1 and len(self.free_lines[g]) == 1:
                self.place(sec, self.address[next(iter(self.free_lines[g]))] - v, BY_ELIMINATION)
                return True
        return False

    def by_shape(self, sec: int, entries: list, candidates: dict) -> bool:
        """Every free line of the section's rarest name tried as its anchor:
        placed where the most of its symbols find their lines, when that is
        one base and two symbols at least; else the best bases are its
        candidates (for the link-order steps)."""
        _pe, pivot_group, pivot_value = min(entries, key=lambda t: len(self.free_lines[t[1]]))
        if not self.free_lines[pivot_group]:
            return False
        pivot_lines = self.group_lines[pivot_group]
        bases = self.placer.ks.address[pivot_lines[self.free[pivot_lines]]] - U64(pivot_value)
        score = np.zeros(len(bases), dtype=np.int64)
        for _e, g, v in entries:
            score += self.free_hits(g, bases + U64(v))
        best = int(score.max())
        if best >= 2 and (score == best).sum() == 1:
            self.place(sec, int(bases[int(score.argmax())]), BY_ELIMINATION)
            return True
        if best >= 1:
            candidates[sec] = self.last_candidates[sec] = bases[score == best].tolist()
        return False

    def unplaced_copies_of_names(self) -> dict[int, list[tuple[int, int, int]]]:
        """Each name with more than one unplaced copy: those copies."""
        how = self.placer.section_how
        return {g: [(e, sec, v) for e, sec, v in self.copies[g] if how[sec] == UNPLACED]
                for g in self.dup if self.unplaced_copies[g] > 1}

    # ---------------------------------------------------------- bookkeeping
    def free_hits(self, g: int, targets: np.ndarray) -> np.ndarray:
        """Which ``targets`` addresses hold a free line called ``g``."""
        addrs = self.group_address[g]
        i = np.minimum(np.searchsorted(addrs, targets), len(addrs) - 1)
        return (addrs[i] == targets) & self.free[self.group_lines[g][i]]

    def claim(self, sec: int, base: int) -> None:
        """The lines that the symbols of placed ``sec`` are: no longer free."""
        for _e, g, v in self.by_section.get(sec, ()):
            line = self.line_at.get((g, (base + v) & MASK))
            if line is not None:
                self.free_lines[g].discard(line)
                self.free[line] = False
                self.changed_at[g] = self.clock

    def place(self, sec: int, base: int, method: int) -> None:
        self.clock += 1
        self.placer.section_base[sec] = U64(base & MASK)
        self.placer.section_how[sec] = method
        for _e, g, _v in self.by_section.get(sec, ()):
            self.unplaced_copies[g] -= 1
            self.changed_at[g] = self.clock
        self.claim(sec, base)


# How many partial assignments _only_link_order_assignment tries at most
# before it gives up (a name of many copies in sections of many names).
LINK_ORDER_STEPS = 100_000


def _only_link_order_assignment(orders: list[list[int]], line_sections: list[int],
                                line_sizes: list, copy_sizes: list[int]) -> list[int] | None:
    """The copy each line (in address order) is, when exactly one assignment
    fits ld's rule, else None.  ``orders``: per section name, its copies in
    link order, which take lines in address order, all in one output section
    (``line_sections``); a copy takes only a line of its size, where the
    line's is known (``line_sizes``, None where not).  A depth-first search
    over the lines, each taken by the next copy of one order."""
    n = len(line_sections)
    next_of = [0] * len(orders)                    # per order: its next copy
    section_of: list[int | None] = [None] * len(orders)
    chosen: list[tuple[int, int | None]] = []      # per line so far: (order, its section before)
    taken: list[int] = []                          # per line so far: the copy
    found = None
    steps = 0
    o = 0                                          # the next order to try for line len(chosen)
    while True:
        i = len(chosen)
        if i == n:
            if found is not None:
                return None                        # two assignments fit
            found = list(taken)
            o = len(orders)
        while o < len(orders):
            steps += 1
            if steps > LINK_ORDER_STEPS:
                return None
            if next_of[o] < len(orders[o]):
                k = orders[o][next_of[o]]
                if (line_sizes[i] is None or line_sizes[i] == copy_sizes[k]) \
                        and section_of[o] in (None, line_sections[i]):
                    break
            o += 1
        if o < len(orders):
            chosen.append((o, section_of[o]))
            section_of[o] = line_sections[i]
            taken.append(orders[o][next_of[o]])
            next_of[o] += 1
            o = 0
            continue
        if not chosen:
            return found
        o, before = chosen.pop()
        section_of[o] = before
        next_of[o] -= 1
        taken.pop()
        o += 1


def _letter_compatible(letters: np.ndarray, bindings: np.ndarray) -> np.ndarray:
    """Whether kallsyms type letters agree with ELF bindings (R10): weak symbols
    print as W/V (w/v), other globals upper case, locals lower case.  'A'/'a'
    (per-cpu data printed as absolute) and '?' say nothing."""
    letters = np.asarray(letters)
    weak_letter = np.isin(letters, np.frombuffer(b"WwVv", dtype=np.uint8))
    upper = (letters >= 65) & (letters <= 90)
    wildcard = np.isin(letters, np.frombuffer(b"Aa?", dtype=np.uint8))
    ok = np.where(bindings == 2, weak_letter,
                  ~weak_letter & np.where(bindings == 1, upper, ~upper))
    return ok | wildcard
