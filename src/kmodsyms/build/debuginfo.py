"""Build a dtrace_syms file from a distribution's debug vmlinux, without the
kernel's build tree: the object of each symbol from the vmlinux's DWARF and
symbol table, by rules D1-D6 of docs/distributions.md ("How a symbol gets
its object"), the module of each object from kbuild's Makefiles evaluated
against the kernel's config (:mod:`kmodsyms.build.makeeval`).  Each object's
symbols become sections at their exact link addresses, so the file has a
link layout as a build tree's has (docs/format.md)."""

from __future__ import annotations

import bisect
import json
import os
import platform
import time
from array import array
from dataclasses import dataclass, field

import numpy as np

from .. import __version__
from .dwarf import Dwarf, Unit
from .elfdefs import SHN_LORESERVE, SHN_UNDEF, STB_LOCAL, STT_FILE, STT_FUNC, STT_SECTION
from .elfscan import ObjectScan
from ..errors import KmodsymsError
from .kallsyms import never_listed
from ..kernelnames import kernel_spelling
from .thick import ThickMap

PFX = b"__pfx_"
PFX_SIZE = 16
SCT, SCK = b"__SCT__", b"__SCK__"
INITCALL = b"__initcall__kmod_"


@dataclass
class DebugInputs:
    """Where a distribution keeps what the build reads."""

    vmlinux: str
    system_map: str
    config: str
    modules_dir: str
    release: str = ""


def default_inputs(release: str = "") -> DebugInputs:
    """The distribution's paths for ``release`` (default: the running
    kernel's): Debian/Ubuntu ``/usr/lib/debug/boot/vmlinux-REL``, Fedora/RHEL
    ``/usr/lib/debug/lib/modules/REL/vmlinux``; ``/boot/config-REL``,
    ``/boot/System.map-REL`` and ``/lib/modules/REL``."""
    release = release or platform.release()
    vmlinux = next((p for p in (f"/usr/lib/debug/boot/vmlinux-{release}",
                                f"/usr/lib/debug/lib/modules/{release}/vmlinux",
                                f"/usr/lib/debug/vmlinux-{release}") if os.path.exists(p)),
                   f"/usr/lib/debug/boot/vmlinux-{release}")
    system_map = next((p for p in (f"/usr/lib/debug/boot/System.map-{release}",
                                   f"/boot/System.map-{release}",
                                   f"/lib/modules/{release}/System.map") if os.path.exists(p)),
                      f"/boot/System.map-{release}")
    config = next((p for p in (f"/boot/config-{release}", f"/lib/modules/{release}/config",
                               f"/lib/modules/{release}/build/.config") if os.path.exists(p)),
                  f"/boot/config-{release}")
    return DebugInputs(vmlinux, system_map, config, f"/lib/modules/{release}", release)


@dataclass
class Attribution:
    """The object of every kept symbol of the image."""

    names: list[bytes]
    address: np.ndarray        # u64
    size: np.ndarray           # u64
    info: np.ndarray           # u8
    shndx: np.ndarray          # u32, the image's section
    obj: np.ndarray            # i32 index into ``objects``, -1: unattributed
    how: np.ndarray            # i8: see HOW
    objects: list[str]


HOW = ("unattributed", "file run", "code range", "variable", "padding", "static call", "no object")
(BY_NONE, BY_FILE_RUN, BY_RANGE, BY_VARIABLE, BY_PADDING, BY_STATIC_CALL, BY_NO_OBJECT) = range(7)


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

    def summary(self) -> dict:
        return {"output": self.output, "symbols": self.symbols, "objects": self.objects,
                "modules": self.modules, "module_map": self.module_map, "seconds": self.seconds,
                "attribution": self.counts, "self_check": self.self_check,
                "unattributed": self.unattributed}


def release_of_vmlinux(path: str) -> str:
    """``REL`` of ``.../vmlinux-REL`` or of ``.../lib/modules/REL/vmlinux``; "" if neither."""
    base = os.path.basename(path)
    if base.startswith("vmlinux-"):
        return base[len("vmlinux-"):]
    parent = os.path.dirname(os.path.abspath(path))
    if base == "vmlinux" and os.path.basename(os.path.dirname(parent)) == "modules":
        return os.path.basename(parent)
    return ""


