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
makes one, and the running kernel is checked again when one is used.  It
lives in ``$XDG_CACHE_HOME/kmodsyms`` (default ``~/.cache/kmodsyms``), one
per pair of file paths, written atomically and fsynced (mode 0600), and is
then trusted as Python trusts its own .pyc files: a missing, stale,
truncated or foreign one is not used; ``--no-cache`` bypasses it.  Byte
order and the ``marshal`` head are the machine's own: it never leaves the
machine that wrote it.
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
from .answer import Answers, parse_address, write_answers
from .errors import KmodsymsError, StaleError
from .live import LIVE_KALLSYMS, check_live, default_syms_path, module_sources, parse_proc_modules

MAGIC = b"KMSNAP\0\4"
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
    ("extent_section", "i|q"), ("section_object", "i|q"), ("answer_address", "Q"),
    ("answer_line", "i|q"), ("vmlinux_extent_start", "Q"), ("vmlinux_extent_end", "Q"),
    ("vmlinux_extent_section", "i|q"), ("core_ranges", "Q"),
)


def cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "kmodsyms")


def snapshot_path(syms_path: str, kallsyms_path: str) -> str:
    """Where the snapshot of this pair of files lives.  The name only
    spreads pairs over files; the key inside says which pair it holds."""
    pair = f"{os.path.abspath(syms_path)}\0{os.path.abspath(kallsyms_path)}"
    return os.path.join(cache_dir(), f"resolve-{zlib.crc32(pair.encode()):08x}")


