"""Derive modules_thick.builtin from a kbuild tree's ``.cmd`` files.

Upstream kernels do not write modules_thick.builtin, but kbuild compiles
every object with ``-DKBUILD_MODFILE='"dir/mod"'`` (Rust objects:
``RUST_MODFILE=dir/mod``) naming the module(s) it is linked into, several
space-separated when an object is shared by several modules.  kbuild gives
*every* object a modfile (``drivers/base/core.o`` gets ``drivers/base/core``),
so a modfile counts only if ``modules.builtin`` lists it as a built-in module.
"""

from __future__ import annotations

import os
import re

from kmodsyms.errors import KmodsymsError
from kmodsyms.scan.elf.archive import vmlinux_objects
from kmodsyms.scan.modmap.thick import ThickMap, module_name

_MODFILE = re.compile(r"""KBUILD_MODFILE=\\?['"]*\\?"?([^"'\\]+)|RUST_MODFILE=([^\s'"]+)""")


def read_modules_builtin(directory: str, advice: str = "is this a kernel build tree after 'make'?") -> list[str]:
    """Built-in module paths (``fs/ext4/ext4.o``) in ``modules.builtin`` order,
    from a build tree or an installed kernel's modules directory (whose
    lines start ``kernel/``); ADVICE says what to give when it is unreadable."""
    path = os.path.join(directory, "modules.builtin")
    try:
        with open(path) as f:
            lines = f.read().split()
    except OSError as e:
        raise KmodsymsError(f"cannot read {path}: {e.strerror}; {advice}") from None
    modules = []
    for line in lines:
        line = line[len("kernel/"):] if line.startswith("kernel/") else line
        modules.append((line[:-3] if line.endswith(".ko") else line) + ".o")
    return modules


def cmd_modfiles(kbuild: str, obj: str) -> list[str]:
    """The modfiles (``dir/mod``) the object's ``.cmd`` file names."""
    directory, base = os.path.split(obj)
    path = os.path.join(kbuild, directory, f".{base}.cmd")
    try:
        with open(path, "rb") as f:
            first = f.readline(1 << 20).decode("utf-8", "surrogateescape")
    except OSError:
        return []
    found = _MODFILE.search(first)
    if not found:
        return []
    return (found.group(1) or found.group(2)).split()


def derive_thick(kbuild: str) -> ThickMap:
    """Build the module map of ``kbuild`` from modules.builtin and .cmd files:
    module lines in modules.builtin order, objects in link order."""
    builtin = read_modules_builtin(kbuild)
    wanted = set(builtin)
    objects, _source = vmlinux_objects(kbuild)
    members: dict[str, list[str]] = {m: [] for m in builtin}
    for obj in objects:
        for modfile in cmd_modfiles(kbuild, obj):
            module = modfile + ".o"
            if module in wanted and obj not in members[module]:
                members[module].append(obj)
    thick = ThickMap()
    for module in builtin:
        objs = members[module]
        if not objs:
            continue  # no object of vmlinux claims it (e.g. a stale modules.builtin)
        thick.modules.append(module_name(module))
        thick.module_paths.append(module)
        thick.objects.append(objs)
    return thick