# ------------------------------------------------------------------ units
def _unit_stem(unit: Unit) -> str:
    """The unit's name less its extension, relative to its build directory
    when under it."""
    name = unit.name
    if os.path.isabs(name) and unit.comp_dir and name.startswith(unit.comp_dir.rstrip("/") + "/"):
        name = name[len(unit.comp_dir.rstrip("/")) + 1:]
    return os.path.splitext(os.path.normpath(name))[0]


def _matches(units: list[Unit], objects: list[str]) -> list[tuple[int, str]]:
    """Per unit, the index in ``objects`` of its object (-1 for none) and
    the prefix of its stem before that object's path."""
    stems = {o[:-2] if o.endswith(".o") else o: i for i, o in enumerate(objects)}
    found = []
    for unit in units:
        parts = _unit_stem(unit).split("/")
        match = (-1, "")
        for start in range(len(parts)):
            index = stems.get("/".join(parts[start:]), -1)
            if index >= 0:
                match = (index, "/".join(parts[:start]))
                break
        found.append(match)
    return found


def unit_objects(units: list[Unit], objects: list[str]) -> list[int]:
    """The index in ``objects`` of each unit's object, -1 for none: the
    object whose path (less ``.o``) is the longest tail of the unit's name
    less its extension."""
    return [index for index, _prefix in _matches(units, objects)]


SOURCE_SUFFIXES = (".c", ".S", ".s", ".rs")


def beside_objects(units: list[Unit], objects: list[str]) -> list[str]:
    """D6: the objects the final link adds beside ``objects`` (vmlinux.a's),
    in unit order: each unit named after a source file that is no object of
    ``objects`` (``.vmlinux.export.c``, ``init/version-timestamp.c``), as its
    path less the prefix most of the other units' names carry (the source
    tree's, in an ``O=`` build).  A unit named after a header (gas names an
    assembler unit after one it included) is none."""
    matches = _matches(units, objects)
    prefixes: dict[str, int] = {}
    for index, prefix in matches:
        if index >= 0:
            prefixes[prefix] = prefixes.get(prefix, 0) + 1
    common = max(prefixes, key=prefixes.get) if prefixes else ""
    known, out = set(objects), []
    for unit, (index, _prefix) in zip(units, matches):
        if index >= 0 or not unit.name.endswith(SOURCE_SUFFIXES):
            continue
        stem = _unit_stem(unit)
        if common and stem.startswith(common + "/"):
            stem = stem[len(common) + 1:]
        path = stem + ".o"
        if not os.path.isabs(path) and not path.startswith("../") and path not in known:
            known.add(path)
            out.append(path)
    return out


def _read_dwarf_units(vmlinux: str, jobs: int) -> list[Unit]:
    """Every unit of ``vmlinux``, read by ``jobs`` processes, each of which
    reads the DWARF itself and takes every ``jobs``-th unit (units differ in
    size: dealt round-robin, each gets a fair share); this process reads
    none of it."""
    if jobs <= 1:
        return list(Dwarf.from_elf(vmlinux).units())
    from concurrent.futures import ProcessPoolExecutor
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        parts = list(pool.map(_units_of_share, [vmlinux] * jobs, range(jobs), [jobs] * jobs))
    return sorted((u for part in parts for u in part), key=lambda u: u.offset)


def _units_of_share(vmlinux: str, share: int, shares: int) -> list[Unit]:
    dwarf = Dwarf.from_elf(vmlinux)
    return list(dwarf.units(dwarf.unit_offsets()[share::shares]))


