"""Cache of object scans between builds, next to the output file.

Keyed by the object's absolute path, size and mtime (nanoseconds), as make
decides staleness.  Stored with msgpack as two objects in a row: a small
head (the fingerprint of every input of the last build and what it wrote),
then the scans; a build whose inputs all match the head reuses the output
without reading the rest.  An unreadable or foreign cache is ignored (it is
only a cache), and it is written atomically.
"""

from __future__ import annotations

import os
from array import array

import msgpack

from kmodsyms.scan.elf.elfscan import ObjectScan

# ObjectScan's fields, stored as msgpack values: arrays as their bytes (in
# this machine's byte order: the cache never leaves it).
_FIELDS = ("sec_name", "sec_flags", "sec_align", "sec_size", "sym_names", "sym_value",
           "sym_size", "sym_info", "sym_section")
_ARRAYS = {"sec_flags": "Q", "sec_align": "Q", "sec_size": "Q", "sym_value": "Q",
           "sym_size": "Q", "sym_section": "I"}
_VERSION = 2


class ScanCache:
    def __init__(self, path: str):
        self.path = path
        self.hits = 0
        self.head: dict = {}
        self._old: dict | None = None
        self._new: dict = {}
        self._file = None
        try:
            self._file = open(path, "rb")
            self._unpacker = msgpack.Unpacker(self._file, raw=False, use_list=True,
                                              strict_map_key=False)
            head = next(self._unpacker)
            if isinstance(head, dict) and head.get("version") == _VERSION:
                self.head = head
        except Exception:  # noqa: BLE001 - any damage just means a cold cache
            self.head = {}

    def _scans(self) -> dict:
        """The cached scans, read on first use."""
        if self._old is None:
            self._old = {}
            if self.head:
                try:
                    objects = next(self._unpacker)
                    if isinstance(objects, dict):
                        self._old = objects
                except Exception:  # noqa: BLE001
                    pass
            if self._file is not None:
                self._file.close()
        return self._old

    def get(self, kbuild: str, obj: str, stamp: tuple[int, int]) -> ObjectScan | None:
        """The cached scan of ``obj`` if it was made at this ``stamp``
        (size, mtime in ns, as the build took it)."""
        path = os.path.abspath(os.path.join(kbuild, obj))
        entry = self._scans().get(path)
        if not entry or entry[0] != list(stamp):
            return None
        try:
            fields = dict(zip(_FIELDS, entry[1:]))
            for name, code in _ARRAYS.items():
                fields[name] = array(code, fields[name])
            scan = ObjectScan(**fields)
        except (TypeError, ValueError):
            return None
        self._new[path] = entry
        self.hits += 1
        return scan

    def put(self, kbuild: str, obj: str, stamp: tuple[int, int], scan: ObjectScan) -> None:
        """Keep the scan of ``obj`` made at ``stamp``, taken before it was
        read: an object rewritten meanwhile is rescanned next time."""
        path = os.path.abspath(os.path.join(kbuild, obj))
        self._new[path] = [list(stamp)] + [getattr(scan, f).tobytes() if f in _ARRAYS
                                           else getattr(scan, f) for f in _FIELDS]

    def save(self, head: dict) -> None:
        """Write the scans used by this build, after ``head`` (the build's
        fingerprint and result)."""
        from kmodsyms.format.symsfile import write_atomic
        try:
            data = (msgpack.packb({"version": _VERSION, **head}, use_bin_type=True)
                    + msgpack.packb(self._new, use_bin_type=True))
            write_atomic(self.path, data)
        except Exception:  # noqa: BLE001 - a cache that cannot be written is no error
            pass
