"""Snapshots: a resolver's answer arrays saved so that a later
``kmodsyms resolve`` answers in plain Python, without numpy or placement.

``kmodsyms resolve`` is a whole process per question.  Loading and placing
costs a few hundred milliseconds where reading kallsyms costs a few, so
after a full load the CLI saves what answering needs (:func:`save`): the
resolver's :class:`State`, which holds its answer table
(:class:`kmodsyms.answer.AnswerTable`: per kallsyms line its address, name
span, letter, module, size, object, binding and region; the sized
intervals; the placed extents; object paths and module lists) and what a
restored resolver needs besides.  This module alone turns a state into
bytes and back (:func:`encode`, :meth:`Saved.state`).  The next ``resolve``
of the same two files answers from it (:class:`Snapshot`, run by
:mod:`kmodsyms.quick`) by bisection over array views of the file, and the
next :func:`kmodsyms.load` restores the resolver from it.

A snapshot is used only for the inputs it was made from: the same kallsyms
text (length, CRC-32 and Adler-32; it changes at every boot under KASLR and
at every module load or unload), dtrace_syms' path, size, mtime and CRC,
the loaded modules' sources (modules directory, modules.dep's size and
mtime, each .ko used by path, size and mtime, the cores of /proc/modules),
and the same kmodsyms and Python.  Only a load that checked the anchors
makes one, and the running kernel is checked again when one is used.  The
cache (:func:`cache_dir`) follows the XDG rules: ``$XDG_CACHE_HOME/kmodsyms``,
for root ``/var/cache/kmodsyms``, else ``~/.cache/kmodsyms`` (never creating
the home).  One file per pair of file paths and boot, written atomically and
fsynced (mode 0600); at most :data:`MAX_SNAPSHOTS` files and
:data:`MAX_CACHE_BYTES`, least recently used out first; a snapshot of another
boot is deleted when seen.  It is then trusted as Python trusts its own .pyc
files: a missing, stale, truncated or foreign one is not used; ``--no-cache``
bypasses it.  Byte order and the ``marshal`` head are the machine's own: it
never leaves the machine that wrote it.
"""

from __future__ import annotations

import marshal
import mmap
import os
import struct
import sys
import zlib

from . import __version__
from .answer import Answerer, AnswerTable, check_address
from .errors import KmodsymsError
from .format.fileformat import CRC_COVERS_FROM, CRC_FIELD
from .live import parse_proc_modules

MAGIC = b"KMSNAP\0\7"            # the last byte: this format's version
_HEAD = struct.Struct("=8sQ")     # magic, length of the marshalled doc
_ALIGN = 8

# The saved arrays and their element types (array module codes; "i|q":
# int32 when every value fits, else int64), in file order: the answer
# table's (kmodsyms.answer.AnswerTable, where they are described), its
# name index, then those only a restored resolver reads (State).
TABLE_ARRAYS = (
    ("line_address", "Q"), ("name_start", "i|q"), ("name_end", "i|q"), ("line_type", "B"),
    ("line_module", "i|q"), ("line_size", "i|q"), ("line_object", "i|q"),
    ("line_binding", "B"), ("line_region", "i|q"), ("answer_address", "Q"),
    ("answer_line", "i|q"), ("iv_start", "Q"), ("iv_end", "Q"), ("iv_line", "i|q"),
    ("iv_parent", "i|q"), ("region_end", "Q"), ("core_ranges", "Q"), ("extent_start", "Q"),
    ("extent_end", "Q"), ("extent_section", "i|q"), ("section_object", "i|q"),
    ("object_modset", "i|q"),
)
NAME_ARRAYS = (("name_hash", "Q"), ("name_order", "i|q"))
STATE_ARRAYS = (
    ("by_address", "i|q"), ("sorted_address", "Q"), ("line_entry", "i|q"),
    ("line_section", "i|q"), ("vmlinux_extent_start", "Q"), ("vmlinux_extent_end", "Q"),
    ("vmlinux_extent_section", "i|q"),
)
ARRAYS = TABLE_ARRAYS + NAME_ARRAYS + STATE_ARRAYS