# ------------------------------------------------------------ attribution
def attribute(vmlinux: str, units: list[Unit], objects: list[str],
              shown: set[bytes] | None) -> Attribution:
    """The object of each symbol of ``vmlinux``'s symbol table that a
    kallsyms line can be (a name of ``shown``, System.map's, when given)."""
    from .elffile import ElfFile
    from .elfdefs import SHT_SYMTAB
    with open(vmlinux, "rb") as f:
        elf = ElfFile(vmlinux, f, "image", "give the debug vmlinux of the kernel")
        symtab = elf.find_section(SHT_SYMTAB)
        if symtab is None:
            raise KmodsymsError(f"{vmlinux}: no symbol table; give the debug vmlinux "
                                "(from the kernel's -dbg/-debuginfo package)")
        table = elf.symbol_array(symtab)
        strings = elf.symbol_strings(symtab) + b"\0"
    names_all = [strings[o:strings.index(b"\0", o)] for o in table["name"].tolist()]
    info_all = table["info"].astype(np.uint8)
    kind = info_all & 0xF
    bind = info_all >> 4
    unit_obj = unit_objects(units, objects)

    # Code ranges, by start; an empty one first, which holds no address, so
    # that an image of data alone searches them as any other.
    lo, hi, owner = [0], [0], [-1]
    for u, unit in enumerate(units):
        for a, b in unit.ranges:
            lo.append(a), hi.append(b), owner.append(u)
    order = np.argsort(np.array(lo, dtype=np.uint64), kind="stable")
    range_lo = np.array(lo, dtype=np.uint64)[order]
    range_hi = np.array(hi, dtype=np.uint64)[order]
    range_unit = np.array(owner, dtype=np.int64)[order]
    # Variables: address -> units claiming it (with the name each gives).
    claims: dict[int, list[tuple[int, bytes]]] = {}
    for u, unit in enumerate(units):
        for address, name in unit.variables:
            claims.setdefault(address, []).append((u, name))

    n_all = len(table)
    value = table["value"].astype(np.uint64)
    shndx = table["shndx"].astype(np.int64)

    def unit_at(address: int, name: bytes) -> tuple[int, int]:
        """The unit of a static variable's address (outside every code range)."""
        claimed = claims.get(address)
        if claimed:
            named = {u for u, n in claimed if n == name} or {u for u, _n in claimed}
            if len(named) == 1:
                return next(iter(named)), BY_VARIABLE
        return -1, BY_NONE

    # D1: STT_FILE runs of local symbols.
    run_of = np.full(n_all, -1, dtype=np.int64)
    run_names: list[bytes] = []
    current = -1
    for i in range(n_all):
        if kind[i] == STT_FILE:
            current = len(run_names)
            run_names.append(names_all[i])
        elif bind[i] == STB_LOCAL and not names_all[i].startswith(PFX):
            # objtool adds __pfx_ locals after every object's: in no file's run.
            run_of[i] = current
        else:
            current = -1

    keep = (shndx != SHN_UNDEF) & (shndx < SHN_LORESERVE) & (kind != STT_FILE) & (kind != STT_SECTION)
    kept = [i for i in np.flatnonzero(keep).tolist()
            if (names_all[i] in shown if shown is not None else not never_listed(names_all[i]))]
    # D2: code ranges first (one search for all), then the variables.
    kept_address = value[kept]
    k = np.searchsorted(range_lo, kept_address, side="right") - 1
    inside = (k >= 0) & (kept_address < range_hi[np.maximum(k, 0)])
    in_unit = np.where(inside, range_unit[np.maximum(k, 0)], -1)
    # A function's range may begin after its symbol: arm64's
    # -fpatchable-function-entry=N,M puts M NOPs in the symbol, before the
    # entry the DWARF starts at.  Then the range holding its last byte, if
    # that range begins inside the symbol, is its unit's.
    kept_size = table["size"].astype(np.uint64)[kept]
    last = kept_address + np.maximum(kept_size, np.uint64(1)) - np.uint64(1)
    k_last = np.searchsorted(range_lo, last, side="right") - 1
    k_last_ok = np.maximum(k_last, 0)
    tail = (~inside & (kept_size > 0) & (k_last >= 0) & (last < range_hi[k_last_ok])
            & (range_lo[k_last_ok] > kept_address))
    in_unit = np.where(tail, range_unit[k_last_ok], in_unit).tolist()
    by_address = {}
    for j, i in enumerate(kept):
        if in_unit[j] >= 0:
            by_address[i] = (in_unit[j], BY_RANGE)
        else:
            by_address[i] = unit_at(int(value[i]), names_all[i])

    # D1: tie each run to a unit.  Its file's name names it (a C file's
    # STT_FILE is its source's base name, an assembler file's often its
    # object's); among units of that name, or when none has it, the units
    # its symbols' addresses give decide: sized symbols first, as a
    # zero-size static (a lockdep __key at the end of its object) shares its
    # address with the next object's first symbol.
    def stem(name: str) -> str:
        return os.path.splitext(os.path.basename(name))[0]

    by_basename: dict[str, list[int]] = {}
    by_stem: dict[str, list[int]] = {}
    for u, unit in enumerate(units):
        by_basename.setdefault(os.path.basename(unit.name), []).append(u)
        by_stem.setdefault(stem(unit.name), []).append(u)
    votes: dict[int, dict[int, int]] = {}
    zero_votes: dict[int, dict[int, int]] = {}
    size_all = table["size"]
    for i in kept:
        r = int(run_of[i])
        u, _how = by_address[i]
        if r >= 0 and u >= 0:
            tally = (votes if int(size_all[i]) else zero_votes).setdefault(r, {})
            tally[u] = tally.get(u, 0) + 1
    run_unit = {}
    run_candidates: dict[int, list[int]] = {}
    for r, name in enumerate(run_names):
        base = name.decode("utf-8", "surrogateescape")
        named = by_basename.get(base) or by_stem.get(stem(base), [])
        run_candidates[r] = named
        if len(named) == 1:
            run_unit[r] = named[0]
            continue
        sized, zero = votes.get(r, {}), zero_votes.get(r, {})
        if named:
            for tally in (sized, zero):
                voted = [u for u in tally if u in named]
                if voted:
                    if len(voted) == 1:
                        run_unit[r] = voted[0]
                    break
        elif len(sized) == 1:    # no unit has its name (gas named it after a header)
            run_unit[r] = next(iter(sized))
    # Else by link order: the linker writes both the runs and the units in
    # the order of its input objects, so an untied run's unit lies between
    # the units of the tied runs around it; one of its file's name there is it.
    tied = sorted(run_unit)
    for r in range(len(run_names)):
        if r in run_unit:
            continue
        k = bisect.bisect_left(tied, r)
        below = run_unit[tied[k - 1]] if k > 0 else -1
        above = run_unit[tied[k]] if k < len(tied) else len(units)
        between = [u for u in run_candidates[r] if below < u < above]
        if len(between) == 1:
            run_unit[r] = between[0]
    # A unit named after no object (gas names an assembler unit after an
    # included header): the object of its file run's name, when one has it.
    object_by_base: dict[str, list[int]] = {}
    for k, o in enumerate(objects):
        object_by_base.setdefault(os.path.basename(o)[:-2], []).append(k)
    for r, u in run_unit.items():
        if unit_obj[u] < 0:
            stem = os.path.splitext(run_names[r].decode("utf-8", "surrogateescape"))[0]
            if len(object_by_base.get(stem, ())) == 1:
                unit_obj[u] = object_by_base[stem][0]

    n = len(kept)
    obj = np.full(n, -1, dtype=np.int32)
    how = np.zeros(n, dtype=np.int8)
    for j, i in enumerate(kept):
        r = int(run_of[i])
        if r >= 0 and r in run_unit:
            u, h = run_unit[r], BY_FILE_RUN
        else:
            u, h = by_address[i]
        if u >= 0:
            o = unit_obj[u]
            obj[j], how[j] = (o, h) if o >= 0 else (-1, BY_NO_OBJECT)
    _break_variable_ties(obj, how, kept, claims, value, shndx, names_all, unit_obj)
    # D3, D4: padding and static-call trampolines follow what they belong to.
    names = [names_all[i] for i in kept]
    address = value[kept]
    functions = {}     # (address, name) -> object, of the attributed functions
    for j in range(n):
        if kind[kept[j]] == STT_FUNC and obj[j] >= 0:
            functions[(int(address[j]), names[j])] = int(obj[j])
    keys: dict[bytes, list[int]] = {}
    for j, name in enumerate(names):
        if name.startswith(SCK):
            keys.setdefault(name, []).append(j)
    for j in range(n):
        if how[j] != BY_NONE:
            continue
        name = names[j]
        if name.startswith(PFX):
            o = functions.get((int(address[j]) + PFX_SIZE, name[len(PFX):]), -1)
            if o >= 0:
                obj[j], how[j] = o, BY_PADDING
        elif name.startswith(SCT):
            key = keys.get(SCK + name[len(SCT):], [])
            if len(key) == 1 and obj[key[0]] >= 0:
                obj[j], how[j] = obj[key[0]], BY_STATIC_CALL
    return Attribution(names, address, table["size"].astype(np.uint64)[kept], info_all[kept],
                       shndx[kept].astype(np.uint32), obj, how, objects)


