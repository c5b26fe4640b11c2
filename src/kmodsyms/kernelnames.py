"""How the kernel names modules in kallsyms, /proc/modules and sysfs.

Plain Python: the run-time path (:mod:`kmodsyms.binding`, the CLI) imports it,
and no numpy.
"""

from __future__ import annotations


def kernel_spelling(module: str) -> str:
    """A module name as the kernel spells it: dashes are underscores
    (``amd-uncore`` -> ``amd_uncore``), in /proc/modules, kallsyms and sysfs."""
    return module.replace("-", "_")



# The identifiers GCC predefines to 1 for every Linux target outside strict
# ISO C (the kernel builds with -std=gnu11): a module's name pasted as a
# token, as 7.x's __initcall_id() pastes __KBUILD_MODNAME, becomes that.
GNU_C_PREDEFINED = {"linux": "1", "unix": "1"}


def name_token(module: str) -> str:
    """A module's name as the C preprocessor leaves it when kbuild's
    ``__KBUILD_MODNAME`` token is pasted into a name (``unix`` -> ``1``:
    ``__initcall__kmod_1__...`` of net/unix/af_unix.o on 7.x)."""
    return GNU_C_PREDEFINED.get(module, module)
