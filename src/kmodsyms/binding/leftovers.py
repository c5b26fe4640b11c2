"""Removing what an earlier kmodsyms left behind: the snapshot cache
(``resolve-BOOTID-CRC`` files, each starting with ``KMSNAP``) that its
``kmodsyms resolve`` wrote under ``$XDG_CACHE_HOME/kmodsyms``,
``~/.cache/kmodsyms`` and, for root, ``/var/cache/kmodsyms``.  The run
time now writes nothing anywhere; each load deletes those files (and the
writers' temp files beside them), then the directory if that left it
empty.  Nothing else is touched, and nothing is created.
"""

from __future__ import annotations

import os

SNAPSHOT_PREFIX = "resolve-"
SNAPSHOT_MAGIC = b"KMSNAP"
TEMP_PREFIX = ".dtrace_syms."   # what the snapshot writer's temp files were called
SYSTEM_CACHE = "/var/cache/kmodsyms"


def snapshot_dirs() -> list[str]:
    """Where the snapshot cache was, by the rules it followed."""
    dirs = []
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    if os.path.isabs(xdg):
        dirs.append(os.path.join(xdg, "kmodsyms"))
    home = os.environ.get("HOME", "")
    if os.path.isabs(home):
        dirs.append(os.path.join(home, ".cache", "kmodsyms"))
    dirs.append(SYSTEM_CACHE)
    return dirs


def _is_snapshot(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(len(SNAPSHOT_MAGIC)) == SNAPSHOT_MAGIC
    except OSError:
        return False


def remove_snapshots() -> int:
    """Delete the old snapshot files (a missing or unwritable directory is
    left as it is); how many were deleted."""
    removed = 0
    for directory in snapshot_dirs():
        try:
            if os.path.islink(directory):
                continue
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            ours = (entry.name.startswith(SNAPSHOT_PREFIX) and _is_snapshot(entry.path)) or \
                entry.name.startswith(TEMP_PREFIX)
            if ours and entry.is_file(follow_symlinks=False):
                try:
                    os.unlink(entry.path)
                    removed += 1
                except OSError:
                    pass
        try:
            os.rmdir(directory)     # only when that emptied it
        except OSError:
            pass
    return removed