def _break_variable_ties(obj, how, kept, claims, value, shndx, names, unit_obj) -> None:
    """A variable two units claim (a weak definition's DW_OP_addr names the
    strong one's address) has the bytes of one of them.  Across any
    neighbours tied as it is, the symbols of its image section below and
    above it were decided: its bytes are those of an object from the one
    below to the one above in link order (the order of ``objects``), as the
    linker lays input sections out in that order, each contiguous.  When one
    claimant alone lies there, and it is the one below or above, it is that
    one's."""
    order = sorted(range(len(kept)), key=lambda j: (int(shndx[kept[j]]), int(value[kept[j]])))
    tied = {}
    for j, i in enumerate(kept):
        if how[j] != BY_NONE:
            continue
        claimed = claims.get(int(value[i]))
        if claimed and len(claimed) > 1:
            units = {u for u, n in claimed if n == names[i]} or {u for u, _n in claimed}
            tied[j] = {unit_obj[u] for u in units if unit_obj[u] >= 0}
    if not tied:
        return
    k = 0
    while k < len(order):
        if order[k] not in tied:
            k += 1
            continue
        first = k      # a group: tied symbols with no decided one between them
        while k < len(order) and (order[k] in tied or how[order[k]] == BY_NONE):
            k += 1
        group = [order[m] for m in range(first, k) if order[m] in tied]
        section = int(shndx[kept[group[0]]])
        below = order[first - 1] if first > 0 else None
        above = order[k] if k < len(order) else None
        if below is None or above is None or int(shndx[kept[below]]) != section \
                or int(shndx[kept[above]]) != section:
            continue
        low, high = int(obj[below]), int(obj[above])
        if low < 0:
            continue
        for j in group:
            # Where one input section pattern of the linker script ends and
            # the next begins, the objects below and above bound nothing
            # (init/version-timestamp.o's strong init_uts_ns, after
            # vmlinux.o's .data): a claimant between them that is neither
            # may not be the one.
            between = [o for o in tied[j] if low <= o <= high]
            if len(between) == 1 and between[0] in (low, high):
                obj[j], how[j] = between[0], BY_VARIABLE


