"""The object of each symbol of a debug vmlinux, by rules D1-D6 of
docs/distributions.md ("How a symbol gets its object"), in two steps so
that the first runs while kbuild's Makefiles are still being evaluated:

* :func:`attribute_units`: the compile unit of each symbol, from the DWARF
  and the symbol table alone (D1's file runs, D2's code ranges and
  variables);
* :func:`attribute_objects`: each unit's object among vmlinux.a's (and
  those the final link adds, D6), then what needs objects: D1's units
  named after no object, D2's weak/strong variable ties (link order), D3's
  ``__pfx_`` padding and D4's static-call trampolines.
"""

from __future__ import annotations

import bisect
import os
from dataclasses import dataclass

import numpy as np

from kmodsyms.scan.debuginfo.debugimage import DebugVmlinux, read_debug_vmlinux
from kmodsyms.scan.debuginfo.dwarf import Unit
from kmodsyms.scan.elf.elfdefs import SHN_LORESERVE, SHN_UNDEF, STB_LOCAL, STT_FILE, STT_FUNC, STT_SECTION
from kmodsyms.scan.sysmap import never_listed

PFX = b"__pfx_"
PFX_SIZE = 16
SCT, SCK = b"__SCT__", b"__SCK__"

RUST_UNIT = "/@/"       # rustc's unit names: SOURCE/@/CRATE.HASH-cgu.N

HOW = ("unattributed", "file run", "code range", "variable", "padding", "static call", "no object")
(BY_NONE, BY_FILE_RUN, BY_RANGE, BY_VARIABLE, BY_PADDING, BY_STATIC_CALL, BY_NO_OBJECT) = range(7)


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


@dataclass
class UnitAttribution:
    """The unit of every kept symbol (:func:`attribute_units`)."""

    vm: DebugVmlinux
    kept: list[int]                          # symbol-table indices of the symbols kept
    unit: list[int]                          # per kept symbol: its unit, -1 for none
    how: list[int]                           # per kept symbol: BY_FILE_RUN, BY_RANGE, BY_VARIABLE, BY_NONE
    run_names: list[bytes]                   # D1: each STT_FILE run's name
    run_unit: dict[int, int]                 # D1: the runs tied to a unit
    claims: dict[int, list[tuple[int, bytes]]]   # D2: address -> (unit, name) of the variables there


# ------------------------------------------------------------------ units
def _unit_stem(unit: Unit) -> str:
    """The unit's name less its extension, relative to its build directory
    when under it.  rustc names a unit ``SOURCE/@/CRATE.HASH-cgu.N``: its
    crate root's source."""
    name = unit.name.partition(RUST_UNIT)[0]
    if os.path.isabs(name) and unit.comp_dir and name.startswith(unit.comp_dir.rstrip("/") + "/"):
        name = name[len(unit.comp_dir.rstrip("/")) + 1:]
    return os.path.splitext(os.path.normpath(name))[0]


def _matches(units: list[Unit], objects: list[str]) -> list[tuple[int, str]]:
    """Per unit, the index in ``objects`` of its object (-1 for none) and
    the prefix of its stem before that object's path.  An object kbuild
    makes from the one compiled from the unit keeps its unit (D5: x86's and
    arm64's ``%.pi.o: %.o``, objcopy --prefix-symbols=__pi_).  A Rust crate
    whose root is no object's source (rust/kernel/lib.rs, the toolchain's
    core) is the object named after the crate (rust/kernel.o, rust/core.o),
    when one is."""
    stems = {o[:-2] if o.endswith(".o") else o: i for i, o in enumerate(objects)}
    made: dict[str, int] = {}
    crates: dict[str, int] = {}
    for stem, i in stems.items():
        base, dot, suffix = stem.rpartition(".")
        if dot and "/" not in suffix and base not in stems:
            made[base] = -1 if base in made else i      # -1: two objects made from one
        name = os.path.basename(stem)
        crates[name] = -1 if name in crates else i
    found = []
    for unit in units:
        parts = _unit_stem(unit).split("/")
        match = (-1, "")
        for table in (stems, made):
            for start in range(len(parts)):
                index = table.get("/".join(parts[start:]), -1)
                if index >= 0:
                    match = (index, "/".join(parts[:start]))
                    break
            if match[0] >= 0:
                break
        if match[0] < 0 and RUST_UNIT in unit.name:
            crate = unit.name.partition(RUST_UNIT)[2].split(".", 1)[0]
            match = (crates.get(crate, -1), "")
            if match[0] < 0:    # the toolchain's crates are built in rust/ (rust/Makefile)
                match = (stems.get(f"rust/{crate}", -1), "")
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


