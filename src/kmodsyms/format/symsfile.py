"""The dtrace_syms file: write it atomically, read and validate it.

The byte-level layout is specified in docs/format.md, and its facts --
the header's fields, the tables in directory order, their entries' fields
and sizes, the codes -- are one table, :mod:`.fileformat`, from which this
module makes its header structs and numpy dtypes (as the C library's
``kms_format.h`` is made from it).  In short: a little-endian header with
a CRC-32 of everything after its first 16 bytes, then the tables at
8-aligned offsets: strings, modules, module-set members, module sets,
objects, section names, object sections, the symbol array sorted by name,
and the link layout's segments and anchors.

Reading is one ``read()``; the fixed-width tables become numpy arrays over
that buffer (no per-symbol Python objects), and names are decoded only when
asked for.
"""

from __future__ import annotations

import bisect
import errno
import json
import operator
import os
import re
import stat
import struct
import tempfile
import time
import zlib
from dataclasses import dataclass

import numpy as np

from kmodsyms.errors import KmodsymsError
from kmodsyms.format.fileformat import (
    CRC_COVERS_FROM,
    DIRECTORY_AT,
    FORMAT_VERSION,
    HEADER,
    HEADER_AT,
    HEADER_SIZE,
    HEADER_STRINGS,
    MAGIC,
    MAX_ENTRIES,
    OBJECT_MISSING,
    TABLE_ALIGN,
    Table,
    struct_format,
)
from kmodsyms.format.fileformat import TABLES as FORMAT_TABLES
from kmodsyms.format.spans import spans_in_order
from kmodsyms.scan.elf.elfdefs import BINDING_NAMES

# The first line of a kallsyms or System.map, given where a dtrace_syms is due.
_KALLSYMS_LINE = re.compile(rb"(?:[0-9a-fA-F]{8}|[0-9a-fA-F]{16}) [A-Za-z?] \S")

_NUMPY_CODE = {"B": "u1", "H": "<u2", "I": "<u4", "Q": "<u8"}


def _dtype(table: Table) -> np.dtype:
    """A table's entries as numpy sees them: a bare integer for a plain
    table, else a record of its fields, the reserved ones too (so that the
    writer's zeroed arrays write them as zero): "reserved", or, when an
    entry has several, "reserved" and its width in bits."""
    if table.plain:
        return np.dtype(_NUMPY_CODE[table.fields[0].code])
    reserved = [f for f in table.fields if not f.name]
    return np.dtype([(f.name or ("reserved" if len(reserved) == 1 else f"reserved{8 * f.size}"),
                      _NUMPY_CODE[f.code]) for f in table.fields])


# Table order in the directory; "strings" counts bytes, the others entries.
TABLES = tuple((t.name, _dtype(t)) for t in FORMAT_TABLES)
(MODULE_DTYPE, MEMBER_DTYPE, MODSET_DTYPE, OBJECT_DTYPE, SECNAME_DTYPE, SECTION_DTYPE,
 SYMBOL_DTYPE, SEGMENT_DTYPE, ANCHOR_DTYPE, VMLINUX_SYMBOL_DTYPE, _BY_OFFSET_DTYPE) = \
    (d for _, d in TABLES[1:])


def _header_part(start: int, end: int) -> struct.Struct:
    """The header's named fields from byte START up to END."""
    return struct.Struct(struct_format(f for f in HEADER if start <= HEADER_AT.get(f.name, -1) < end))


_LEAD = _header_part(0, CRC_COVERS_FROM)                    # magic, version, crc32
_FIXED = _header_part(CRC_COVERS_FROM, DIRECTORY_AT)        # file_size .. the header strings
_HEADER = _header_part(0, DIRECTORY_AT)
_DIRECTORY = struct.Struct(f"<{2 * len(TABLES)}I")          # (offset, count) per table

TYPE_NAMES = {0: "notype", 1: "object", 2: "func", 6: "tls"}


