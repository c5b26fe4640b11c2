"""Build a dtrace_syms file from a distribution's debug vmlinux, without the
kernel's build tree: the object of each symbol from the vmlinux's DWARF and
symbol table, by rules D1-D6 of docs/distributions.md ("How a symbol gets
its object"), the module of each object from kbuild's Makefiles evaluated
against the kernel's config (:mod:`kmodsyms.scan.modmap.makeeval`).  Each object's
symbols become sections at their exact link addresses, so the file has a
link layout as a build tree's has (docs/format.md)."""

from __future__ import annotations

import json
import os
import platform
import re
import threading
import time
from array import array
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from kmodsyms import __version__
from kmodsyms.errors import KmodsymsError
from kmodsyms.format.fileformat import FLAG_FORCED, FLAG_FROM_DEBUG_INFO, FLAG_GUESSED_MODULES
from kmodsyms.format.symsfile import Meta, encode, write_atomic
from kmodsyms.kernelnames import kernel_spelling, name_token
from kmodsyms.scan.debuginfo.debugattr import BY_NONE, HOW, Attribution, attribute_objects, attribute_units, beside_objects
from kmodsyms.scan.debuginfo.debugcheck import check_config, check_modules_dir, check_system_map
from kmodsyms.scan.debuginfo.debugimage import check_debug_vmlinux_kind, read_debug_vmlinux
from kmodsyms.scan.debuginfo.dwarf import Dwarf, Unit
from kmodsyms.scan.elf.elfdefs import STT_FUNC
from kmodsyms.scan.elf.elfscan import ObjectScan
from kmodsyms.scan.modmap import makeeval
from kmodsyms.scan.modmap.kbuild import read_modules_builtin
from kmodsyms.scan.modmap.thick import ThickMap
from kmodsyms.scan.sysmap import read_kallsyms
from kmodsyms.scan.tables import assemble

INITCALL = b"__initcall__kmod_"


@dataclass
class DebugInputs:
    """Where a distribution keeps what the build reads."""

    vmlinux: str
    system_map: str
    config: str
    modules_dir: str
    release: str = ""


def default_inputs(release: str = "", vmlinux: str = "", root: str = "/") -> DebugInputs:
    """The distribution's paths for ``release`` (default: the running
    kernel's), each the first that exists (docs/distributions.md), under
    ``root`` (an unpacked package tree, a mounted image): the debug vmlinux
    in /usr/lib/debug (Debian and Ubuntu's boot/vmlinux-REL, Fedora's and
    Debian 14's lib/modules/REL/vmlinux); the System.map beside it, else
    the package's others; the config in /boot or the modules directory;
    the modules directory in /lib/modules or /usr/lib/modules."""
    release = release or platform.release()
    at = lambda *paths: tuple(os.path.join(root, p.lstrip("/")) for p in paths)  # noqa: E731
    vmlinux = vmlinux or _first(at(f"/usr/lib/debug/boot/vmlinux-{release}",
                                   f"/usr/lib/debug/lib/modules/{release}/vmlinux",
                                   f"/usr/lib/debug/vmlinux-{release}"))
    beside = os.path.dirname(os.path.realpath(vmlinux))
    modules = ("/lib/modules", "/usr/lib/modules")
    system_map = _first((os.path.join(beside, f"System.map-{release}"), os.path.join(beside, "System.map"))
                        + at(f"/usr/lib/debug/boot/System.map-{release}", f"/boot/System.map-{release}",
                             *(f"{m}/{release}/System.map" for m in modules)))
    config = _first(at(f"/boot/config-{release}", *(f"{m}/{release}/config" for m in modules),
                       f"/lib/modules/{release}/build/.config"))
    modules_dir = _first(at(*(f"{m}/{release}" for m in modules)),
                         lambda p: os.path.isfile(os.path.join(p, "modules.builtin")))
    return DebugInputs(vmlinux, system_map, config, modules_dir, release)


def _first(paths: tuple[str, ...], exists=os.path.exists) -> str:
    """The first of ``paths`` that exists, else the first (for the error)."""
    return next((p for p in paths if exists(p)), paths[0])


