"""Place every object section of dtrace_syms in a kernel's address space.

Placement works on *object sections* (an object's ``.text``, ``.data``...),
because once linked each occupies one contiguous interval of vmlinux.  Input:
a :class:`~kmodsyms.format.symsfile.SymsFile` and a symbol list of the kernel, as
:class:`~kmodsyms.build.kallsyms.Kallsyms` (``/proc/kallsyms``, or ``System.map``
at build time).  The strategies, each in its module, all yield the result
type declared once in :mod:`.result`:

* :mod:`.search` — by names alone (files without a layout; the build, which
  records its result as the layout);
* :mod:`.linked` — from the link addresses the build recorded;
* :mod:`.saved` — what a snapshot kept (extents and stats only).

docs/resolver.md states the rules in full.
"""

from __future__ import annotations

from ..kallsyms import Kallsyms
from ...format.symsfile import SymsFile
from .linked import LinkedPlacer
from .result import NO, Placed, Placement, PlacementStats
from .saved import saved_placement
from .search import SearchPlacer

__all__ = ["NO", "Placed", "Placement", "PlacementStats", "SearchPlacer", "LinkedPlacer",
           "place", "saved_placement"]


def place(syms: SymsFile, ks: Kallsyms, check_anchors: bool = True) -> Placement:
    """Place ``syms`` in the kernel whose symbols ``ks`` lists: from the
    recorded link addresses when the file has them, else by search."""
    placer = LinkedPlacer if syms.has_layout else SearchPlacer
    return placer(syms, ks, check_anchors).result()
