"""Read modules_thick.builtin / modules.builtin.objs: which objects make up
each built-in module.

The format (Oracle's ``modules_thick.builtin``, and upstream's short-lived
``modules.builtin.objs``) is one line per built-in module::

    fs/ext4/ext4.o: fs/ext4/balloc.o fs/ext4/bitmap.o ...
    arch/x86/kernel/msr.o:

A module path with nothing after the colon is a one-file module: the object
is the module.  An object may be listed under several modules; it then
belongs to all of them, in file order.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from kmodsyms.errors import KmodsymsError, shown
from kmodsyms.kernelnames import kernel_spelling


def module_name(path: str) -> str:
    """The kernel's spelling of a module name: base name without ``.o`` or
    ``.ko``, dashes turned into underscores (``amd-uncore.o`` -> ``amd_uncore``)."""
    base = os.path.basename(path)
    for suffix in (".ko", ".o"):
        if base.endswith(suffix):
            base = base[: -len(suffix)]
            break
    return kernel_spelling(base)


@dataclass
class ThickMap:
    """Built-in modules in file order and the objects of each."""

    modules: list[str] = field(default_factory=list)        # names, file order
    module_paths: list[str] = field(default_factory=list)   # e.g. fs/ext4/ext4.o
    objects: list[list[str]] = field(default_factory=list)  # per module

    @classmethod
    def from_members(cls, builtin: list[str], members: dict[str, list[str]]) -> "ThickMap":
        """The map of the module files ``builtin`` (modules.builtin order)
        that have members, each with its objects ``members[module]``."""
        thick = cls()
        for module in builtin:
            if members[module]:
                thick.modules.append(module_name(module))
                thick.module_paths.append(module)
                thick.objects.append(members[module])
        return thick

    def object_modules(self) -> dict[str, tuple[int, ...]]:
        """object path -> indices of the modules it belongs to, in file order."""
        owners: dict[str, list[int]] = {}
        for index, objs in enumerate(self.objects):
            for obj in objs:
                mods = owners.setdefault(obj, [])
                if index not in mods:
                    mods.append(index)
        return {obj: tuple(mods) for obj, mods in owners.items()}

    def format(self) -> str:
        """The map in modules_thick.builtin syntax."""
        lines = []
        for path, objs in zip(self.module_paths, self.objects):
            rest = "" if objs == [path] else " " + " ".join(objs)
            lines.append(f"{path}:{rest}\n")
        return "".join(lines)


def parse_thick(text: str, source: str = "modules_thick.builtin") -> ThickMap:
    """Parse modules_thick.builtin text; errors name ``source:line``."""
    thick = ThickMap()
    seen: dict[str, int] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        head, colon, rest = line.partition(":")
        head = head.strip()
        objs = rest.split()
        if not colon or not head or " " in head:
            raise KmodsymsError(
                f"{source}:{lineno}: expected 'dir/module.o: dir/a.o ...', got '{shown(line.strip()[:80])}'"
            )
        for path in [head, *objs]:
            if not path.endswith((".o", ".ko")):
                raise KmodsymsError(
                    f"{source}:{lineno}: '{shown(path)}' is not an object file (.o/.ko)"
                )
        if head.endswith(".ko"):
            head = head[:-3] + ".o"
        name = module_name(head)
        if name in seen:
            raise KmodsymsError(
                f"{source}:{lineno}: module {name} already listed on line {seen[name]}"
            )
        seen[name] = lineno
        thick.modules.append(name)
        thick.module_paths.append(head)
        thick.objects.append(objs or [head])
    return thick


def read_thick(path: str) -> ThickMap:
    """Read and parse a modules_thick.builtin (or modules.builtin.objs) file."""
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            text = f.read()
    except OSError as e:
        raise KmodsymsError(f"cannot read thick file {path}: {e.strerror}") from None
    return parse_thick(text, path)