class State:
    """Everything a snapshot holds: what the resolver hands over
    (:meth:`kmodsyms.resolver.Resolver.state`) and takes back
    (:meth:`kmodsyms.resolver.Resolver.restore`).  (A plain class: the
    quick path imports no dataclasses.)

    ``table``: the answer table.  The rest only a restored resolver reads:
    ``by_address`` (the lines in address order) and ``sorted_address``
    (their addresses); per line, ``line_entry`` and ``line_section``, the
    dtrace_syms symbol and object section placement gave it (-1: none);
    ``vmlinux_extent_*``, vmlinux's placed sections alone; ``ambiguous``,
    an ambiguous line's candidate symbol entries; ``stats``, the
    placement's (:class:`kmodsyms.build.layout.PlacementStats` fields); per
    loaded module, ``module_stats`` (:class:`kmodsyms.loadable.ModuleStats`
    fields, in order) and ``module_warnings``; ``ko_files``, the .ko files
    read (path, size, mtime).  And what it was made from: the dtrace_syms
    (``source``, ``kernel_release``, ``build_id``, and ``syms_id``, its
    (size, header CRC), None when made from kallsyms alone) and the
    kallsyms (``kallsyms_source``; its text is the table's).
    """

    def __init__(self, *, table: AnswerTable, by_address, sorted_address, line_entry,
                 line_section, vmlinux_extent_start, vmlinux_extent_end, vmlinux_extent_section,
                 ambiguous: dict[int, list[int]], stats: dict, module_stats: list[tuple],
                 module_warnings: list[str], ko_files: list[tuple], source: str,
                 kernel_release: str, build_id: str, kallsyms_source: str,
                 syms_id: tuple[int, bytes] | None):
        self.table = table
        self.by_address, self.sorted_address = by_address, sorted_address
        self.line_entry, self.line_section = line_entry, line_section
        self.vmlinux_extent_start = vmlinux_extent_start
        self.vmlinux_extent_end = vmlinux_extent_end
        self.vmlinux_extent_section = vmlinux_extent_section
        self.ambiguous, self.stats = ambiguous, stats
        self.module_stats, self.module_warnings = module_stats, module_warnings
        self.ko_files = ko_files
        self.source, self.kernel_release, self.build_id = source, kernel_release, build_id
        self.kallsyms_source, self.syms_id = kallsyms_source, syms_id


# The cache's bound: least recently used snapshots go first once there are
# more than this many, or they take more than this many bytes (a snapshot
# of a distribution kernel is ~15 MB).
MAX_SNAPSHOTS = 8
MAX_CACHE_BYTES = 256 << 20
SNAPSHOT_PREFIX = "resolve-"
SYSTEM_CACHE = "/var/cache/kmodsyms"
BOOT_ID = "/proc/sys/kernel/random/boot_id"


def cache_dir() -> str | None:
    """Where snapshots live, by the XDG base directory rules:
    ``$XDG_CACHE_HOME/kmodsyms`` (an absolute path; a relative one is
    ignored), else for root the system cache ``/var/cache/kmodsyms``, else
    ``$HOME/.cache/kmodsyms``; None (no cache) when there is no home."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    if os.path.isabs(xdg):
        return os.path.join(xdg, "kmodsyms")
    if os.geteuid() == 0:
        return SYSTEM_CACHE
    home = os.environ.get("HOME", "")
    return os.path.join(home, ".cache", "kmodsyms") if os.path.isabs(home) else None


def _make_cache_dir(path: str) -> None:
    """Create the cache directory (0700) and, missing, its parent (the XDG
    cache or ~/.cache) -- never more: a missing home stays missing, and
    then there is no cache (OSError)."""
    parent = os.path.dirname(path)
    for directory in (parent, path):
        try:
            os.mkdir(directory, 0o700)
        except FileExistsError:
            pass


def boot_id() -> str:
    """The running boot's id (a snapshot's name carries it), or "noboot"."""
    try:
        with open(BOOT_ID) as f:
            return f.read().strip().replace("-", "")[:16] or "noboot"
    except OSError:
        return "noboot"


def snapshot_path(syms_path: str, kallsyms_path: str) -> str | None:
    """Where the snapshot of this pair of files lives (None: no cache).
    The name spreads pairs over files and says the boot that made it; the
    key inside says which pair it holds."""
    directory = cache_dir()
    if directory is None:
        return None
    pair = f"{os.path.abspath(syms_path)}\0{os.path.abspath(kallsyms_path)}"
    return os.path.join(directory,
                        f"{SNAPSHOT_PREFIX}{boot_id()}-{zlib.crc32(pair.encode()):08x}")


class CachedSnapshot:
    """One snapshot file in the cache, as ``kmodsyms cache --list`` shows it."""

    def __init__(self, path: str, size: int, last_used: float, syms: str | None,
                 kallsyms: str | None):
        self.path, self.size, self.last_used = path, size, last_used
        self.syms, self.kallsyms = syms, kallsyms

    def to_json(self) -> dict:
        return dict(self.__dict__)


def cached_snapshots() -> list[CachedSnapshot]:
    """The cache's snapshots, most recently used first.  Snapshots of
    another boot are deleted as they are seen: their kallsyms is gone."""
    directory = cache_dir()
    try:
        entries = list(os.scandir(directory)) if directory else []
    except OSError:
        return []
    this_boot = f"{SNAPSHOT_PREFIX}{boot_id()}-"
    found = []
    for entry in entries:
        if not entry.name.startswith(SNAPSHOT_PREFIX):
            continue
        try:
            if not entry.name.startswith(this_boot):
                os.unlink(entry.path)
                continue
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        key = _read_key(entry.path)
        found.append(CachedSnapshot(entry.path, st.st_size, st.st_mtime,
                                    key.get("syms"), key.get("kallsyms")))
    return sorted(found, key=lambda snap: -snap.last_used)


def _read_key(path: str) -> dict:
    """A snapshot's key (which pair of files it holds), or {} if unreadable."""
    try:
        with open(path, "rb") as f:
            magic, length = _HEAD.unpack(f.read(_HEAD.size))
            if magic != MAGIC:
                return {}
            return marshal.loads(f.read(length))["key"]
    except (OSError, ValueError, KeyError, TypeError, EOFError, struct.error):
        return {}