def default_source(version: str, root: str = "/usr/src") -> str:
    """The kernel source a distribution installs for ``version``'s X.Y:
    Debian's linux-source-X.Y package (``/usr/src/linux-source-X.Y.tar.xz``),
    Ubuntu's (``/usr/src/linux-source-X.Y.Z/linux-source-X.Y.Z.tar.bz2``),
    or such a tarball unpacked; "" when there is none."""
    found = re.match(r"(\d+)\.(\d+)", version)
    if not found:
        return ""
    ours = re.compile(rf"linux-source-{found.group(1)}\.{found.group(2)}(\.\d+)?")
    try:
        names = sorted(n for n in os.listdir(root) if ours.match(n))
    except OSError:
        return ""
    for name in names:     # a tarball of its own first
        path = os.path.join(root, name)
        if os.path.isfile(path) and ours.fullmatch(name.split(".tar")[0]):
            return path
    for name in names:
        path = os.path.join(root, name)
        if os.path.isdir(path):
            inner = [n for n in sorted(os.listdir(path)) if ours.fullmatch(n.split(".tar")[0]) and ".tar" in n]
            if inner:
                return os.path.join(path, inner[0])
            if os.path.isfile(os.path.join(path, "Kbuild")):
                return path
    return ""


@dataclass
class DebugBuildResult:
    output: str
    symbols: int
    objects: int
    modules: int
    seconds: float
    counts: dict = field(default_factory=dict)   # how many symbols each rule decided, and the rest
    self_check: dict = field(default_factory=dict)
    unattributed: list[str] = field(default_factory=list)   # every unattributed symbol's name
    module_map: str = ""
    forced: str = ""      # the check --force wrote it past, or ""
    inputs: dict = field(default_factory=dict)   # the files read, by input

    def summary(self) -> dict:
        return {"output": self.output, "inputs": self.inputs, "symbols": self.symbols, "objects": self.objects,
                "modules": self.modules, "module_map": self.module_map, "seconds": self.seconds,
                "attribution": self.counts, "self_check": self.self_check,
                "unattributed": self.unattributed, "forced": self.forced}


def release_of_vmlinux(path: str) -> str:
    """``REL`` of ``.../vmlinux-REL`` or of ``.../lib/modules/REL/vmlinux``
    (or of a ``vmlinuz-REL`` given by mistake, for the error that names
    REL's debug vmlinux); "" if neither."""
    base = os.path.basename(path)
    if base.startswith(("vmlinux-", "vmlinuz-")):
        return base[len("vmlinux-"):]
    parent = os.path.dirname(os.path.abspath(path))
    if base == "vmlinux" and os.path.basename(os.path.dirname(parent)) == "modules":
        return os.path.basename(parent)
    return ""


