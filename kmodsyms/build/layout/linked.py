"""Placement from the link addresses ``kmodsyms build`` recorded
(docs/format.md "Placing symbols with the layout"; docs/resolver.md §3, §8):
one KASLR shift per load segment from its anchor symbols, the staleness
rules that refuse a file of another kernel or a damaged kallsyms, then each
line attributed by address and name."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..elfdefs import STT_FUNC
from ...errors import KmodsymsError, StaleError
from ..kallsyms import Kallsyms
from ...format.spans import hash_spans
from ...format.symsfile import NO_ADDRESS, SymsFile
from .names import _same_names
from .result import (LINE_AMBIGUOUS, LINE_EXTENT, LINE_SYMBOL, MASK, NO, U64, UNPLACED, Placed,
                     Placer, PlacementStats, count_lines)

# Linked placement: in a kallsyms of the kernel the file was built for, every
# anchor it shows is exactly at its link address plus its segment's shift,
# and KASLR shifts by whole pages (in practice by more: 2 MiB on x86_64,
# 64 KiB on arm64).  So one anchor elsewhere, or a shift that is not a
# multiple of the smallest page, means another kernel: a rebuild that grew
# one function moves everything after it by a few bytes.
MISPLACED_ANCHORS_ALLOWED = 0
SHIFT_ALIGNMENT = 4096


@dataclass
class AnchorCheck:
    """Tally of a linked placement's anchors, and the judgement on it.

    An anchor is *placed* (a core kallsyms line of its name at its link
    address plus its segment's shift), *misplaced* (lines of its name, none
    there) or *absent* (no line of its name).  Absent is no evidence against
    the file: a kernel without ``CONFIG_KALLSYMS_ALL`` lists only the text
    ranges, so its data anchors are absent.  But ``kmodsyms build`` takes
    function anchors only inside the text ranges, which every kallsyms
    lists (``scripts/kallsyms.c``), so an absent function anchor means
    kallsyms lacks lines it must have."""

    syms_source: str
    kallsyms_source: str
    verified: int = 0
    misplaced: int = 0
    absent: int = 0
    absent_functions: int = 0
    example_absent_function: str = ""

    def count(self, name: bytes, is_function: bool, present: bool, placed: bool) -> None:
        if placed:
            self.verified += 1
        elif present:
            self.misplaced += 1
        else:
            self.absent += 1
            if is_function:
                self.absent_functions += 1
                self.example_absent_function = self.example_absent_function or \
                    name.decode("utf-8", "backslashreplace")

    def judge(self) -> None:
        """Raise when the two files are not of one kernel: blame the file
        the evidence points at, in one line."""
        present = self.verified + self.misplaced
        if self.verified == 0 or self.misplaced > MISPLACED_ANCHORS_ALLOWED:
            raise StaleError(
                f"{self.syms_source} does not match {self.kallsyms_source}: of its "
                f"{present + self.absent} anchor symbols, {self.verified} are where its link "
                f"addresses say, {self.misplaced} elsewhere and {self.absent} absent; they are "
                "of different kernels: use the dtrace_syms built for the kernel whose kallsyms "
                "this is (or rebuild it)")
        if self.absent_functions:
            raise KmodsymsError(
                f"{self.kallsyms_source} lacks {self.absent_functions} function symbols that every "
                f"kallsyms of this kernel lists (such as {self.example_absent_function}), though the "
                f"{self.verified} it has are where {self.syms_source} says: it is truncated or "
                "filtered; read /proc/kallsyms again, whole and as root")



def _shift_between(starts: np.ndarray, shift: np.ndarray, known: np.ndarray) -> None:
    """A segment none of whose anchors kallsyms shows (the data of a
    text-only kernel) moves with the segments around it when the nearest
    below and above moved alike: KASLR moves the kernel image as one piece,
    and only a segment apart from it (x86's per-cpu data at 0) stays put, so
    a segment lying between two that moved by one amount moved by it too."""
    order = np.argsort(starts, kind="stable").tolist()
    for rank, seg in enumerate(order):
        if known[seg]:
            continue
        below = [s for s in order[:rank] if known[s]]
        above = [s for s in order[rank + 1:] if known[s]]
        if below and above and shift[below[-1]] == shift[above[0]]:
            shift[seg], known[seg] = shift[below[-1]], True


def _core_lines_named(ks: Kallsyms, names: list[bytes]) -> list[list[int]]:
    """The core kallsyms lines called each of ``names`` (few names, many
    lines): only lines of a length some name has are hashed."""
    found: list[list[int]] = [[] for _ in names]
    name_lengths = np.array([len(n) for n in names], dtype=np.int64)
    core = np.flatnonzero(ks.module == 0)
    length = (ks.name_end[core] - ks.name_start[core]).astype(np.int64)
    fits = np.isin(length, name_lengths)
    core, length = core[fits], length[fits]
    if not len(core) or not names:
        return found
    line_hash = hash_spans(ks.text, ks.name_start[core], length)
    starts = np.concatenate(([0], np.cumsum(name_lengths)[:-1]))
    name_hash = hash_spans(b"".join(names), starts, name_lengths)
    wanted: dict[int, list[int]] = {}
    for k, h in enumerate(name_hash.tolist()):
        wanted.setdefault(h, []).append(k)
    hit = np.isin(line_hash, name_hash)
    for line, h in zip(core[hit].tolist(), line_hash[hit].tolist()):
        for k in wanted[h]:
            if ks.name_bytes(line) == names[k]:
                found[k].append(line)
    return found
    line_hash = hash_spans(ks.text, ks.name_start[core], (ks.name_end[core] - ks.name_start[core]).astype(np.int64))
    joined = b"".join(names)
    starts = np.cumsum([0] + [len(n) for n in names[:-1]]).astype(np.int64)
    name_hash = hash_spans(joined, starts, np.array([len(n) for n in names], dtype=np.int64))
    wanted = {}
    for k, h in enumerate(name_hash.tolist()):
        wanted.setdefault(h, []).append(k)
    for line, h in zip(core[np.isin(line_hash, name_hash)].tolist(),
                       line_hash[np.isin(line_hash, name_hash)].tolist()):
        for k in wanted[h]:
            if ks.name_bytes(line) == names[k]:
                found[k].append(line)
    return found



class LinkedPlacer(Placer):
    """Placement from the link addresses ``kmodsyms build`` recorded.

    Each of vmlinux's load segments moves as a whole (KASLR), so one shift
    per segment places every section in it.  The shift comes from the
    segment's anchor symbols: the first one found by name in kallsyms gives
    it, and every anchor must then sit exactly at its link address plus the
    shift (the staleness check).  Lines are then attributed by address alone:
    the placed section holding the line, and the symbol entry at that offset
    of that section with that name.  Same results as the search
    (:class:`~kmodsyms.build.layout.search.SearchPlacer`).
    """

    def __init__(self, syms: SymsFile, ks: Kallsyms, check_anchors: bool = True):
        self.syms = syms
        self.ks = ks
        self.stats = PlacementStats()
        self.ambiguous: dict[int, list[int]] = {}
        self.core_lines = np.flatnonzero(ks.module == 0)
        self._shift_segments(check_anchors)
        self.placed = Placed.of_sections(self.stats, syms, self.section_base, self.section_how)
        self._attribute_lines()

    def _shift_segments(self, check: bool) -> None:
        """One KASLR shift per load segment, from its anchors (see
        :class:`AnchorCheck` for which files are refused)."""
        syms, ks = self.syms, self.ks
        sections, symbols = syms.sections, syms.symbols
        anchors = syms.anchors
        # An anchor in a section without a link address locates nothing.
        anchors = anchors[sections["address"][symbols["section"][anchors["symbol"]]] != U64(NO_ADDRESS)]
        entry = anchors["symbol"].astype(np.int64)
        link = sections["address"][symbols["section"][entry]] + symbols["value"][entry]  # wraps as ld's do
        names = [syms.raw_string(int(symbols["name"][e])) for e in entry.tolist()]
        lines_named = _core_lines_named(ks, names)
        n_segments = len(syms.segments)
        shift = np.zeros(n_segments, dtype=U64)
        known = np.zeros(n_segments, dtype=bool)
        check_result = AnchorCheck(syms.source, ks.source)
        for seg in range(n_segments):
            mine = np.flatnonzero(anchors["segment"] == seg).tolist()
            # Each present anchor votes for the shifts its lines imply; the
            # shift most anchors agree on is the segment's.
            votes: dict[int, int] = {}
            for k in mine:
                for s in {(int(ks.address[line]) - int(link[k])) & MASK for line in lines_named[k]}:
                    votes[s] = votes.get(s, 0) + 1
            if votes:
                best = max(votes.items(), key=lambda kv: (kv[1], -kv[0]))[0]
                # A shift by part of a page is no KASLR: every anchor of
                # the segment then counts as misplaced.
                if best % SHIFT_ALIGNMENT == 0:
                    shift[seg], known[seg] = U64(best), True
            for k in mine:
                at = (int(link[k]) + int(shift[seg])) & MASK
                check_result.count(names[k], int(symbols["type"][entry[k]]) == STT_FUNC,
                                   present=bool(lines_named[k]),
                                   placed=known[seg] and any(int(ks.address[line]) == at
                                                             for line in lines_named[k]))
        _shift_between(syms.segments["start"], shift, known)
        self.stats.anchors = check_result.verified
        self.stats.conflicting_anchors = check_result.misplaced
        if check:
            check_result.judge()
        # Each section moves with the segment holding its link address.
        address = sections["address"]
        has = address != U64(0xFFFFFFFFFFFFFFFF)
        seg_of = np.full(len(sections), NO, dtype=np.int64)
        for seg, (start, end) in enumerate(zip(syms.segments["start"], syms.segments["end"])):
            if known[seg]:
                seg_of[has & (address >= start) & (address <= end)] = seg
        self.section_how = np.where(seg_of >= 0, sections["placement"], UNPLACED).astype(np.int8)
        self.section_base = np.where(seg_of >= 0, address + shift[np.maximum(seg_of, 0)], U64(0))

    def _attribute_lines(self) -> None:
        syms, ks = self.syms, self.ks
        n = len(ks)
        core = self.core_lines
        self.line_entry = np.full(n, NO, dtype=np.int32)
        self.line_section = np.full(n, NO, dtype=np.int32)
        self.line_how = np.zeros(n, dtype=np.int8)
        inside = self.placed.extent_of(ks.address[core])
        held = core[inside >= 0]
        sec = inside[inside >= 0]
        self.line_section[held] = sec
        self.line_how[held] = LINE_EXTENT
        # The entry at (section, offset) with the line's name is the symbol.
        self._match_entries(held, sec)
        # A zero-size symbol at the very end of its (non-empty) section holds
        # no byte of it; where no other object's bytes are either, it is
        # still its own object's symbol (docs/resolver.md).
        loose = core[inside < 0]
        sections = syms.sections
        placed = np.flatnonzero((self.section_how != UNPLACED) & (sections["size"] > 0))
        end = self.section_base[placed] + sections["size"][placed]
        order = np.argsort(end, kind="stable")
        placed, end = placed[order], end[order]
        lo = np.searchsorted(end, ks.address[loose], side="left")
        hi = np.searchsorted(end, ks.address[loose], side="right")
        ending = np.flatnonzero(hi > lo)
        pairs = [(int(loose[k]), int(placed[j])) for k in ending.tolist()
                 for j in range(int(lo[k]), int(hi[k]))]
        if pairs:
            lines, secs = (np.array(column, dtype=np.int64) for column in zip(*pairs))
            self._match_entries(lines, secs)
            found = self.line_entry[loose] >= 0
            self.line_section[loose[found]] = syms.symbols["section"][self.line_entry[loose[found]]]
        self.line_how[self.line_entry >= 0] = LINE_SYMBOL
        self._find_ambiguous()
        count_lines(self.stats, self.section_how, self.core_lines, self.line_section, self.line_how)

    def _find_ambiguous(self) -> None:
        """A core line in no placed section, whose name only unplaced copies
        of some size carry, is one of them, but which one the file cannot
        say: ambiguous, with those copies as candidates (as in
        :class:`~kmodsyms.build.layout.search.SearchPlacer`).  It is never quietly core kernel."""
        syms, ks = self.syms, self.ks
        sym = syms.symbols
        candidates = np.flatnonzero((self.section_how[sym["section"]] == UNPLACED) & (sym["size"] > 0))
        if not len(candidates):
            return
        by_name: dict[bytes, list[int]] = {}
        for e in candidates.tolist():
            by_name.setdefault(syms.raw_string(int(sym["name"][e])), []).append(e)
        loose = self.core_lines[self.line_section[self.core_lines] < 0]
        for line, name in zip(loose.tolist(), ks.names_bytes(loose)):
            entries = by_name.get(name)
            if entries:
                self.ambiguous[line] = entries
                self.line_how[line] = LINE_AMBIGUOUS

    def _match_entries(self, lines: np.ndarray, secs: np.ndarray) -> None:
        """For each line (not yet matched) and a placed section that may hold
        it, the entry of that section at the line's offset with its name."""
        syms, ks = self.syms, self.ks
        sym = syms.symbols
        if not len(sym) or not len(lines) or int(sym["value"].max()) >= 1 << 32:
            return
        sorted_key, by_key = self._entry_keys()
        offset = ks.address[lines] - self.section_base[secs]
        key = (secs.astype(U64) << U64(32)) | offset
        lo = np.searchsorted(sorted_key, key, side="left")
        hi = np.searchsorted(sorted_key, key, side="right")
        todo = self.line_entry[lines] < 0
        single = todo & ((hi - lo) == 1)
        cand = by_key[np.minimum(lo, len(by_key) - 1)]
        same = np.zeros(len(lines), dtype=bool)
        same[single] = _same_names(ks, lines[single], syms, cand[single])
        self.line_entry[lines[same]] = cand[same]
        for k in np.flatnonzero(todo & ((hi - lo) > 1)).tolist():   # aliases at one address
            name = ks.name_bytes(int(lines[k]))
            for j in by_key[lo[k]:hi[k]].tolist():
                if syms.raw_string(int(sym["name"][j])) == name:
                    self.line_entry[lines[k]] = j
                    break

    def _entry_keys(self) -> tuple[np.ndarray, np.ndarray]:
        """Every entry's (section << 32 | value), sorted, and the order."""
        keys = getattr(self, "_keys", None)
        if keys is None:
            sym = self.syms.symbols
            entry_key = (sym["section"].astype(U64) << U64(32)) | sym["value"]
            by_key = np.argsort(entry_key, kind="stable")
            keys = self._keys = (entry_key[by_key], by_key)
        return keys
