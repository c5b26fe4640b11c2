"""A small reader for the ``ar`` archives kbuild links vmlinux from.

Kernels since 6.1 collect every object of vmlinux, in link order, in the thin
archive ``vmlinux.a``; since 4.13 each directory has a thin ``built-in.a``.
A thin archive (``!<thin>\\n``) stores member *paths*, relative to the
archive's own directory, instead of member contents.  Only member names are
read here; nested thin archives are expanded in place.

The final link takes a few objects beside them (scripts/link-vmlinux.sh):
:func:`final_link_objects`.
"""

from __future__ import annotations

import glob
import os
import re

from kmodsyms.errors import KmodsymsError

THIN_MAGIC = b"!<thin>\n"
ARCH_MAGIC = b"!<arch>\n"
_HEADER_SIZE = 60
_LONG_NAME_REF = re.compile(rb"/(\d+)")


def archive_members(path: str, _depth: int = 0) -> list[str]:
    """Member paths of the archive at ``path``, as written in it (relative to
    the archive's directory for a thin archive), nested thin archives
    expanded.  Raises KmodsymsError when the file is not a readable archive."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise KmodsymsError(f"cannot read archive {path}: {e.strerror}") from None
    magic = data[:8]
    if magic not in (THIN_MAGIC, ARCH_MAGIC):
        raise KmodsymsError(f"{path}: not an ar archive (bad magic {magic!r})")
    thin = magic == THIN_MAGIC
    base = os.path.dirname(path)
    long_names = b""
    members: list[str] = []
    pos = 8
    while pos < len(data):
        if data[pos:pos + 1] == b"\n":  # members are 2-aligned; padding byte
            pos += 1
            continue
        header = data[pos:pos + _HEADER_SIZE]
        if len(header) < _HEADER_SIZE or header[58:60] != b"`\n":
            raise KmodsymsError(f"{path}: corrupt archive member header at byte {pos}")
        raw_name = header[:16].rstrip(b" ")
        try:
            size = int(header[48:58].strip() or b"0")
        except ValueError:
            raise KmodsymsError(f"{path}: corrupt member size at byte {pos}") from None
        body_start = pos + _HEADER_SIZE
        if raw_name in (b"/", b"/SYM64/"):          # symbol index: always stored
            pos = body_start + size
            continue
        if raw_name == b"//":                         # GNU long-name table
            long_names = data[body_start:body_start + size]
            pos = body_start + size
            continue
        long_ref = _LONG_NAME_REF.match(raw_name)
        if long_ref:
            # "/OFFSET" into the long-name table.  GNU ar may write more after
            # the number in the 16-byte field (seen: "/7015          /").
            start = int(long_ref.group(1))
            end = long_names.find(b"\n", start)
            if start >= len(long_names) or end < 0:
                raise KmodsymsError(f"{path}: member name offset {start} outside the name table")
            name = long_names[start:end]
        else:
            name = raw_name
        name = name.rstrip(b"/").decode("utf-8", "surrogateescape")
        # A thin archive stores no member contents, a regular one does.
        pos = body_start if thin else body_start + size
        if thin and name.endswith(".a") and _depth < 8:
            nested = os.path.join(base, name)
            prefix = os.path.dirname(name)
            members.extend(os.path.normpath(os.path.join(prefix, m))
                           for m in archive_members(nested, _depth + 1))
        else:
            members.append(name)
    return members


def vmlinux_objects(kbuild: str) -> tuple[list[str], str]:
    """The objects linked into vmlinux, relative to the build tree, and where
    the list came from: ``vmlinux.a`` (6.1+), else the per-directory
    ``built-in.a`` thin archives (4.13+)."""
    vmlinux_a = os.path.join(kbuild, "vmlinux.a")
    if os.path.exists(vmlinux_a):
        return _unique(archive_members(vmlinux_a)), "vmlinux.a"
    tops = []
    if os.path.exists(os.path.join(kbuild, "built-in.a")):
        tops = ["built-in.a"]
    else:
        for entry in sorted(os.listdir(kbuild)):
            if os.path.exists(os.path.join(kbuild, entry, "built-in.a")):
                tops.append(os.path.join(entry, "built-in.a"))
        arch = os.path.join(kbuild, "arch")
        if os.path.isdir(arch):
            for entry in sorted(os.listdir(arch)):
                if os.path.exists(os.path.join(arch, entry, "built-in.a")):
                    tops.append(os.path.join("arch", entry, "built-in.a"))
    if not tops:
        raise KmodsymsError(
            f"{kbuild}: no vmlinux.a or built-in.a: is this a kernel build tree (run 'make' first)?")
    objects: list[str] = []
    for top in tops:
        prefix = os.path.dirname(top)
        objects.extend(os.path.normpath(os.path.join(prefix, m))
                       for m in archive_members(os.path.join(kbuild, top)))
    return _unique([o for o in objects if o.endswith(".o")]), "built-in.a"


def _unique(paths: list[str]) -> list[str]:
    return list(dict.fromkeys(paths))


def final_link_objects(kbuild: str) -> list[str]:
    """The objects scripts/link-vmlinux.sh links after vmlinux.a (or
    vmlinux.o), in its order: ``.vmlinux.export.o`` (CONFIG_MODULES: the
    ``__ksymtab_*`` entries modpost writes), ``init/version-timestamp.o``
    (``linux_banner``, ``init_uts_ns``) and the kallsyms tables of its last
    pass (CONFIG_KALLSYMS: ``.tmp_vmlinuxN.kallsyms.o`` since 6.12,
    ``.tmp_vmlinux.kallsymsN.o`` before).  Those the tree has, relative to
    it; the configuration (include/config/auto.conf, when there) decides
    as the script does, so that one left by another configuration is not
    taken."""
    config = _auto_conf(kbuild)
    wanted = lambda option: config is None or option in config  # noqa: E731
    out = []
    if wanted("CONFIG_MODULES"):
        out.append(".vmlinux.export.o")
    out.append(os.path.join("init", "version-timestamp.o"))
    out = [o for o in out if os.path.isfile(os.path.join(kbuild, o))]
    if wanted("CONFIG_KALLSYMS"):
        passes = glob.glob(os.path.join(glob.escape(kbuild), ".tmp_vmlinux*kallsyms*.o"))
        numbered = [(int(m.group(1) or m.group(2)), path) for path in passes
                    if (m := re.search(r"/\.tmp_vmlinux(?:(\d+)\.kallsyms|\.kallsyms(\d+))\.o$", path))]
        # The last pass linked is the newest file (a later build's shorter
        # run leaves an older one's extra pass behind); pass 0, the empty
        # tables of 6.12's first link, never reaches vmlinux.
        linked = [(os.stat(path).st_mtime_ns, n, path) for n, path in numbered if n > 0]
        if linked:
            out.append(os.path.relpath(max(linked)[2], kbuild))
    return out


def _auto_conf(kbuild: str) -> set[str] | None:
    """The options include/config/auto.conf sets to y, or None without it."""
    try:
        with open(os.path.join(kbuild, "include", "config", "auto.conf"), encoding="utf-8",
                  errors="surrogateescape") as f:
            return {line.split("=", 1)[0] for line in f if line.rstrip().endswith("=y")}
    except OSError:
        return None
