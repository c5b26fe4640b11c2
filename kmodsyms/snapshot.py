"""Snapshots: a resolver's answer arrays saved so that a later
``kmodsyms resolve`` answers in plain Python, without numpy or placement.

``kmodsyms resolve`` is a whole process per question.  Loading and placing
costs a few hundred milliseconds where reading kallsyms costs a few, so
after a full load the CLI saves what answering needs (:func:`save`): per
kallsyms line, in address order, its address, name span, letter, module,
size, object, binding and region; the sized intervals; the placed extents;
object paths and module lists.  The next
``resolve`` of the same two files answers from it (:func:`quick_resolve`)
by bisection over array views of the file.

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

import bisect
import marshal
import mmap
import os
import struct
import sys
import zlib

from . import __version__
from .answer import Answers, check_address
from .errors import KmodsymsError, StaleError
from .fileformat import CRC_COVERS_FROM, CRC_FIELD
from .frontend import (byte_exact_stdout, check_addresses, degraded_warning, forced_warning,
                       guarded, output_format, parse_args, parse_name, run_lookup, run_resolve,
                       warn)
from .live import LIVE_KALLSYMS, check_live, default_syms_path, module_sources, parse_proc_modules

MAGIC = b"KMSNAP\0\6"
_HEAD = struct.Struct("=8sQ")     # magic, length of the marshalled doc
_ALIGN = 8

# The saved arrays and their element types (array module codes; "i|q":
# int32 when every value fits, else int64).  Per kallsyms line, in kallsyms
# order: line_* and name_*; sorted_address/by_address are the lines in
# address order; answer_* those that may answer an address; iv_* the sized
# intervals; extent_* the placed sections (vmlinux's and the .ko files') and
# section_object their objects; vmlinux_extent_* vmlinux's placement alone.
ARRAYS = (
    ("line_address", "Q"), ("name_start", "i|q"), ("name_end", "i|q"), ("line_type", "B"),
    ("line_module", "i|q"), ("line_size", "i|q"), ("line_object", "i|q"),
    ("line_binding", "B"), ("line_region", "i|q"), ("line_entry", "i|q"),
    ("line_section", "i|q"), ("sorted_address", "Q"), ("by_address", "i|q"),
    ("iv_start", "Q"), ("iv_end", "Q"), ("iv_line", "i|q"), ("iv_parent", "i|q"),
    ("region_end", "Q"), ("extent_start", "Q"), ("extent_end", "Q"),
    ("extent_section", "i|q"), ("section_object", "i|q"), ("name_hash", "Q"),
    ("name_order", "i|q"), ("answer_address", "Q"),
    ("answer_line", "i|q"), ("vmlinux_extent_start", "Q"), ("vmlinux_extent_end", "Q"),
    ("vmlinux_extent_section", "i|q"), ("core_ranges", "Q"),
)


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
    from .symsfile import TEMP_PREFIX
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
    import numpy as np
    from .symsfile import write_atomic
    syms, ks, placement = resolver.syms, resolver.ks, resolver.placement
    arrays = {
        "line_address": ks.address, "name_start": ks.name_start, "name_end": ks.name_end,
        "line_type": ks.type, "line_module": ks.module, "line_size": resolver.line_size,
        "line_object": resolver.line_object, "line_binding": resolver.line_binding,
        "line_region": resolver.line_region, "line_entry": resolver.line_entry,
        "line_section": resolver.line_section, "sorted_address": resolver.sorted_address,
        "by_address": resolver.by_address, "iv_start": resolver.iv_start,
        "iv_end": resolver.iv_end, "iv_line": resolver.iv_line, "iv_parent": resolver.iv_parent,
        "region_end": resolver.region_end, "extent_start": resolver.extent_start,
        "extent_end": resolver.extent_end, "extent_section": resolver.extent_section,
        "section_object": resolver.section_object, "answer_address": resolver.answer_address,
        "answer_line": resolver.answer_line, "vmlinux_extent_start": placement.extent_start,
        "vmlinux_extent_end": placement.extent_end,
        "vmlinux_extent_section": placement.extent_section, "core_ranges": resolver.core_ranges,
    }
    arrays["name_hash"], arrays["name_order"] = resolver._name_index()
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
    modset_names = [syms.modset_names(i) for i in range(len(syms.modsets))]
    doc = {
        "key": _key(syms_path, kallsyms_path,
                    (len(syms.data), bytes(syms.data[CRC_FIELD]), os.stat(syms_path).st_mtime_ns)
                    if resolver.builtin_modules_known else None, ks.text,
                    resolver.sources, resolver.ko_files),
        "meta": {"source": syms.source, "kernel_release": syms.meta_kernel_release,
                 "build_id": syms.meta_build_id, "kallsyms_source": ks.source},
        "arrays": layout,
        "loaded_module_names": ks.module_names,
        "builtin_module_names": syms.module_names,
        "object_paths": [syms.object_path(i) for i in range(len(syms.objects))],
        "object_modset": syms.objects["modset"].tolist(),
        "modsets": modset_names,
        "ambiguous": {line: (entries, resolver._candidates(line))
                      for line, entries in resolver.ambiguous.items()},
        "stats": dict(resolver.stats.__dict__),
        "modules": {"ko_paths": resolver.ko_paths, "ko_modules": resolver.ko_modules,
                    "ko_files": resolver.ko_files,
                    "stats": [tuple(s.__dict__.values()) for s in resolver.module_stats],
                    "warnings": resolver.module_warnings},
    }
    packed = marshal.dumps(doc)
    body = packed + bytes(-(_HEAD.size + len(packed)) % _ALIGN) + b"".join(blobs)
    path = snapshot_path(syms_path, kallsyms_path)
    if path is None:
        return
    try:
        _make_cache_dir(os.path.dirname(path))
        write_atomic(path, _HEAD.pack(MAGIC, len(packed)) + body, mode=0o600)
    except (OSError, KmodsymsError):
        return   # an unwritable cache (read-only home, full disk) only costs speed
    evict()


# ------------------------------------------------------------------ reading
class Snapshot(Answers):
    """A saved resolver, answering :meth:`resolve` like the one it was saved
    from, over array views of the mapped file."""

    def __init__(self, saved: "Saved"):
        doc = saved.doc
        self.text = saved.kallsyms_text
        self.loaded_module_names = doc["loaded_module_names"]
        self.builtin_module_names = doc["builtin_module_names"]
        self.builtin_modules_known = doc["stats"]["builtin_modules_known"]
        self.answered = 0   # a damaged snapshot is dropped silently only before any answer
        modules = doc["modules"]
        self.module_warnings = modules["warnings"]
        # Objects: vmlinux's, then the .ko files (each in its own module).
        self.first_ko_object = len(doc["object_paths"])
        self.object_paths = doc["object_paths"] + modules["ko_paths"]
        self.modsets = doc["modsets"] + [[name] for name in modules["ko_modules"]]
        self.object_modset = doc["object_modset"] + list(
            range(len(doc["modsets"]), len(self.modsets)))
        self.ambiguous = {line: cands for line, (_entries, cands) in doc["ambiguous"].items()}
        for name, (start, code, count) in saved.arrays.items():
            setattr(self, name, saved.view[start:start + struct.calcsize(code) * count].cast(code))

    def resolve(self, address: int):
        """Answer one address (a :class:`kmodsyms.answer.Symbolization`)."""
        address = check_address(address)
        return self.record(address, *self._answer(address))

    def record(self, address: int, line: int, sized: bool):
        answer = super().record(address, line, sized)
        self.answered += 1
        return answer

    def _answer(self, q: int) -> tuple[int, bool]:
        """The line answering ``q`` and whether it is a sized hit: the same
        rules as :meth:`kmodsyms.resolver.Resolver.resolve_many`, one address
        at a time."""
        j = bisect.bisect_right(self.iv_start, q) - 1
        while j >= 0 and self.iv_end[j] <= q:
            j = self.iv_parent[j]
        if j >= 0:
            return self.iv_line[j], True
        k = bisect.bisect_right(self.answer_address, q) - 1
        if k < 0:
            return -1, False
        line = self.answer_line[k]
        region, section = self.line_region[line], self._section_at(q)
        if section >= 0:
            ok = region == section
        else:
            ok = region < 0 and q <= self.region_end[-1 - region]
        if ok and region == -1:     # the core kernel: only inside its ranges
            i = bisect.bisect_right(self.core_ranges[0::2], q) - 1
            ok = i >= 0 and q <= self.core_ranges[2 * i + 1]
        return (line if ok else -1), False

    def _section_at(self, q: int) -> int:
        i = bisect.bisect_right(self.extent_start, q) - 1
        return self.extent_section[i] if i >= 0 and q < self.extent_end[i] else -1

    # Answers' hooks
    def _name_index(self):
        return self.name_hash, self.name_order

    def _line_name(self, line: int) -> str:
        return self.text[self.name_start[line]:self.name_end[line]].decode("utf-8", "surrogateescape")

    def _candidates(self, line: int):
        return self.ambiguous.get(line)

    def _object_at(self, address: int) -> int:
        section = self._section_at(address)
        return self.section_object[section] if section >= 0 else -1

    def _object_path(self, obj: int) -> str:
        return self.object_paths[obj]

    def _object_modules(self, obj: int) -> list[str]:
        return self.modsets[self.object_modset[obj]]


class Saved:
    """A snapshot file that matches its inputs: the mapped file (``view``),
    its ``doc``, where each array lies (``arrays``: name -> (offset, code,
    count)) and the kallsyms text it was checked against."""

    def __init__(self, view, doc: dict, arrays: dict, kallsyms_text: bytes):
        self.view, self.doc, self.arrays, self.kallsyms_text = view, doc, arrays, kallsyms_text

    def numpy_arrays(self) -> dict:
        """The arrays as numpy views of the mapping (no copy)."""
        import numpy as np
        return {name: np.frombuffer(self.view, dtype=np.dtype(code), count=count, offset=start)
                for name, (start, code, count) in self.arrays.items()}


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


# ------------------------------------------------------------- quick answers
RUNNERS = {"resolve": run_resolve, "lookup": run_lookup}


class _Declined(Exception):
    """The quick path hands over to the typer CLI."""


def quick_run(command: str, args: list[str]) -> int | None:
    """Run ``kmodsyms COMMAND ARGS`` (``resolve`` or ``lookup``) from a
    snapshot: the exit status, or None when this path does not answer
    (arguments it does not read, no matching snapshot, a stale file), and
    the full CLI must run instead, which also words any error."""
    options = parse_args(command, args)
    if options is None or options["no_cache"]:
        return None
    arguments = options["arguments"]
    try:
        if command == "resolve":
            check_addresses(arguments)
        else:
            for spec in arguments:
                parse_name(spec)
    except KmodsymsError:
        return None
    syms_path = options["syms"] or default_syms_path()
    kallsyms_path = options["kallsyms"] or LIVE_KALLSYMS
    sources = module_sources(kallsyms_path == LIVE_KALLSYMS, options["modules_dir"])
    saved = open_saved(syms_path, kallsyms_path, sources=sources)
    if saved is None:
        return None
    snapshot, meta = Snapshot(saved), saved.doc["meta"]
    if not snapshot.builtin_modules_known:
        # Made from kallsyms alone, the default file missing: as the full
        # CLI, answer so with its warning, unless told not to.
        if options["strict"] or options["syms"]:
            return None
        warn(degraded_warning(meta["kallsyms_source"], saved.doc["stats"]["degraded"]))
    elif kallsyms_path == LIVE_KALLSYMS:
        try:
            check_live(meta["source"], meta["kernel_release"], meta["build_id"])
        except StaleError as e:
            if not options["force"]:
                return None
            warn(forced_warning(e))
    for warning in snapshot.module_warnings:
        warn(warning)
    byte_exact_stdout()

    def run() -> int:
        try:
            return RUNNERS[command](snapshot, arguments, output_format(options))
        except (IndexError, KeyError, TypeError, OverflowError) as e:
            # A damaged snapshot (its arrays are trusted, not checked): drop
            # it; before any answer the full CLI takes over (and saves a new one).
            try:
                os.unlink(snapshot_path(syms_path, kallsyms_path))
            except (OSError, TypeError):
                pass
            if not snapshot.answered:
                raise _Declined from None
            raise KmodsymsError(f"damaged snapshot ({type(e).__name__}), now removed; "
                                "run the command again") from None

    try:
        return guarded(run)
    except _Declined:
        return None
