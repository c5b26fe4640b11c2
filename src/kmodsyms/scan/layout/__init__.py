"""Place every object section of dtrace_syms in a kernel's address space.

Placement works on *object sections* (an object's ``.text``, ``.data``...),
because once linked each occupies one contiguous interval of vmlinux.  Input:
a :class:`~kmodsyms.symsfile.SymsFile` and a symbol list of the kernel, as
:class:`~kmodsyms.kallsyms.Kallsyms` (``/proc/kallsyms``, or ``System.map``
at build time).  The strategies, each in its module, all yield the result
type declared once in :mod:`.result`:

* :mod:`.search` — by names alone, against System.map: the build
  records its result as the file's link layout, which libkmodsyms then
  shifts into the running kernel.

docs/resolver.md states the rules in full.
"""

from __future__ import annotations

from kmodsyms.scan.layout.result import NO, Placed, PlacementStats
from kmodsyms.scan.layout.search import SearchPlacer

__all__ = ["NO", "Placed", "PlacementStats", "SearchPlacer"]