# ------------------------------------------------------------------ tables
def object_scans(attr: Attribution, section_names: list[str], section_flags: list[int]):
    """One scan per object: its symbols, in runs of consecutive addresses of
    one image section that no other object's symbol interrupts; each run is
    one section, whose link address is its first symbol's and which ends
    where the next run of that image section begins (or at its last
    symbol's end).  Also the runs' link addresses, in the order
    :func:`kmodsyms.scan.tables.assemble` lays out the sections (by object)."""
    placed = np.flatnonzero(attr.obj >= 0)
    # At one address a zero-size symbol comes first: it ends its object's
    # run there, and a sized one begins the next object's.
    order = placed[np.lexsort((attr.size[placed] > 0, attr.address[placed], attr.shndx[placed]))]
    obj = attr.obj[order].astype(np.int64)
    sec = attr.shndx[order].astype(np.int64)
    address = attr.address[order]
    end = address + attr.size[order]
    n = len(order)
    new_run = np.ones(n, dtype=bool)
    new_run[1:] = (obj[1:] != obj[:-1]) | (sec[1:] != sec[:-1])
    run = np.cumsum(new_run) - 1
    starts = np.flatnonzero(new_run)
    run_obj, run_sec, run_start = obj[starts], sec[starts], address[starts]
    # A run holds a byte of each of its symbols, zero-size ones too (an
    # initcall's entry, asm-defined, has no size), and ends where the next
    # run of its image section begins; one that begins there too holds none.
    last = np.maximum.reduceat(address, starts) if n else np.zeros(0, np.uint64)
    run_end = np.maximum(np.maximum.reduceat(end, starts), last + np.uint64(1)) if n \
        else np.zeros(0, np.uint64)
    same_section_next = np.zeros(len(starts), dtype=bool)
    same_section_next[:-1] = run_sec[1:] == run_sec[:-1]
    next_start = np.append(run_start[1:], np.uint64(0))
    run_end = np.where(same_section_next, np.where(next_start > run_start,
                                                   np.minimum(run_end, next_start), run_start), run_end)
    # Sections by object, runs in address order within each (assemble's layout).
    by_object = np.argsort(run_obj, kind="stable")
    local_index = np.empty(len(starts), dtype=np.int64)
    counts = np.bincount(run_obj, minlength=len(attr.objects)) if len(starts) else \
        np.zeros(len(attr.objects), np.int64)
    first = np.concatenate(([0], np.cumsum(counts)[:-1]))
    local_index[by_object] = np.arange(len(starts)) - np.repeat(first, counts)
    scans = [ObjectScan() for _ in attr.objects]
    names_of = [section_names[k] if k < len(section_names) else "" for k in range(len(section_names))]
    for r in by_object.tolist():
        scan = scans[int(run_obj[r])]
        k = int(run_sec[r])
        scan.sec_name.append(names_of[k] if k < len(names_of) else "")
        scan.sec_flags.append(section_flags[k] if k < len(section_flags) else 0)
        scan.sec_align.append(1)
        scan.sec_size.append(int(run_end[r] - run_start[r]))
    value = (address - run_start[run]).tolist()
    size = attr.size[order].tolist()
    info = attr.info[order].tolist()
    sym_section = local_index[run].tolist()
    # Symbols grouped by object, in address order within each.
    by_sym_object = np.argsort(obj, kind="stable").tolist()
    sym_counts = np.bincount(obj, minlength=len(attr.objects)).tolist() if n else [0] * len(attr.objects)
    at = 0
    names = attr.names
    order_list = order.tolist()
    for o, count in enumerate(sym_counts):
        if not count:
            continue
        mine = by_sym_object[at:at + count]
        at += count
        scan = scans[o]
        scan.sym_names = b"".join(names[order_list[j]] + b"\0" for j in mine)
        scan.sym_value = array("Q", [value[j] for j in mine])
        scan.sym_size = array("Q", [size[j] for j in mine])
        scan.sym_info = bytes(info[j] for j in mine)
        scan.sym_section = array("I", [sym_section[j] for j in mine])
    return scans, run_start[by_object]


# ------------------------------------------------------------ module map
def read_builtin(modules_dir: str) -> list[str]:
    """``modules.builtin`` of an installed kernel as module paths (``fs/ext4/ext4.o``)."""
    return read_modules_builtin(modules_dir, "give the kernel's modules directory "
                                "(/lib/modules/RELEASE, from its image package)")


def guessed_thick(modules_dir: str, objects: list[str], builtin: list[str]) -> ThickMap:
    """The ``--guess-modules`` map, from ``modules.builtin.modinfo``'s
    ``MOD.file=dir/mod`` alone: an object is its module's when its path is
    the module's file, or when it lies in the module's directory and that
    directory holds no other built-in module.  Wrong for a module of
    several objects that shares its directory; said so in ``info``."""
    by_dir: dict[str, list[str]] = {}
    for module in builtin:
        by_dir.setdefault(os.path.dirname(module), []).append(module)
    members: dict[str, list[str]] = {m: [] for m in builtin}
    wanted = set(builtin)
    for obj in objects:
        if obj in wanted:
            members[obj].append(obj)
            continue
        here = by_dir.get(os.path.dirname(obj), [])
        if len(here) == 1:
            members[here[0]].append(obj)
    return ThickMap.from_members(builtin, members)