# ------------------------------------------------------------------ tables
def object_scans(attr: Attribution, section_names: list[str], section_flags: list[int]):
    """One scan per object: its symbols, in runs of consecutive addresses of
    one image section that no other object's symbol interrupts; each run is
    one section, whose link address is its first symbol's and which ends
    where the next run of that image section begins (or at its last
    symbol's end).  Also the runs' link addresses, in the order
    :func:`kmodsyms.build.tables.assemble` lays out the sections (by object)."""
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
    path = os.path.join(modules_dir, "modules.builtin")
    try:
        with open(path) as f:
            lines = f.read().split()
    except OSError as e:
        raise KmodsymsError(f"cannot read {path}: {e.strerror}; give the kernel's modules "
                            "directory (/lib/modules/RELEASE, from its image package)") from None
    out = []
    for line in lines:
        line = line[len("kernel/"):] if line.startswith("kernel/") else line
        for suffix in (".ko", ".ko.xz", ".ko.zst", ".ko.gz"):
            if line.endswith(suffix):
                line = line[:-len(suffix)]
                break
        out.append(line + ".o")
    return out


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


def self_check(attr: Attribution, modfiles: dict[str, tuple[str, ...]], modules_dir: str) -> dict:
    """Two names that carry their object's KBUILD_MODNAME, compared with
    the modfile the Makefiles gave the object D1-D4 chose:
    ``__initcall__kmod_<MODNAME>__...``, and the ``__param_<P>`` of each
    ``<MODNAME>.parmtype=<P>:...`` of ``modules.builtin.modinfo`` (when one
    symbol has that name)."""
    def modname(obj: int) -> str:
        return ":".join(kernel_spelling(os.path.basename(m)).replace(",", "_")
                        for m in modfiles.get(attr.objects[obj], ()))

    result = {"initcalls_checked": 0, "initcalls_wrong": 0, "initcalls_unattributed": 0,
              "params_checked": 0, "params_wrong": 0, "params_unattributed": 0, "examples": []}

    def check(kind: str, j: int, expected: str) -> None:
        o = int(attr.obj[j])
        if o < 0:
            result[f"{kind}_unattributed"] += 1
            return
        result[f"{kind}_checked"] += 1
        if modname(o) != expected:
            result[f"{kind}_wrong"] += 1
            if len(result["examples"]) < 5:
                result["examples"].append(f"{attr.names[j].decode()} in {attr.objects[o]} "
                                          f"({modname(o)}, not {expected})")

    by_name: dict[bytes, list[int]] = {}
    for j, name in enumerate(attr.names):
        if name.startswith(INITCALL):
            check("initcalls", j, name[len(INITCALL):].decode("utf-8", "surrogateescape").split("__", 1)[0])
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
                check("params", found[0], key[:-len(b".parmtype")].decode("utf-8", "surrogateescape"))
    return result


