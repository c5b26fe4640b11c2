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

The strategies, each in its module, all yielding the result type declared
once in :mod:`.result`:

* :mod:`.search` — by names alone (files without a layout; the build);
* :mod:`.linked` — from the link addresses the build recorded;
* :mod:`.saved` — what a snapshot kept (extents and stats only).
"""

from __future__ import annotations

from ..kallsyms import Kallsyms
from ..symsfile import SymsFile
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