def evict() -> None:
    """Keep the cache within :data:`MAX_SNAPSHOTS` and :data:`MAX_CACHE_BYTES`,
    least recently used out first (a snapshot is touched when used)."""
    total = 0
    for rank, snap in enumerate(cached_snapshots()):
        total += snap.size
        if rank >= MAX_SNAPSHOTS or (rank and total > MAX_CACHE_BYTES):
            try:
                os.unlink(snap.path)
            except OSError:
                pass


def clear() -> int:
    """Delete every snapshot (and temp file of a killed writer); how many."""
    from .format.symsfile import TEMP_PREFIX
    directory = cache_dir()
    try:
        entries = list(os.scandir(directory)) if directory else []
    except OSError:
        return 0
    removed = 0
    for entry in entries:
        if entry.name.startswith((SNAPSHOT_PREFIX, TEMP_PREFIX)):
            try:
                os.unlink(entry.path)
                removed += entry.name.startswith(SNAPSHOT_PREFIX)
            except OSError:
                pass
    return removed


def _key(syms_path: str, kallsyms_path: str, syms_state: tuple | None,
         kallsyms_text: bytes, sources, ko_files) -> dict:
    """What a snapshot must match: ``syms_state`` is the dtrace_syms file's
    (size, header CRC, mtime), None for a load without it (the default file
    missing: its snapshot holds until the file appears).  The kallsyms text
    is known by its length and two checksums (64 bits in all): reading it
    is the one cost a snapshot cannot avoid, and these cost a few
    milliseconds more, where a cryptographic hash would cost as much again
    in imports."""
    return {"kmodsyms": __version__, "python": sys.version, "syms": os.path.abspath(syms_path),
            "kallsyms": os.path.abspath(kallsyms_path), "syms_state": syms_state,
            "kallsyms_size": len(kallsyms_text), "kallsyms_crc32": zlib.crc32(kallsyms_text),
            "kallsyms_adler32": zlib.adler32(kallsyms_text),
            "modules": _modules_key(sources, ko_files)}


def _modules_key(sources, ko_files) -> tuple | None:
    """What the loadable modules' answers were made from: where the files
    and the kernel's word were looked for, modules.dep's size and mtime
    (depmod rewrites it when modules are installed), each .ko used (path,
    size, mtime) and the module cores /proc/modules gives.  sysfs is not
    keyed: the kallsyms text changes whenever a module does, and the
    cache is the user's own (what that user may read of sysfs stays so)."""
    if sources is None or sources.modules_dir is None:
        return None
    root = os.path.abspath(sources.modules_dir)
    try:
        st = os.stat(os.path.join(root, "modules.dep"))
        dep = (st.st_size, st.st_mtime_ns)
    except OSError:
        dep = None
    files = []
    for path, _size, _mtime in ko_files:
        try:
            st = os.stat(os.path.join(root, path))
            files.append((path, st.st_size, st.st_mtime_ns))
        except OSError:
            files.append((path, -1, -1))
    cores = None
    if sources.proc_modules:
        try:
            with open(sources.proc_modules, "rb") as f:
                cores = sorted(parse_proc_modules(f.read()).items())
        except OSError:
            pass
    return (root, sources.sysfs_root, sources.proc_modules, dep, tuple(files), cores)