# ------------------------------------------------------------------ build
def build_from_debuginfo(inputs: DebugInputs, output: str, source: str | None,
                         guess_modules: bool = False, jobs: int = 0,
                         kbuild_map=None, kbuild_map_source: str = "") -> DebugBuildResult:
    """Write ``output`` from a debug vmlinux and its kernel's config,
    System.map and modules directory.  The objects and their modules come
    from kbuild's Makefiles in ``source``, or are ``kbuild_map`` (a
    :class:`~kmodsyms.build.makeeval.KbuildEval`, described by
    ``kbuild_map_source``), or with ``guess_modules`` from the units' names
    and modules.builtin.modinfo."""
    start = time.monotonic()
    from .elfimage import read_image
    from .kallsyms import read_kallsyms
    from ..format.symsfile import (FLAG_FROM_DEBUG_INFO, FLAG_GUESSED_MODULES, Meta, encode,
                           write_atomic)
    from .tables import assemble
    needed = [("debug vmlinux", inputs.vmlinux), ("System.map", inputs.system_map),
              ("modules directory", inputs.modules_dir)] + ([("config", inputs.config)] if source else [])
    for what, path in needed:
        if not os.path.exists(path):
            raise KmodsymsError(f"{path}: no such {what}; {_REMEDIES[what]}")
    if not source and not guess_modules and kbuild_map is None:
        raise KmodsymsError("no kernel source given (--source): the module of each object comes "
                            "from kbuild's Makefiles; install the kernel's source (Debian/Ubuntu: "
                            "apt-get install linux-source-X.Y; Fedora/RHEL: the kernel-devel package "
                            "carries the Makefiles) and pass --source, or pass --guess-modules")
    builtin = read_builtin(inputs.modules_dir)
    jobs = jobs or min(os.cpu_count() or 1, 4)
    exact = source or kbuild_map is not None
    from .makeeval import start as start_evaluation, thick_from_eval
    # make reads the Makefiles while the DWARF is read.
    pending = start_evaluation(source, inputs.config) if source and kbuild_map is None else None
    image = read_image(inputs.vmlinux)
    units = _read_dwarf_units(inputs.vmlinux, jobs)
    if exact:
        if kbuild_map is None:
            kbuild_map = pending.result()
            kbuild_map_source = f"evaluated from kbuild's Makefiles ({os.path.basename(os.path.normpath(source))})"
        objects = [o.path for o in kbuild_map.objects]
        modfiles = kbuild_map.modfiles()
        thick = thick_from_eval(kbuild_map, builtin)
        module_map = kbuild_map_source
    else:
        objects = _objects_from_units(units)
        modfiles = {}
        thick = guessed_thick(inputs.modules_dir, objects, builtin)
        module_map = "guessed from modules.builtin.modinfo (file=): not exact"
    # D6: what the final link adds beside vmlinux.a, in no module.
    beside = beside_objects(units, objects)
    objects = objects + beside
    sysmap = read_kallsyms(inputs.system_map, zero_is_hidden=False)
    shown = set(sysmap.names_bytes(slice(None)))
    attr = attribute(inputs.vmlinux, units, objects, shown)
    section_names, section_flags = _image_sections(inputs.vmlinux)
    scans, bases = object_scans(attr, section_names, section_flags)
    owners = thick.object_modules()
    meta = Meta(kernel_release=inputs.release or _release_of(inputs), build_id=image.build_id,
                tool_version=f"kmodsyms {__version__}",
                object_source=f"debug info ({os.path.basename(inputs.vmlinux)}: {len(units)} DWARF units)",
                thick_source=module_map,
                flags=FLAG_FROM_DEBUG_INFO | (0 if exact else FLAG_GUESSED_MODULES))
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
    check = self_check(attr, modfiles, inputs.modules_dir) if exact else {}
    _record_anchors(tables, image, sysmap, strings, meta, counts, check, module_map, bool(exact))
    write_atomic(output, encode(meta, strings, tables))
    unattributed = [attr.names[j].decode("utf-8", "backslashreplace")
                    for j in np.flatnonzero(attr.how == BY_NONE).tolist()]
    return DebugBuildResult(output, len(tables["symbols"]), len(objects), len(thick.modules),
                            time.monotonic() - start, counts, check, unattributed, module_map)