def self_check(attr: Attribution, modfiles: dict[str, tuple[str, ...]], modules_dir: str,
               builtin: list[str]) -> dict:
    """Two names that carry their object's KBUILD_MODNAME, compared with
    the modfile the Makefiles gave the object D1-D4 chose:
    ``__initcall__kmod_<MODNAME>__...``, and the ``__param_<P>`` of each
    ``<MODNAME>.parmtype=<P>:...`` of ``modules.builtin.modinfo`` (when one
    symbol has that name).  A name that is not its object's is ``wrong``
    when either names a built-in module (``builtin``: modules.builtin's
    paths, ``fs/ext4/ext4.o``), so that an answer would differ; where
    neither does (security/ipe/eval.c redefines KBUILD_MODNAME as "ipe",
    in no module), every answer is vmlinux either way: counted as
    ``outside``."""
    builtin_paths = set(builtin)
    builtin_names = {kernel_spelling(os.path.basename(m)[:-2]).replace(",", "_") for m in builtin}

    def names(obj: int) -> list[str]:
        return [kernel_spelling(os.path.basename(m)).replace(",", "_")
                for m in modfiles.get(attr.objects[obj], ())]

    def in_builtin_module(obj: int) -> bool:
        return any(m + ".o" in builtin_paths for m in modfiles.get(attr.objects[obj], ()))

    result = {"initcalls_checked": 0, "initcalls_wrong": 0, "initcalls_unattributed": 0,
              "initcalls_outside": 0, "params_checked": 0, "params_wrong": 0,
              "params_unattributed": 0, "params_outside": 0, "examples": []}

    def check(kind: str, j: int, expected: str, token: bool) -> None:
        o = int(attr.obj[j])
        if o < 0:
            result[f"{kind}_unattributed"] += 1
            return
        result[f"{kind}_checked"] += 1
        own = ":".join(names(o))
        if expected in (own, name_token(own) if token else own):
            return
        if expected not in builtin_names and not in_builtin_module(o):
            result[f"{kind}_outside"] += 1
            return
        result[f"{kind}_wrong"] += 1
        if len(result["examples"]) < 5:
            result["examples"].append(f"{attr.names[j].decode('utf-8', 'backslashreplace')} in "
                                      f"{attr.objects[o]} ({own or 'in no module'}, not {expected})")

    by_name: dict[bytes, list[int]] = {}
    for j, name in enumerate(attr.names):
        if name.startswith(INITCALL):
            check("initcalls", j, name[len(INITCALL):].decode("utf-8", "surrogateescape").split("__", 1)[0],
                  True)
        elif name.startswith(b"__param_"):
            by_name.setdefault(name, []).append(j)
    try:
        with open(os.path.join(modules_dir, "modules.builtin.modinfo"), "rb") as f:
            entries = f.read().split(b"\0")
    except OSError:
        entries = []
    for entry in entries:
        key, eq, value = entry.partition(b"=")
        if eq and key.endswith(b".parmtype"):
            param = value.partition(b":")[0]
            found = by_name.get(b"__param_" + param, [])
            if len(found) == 1:
                check("params", found[0], key[:-len(b".parmtype")].decode("utf-8", "surrogateescape"),
                      False)
    return result


# ------------------------------------------------------------------ build
Progress = Callable[[str, int, int], None]


