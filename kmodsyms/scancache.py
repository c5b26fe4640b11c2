"""Cache of object scans between builds, next to the output file.

Keyed by the object's absolute path, size and mtime (nanoseconds), as make
decides staleness.  Stored with msgpack; an unreadable or foreign cache is
ignored (it is only a cache), and it is written atomically.
"""

from __future__ import annotations

import os

import msgpack

from .elfscan import ObjectScan

_FIELDS = ("sec_name", "sec_flags", "sec_align", "sec_size", "sym_name", "sym_value",
           "sym_size", "sym_info", "sym_section")
_VERSION = 1


class ScanCache:
    def __init__(self, path: str):
        self.path = path
        self.hits = 0
        self._old: dict = {}
        self._new: dict = {}
        try:
            with open(path, "rb") as f:
                blob = msgpack.unpackb(f.read(), raw=False, use_list=True,
                                       strict_map_key=False)
            if isinstance(blob, dict) and blob.get("version") == _VERSION:
                self._old = blob["objects"]
        except Exception:  # noqa: BLE001 - any damage just means a cold cache
            self._old = {}

    @staticmethod
    def _key(kbuild: str, obj: str) -> tuple[str, list[int]]:
        path = os.path.abspath(os.path.join(kbuild, obj))
        st = os.stat(path)
        return path, [st.st_size, st.st_mtime_ns]

    def get(self, kbuild: str, obj: str) -> ObjectScan | None:
        try:
            path, stamp = self._key(kbuild, obj)
        except OSError:
            return None
        entry = self._old.get(path)
        if not entry or entry[0] != stamp:
            return None
        try:
            scan = ObjectScan(*entry[1:])
        except TypeError:
            return None
        self._new[path] = entry
        self.hits += 1
        return scan

    def put(self, kbuild: str, obj: str, scan: ObjectScan) -> None:
        path, stamp = self._key(kbuild, obj)
        self._new[path] = [stamp] + [getattr(scan, f) for f in _FIELDS]

    def save(self) -> None:
        from .symsfile import write_atomic
        try:
            write_atomic(self.path, msgpack.packb({"version": _VERSION, "objects": self._new},
                                                  use_bin_type=True))
        except Exception:  # noqa: BLE001 - a cache that cannot be written is no error
            pass