_REMEDIES = {
    "debug vmlinux": "install the kernel's debug package (docs/distributions.md) or give --debuginfo",
    "System.map": "give --system-map (Debian: in the -dbg package and /boot)",
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


def _image_sections(vmlinux: str) -> tuple[list[str], list[int]]:
    from .elffile import ElfFile
    with open(vmlinux, "rb") as f:
        elf = ElfFile(vmlinux, f, "image", "give the debug vmlinux of the kernel")
        return ([elf.section_name(i) for i in range(len(elf.sections))],
                [s.flags & 0xFFFFFFFF for s in elf.sections])


ANCHORS_PER_SEGMENT = 16


def _record_anchors(tables: dict, image, sysmap, strings, meta, counts: dict, check: dict,
                    module_map: str, exact_modules: bool) -> None:
    """Segments, anchors (names once in the file and once in System.map,
    spread over each segment; functions only in the text ranges, as
    :func:`kmodsyms.build.tables.record_layout` takes them) and the statistics."""
    from ..format.symsfile import ANCHOR_DTYPE, SEGMENT_DTYPE
    symbols, sections = tables["symbols"], tables["sections"]
    from ..format.symsfile import SymsFile
    syms = SymsFile.from_tables(meta, strings, tables)
    link = sections["address"][symbols["section"]] + symbols["value"]
    # Names unique in the file: the symbol array is sorted by name.
    name_off = symbols["name"]
    unique_in_file = np.ones(len(symbols), dtype=bool)
    same = name_off[1:] == name_off[:-1]
    unique_in_file[1:] &= ~same
    unique_in_file[:-1] &= ~same
    map_names = sysmap.names_bytes(slice(None))
    seen: dict[bytes, int] = {}
    for name in map_names:
        seen[name] = seen.get(name, 0) + 1
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
            inside = [k for k in inside.tolist()
                      if seen.get(syms.raw_string(int(name_off[k])), 0) == 1]
            inside.sort(key=lambda k: int(address[k]))
            if inside:
                pick = np.linspace(0, len(inside) - 1, min(ANCHORS_PER_SEGMENT, len(inside))).astype(int)
                anchors += [(inside[p], index) for p in sorted(set(pick.tolist()))]
    anchors.sort(key=lambda a: (a[1], int(address[a[0]])))
    tables["segments"] = np.array(image.segments, dtype=SEGMENT_DTYPE)
    tables["anchors"] = np.array(anchors, dtype=ANCHOR_DTYPE)
    stats = {"core_lines": 0, "sections_by_anchor": len(sections), "sections_by_elimination": 0,
             "sections_by_neighbours": 0, "sections_unplaced": 0, "anchors": len(anchors),
             "conflicting_anchors": 0, "lines_by_anchor": 0, "lines_by_elimination": 0,
             "lines_by_neighbours": 0, "lines_by_extent": 0, "lines_core_unknown": 0,
             "lines_ambiguous": 0, "builtin_modules_known": exact_modules,
             "degraded": "" if exact_modules else module_map,
             "debug_info": {**counts, "self_check": check}}
    meta.placement = json.dumps(stats)