def _syms_state(syms_path: str) -> tuple | None:
    """(size, header CRC, mtime) of the file at ``syms_path``; None when
    there is none (other failures to read it raise OSError)."""
    try:
        with open(syms_path, "rb") as f:
            head = f.read(CRC_COVERS_FROM)
            st = os.fstat(f.fileno())
    except FileNotFoundError:
        return None
    return st.st_size, bytes(head[CRC_FIELD]), st.st_mtime_ns


# ------------------------------------------------------------------ writing
def save(resolver, syms_path: str, kallsyms_path: str) -> None:
    """Save ``resolver`` (a full :class:`kmodsyms.resolver.Resolver`, loaded
    from these two paths with its checks on, or from kallsyms alone because
    the file at ``syms_path`` is missing) as their snapshot.  Failure to
    write is no error: it is only a cache."""
    from .format.symsfile import write_atomic
    state = resolver.state()
    syms_state = (None if state.syms_id is None
                  else state.syms_id + (os.stat(syms_path).st_mtime_ns,))
    data = encode(state, _key(syms_path, kallsyms_path, syms_state, state.table.text,
                              resolver.sources, state.ko_files))
    path = snapshot_path(syms_path, kallsyms_path)
    if path is None:
        return
    try:
        _make_cache_dir(os.path.dirname(path))
        write_atomic(path, data, mode=0o600)
    except (OSError, KmodsymsError):
        return   # an unwritable cache (read-only home, full disk) only costs speed
    evict()


def encode(state: State, key: dict) -> bytes:
    """The snapshot file of ``state``, made from the inputs ``key`` says:
    the head, the marshalled doc (the key, the plain values and where each
    array lies), then the arrays, each aligned."""
    import numpy as np
    table = state.table
    arrays = {name: getattr(table, name) for name, _codes in TABLE_ARRAYS}
    arrays["name_hash"], arrays["name_order"] = table.name_index()
    arrays.update((name, getattr(state, name)) for name, _codes in STATE_ARRAYS)
    blobs, layout = [], []
    for name, codes in ARRAYS:
        values = arrays[name]
        code = codes
        if codes == "i|q":
            fits = not len(values) or (int(values.min()) >= -2**31 and int(values.max()) < 2**31)
            code = "i" if fits else "q"
        blob = np.ascontiguousarray(values, dtype=np.dtype(code)).tobytes()
        layout.append((name, code, len(values)))
        blobs.append(blob + bytes(-len(blob) % _ALIGN))
    paths = table.object_paths
    doc = {
        "key": key,
        "meta": {"source": state.source, "kernel_release": state.kernel_release,
                 "build_id": state.build_id, "kallsyms_source": state.kallsyms_source},
        "arrays": layout,
        "loaded_module_names": list(table.loaded_module_names),
        "builtin_module_names": list(table.builtin_module_names),
        "object_paths": [paths[i] for i in range(len(paths))],
        "modsets": table.modsets,
        "first_ko_object": table.first_ko_object,
        "candidates": table.candidates,
        "ambiguous": state.ambiguous,
        "stats": state.stats,
        "modules": {"ko_files": state.ko_files, "stats": state.module_stats,
                    "warnings": state.module_warnings},
    }
    packed = marshal.dumps(doc)
    return (_HEAD.pack(MAGIC, len(packed)) + packed
            + bytes(-(_HEAD.size + len(packed)) % _ALIGN) + b"".join(blobs))


# ------------------------------------------------------------------ reading
class Snapshot:
    """A saved resolver, answering :meth:`resolve` and :meth:`lookup` like
    the one it was saved from, in plain Python over array views of the
    mapped file: it holds the :class:`kmodsyms.answer.Answerer` of the
    saved table.  ``state``: all the snapshot holds."""

    def __init__(self, saved: "Saved"):
        self.state = saved.state()
        self.answers = Answerer(self.state.table)
        self.builtin_modules_known = self.state.table.builtin_modules_known
        self.module_warnings = self.state.module_warnings
        self.answered = 0   # a damaged snapshot is dropped silently only before any answer

    def resolve(self, address: int):
        """Answer one address (a :class:`kmodsyms.answer.Symbolization`)."""
        address = check_address(address)
        answer = self.answers.record(address, *self.answers.find(address))
        self.answered += 1
        return answer

    def lookup(self, name: str, module: str | None = None, offset: int = 0) -> list:
        """As :meth:`kmodsyms.resolver.Resolver.lookup`."""
        answers = self.answers.lookup(name, module, offset)
        self.answered += len(answers)
        return answers

    def modules(self) -> list[str]:
        return self.answers.modules()