def _key(syms_path: str, kallsyms_path: str, syms_size: int, syms_crc: bytes,
         kallsyms_text: bytes, sources, ko_files) -> dict:
    """What a snapshot must match.  The kallsyms text is known by its length
    and two checksums (64 bits in all): reading it is the one cost a
    snapshot cannot avoid, and these cost a few milliseconds more, where a
    cryptographic hash would cost as much again in imports."""
    return {"kmodsyms": __version__, "python": sys.version, "syms": os.path.abspath(syms_path),
            "kallsyms": os.path.abspath(kallsyms_path), "syms_size": syms_size,
            "syms_crc": syms_crc, "syms_mtime_ns": os.stat(syms_path).st_mtime_ns,
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


# ------------------------------------------------------------------ writing
def save(resolver, syms_path: str, kallsyms_path: str) -> None:
    """Save ``resolver`` (a full :class:`kmodsyms.resolver.Resolver`, loaded
    from these two paths with its checks on) as their snapshot.  Failure to
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
        "key": _key(syms_path, kallsyms_path, len(syms.data), bytes(syms.data[12:16]), ks.text,
                    resolver.sources, resolver.ko_files),
        "meta": {"source": syms.source, "kernel_release": syms.meta_kernel_release,
                 "build_id": syms.meta_build_id, "kallsyms_source": ks.source},
        "arrays": layout,
        "loaded_module_names": ks.module_names,
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
    try:
        os.makedirs(cache_dir(), mode=0o700, exist_ok=True)
        write_atomic(snapshot_path(syms_path, kallsyms_path),
                     _HEAD.pack(MAGIC, len(packed)) + body, mode=0o600)
    except (OSError, KmodsymsError):
        pass   # an unwritable cache (read-only home, full disk) only costs speed


# ------------------------------------------------------------------ reading
class Snapshot(Answers):
    """A saved resolver, answering :meth:`resolve` like the one it was saved
    from, over array views of the mapped file."""

    def __init__(self, saved: "Saved"):
        doc = saved.doc
        self.text = saved.kallsyms_text
        self.loaded_module_names = doc["loaded_module_names"]
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
        return self.record(address, *self._answer(address))

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
    try:
        with open(snapshot_path(syms_path, kallsyms_path), "rb") as f:
            data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        with open(syms_path, "rb") as f:
            syms_head = f.read(16)
            syms_size = os.fstat(f.fileno()).st_size
        if kallsyms_text is None:
            with open(kallsyms_path, "rb") as f:
                kallsyms_text = f.read()
        magic, length = _HEAD.unpack_from(data)
        if magic != MAGIC:
            return None
        doc = marshal.loads(data[_HEAD.size:_HEAD.size + length])
        key = _key(syms_path, kallsyms_path, syms_size, syms_head[12:16], kallsyms_text,
                   sources, doc["modules"]["ko_files"])
        if doc["key"] != key:
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
        return Saved(memoryview(data), doc, arrays, kallsyms_text)
    except (OSError, ValueError, KeyError, TypeError, EOFError, struct.error):
        return None


# ------------------------------------------------------------- quick resolve
def quick_resolve(args: list[str]) -> int | None:
    """Run ``kmodsyms resolve ARGS`` from a snapshot: the exit status, or
    None when this path does not answer (arguments it does not parse, no
    matching snapshot, a stale file), and the full CLI must run instead,
    which also reports any error in its own words."""
    options = _parse_resolve_args(args)
    if options is None:
        return None
    syms_path = options["syms"] or default_syms_path()
    kallsyms_path = options["kallsyms"] or LIVE_KALLSYMS
    sources = module_sources(kallsyms_path == LIVE_KALLSYMS, options["modules_dir"])
    saved = open_saved(syms_path, kallsyms_path, sources=sources)
    if saved is None:
        return None
    snapshot, meta = Snapshot(saved), saved.doc["meta"]
    if kallsyms_path == LIVE_KALLSYMS and not options["force"]:
        try:
            check_live(meta["source"], meta["kernel_release"], meta["build_id"])
        except StaleError:
            return None
    for warning in snapshot.module_warnings:
        print(f"kmodsyms: warning: {warning}", file=sys.stderr)
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(errors="surrogateescape")

    answered = 0

    def resolve(address: int):
        nonlocal answered
        record = snapshot.resolve(address)
        answered += 1
        return record

    try:
        write_answers(resolve, options["addresses"], options["json"])
        sys.stdout.flush()
    except (IndexError, KeyError, TypeError, OverflowError) as e:
        # A damaged snapshot (its arrays are trusted, not checked): drop it;
        # before any answer the full CLI takes over (and saves a new one).
        try:
            os.unlink(snapshot_path(syms_path, kallsyms_path))
        except OSError:
            pass
        if not answered:
            return None
        print(f"kmodsyms: error: damaged snapshot ({type(e).__name__}), now removed; "
              "run the command again", file=sys.stderr)
        return 2
    except KmodsymsError as e:
        print(f"kmodsyms: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


_VALUE_OPTIONS = {"--syms": "syms", "-s": "syms", "--kallsyms": "kallsyms",
                  "--modules-dir": "modules_dir"}
_FLAG_OPTIONS = {"--json": "json", "--force": "force", "--no-cache": "no_cache"}


def _parse_resolve_args(args: list[str]) -> dict | None:
    """``resolve``'s arguments as the typer command would take them, or None
    for anything else (help, unknown or malformed options, bad addresses,
    --no-cache): those go to the typer command."""
    options = {"syms": None, "kallsyms": None, "modules_dir": None, "json": False, "force": False,
               "no_cache": False, "addresses": []}
    i = 0
    only_arguments = False
    while i < len(args):
        arg = args[i]
        i += 1
        if only_arguments or arg == "-" or not arg.startswith("-"):
            options["addresses"].append(arg)
        elif arg == "--":
            only_arguments = True
        elif arg in _FLAG_OPTIONS:
            options[_FLAG_OPTIONS[arg]] = True
        else:
            name, eq, value = arg.partition("=")
            if name not in _VALUE_OPTIONS or (eq and name == "-s"):   # click: -s=F is "=F"
                return None
            if not eq:
                if i >= len(args):
                    return None
                value = args[i]
                i += 1
            options[_VALUE_OPTIONS[name]] = value
    if options["no_cache"] or not options["addresses"]:
        return None
    try:
        for arg in options["addresses"]:
            if arg != "-":
                parse_address(arg)
    except KmodsymsError:
        return None
    return options