def build_from_debuginfo(inputs: DebugInputs, output: str, source: str | None,
                         guess_modules: bool = False, jobs: int = 0,
                         kbuild_map=None, kbuild_map_source: str = "", force: bool = False,
                         progress: Optional[Progress] = None,
                         warn: Callable[[str], None] = lambda message: None) -> DebugBuildResult:
    """Write ``output`` from a debug vmlinux and its kernel's config,
    System.map and modules directory.  The objects and their modules come
    from kbuild's Makefiles in ``source``, or are ``kbuild_map`` (a
    :class:`~kmodsyms.scan.modmap.makeeval.KbuildEval`, described by
    ``kbuild_map_source``), or with ``guess_modules`` from the units' names
    and modules.builtin.modinfo.  Each input is held to the debug vmlinux
    first (:mod:`.debugcheck`) and the result to the kernel's own names
    (:func:`self_check`): a failure refuses the build, and nothing is
    written, unless ``force``, when the file records it.  The source is
    unpacked and evaluated, and the DWARF read, while the rest is checked.
    ``progress(phase, done, total)`` hears how far each phase got;
    ``warn`` what a user should hear."""
    start = time.monotonic()
    _require(inputs, source, guess_modules, kbuild_map)
    forced: list[str] = []     # what --force wrote it past

    def held(check, *args):
        try:
            return check(*args)
        except KmodsymsError as e:
            if not force:
                raise
            forced.append(str(e))
            return None

    vm = read_debug_vmlinux(inputs.vmlinux, inputs.release)
    exact = bool(source) or kbuild_map is not None
    version = (held(check_config, inputs.config, vm) or "") if source else ""
    jobs = jobs or min(os.cpu_count() or 1, 4)
    dwarf = DwarfReading(inputs.vmlinux, progress)
    pending = makeeval.start(source, inputs.config, release=version or vm.release, jobs=jobs,
                             progress=progress, strict=not force) if source and kbuild_map is None else None
    try:
        sysmap = read_kallsyms(inputs.system_map, zero_is_hidden=False)
        listed = sysmap.names_bytes(slice(None))
        held(check_system_map, inputs.system_map, sysmap, vm, listed)
        held(check_modules_dir, inputs.modules_dir, vm)
        builtin = read_builtin(inputs.modules_dir)
        shown = set(listed)
        units = dwarf.result()
        if progress:
            progress("attributing symbols", 0, 0)
        by_unit = attribute_units(vm, units, shown)
        if exact:
            if kbuild_map is None:
                kbuild_map = pending.result()
                for line in kbuild_map.warnings:
                    warn(line)
                forced += kbuild_map.forced
                kbuild_map_source = f"evaluated from kbuild's Makefiles ({os.path.basename(os.path.normpath(source))})"
            objects = [o.path for o in kbuild_map.objects]
            modfiles = kbuild_map.modfiles()
            thick = makeeval.thick_from_eval(kbuild_map, builtin)
            module_map = kbuild_map_source
        else:
            objects = _objects_from_units(units)
            modfiles = {}
            thick = guessed_thick(inputs.modules_dir, objects, builtin)
            module_map = "guessed from modules.builtin.modinfo (file=): not exact"
    finally:
        dwarf.cancel()
        if pending is not None:
            pending.cancel()
    # D6: what the final link adds beside vmlinux.a, in no module.
    beside = beside_objects(units, objects)
    objects = objects + beside
    attr = attribute_objects(by_unit, units, objects)
    check = self_check(attr, modfiles, inputs.modules_dir, builtin) if exact else {}
    refusal = _refusal(check, thick, builtin, inputs) if exact else ""
    if refusal and not force:
        raise KmodsymsError(refusal + " (--force writes it anyway, and says so at every load)")
    forced += [refusal] if refusal else []
    refusal = "; ".join(forced)
    if refusal:
        warn(f"written anyway (--force), its answers may be wrong: {refusal}")
        module_map += f"; FORCED past: {refusal}"
    if progress:
        progress("writing", 0, 0)
    scans, bases = object_scans(attr, vm.section_names, vm.section_flags)
    owners = thick.object_modules()
    meta = Meta(kernel_release=inputs.release or vm.release or _release_of(inputs),
                build_id=vm.image.build_id, tool_version=f"kmodsyms {__version__}",
                object_source=f"debug info ({os.path.basename(inputs.vmlinux)}: {len(units)} DWARF units)",
                thick_source=module_map,
                flags=FLAG_FROM_DEBUG_INFO | (0 if exact else FLAG_GUESSED_MODULES)
                | (FLAG_FORCED if refusal else 0))
    strings, tables = assemble(thick, owners, objects, scans, [], shown)
    sections = tables["sections"]
    if len(bases) != len(sections):
        raise AssertionError("object_scans and assemble disagree on the sections")
    sections["address"] = bases
    sections["placement"] = 1
    counts = {name: int((attr.how == k).sum()) for k, name in enumerate(HOW)}
    counts["symbols"] = len(attr.names)
    module_symbols = int(sum(1 for o in attr.obj.tolist() if o >= 0 and owners.get(objects[o])))
    counts["in_modules"] = module_symbols
    counts["beside vmlinux.a"] = int((attr.obj >= len(objects) - len(beside)).sum())
    _record_anchors(tables, vm.image, sysmap, listed, strings, meta, counts, check, module_map, exact, refusal)
    write_atomic(output, encode(meta, strings, tables))
    unattributed = [attr.names[j].decode("utf-8", "backslashreplace")
                    for j in np.flatnonzero(attr.how == BY_NONE).tolist()]
    return DebugBuildResult(output, len(tables["symbols"]), len(objects), len(thick.modules),
                            time.monotonic() - start, counts, check, unattributed, module_map, refusal,
                            {"vmlinux": inputs.vmlinux, "system_map": inputs.system_map,
                             "config": inputs.config if source else None,
                             "modules_dir": inputs.modules_dir, "source": source})