@dataclass
class Meta:
    """Header strings and flags."""

    kernel_release: str = ""
    build_id: str = ""
    tool_version: str = ""
    object_source: str = ""
    thick_source: str = ""
    placement: str = ""       # build-time placement statistics (JSON), or ""
    flags: int = 0


def pick(items: list, indices) -> list:
    """``[items[i] for i in indices]`` (a list of ints or an integer array)
    in one C-level call."""
    if isinstance(indices, np.ndarray):
        indices = indices.tolist()
    if len(indices) < 2:
        return [items[i] for i in indices]
    return list(operator.itemgetter(*indices)(items))


class StringTable:
    """Builds a NUL-terminated string table, each distinct string once;
    offset 0 is the empty string.  Strings come one by one (:meth:`add`) or,
    the symbol names, as one sorted batch (:meth:`add_sorted`), which is
    kept as a sorted list rather than put in the dict: ~135,000 inserts and
    lookups are a large part of a build."""

    def __init__(self):
        self._offsets = {b"": 0}
        self._batch: list[bytes] = []     # add_sorted's strings, sorted
        self._batch_at = np.zeros(0, dtype=np.int64)
        self._chunks = [b"\0"]
        self._size = 1

    def _find(self, s: bytes) -> int | None:
        off = self._offsets.get(s)
        if off is None and self._batch:
            i = bisect.bisect_left(self._batch, s)
            if i < len(self._batch) and self._batch[i] == s:
                off = int(self._batch_at[i])
        return off

    def add(self, s: bytes | str) -> int:
        if isinstance(s, str):
            s = s.encode("utf-8", "surrogateescape")
        off = self._find(s)
        if off is None:
            if b"\0" in s:
                raise KmodsymsError(f"name {s[:40]!r} contains a NUL byte")
            off = self._offsets[s] = self._size
            self._chunks.append(s + b"\0")
            self._size += len(s) + 1
        return off

    def add_sorted(self, items: list[bytes], first: np.ndarray) -> np.ndarray:
        """Offsets of ``items``, which are sorted (bytewise), with ``first``
        marking the first of each run of equal ones.  Called once per table."""
        if self._batch:
            raise ValueError("add_sorted is called once per table")
        starts = np.flatnonzero(first)
        runs = pick(items, starts)
        # Strings the table already holds (a few: paths, section names) keep
        # their offsets and are not stored again.
        at = np.full(len(runs), -1, dtype=np.int64)
        for s, off in self._offsets.items():
            i = bisect.bisect_left(runs, s)
            if i < len(runs) and runs[i] == s:
                at[i] = off
        new = runs if (at < 0).all() else [r for r, known in zip(runs, at.tolist()) if known < 0]
        if new:
            blob = b"\0".join(new) + b"\0"
            if blob.count(b"\0") != len(new):
                bad = next(s for s in new if b"\0" in s)
                raise KmodsymsError(f"name {bad[:40]!r} contains a NUL byte")
            lengths = np.fromiter(map(len, new), dtype=np.int64, count=len(new)) + 1
            at[at < 0] = self._size + np.cumsum(lengths) - lengths
            self._chunks.append(blob)
            self._size += len(blob)
        self._batch, self._batch_at = runs, at
        return at[np.cumsum(first) - 1]

    def data(self) -> bytes:
        return b"".join(self._chunks)

    def copy(self) -> "StringTable":
        """Another table with these strings, which later adds leave alone."""
        other = StringTable()
        other._offsets, other._chunks, other._size = dict(self._offsets), list(self._chunks), self._size
        other._batch, other._batch_at = self._batch, self._batch_at
        return other


def offset_order(symbols: np.ndarray) -> np.ndarray:
    """The symbols_by_offset table of SYMBOLS (docs/format.md §11): their
    indices by section, then value, then index, the order of a placed
    section's kallsyms lines, which a reader walks beside them."""
    return np.lexsort((np.arange(len(symbols)), symbols["value"], symbols["section"])).astype("<u4")


