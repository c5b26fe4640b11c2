"""Choose the module map (which objects make up each built-in module) of a
kernel build tree, the same way for every command that needs one.

Order: an explicit file (``--thick``), ``DIR/modules_thick.builtin``
(Oracle/UEK trees), ``DIR/modules.builtin.objs`` (upstream's short-lived
name), else derived from kbuild's ``.cmd`` files (``KBUILD_MODFILE``); or,
given the kernel's source (``--source``), evaluated from its Makefiles
against ``DIR/.config`` (:mod:`kmodsyms.scan.modmap.makeeval`), for a tree without
``.cmd`` files.
"""

from __future__ import annotations

import os
from typing import Optional, Tuple

from kmodsyms.scan.modmap.thick import ThickMap, read_thick

DERIVED = "derived from .cmd files (KBUILD_MODFILE)"
EVALUATED = "evaluated from kbuild's Makefiles"


def choose_module_map(kbuild: str, thick: Optional[str] = None,
                      source: Optional[str] = None) -> Tuple[ThickMap, str]:
    """The module map of ``kbuild`` and a description of where it came from
    (a path, :data:`DERIVED`, or :data:`EVALUATED` and the source)."""
    if source:
        from kmodsyms.scan.elf.archive import vmlinux_objects
        from kmodsyms.scan.modmap.kbuild import read_modules_builtin
        from kmodsyms.scan.modmap.makeeval import evaluate, thick_from_eval
        result = evaluate(source, os.path.join(kbuild, ".config"))
        objects, _ = vmlinux_objects(kbuild)
        return (thick_from_eval(result, read_modules_builtin(kbuild), objects),
                f"{EVALUATED} ({os.path.basename(os.path.normpath(source))})")
    if thick:
        return read_thick(thick), thick
    for name in ("modules_thick.builtin", "modules.builtin.objs"):
        path = os.path.join(kbuild, name)
        if os.path.exists(path):
            return read_thick(path), path
    from kmodsyms.scan.modmap.kbuild import derive_thick
    return derive_thick(kbuild), DERIVED
