"""How the kernel names modules in kallsyms, /proc/modules and sysfs.

Plain Python (no numpy): the kallsyms reader (:mod:`kmodsyms.build.kallsyms`)
and the quick ``resolve`` path from a snapshot (:mod:`kmodsyms.quick`) both
read it, and the quick path imports neither numpy nor the reader.
"""

from __future__ import annotations


def kernel_spelling(module: str) -> str:
    """A module name as the kernel spells it: dashes are underscores
    (``amd-uncore`` -> ``amd_uncore``), in /proc/modules, kallsyms and sysfs."""
    return module.replace("-", "_")


def is_pseudo_module(name: str) -> bool:
    """True for the kernel's pseudo-modules in kallsyms' ``[MOD]`` tags:
    ``bpf``, ``__builtin__ftrace``, ``__builtin__kprobes``... (BPF programs,
    ftrace and kprobe trampolines: no module file behind them)."""
    return name == "bpf" or name.startswith("__builtin__")