def encode(meta: Meta, strings: StringTable, tables: dict[str, np.ndarray]) -> bytes:
    """Lay out a complete dtrace_syms image.  ``tables`` holds every table of
    TABLES but ``strings`` and ``symbols_by_offset`` (made here, from the
    symbols) as arrays of the table's dtype; the header string fields are
    added to ``strings`` here."""
    tables = {**tables, "symbols_by_offset": offset_order(tables["symbols"])}
    header_strings = [strings.add(getattr(meta, f)) for f in HEADER_STRINGS]
    blobs = [np.frombuffer(strings.data(), dtype="u1")] + [
        np.ascontiguousarray(tables[name], dtype=dtype) for name, dtype in TABLES[1:]]
    directory = []
    parts = []
    pos = HEADER_SIZE
    for blob in blobs:
        directory += [pos, len(blob)]
        raw = blob.tobytes()
        pad = -len(raw) % TABLE_ALIGN
        parts.append(raw + b"\0" * pad)
        pos += len(raw) + pad
    body = (_DIRECTORY.pack(*directory) + b"\0" * (HEADER_SIZE - DIRECTORY_AT - _DIRECTORY.size)
            + b"".join(parts))
    fixed = _FIXED.pack(pos, HEADER_SIZE, meta.flags, *header_strings)
    crc = zlib.crc32(body, zlib.crc32(fixed))
    return _LEAD.pack(MAGIC, FORMAT_VERSION, crc) + fixed + body


TEMP_PREFIX = ".dtrace_syms."
STALE_TEMP_SECONDS = 3600


def _remove_stale_temps(directory: str) -> None:
    """Remove our temp files that a killed writer left behind (SIGKILL gives
    no chance to clean up).  Only our own, and only those older than an hour,
    so that a writer running at the same time keeps its file."""
    now = time.time()
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    for entry in entries:
        if not entry.name.startswith(TEMP_PREFIX):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid() \
                    and now - st.st_mtime > STALE_TEMP_SECONDS:
                os.unlink(entry.path)
        except OSError:
            pass


