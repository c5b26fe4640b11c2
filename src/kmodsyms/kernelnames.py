"""How the kernel names modules in kallsyms, /proc/modules and sysfs.

Plain Python: the run-time path (:mod:`kmodsyms.binding`, the CLI) imports it,
and no numpy.
"""

from __future__ import annotations


def kernel_spelling(module: str) -> str:
    """A module name as the kernel spells it: dashes are underscores
    (``amd-uncore`` -> ``amd_uncore``), in /proc/modules, kallsyms and sysfs."""
    return module.replace("-", "_")