def _require(inputs: DebugInputs, source, guess_modules: bool, kbuild_map) -> None:
    needed = [("debug vmlinux", inputs.vmlinux), ("System.map", inputs.system_map),
              ("modules directory", inputs.modules_dir)] + ([("config", inputs.config)] if source else [])
    for what, path in needed:
        if not os.path.exists(path):
            raise KmodsymsError(f"{path}: no such {what}; {_REMEDIES[what]}")
        if what == "debug vmlinux":
            check_debug_vmlinux_kind(path, inputs.release)
    if not os.path.isdir(inputs.modules_dir):
        raise KmodsymsError(f"{inputs.modules_dir}: not a directory; {_REMEDIES['modules directory']}")
    if not source and not guess_modules and kbuild_map is None:
        raise KmodsymsError("no kernel source given (--source): the module of each object comes "
                            "from kbuild's Makefiles; install the kernel's source (Debian/Ubuntu: "
                            "apt-get install linux-source-X.Y; Fedora/RHEL: the kernel-devel package "
                            "carries the Makefiles) and pass --source, or pass --guess-modules")


def _refusal(check: dict, thick: ThickMap, builtin: list[str], inputs: DebugInputs) -> str:
    """Why the module map is not this kernel's, in one line ("" when it
    is): a name of the kernel's own that says another built-in module than
    its object's (:func:`self_check`), or a module of modules.builtin that
    the map gives no object."""
    mapped = set(thick.module_paths)
    empty = [m for m in builtin if m not in mapped]
    fault = f"the config ({inputs.config}) or the source is not this kernel's: give both of its release"
    if check.get("initcalls_wrong") or check.get("params_wrong"):
        return (f"{check['initcalls_wrong']} of {check['initcalls_checked']} __initcall__kmod_ "
                f"symbols and {check['params_wrong']} of {check['params_checked']} parameters name "
                f"another built-in module than their object's (e.g. {check['examples'][0]}): {fault}")
    if empty:
        names = ", ".join(os.path.basename(m)[:-2] for m in empty[:3])
        return (f"{len(empty)} of the {len(builtin)} modules of modules.builtin have no object "
                f"in the module map (e.g. {names}): {fault}")
    return ""


class DwarfReading:
    """Every unit of a vmlinux's DWARF, read in a thread while the caller
    goes on.  A thread, not processes: the reading takes a fraction of the
    time the source's unpacking takes beside it, and each process would
    hold a copy of the DWARF (300 MB for a 7.2 kernel) and send its units
    back pickled."""

    def __init__(self, vmlinux: str, progress: Optional[Progress] = None):
        self.vmlinux, self.progress = vmlinux, progress
        self.stop, self.done = threading.Event(), threading.Event()
        self.outcome: object = None
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        try:
            dwarf = Dwarf.from_elf(self.vmlinux)
            offsets = dwarf.unit_offsets()
            units = []
            for k, offset in enumerate(offsets):
                if self.stop.is_set():
                    break
                unit = dwarf.unit(offset)
                if unit is not None:
                    units.append(unit)
                if self.progress and k % 64 == 0:
                    self.progress("reading DWARF", k, len(offsets))
            self.outcome = units
        except BaseException as e:
            self.outcome = e
        finally:
            self.done.set()

    def result(self) -> list[Unit]:
        self.done.wait()
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        return self.outcome

    def cancel(self) -> None:
        """Stop the reading at its next unit."""
        self.stop.set()