# ------------------------------------------------------------ attribution
def attribute(vmlinux: str | DebugVmlinux, units: list[Unit], objects: list[str],
              shown: set[bytes] | None) -> Attribution:
    """The object of each symbol of ``vmlinux``'s symbol table that a
    kallsyms line can be (a name of ``shown``, System.map's, when given)."""
    vm = vmlinux if isinstance(vmlinux, DebugVmlinux) else read_debug_vmlinux(vmlinux)
    return attribute_objects(attribute_units(vm, units, shown), units, objects)


def attribute_units(vm: DebugVmlinux, units: list[Unit], shown: set[bytes] | None) -> UnitAttribution:
    """D1 and D2: the unit of each kept symbol, by its file run, else by
    its address (a code range, then a variable)."""
    table, names_all = vm.symbols, vm.names
    kind = table["info"] & 0xF
    bind = table["info"] >> 4
    value = table["value"].astype(np.uint64)
    shndx = table["shndx"].astype(np.int64)
    claims: dict[int, list[tuple[int, bytes]]] = {}
    for u, unit in enumerate(units):
        for address, name in unit.variables:
            claims.setdefault(address, []).append((u, name))
    run_of, run_names = _file_runs(kind, bind, names_all)
    keep = (shndx != SHN_UNDEF) & (shndx < SHN_LORESERVE) & (kind != STT_FILE) & (kind != STT_SECTION)
    kept = [i for i in np.flatnonzero(keep).tolist()
            if (names_all[i] in shown if shown is not None else not never_listed(names_all[i]))]
    by_address = _units_by_address(units, table, value, kept, claims, names_all)
    run_unit = _tie_runs(units, kept, table["size"], run_of, run_names, by_address)
    unit, how = [], []
    for i in kept:
        r = int(run_of[i])
        u, h = (run_unit[r], BY_FILE_RUN) if r >= 0 and r in run_unit else by_address[i]
        unit.append(u)
        how.append(h if u >= 0 else BY_NONE)
    return UnitAttribution(vm, kept, unit, how, run_names, run_unit, claims)


def _file_runs(kind, bind, names) -> tuple[np.ndarray, list[bytes]]:
    """D1: the STT_FILE run of each local symbol of the table (-1: none),
    and each run's name."""
    run_of = np.full(len(names), -1, dtype=np.int64)
    run_names: list[bytes] = []
    current = -1
    for i, (k, b) in enumerate(zip(kind.tolist(), bind.tolist())):
        if k == STT_FILE:
            current = len(run_names)
            run_names.append(names[i])
        elif b == STB_LOCAL and not names[i].startswith(PFX):
            # objtool adds __pfx_ locals after every object's: in no file's run.
            run_of[i] = current
        else:
            current = -1
    return run_of, run_names


def _units_by_address(units, table, value, kept, claims, names) -> dict[int, tuple[int, int]]:
    """D2: the unit of each kept symbol's address: the code range holding
    it, else the one variable there."""
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
            by_address[i] = _variable_unit(claims.get(int(value[i])), names[i])
    return by_address


def _variable_unit(claimed, name: bytes) -> tuple[int, int]:
    """The unit of a static variable's address (outside every code range):
    the one unit that has a variable of that name there, else the one that
    has any."""
    if claimed:
        named = {u for u, n in claimed if n == name} or {u for u, _n in claimed}
        if len(named) == 1:
            return next(iter(named)), BY_VARIABLE
    return -1, BY_NONE


def _tie_runs(units, kept, size_all, run_of, run_names, by_address) -> dict[int, int]:
    """D1: tie each file run to a unit.  Its file's name names it (a C
    file's STT_FILE is its source's base name, an assembler file's often its
    object's); among units of that name, or when none has it, the units its
    symbols' addresses give decide: sized symbols first, as a zero-size
    static (a lockdep __key at the end of its object) shares its address
    with the next object's first symbol.  Else by link order: the linker
    writes both the runs and the units in the order of its input objects,
    so an untied run's unit lies between the units of the tied runs around
    it; one of its file's name there is it."""
    def stem(name: str) -> str:
        return os.path.splitext(os.path.basename(name))[0]

    by_basename: dict[str, list[int]] = {}
    by_stem: dict[str, list[int]] = {}
    for u, unit in enumerate(units):
        by_basename.setdefault(os.path.basename(unit.name), []).append(u)
        by_stem.setdefault(stem(unit.name), []).append(u)
    votes: dict[int, dict[int, int]] = {}
    zero_votes: dict[int, dict[int, int]] = {}
    for i in kept:
        r = int(run_of[i])
        u, _how = by_address[i]
        if r >= 0 and u >= 0:
            tally = (votes if int(size_all[i]) else zero_votes).setdefault(r, {})
            tally[u] = tally.get(u, 0) + 1
    run_unit: dict[int, int] = {}
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
    return run_unit


