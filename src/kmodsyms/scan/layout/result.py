"""What the build-time placement (:mod:`.search`) yields.

:class:`Placed` is the placed extents and :meth:`Placed.extent_of`, which
the search asks as it goes; :class:`Placement` adds every section's base,
what the build records in dtrace_syms; :func:`count_lines` adds the lines'
attribution (:mod:`.attribute`) to the statistics.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from kmodsyms.format.fileformat import PLACEMENT_CODES
from kmodsyms.format.symsfile import SymsFile

NO = -1
U64 = np.uint64
MASK = (1 << 64) - 1      # addresses are modulo 2^64, as the linker's
# Placement methods, per object section: the codes dtrace_syms stores.
UNPLACED, BY_ANCHOR, BY_ELIMINATION, BY_NEIGHBOURS = (
    PLACEMENT_CODES[k] for k in ("UNPLACED", "BY_ANCHOR", "BY_ELIMINATION", "BY_NEIGHBOURS"))


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
    # Recorded with the rest in the file's placement statistics: False when
    # its module map is a guess (--debuginfo --guess-modules), ``degraded``
    # then saying what it was guessed from.
    builtin_modules_known: bool = True
    degraded: str = ""




@dataclass
class Placed:
    """The placed object sections (size > 0) by address, and how the lines
    got their objects."""

    stats: PlacementStats
    extent_start: np.ndarray     # uint64, sorted
    extent_end: np.ndarray       # uint64, exclusive
    extent_section: np.ndarray   # object section index of each extent

    @classmethod
    def of_sections(cls, stats: PlacementStats, syms: SymsFile, section_base: np.ndarray,
                    section_how: np.ndarray) -> "Placed":
        sec = syms.sections
        ok = np.flatnonzero((section_how != UNPLACED) & (sec["size"] > 0))
        base = section_base[ok]
        order = np.argsort(base, kind="stable")
        start = base[order]
        return cls(stats, start, start + sec["size"][ok[order]], ok[order])

    def extent_of(self, addresses) -> np.ndarray:
        """Object section (index) whose placed extent holds each address, or -1."""
        addresses = np.asarray(addresses, dtype=U64)
        if not len(self.extent_section):      # nothing placed (e.g. no symbols)
            return np.full(addresses.shape, NO, dtype=np.int64)
        i = np.searchsorted(self.extent_start, addresses, side="right") - 1
        ok = i >= 0
        ok[ok] = addresses[ok] < self.extent_end[i[ok]]
        return np.where(ok, self.extent_section[np.maximum(i, 0)], NO)


@dataclass
class Placement(Placed):
    """A whole placement: every object section's base and method;
    ``core_lines`` are the lines of no loadable module."""

    section_base: np.ndarray = field(default=None)   # uint64 per object section
    section_how: np.ndarray = field(default=None)    # UNPLACED, BY_*
    core_lines: np.ndarray = field(default=None)


class Placer:
    """What the search (:mod:`.search`) fills in as it places, and the
    :class:`Placement` it then yields."""

    stats: PlacementStats
    placed: Placed
    section_base: np.ndarray
    section_how: np.ndarray
    core_lines: np.ndarray

    def result(self) -> Placement:
        placed = self.placed
        return Placement(self.stats, placed.extent_start, placed.extent_end, placed.extent_section,
                         self.section_base, self.section_how, self.core_lines)


def count_lines(stats: PlacementStats, section_how: np.ndarray, core: np.ndarray,
                line_entry: np.ndarray, line_section: np.ndarray, ambiguous: np.ndarray) -> None:
    """Fill ``stats`` from a finished placement and the lines' attribution
    (:mod:`.attribute`); every core line counts once: as a symbol of a
    section placed by some method, inside a placed section (no symbol),
    ambiguous, or core kernel."""
    st, how = stats, section_how
    st.sections_by_anchor = int((how == BY_ANCHOR).sum())
    st.sections_by_elimination = int((how == BY_ELIMINATION).sum())
    st.sections_by_neighbours = int((how == BY_NEIGHBOURS).sum())
    st.sections_unplaced = int((how == UNPLACED).sum())
    section, entry, ambiguous = line_section[core], line_entry[core], ambiguous[core]
    by = how[section[(entry >= 0) & (section >= 0)]]
    st.core_lines = len(core)
    st.lines_by_anchor = int((by == BY_ANCHOR).sum())
    st.lines_by_elimination = int((by == BY_ELIMINATION).sum())
    st.lines_by_neighbours = int((by == BY_NEIGHBOURS).sum())
    st.lines_by_extent = int(((entry < 0) & (section >= 0)).sum())
    st.lines_ambiguous = int(ambiguous.sum())
    st.lines_core_unknown = int(((section < 0) & ~ambiguous).sum())