_REMEDIES = {
    "debug vmlinux": "install the kernel's debug package (docs/distributions.md) or give --vmlinux",
    "System.map": "give --system-map (Debian: in the -dbg package, beside the debug vmlinux)",
    "config": "give --config (the kernel's /boot/config-RELEASE)",
    "modules directory": "give --modules-dir (/lib/modules/RELEASE, from the kernel's image package)",
}


def _release_of(inputs: DebugInputs) -> str:
    return os.path.basename(os.path.normpath(inputs.modules_dir))


def _objects_from_units(units: list[Unit]) -> list[str]:
    """Without the source: each unit's name as an object path (``.c`` -> ``.o``)."""
    seen, out = set(), []
    for unit in units:
        name = unit.name
        if os.path.isabs(name) or name.startswith(".") or not name.endswith((".c", ".S", ".rs")):
            continue
        path = os.path.splitext(os.path.normpath(name))[0] + ".o"
        if path not in seen:
            seen.add(path)
            out.append(path)
    return out


ANCHORS_PER_SEGMENT = 16


def _record_anchors(tables: dict, image, sysmap, listed: list[bytes], strings, meta, counts: dict,
                    check: dict, module_map: str, exact_modules: bool, forced: str) -> None:
    """Segments, anchors (names once in the file and once in System.map,
    spread over each segment; functions only in the text ranges, as
    :func:`kmodsyms.scan.tables.record_layout` takes them) and the statistics."""
    from kmodsyms.format.symsfile import ANCHOR_DTYPE, SEGMENT_DTYPE
    symbols, sections = tables["symbols"], tables["sections"]
    from kmodsyms.format.symsfile import SymsFile
    syms = SymsFile.from_tables(meta, strings, tables)
    link = sections["address"][symbols["section"]] + symbols["value"]
    # Names unique in the file: the symbol array is sorted by name.
    name_off = symbols["name"]
    unique_in_file = np.ones(len(symbols), dtype=bool)
    same = name_off[1:] == name_off[:-1]
    unique_in_file[1:] &= ~same
    unique_in_file[:-1] &= ~same
    seen = Counter(listed)
    address = link
    in_text = np.zeros(len(symbols), dtype=bool)
    for start, end in sysmap.text_ranges():
        in_text |= (address >= start) & (address < end)
    is_function = symbols["type"] == STT_FUNC
    candidates = np.flatnonzero(unique_in_file)
    anchors = []
    for index, (start, end) in enumerate(image.segments):
        in_segment = (address >= start) & (address < end)
        for kind in (in_text, ~in_text & ~is_function):
            inside = candidates[(in_segment & kind)[candidates]]
            inside = inside[np.argsort(address[inside], kind="stable")].tolist()
            # Spread over the segment: from each of evenly spaced places,
            # the first name System.map has once.
            picked: list[int] = []
            for at in np.linspace(0, len(inside), ANCHORS_PER_SEGMENT, endpoint=False).astype(int).tolist():
                at = max(at, picked[-1] + 1 if picked else 0)
                while at < len(inside) and seen.get(syms.raw_string(int(name_off[inside[at]])), 0) != 1:
                    at += 1
                if at < len(inside):
                    picked.append(at)
            anchors += [(inside[p], index) for p in picked]
    anchors.sort(key=lambda a: (a[1], int(address[a[0]])))
    tables["segments"] = np.array(image.segments, dtype=SEGMENT_DTYPE)
    tables["anchors"] = np.array(anchors, dtype=ANCHOR_DTYPE)
    stats = {"core_lines": 0, "sections_by_anchor": len(sections), "sections_by_elimination": 0,
             "sections_by_neighbours": 0, "sections_unplaced": 0, "anchors": len(anchors),
             "conflicting_anchors": 0, "lines_by_anchor": 0, "lines_by_elimination": 0,
             "lines_by_neighbours": 0, "lines_by_extent": 0, "lines_core_unknown": 0,
             "lines_ambiguous": 0, "builtin_modules_known": exact_modules,
             "degraded": "" if exact_modules else module_map,
             "debug_info": {**counts, "self_check": check}, "forced": forced}
    meta.placement = json.dumps(stats)