def write_atomic(path: str, data: bytes, mode: int = 0o644) -> None:
    """Write ``data`` to ``path`` so that a reader sees the old file or the
    whole new one, never a part: temp file in the same directory, fsync,
    rename.  A failure leaves no temp file behind; temp files of writers
    killed earlier are removed once stale."""
    directory = os.path.dirname(os.path.abspath(path))
    _remove_stale_temps(directory)
    try:
        fd, tmp = tempfile.mkstemp(prefix=TEMP_PREFIX, dir=directory)
    except OSError as e:
        raise KmodsymsError(f"cannot write in {directory}: {e.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError):
            raise KmodsymsError(f"cannot write {path}: {e.strerror}") from None
        raise


def _is_json_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


class SymsFile:
    """A validated dtrace_syms image.

    Tables are numpy arrays viewing the file's bytes (docs/format.md), the
    symbols sorted by name, then modules, then object.
    """

    source: str
    data: bytes            # the image (or, from_tables, the string table alone)
    strings_offset: int    # where the string table starts in ``data``
    strings: memoryview
    flags: int
    modules: np.ndarray
    modset_members: np.ndarray
    modsets: np.ndarray
    objects: np.ndarray
    section_names: np.ndarray
    sections: np.ndarray
    symbols: np.ndarray
    segments: np.ndarray
    anchors: np.ndarray
    vmlinux_symbols: np.ndarray
    meta_kernel_release: str
    meta_build_id: str
    meta_tool_version: str
    meta_object_source: str
    meta_thick_source: str
    meta_placement: str
    module_names: list[str]
    modset_modules: list[tuple[int, ...]]

    def __init__(self, data: bytes, source: str = "dtrace_syms"):
        """``data``: the file's bytes, checked whole (CRC and the cross-table
        ranges)."""
        self.source = source
        self.data = data
        self._verify = True
        self._validate_header()
        self._load_tables()

    @classmethod
    def from_tables(cls, meta: Meta, strings: StringTable, tables: dict[str, np.ndarray],
                    source: str = "dtrace_syms") -> "SymsFile":
        """The file that ``encode(meta, strings, tables)`` would write, read
        straight from the tables (the build places its sections before
        encoding it, once)."""
        self = cls.__new__(cls)
        self.source, self._verify = source, False
        self.data = strings.data()
        self.strings_offset = 0
        self.strings = memoryview(self.data)
        self.flags = meta.flags
        self._set_tables(tables)
        (self.meta_kernel_release, self.meta_build_id, self.meta_tool_version,
         self.meta_object_source, self.meta_thick_source, self.meta_placement) = \
            (getattr(meta, f) for f in HEADER_STRINGS)
        self._index_modules()
        return self

    def _set_tables(self, t: dict[str, np.ndarray]) -> None:
        self.modules, self.modset_members, self.modsets = t["modules"], t["modset_members"], t["modsets"]
        self.objects, self.section_names, self.sections = t["objects"], t["section_names"], t["sections"]
        self.symbols, self.segments, self.anchors = t["symbols"], t["segments"], t["anchors"]
        self.vmlinux_symbols = t["vmlinux_symbols"]
        self._by_offset = t.get("symbols_by_offset")   # (from_tables: made when asked)

    def _index_modules(self) -> None:
        self.module_names = [self.string(int(o)) for o in self.modules["name"]]
        self.modset_modules = [
            tuple(int(m) for m in self.modset_members[f:f + c])
            for f, c in zip(self.modsets["first"].tolist(), self.modsets["count"].tolist())]

    # -- validation ---------------------------------------------------------
    def _fail(self, what: str) -> KmodsymsError:
        return KmodsymsError(f"{self.source}: {what}; rebuild it with 'kmodsyms build'")

    def _validate_header(self) -> None:
        data = self.data
        if len(data) < _LEAD.size or data[:len(MAGIC)] != MAGIC:
            if _KALLSYMS_LINE.match(bytes(data[:80])):
                raise KmodsymsError(f"{self.source} is a kallsyms text, not a dtrace_syms file: "
                                    "were --syms and --kallsyms swapped?")
            raise KmodsymsError(f"{self.source}: not a dtrace_syms file (bad magic)")
        _magic, version, crc = _LEAD.unpack_from(data)
        if version != FORMAT_VERSION:
            raise KmodsymsError(
                f"{self.source}: dtrace_syms format version {version}; this kmodsyms reads "
                f"version {FORMAT_VERSION}: rebuild it with this kmodsyms")
        if len(data) < HEADER_SIZE:
            raise self._fail(f"truncated ({len(data)} bytes, header needs {HEADER_SIZE})")
        (_m, _v, _c, file_size, header_size, self.flags, *strs) = _HEADER.unpack_from(data)
        if file_size != len(data):
            raise self._fail(f"truncated or padded: header says {file_size} bytes, file has {len(data)}")
        if header_size != HEADER_SIZE:
            raise self._fail(f"bad header size {header_size}")
        if self._verify and zlib.crc32(memoryview(data)[CRC_COVERS_FROM:]) != crc:
            raise self._fail("checksum mismatch (corrupt file)")
        self._header_strings = strs

    def _load_tables(self) -> None:
        data = self.data
        directory = _DIRECTORY.unpack_from(data, DIRECTORY_AT)
        tables = {}
        for i, (name, dtype) in enumerate(TABLES):
            off, count = directory[2 * i], directory[2 * i + 1]
            if count > MAX_ENTRIES or off % TABLE_ALIGN or off < HEADER_SIZE or \
                    off + count * dtype.itemsize > len(data):
                raise self._fail(f"table {name} out of bounds (offset {off}, {count} entries)")
            tables[name] = np.frombuffer(data, dtype=dtype, count=count, offset=off)
        self._set_tables(tables)
        strings = tables["strings"]
        if len(strings) == 0 or strings[-1] != 0:
            raise self._fail("string table not NUL-terminated")
        # A view, not a copy: the tables already keep ``data`` alive.
        self.strings_offset = directory[0]
        self.strings = memoryview(data)[directory[0]:directory[0] + directory[1]]
        n_str = len(self.strings)

        def check(array, bound: int, what: str):
            if self._verify and len(array) and int(array.max()) >= bound:
                raise self._fail(f"{what} out of range")

        check(np.asarray(self._header_strings, dtype=np.uint64), n_str, "header string")
        check(self.modules["name"], n_str, "module name")
        check(self.modset_members, len(self.modules), "module-set member")
        ends = self.modsets["first"].astype(np.uint64) + self.modsets["count"]
        check(ends, len(self.modset_members) + 1, "module set")
        check(self.objects["path"], n_str, "object path")
        check(self.objects["modset"], len(self.modsets), "object module set")
        check(self.section_names["name"], n_str, "section name")
        check(self.sections["object"], len(self.objects), "section object")
        check(self.sections["name"], len(self.section_names), "section name index")
        symbols = self.symbols
        check(symbols["name"], n_str, "symbol name")
        check(symbols["modset"], len(self.modsets), "symbol module set")
        check(symbols["object"], len(self.objects), "symbol object")
        check(symbols["section"], len(self.sections), "symbol section")
        if self._verify and len(symbols) and \
                not np.array_equal(self.sections["object"][symbols["section"]], symbols["object"]):
            raise self._fail("symbol section belongs to another object")
        (self.meta_kernel_release, self.meta_build_id, self.meta_tool_version,
         self.meta_object_source, self.meta_thick_source,
         self.meta_placement) = (self.string(o) for o in self._header_strings)
        if self._verify and self.meta_placement and not _is_json_object(self.meta_placement):
            raise self._fail("header string placement is not a JSON object")
        check(self.anchors["symbol"], len(symbols), "anchor symbol")
        check(self.anchors["segment"], len(self.segments), "anchor segment")
        check(self.vmlinux_symbols["name"], n_str, "vmlinux symbol name")
        check(self.symbols_by_offset, len(symbols), "symbols_by_offset entry")
        if self._verify and not np.array_equal(self.symbols_by_offset, offset_order(symbols)):
            raise self._fail("symbols_by_offset is not the symbols in section and offset order")
        self._index_modules()

    # -- decoding -------------------------------------------------------------
    def string(self, offset: int) -> str:
        """The NUL-terminated string at ``offset`` of the string table."""
        return self.raw_string(offset).decode("utf-8", "surrogateescape")

    def raw_string(self, offset: int) -> bytes:
        start = self.strings_offset + offset
        return self.data[start:self.data.find(b"\0", start)]   # the table ends in a NUL

    @property
    def missing_objects(self) -> list[str]:
        return [self.object_path(i) for i in np.flatnonzero(self.objects["flags"] & OBJECT_MISSING)]

    @property
    def placement_stats(self) -> dict | None:
        """The build's placement statistics (header string ``placement``,
        docs/format.md), or None when the file records none."""
        return json.loads(self.meta_placement) if self.meta_placement else None

    @property
    def symbols_by_offset(self) -> np.ndarray:
        if self._by_offset is None:
            self._by_offset = offset_order(self.symbols)
        return self._by_offset

    @property
    def has_layout(self) -> bool:
        """Whether ``kmodsyms build`` recorded link addresses (from vmlinux)."""
        return len(self.segments) > 0

    def object_path(self, index: int) -> str:
        return self.string(int(self.objects["path"][index]))

    def section_name(self, section: int) -> str:
        return self.string(int(self.section_names["name"][self.sections["name"][section]]))

    def modset_names(self, modset: int) -> list[str]:
        return [self.module_names[m] for m in self.modset_modules[modset]]

    def name_lengths(self) -> np.ndarray:
        """Byte length of every symbol's name (computed once)."""
        lengths = getattr(self, "_name_lengths", None)
        if lengths is None:
            buf = np.frombuffer(self.strings, dtype=np.uint8)
            nul = np.flatnonzero(buf == 0)
            offsets = self.symbols["name"].astype(np.int64)
            lengths = (nul[np.searchsorted(nul, offsets)] - offsets).astype(np.int32)
            self._name_lengths = lengths
        return lengths

    def symbol_name(self, index: int) -> str:
        return self.string(int(self.symbols["name"][index]))

    def check_sorted(self) -> None:
        """Refuse a file whose symbols are not in strcmp order of name
        (docs/format.md): a search over it would give other names' entries.
        Checked on first use by what relies on the order (find(), placement
        by search), not on every load: the CRC already catches damage."""
        if not getattr(self, "_sorted", False):
            if not spans_in_order(self.strings,
                                 self.symbols["name"].astype(np.int64), self.name_lengths()):
                raise self._fail("symbol names are not sorted")
            self._sorted = True

    def find(self, name: str) -> range:
        """Indices of every symbol entry called ``name`` (binary search over
        the name-sorted array)."""
        self.check_sorted()
        key = name.encode("utf-8", "surrogateescape")
        names = _NameView(self)
        lo = bisect.bisect_left(names, key)
        hi = bisect.bisect_right(names, key, lo)
        return range(lo, hi)

    def entry(self, index: int) -> dict:
        """One symbol entry decoded, as ``kmodsyms dump --json`` prints it."""
        s = self.symbols[index]
        return {
            "name": self.string(int(s["name"])),
            "modules": self.modset_names(int(s["modset"])),
            "object": self.object_path(int(s["object"])),
            "section": self.section_name(int(s["section"])),
            "value": int(s["value"]),
            "size": int(s["size"]),
            "type": TYPE_NAMES.get(int(s["type"]), str(int(s["type"]))),
            "binding": BINDING_NAMES.get(int(s["binding"]), str(int(s["binding"]))),
        }

    def module_symbol_counts(self) -> list[int]:
        """Number of symbol entries in each built-in module."""
        per_modset = np.bincount(self.symbols["modset"], minlength=len(self.modsets))
        counts = [0] * len(self.module_names)
        for modset, members in enumerate(self.modset_modules):
            for m in members:
                counts[m] += int(per_modset[modset])
        return counts


class _NameView:
    """Symbol names as a sequence of bytes, for bisect, decoded per probe."""

    def __init__(self, syms: SymsFile):
        self._offsets = syms.symbols["name"]
        self._raw = syms.raw_string

    def __len__(self):
        return len(self._offsets)

    def __getitem__(self, i):
        return self._raw(int(self._offsets[i]))


def read_syms(path: str) -> SymsFile:
    """Read and validate a dtrace_syms file in one read."""
    try:
        with open(path, "rb") as f:
            data = f.read()
            if not data:
                mode = os.fstat(f.fileno()).st_mode
                raise KmodsymsError(f"{path}: {file_kind(mode) if not stat.S_ISREG(mode) else 'an empty file'}, "
                                    "not a dtrace_syms file: give the file 'kmodsyms build' wrote")
    except IsADirectoryError:
        raise KmodsymsError(f"{path}: a directory, not a dtrace_syms file: give the file "
                            "'kmodsyms build' wrote (DIR/dtrace_syms)") from None
    except OSError as e:
        # only a missing file is one to build: another error is the file's own
        build = "; build it with 'kmodsyms build'" if e.errno == errno.ENOENT else ""
        raise KmodsymsError(f"cannot read {path}: {e.strerror or e}{build}") from None
    return SymsFile(data, path)


def file_kind(mode: int) -> str:
    """What a file that is not a regular one is, in a message (the words
    of libkmodsyms' file_kind())."""
    for test, kind in ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a pipe"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return "not a regular file"
