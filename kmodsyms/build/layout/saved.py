"""A placement read back from a snapshot (:mod:`kmodsyms.snapshot`): its
stats and placed extents, nothing placed again."""

from __future__ import annotations

from .result import Placed, PlacementStats


def saved_placement(stats: dict, extent_start, extent_end, extent_section) -> Placed:
    return Placed(PlacementStats(**stats), extent_start, extent_end, extent_section)