class Saved:
    """A snapshot file that matches its inputs: the mapped file (``view``),
    its ``doc``, where each array lies (``arrays``: name -> (offset, code,
    count)) and the kallsyms text it was checked against."""

    def __init__(self, view, doc: dict, arrays: dict, kallsyms_text: bytes):
        self.view, self.doc, self.arrays, self.kallsyms_text = view, doc, arrays, kallsyms_text

    def state(self, numpy: bool = False) -> State:
        """The saved state, its arrays views of the mapping (no copy):
        memoryviews, or numpy arrays with ``numpy``."""
        if numpy:
            import numpy as np

            def array(start: int, code: str, count: int):
                return np.frombuffer(self.view, dtype=np.dtype(code), count=count, offset=start)
        else:
            def array(start: int, code: str, count: int):
                return self.view[start:start + struct.calcsize(code) * count].cast(code)
        a = {name: array(*where) for name, where in self.arrays.items()}
        doc, meta, modules = self.doc, self.doc["meta"], self.doc["modules"]
        syms_state = doc["key"]["syms_state"]
        table = AnswerTable(
            text=self.kallsyms_text, **{name: a[name] for name, _codes in TABLE_ARRAYS},
            object_paths=doc["object_paths"], modsets=doc["modsets"],
            first_ko_object=doc["first_ko_object"],
            loaded_module_names=doc["loaded_module_names"],
            builtin_module_names=doc["builtin_module_names"], candidates=doc["candidates"],
            name_index=lambda: (a["name_hash"], a["name_order"]),
            builtin_modules_known=doc["stats"]["builtin_modules_known"])
        return State(
            table=table, **{name: a[name] for name, _codes in STATE_ARRAYS},
            ambiguous=doc["ambiguous"], stats=doc["stats"], module_stats=modules["stats"],
            module_warnings=modules["warnings"], ko_files=modules["ko_files"],
            source=meta["source"], kernel_release=meta["kernel_release"],
            build_id=meta["build_id"], kallsyms_source=meta["kallsyms_source"],
            syms_id=None if syms_state is None else tuple(syms_state[:2]))


def open_saved(syms_path: str, kallsyms_path: str, kallsyms_text: bytes | None = None,
               sources=None) -> Saved | None:
    """The snapshot of these two files, or None when there is none that
    matches them (``kallsyms_text``: the kallsyms file's bytes, if the
    caller has read them already).  The file is mapped, not read: what is
    not used is never paged in."""
    path = snapshot_path(syms_path, kallsyms_path)
    if path is None:
        return None
    try:
        with open(path, "rb") as f:
            data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        syms_state = _syms_state(syms_path)
        if kallsyms_text is None:
            with open(kallsyms_path, "rb") as f:
                kallsyms_text = f.read()
        magic, length = _HEAD.unpack_from(data)
        if magic != MAGIC:
            return None
        doc = marshal.loads(data[_HEAD.size:_HEAD.size + length])
        if doc["key"] != _key(syms_path, kallsyms_path, syms_state, kallsyms_text, sources,
                              doc["modules"]["ko_files"]):
            return None
        arrays = {}
        at = _HEAD.size + length
        at += -at % _ALIGN
        for (name, codes), (saved_name, code, count) in zip(ARRAYS, doc["arrays"]):
            if name != saved_name or code not in codes.split("|"):
                return None
            arrays[name] = (at, code, count)
            at += struct.calcsize(code) * count
            at += -at % _ALIGN
        if at != len(data) or len(arrays) != len(ARRAYS):
            return None
        _touch(path)
        return Saved(memoryview(data), doc, arrays, kallsyms_text)
    except (OSError, ValueError, KeyError, TypeError, EOFError, struct.error):
        return None


def _touch(path: str) -> None:
    """Mark a snapshot used now: the cache evicts by last use, and atime
    is not to be trusted (noatime, relatime)."""
    try:
        os.utime(path)
    except OSError:
        pass