def attribute_objects(ua: UnitAttribution, units: list[Unit], objects: list[str]) -> Attribution:
    """Each kept symbol's object: its unit's, then D2's variable ties, D3
    and D4."""
    vm, kept = ua.vm, ua.kept
    table, names_all = vm.symbols, vm.names
    unit_obj = unit_objects(units, objects)
    # A unit named after no object (gas names an assembler unit after an
    # included header): the object of its file run's name, when one has it.
    object_by_base: dict[str, list[int]] = {}
    for k, o in enumerate(objects):
        object_by_base.setdefault(os.path.basename(o)[:-2], []).append(k)
    for r, u in ua.run_unit.items():
        if unit_obj[u] < 0:
            stem = os.path.splitext(ua.run_names[r].decode("utf-8", "surrogateescape"))[0]
            if len(object_by_base.get(stem, ())) == 1:
                unit_obj[u] = object_by_base[stem][0]
    _header_units_by_link_order(units, unit_obj, len(objects))
    unit = np.asarray(ua.unit, dtype=np.int64)
    with_unit = unit >= 0
    obj = np.full(len(kept), -1, dtype=np.int32)
    obj[with_unit] = np.asarray(unit_obj, dtype=np.int32)[unit[with_unit]]
    how = np.where(with_unit, np.where(obj >= 0, np.asarray(ua.how, dtype=np.int8), BY_NO_OBJECT),
                   0).astype(np.int8)
    obj[obj < 0] = -1
    value = table["value"].astype(np.uint64)
    shndx = table["shndx"].astype(np.int64)
    _break_variable_ties(obj, how, kept, ua.claims, value, shndx, names_all, unit_obj)
    names = [names_all[i] for i in kept]
    address = value[kept]
    _follow_what_they_belong_to(obj, how, names, address, table["info"][kept] & 0xF)
    return Attribution(names, address, table["size"].astype(np.uint64)[kept],
                       table["info"].astype(np.uint8)[kept], shndx[kept].astype(np.uint32), obj, how,
                       objects)


def _header_units_by_link_order(units: list[Unit], unit_obj: list[int], n_objects: int) -> None:
    """D1's link order for a unit gas named after a header it included
    (arch/x86/lib/retpoline.S's ``GEN-for-each-reg.h``) and that no file run
    ties to an object: the linker writes the units in the order of its
    input objects, so its object lies between those of the units around
    it; when one object there has no unit of its own, it is that one."""
    has_unit = set(unit_obj)
    known = [u for u, o in enumerate(unit_obj) if o >= 0]
    for u, unit in enumerate(units):
        if unit_obj[u] >= 0 or not unit.name.endswith(".h"):
            continue
        k = bisect.bisect_left(known, u)
        below = unit_obj[known[k - 1]] if k > 0 else -1
        above = unit_obj[known[k]] if k < len(known) else n_objects
        between = [o for o in range(below + 1, above) if o not in has_unit]
        if len(between) == 1 and below < above:
            unit_obj[u] = between[0]
            has_unit.add(between[0])


def _break_variable_ties(obj, how, kept, claims, value, shndx, names, unit_obj) -> None:
    """A variable two units claim (a weak definition's DW_OP_addr names the
    strong one's address) has the bytes of one of them.  Across any
    neighbours tied as it is, the symbols of its image section below and
    above it were decided: its bytes are those of an object from the one
    below to the one above in link order (the order of ``objects``), as the
    linker lays input sections out in that order, each contiguous.  When one
    claimant alone lies there, and it is the one below or above, it is that
    one's."""
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
    # by section, then address (stable: a tie keeps the symbol table's order)
    order = np.lexsort((value[kept], shndx[kept])).tolist()
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


def _follow_what_they_belong_to(obj, how, names, address, kind) -> None:
    """D3, D4: objtool's ``__pfx_F`` takes F's object, 16 bytes on; a
    static-call trampoline ``__SCT__K`` its key ``__SCK__K``'s."""
    attributed = np.flatnonzero((kind == STT_FUNC) & (obj >= 0)).tolist()
    # (address, name) -> object, of the attributed functions
    functions = dict(zip(zip(address[attributed].tolist(), [names[j] for j in attributed]),
                         obj[attributed].tolist()))
    keys: dict[bytes, list[int]] = {}
    for j, name in enumerate(names):
        if name.startswith(SCK):
            keys.setdefault(name, []).append(j)
    for j in np.flatnonzero(how == BY_NONE).tolist():
        name = names[j]
        if name.startswith(PFX):
            o = functions.get((int(address[j]) + PFX_SIZE, name[len(PFX):]), -1)
            if o >= 0:
                obj[j], how[j] = o, BY_PADDING
        elif name.startswith(SCT):
            key = keys.get(SCK + name[len(SCT):], [])
            if len(key) == 1 and obj[key[0]] >= 0:
                obj[j], how[j] = obj[key[0]], BY_STATIC_CALL
