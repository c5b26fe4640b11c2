"""Build a dtrace_syms file from a kernel build tree.

Pipeline: module map (thick file) + object list (vmlinux.a / built-in.a) ->
scan every object (in parallel, with a cache keyed by path, size and mtime)
-> string table and sorted arrays -> one atomic write.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

import numpy as np

from . import __version__
from .archive import vmlinux_objects
from .elfscan import ObjectScan, scan_object
from .errors import KmodsymsError
from .symsfile import (FLAG_MISSING_OBJECTS, NO_ADDRESS, OBJECT_MISSING, TABLES, Meta,
                       StringTable, encode, write_atomic)
from .thick import ThickMap
from .scancache import ScanCache


@dataclass
class BuildResult:
    output: str
    objects: int
    symbols: int
    modules: int
    seconds: float
    object_source: str
    thick_source: str
    missing: list[str] = field(default_factory=list)
    cached: int = 0


def kernel_release(kbuild: str) -> str:
    """``include/config/kernel.release`` of the tree, or "" if absent."""
    try:
        with open(os.path.join(kbuild, "include", "config", "kernel.release")) as f:
            return f.read().strip()
    except OSError:
        return ""


def vmlinux_build_id(kbuild: str) -> str:
    """The GNU build-id of ``DIR/vmlinux`` in hex, or "" when there is none."""
    from .elfnotes import elf_build_id
    path = os.path.join(kbuild, "vmlinux")
    return elf_build_id(path) if os.path.exists(path) else ""


def build(kbuild: str, thick: ThickMap, thick_source: str, output: str, jobs: int = 0,
          allow_missing: bool = False, progress=None, use_cache: bool = True,
          layout: bool = True) -> BuildResult:
    """Scan the tree and write ``output``.  ``progress(n)`` is called as
    objects are scanned.  With ``layout`` (and the tree's vmlinux and
    System.map), every object section's link address is recorded too, so
    that loading needs only the KASLR shift.  Raises KmodsymsError on bad
    input; on any failure no output (not even a partial one) is written."""
    start = time.monotonic()
    objects, object_source = vmlinux_objects(kbuild)
    owners = thick.object_modules()
    listed = set(objects)
    objects += [o for o in owners if o not in listed]
    present, missing = [], []
    for obj in objects:
        (present if os.path.exists(os.path.join(kbuild, obj)) else missing).append(obj)
    if missing and not allow_missing:
        raise KmodsymsError(
            f"{os.path.join(kbuild, missing[0])}: object does not exist"
            f"{f' (and {len(missing) - 1} more)' if len(missing) > 1 else ''}; "
            "finish the kernel build, or pass --allow-missing")
    cache = ScanCache(output + ".cache") if use_cache else None
    scans = scan_all(kbuild, present, jobs, progress, cache)
    if cache is not None:
        cache.save()
    meta = Meta(kernel_release=kernel_release(kbuild), build_id=vmlinux_build_id(kbuild),
                tool_version=f"kmodsyms {__version__}", object_source=object_source,
                thick_source=_tree_relative(kbuild, thick_source), flags=FLAG_MISSING_OBJECTS if missing else 0)
    strings, tables = assemble(thick, owners, present, scans, missing)
    if layout:
        record_layout(kbuild, meta, strings, tables)
    write_atomic(output, encode(meta, strings, tables))
    n_symbols = len(tables["symbols"])
    return BuildResult(output, len(present), n_symbols, len(thick.modules),
                       time.monotonic() - start, object_source, thick_source, missing,
                       cache.hits if cache is not None else 0)


def _tree_relative(kbuild: str, path: str) -> str:
    """``path`` relative to the build tree when it lies inside it, so that the
    same tree gives the same file however it was named on the command line."""
    if not os.path.exists(path):
        return path  # a description such as "derived from .cmd files"
    rel = os.path.relpath(os.path.abspath(path), os.path.abspath(kbuild))
    return path if rel.startswith("..") else rel


def scan_all(kbuild: str, objects: list[str], jobs: int, progress, cache) -> list[ObjectScan]:
    """Scan ``objects`` (paths relative to ``kbuild``), in order."""
    results: list[ObjectScan | None] = [None] * len(objects)
    todo = []
    for i, obj in enumerate(objects):
        hit = cache.get(kbuild, obj) if cache is not None else None
        if hit is not None:
            results[i] = hit
        else:
            todo.append(i)
    if progress and len(todo) < len(objects):
        progress(len(objects) - len(todo))
    jobs = jobs or os.cpu_count() or 1
    paths = [os.path.join(kbuild, objects[i]) for i in todo]
    if jobs > 1 and len(todo) >= 64:
        from concurrent.futures import ProcessPoolExecutor
        chunk = max(16, len(todo) // (jobs * 8))
        batches = [paths[i:i + chunk] for i in range(0, len(paths), chunk)]
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            done = 0
            for batch in pool.map(_scan_batch, batches):
                for scan in batch:
                    results[todo[done]] = scan
                    done += 1
                if progress:
                    progress(len(batch))
    else:
        for n, (i, path) in enumerate(zip(todo, paths)):
            results[i] = scan_object(path)
            if progress:
                progress(1)
    if cache is not None:
        for i in todo:
            cache.put(kbuild, objects[i], results[i])
    return results  # type: ignore[return-value]


def _scan_batch(paths: list[str]) -> list[ObjectScan]:
    return [scan_object(p) for p in paths]


def assemble(thick: ThickMap, owners: dict[str, tuple[int, ...]], objects: list[str],
             scans: list[ObjectScan], missing: list[str]) -> tuple[StringTable, dict]:
    """Turn scans into the file's string table and tables (no layout yet)."""
    strings = StringTable()
    modsets: dict[tuple[int, ...], int] = {(): 0}
    for obj in objects + missing:
        modsets.setdefault(owners.get(obj, ()), len(modsets))
    modset_list = list(modsets)
    members = [m for ms in modset_list for m in ms]
    firsts = np.cumsum([0] + [len(ms) for ms in modset_list[:-1]], dtype=np.uint64)

    all_objects = objects + missing
    obj_table = np.zeros(len(all_objects), dtype=TABLES[4][1])
    obj_table["path"] = [strings.add(o) for o in all_objects]
    obj_table["modset"] = [modsets[owners.get(o, ())] for o in all_objects]
    obj_table["flags"][len(objects):] = OBJECT_MISSING

    secname_index: dict[str, int] = {}
    sec_rows = []
    sec_base = []
    for obj_index, scan in enumerate(scans):
        sec_base.append(len(sec_rows))
        for name, flags, align, size in zip(scan.sec_name, scan.sec_flags,
                                            scan.sec_align, scan.sec_size):
            sec_rows.append((obj_index, secname_index.setdefault(name, len(secname_index)),
                             flags & 0xFFFFFFFF, min(align, 0xFFFFFFFF), size))
    sections = np.zeros(len(sec_rows), dtype=TABLES[6][1])
    if sec_rows:
        for field_index, field_name in enumerate(("object", "name", "flags", "align", "size")):
            sections[field_name] = [row[field_index] for row in sec_rows]
    sections["address"] = NO_ADDRESS
    secnames = np.array([strings.add(n) for n in secname_index], dtype=TABLES[5][1])

    n = sum(len(s.sym_name) for s in scans)
    names: list[bytes] = []
    obj_col = np.empty(n, dtype=np.uint32)
    sec_col = np.empty(n, dtype=np.uint32)
    pos = 0
    for obj_index, scan in enumerate(scans):
        k = len(scan.sym_name)
        names += scan.sym_name
        obj_col[pos:pos + k] = obj_index
        sec_col[pos:pos + k] = np.asarray(scan.sym_section, dtype=np.uint32) + sec_base[obj_index]
        pos += k
    value = np.fromiter((v for s in scans for v in s.sym_value), dtype=np.uint64, count=n)
    size = np.fromiter((v for s in scans for v in s.sym_size), dtype=np.uint64, count=n)
    info = np.fromiter((v for s in scans for v in s.sym_info), dtype=np.uint8, count=n)
    modset_col = obj_table["modset"][obj_col] if n else np.zeros(0, np.uint32)

    # Sort by name, then module names, then object path (docs/format.md).
    # Every key compares as bytes, as a C reader's strcmp/memcmp does.
    module_key = [tuple(thick.modules[m].encode() for m in ms) for ms in modset_list]
    object_key = [o.encode("utf-8", "surrogateescape") for o in all_objects]
    order = sorted(range(n), key=lambda i: (names[i], module_key[modset_col[i]],
                                            object_key[obj_col[i]]))
    symbols = np.zeros(n, dtype=TABLES[7][1])
    symbols["name"] = [strings.add(names[i]) for i in order]
    order = np.asarray(order, dtype=np.int64)
    symbols["modset"] = modset_col[order]
    symbols["object"] = obj_col[order]
    symbols["section"] = sec_col[order]
    symbols["value"] = value[order]
    symbols["size"] = size[order]
    symbols["type"] = info[order] & 0xF
    symbols["binding"] = info[order] >> 4

    modules = np.array([strings.add(m) for m in thick.modules], dtype=TABLES[1][1])
    modset_table = np.zeros(len(modset_list), dtype=TABLES[3][1])
    modset_table["first"] = firsts
    modset_table["count"] = [len(ms) for ms in modset_list]
    tables = {"modules": modules, "modset_members": np.array(members, dtype=np.uint32),
              "modsets": modset_table, "objects": obj_table, "section_names": secnames,
              "sections": sections, "symbols": symbols,
              "segments": np.zeros(0, TABLES[8][1]), "anchors": np.zeros(0, TABLES[9][1])}
    return strings, tables


ANCHORS_PER_SEGMENT = 16


def load_segments(vmlinux: str) -> list[tuple[int, int]]:
    """[start, end) of vmlinux's PT_LOAD segments: the pieces KASLR moves
    (or, like x86_64's per-cpu segment at 0, leaves) as a whole."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile
    try:
        with open(vmlinux, "rb") as f:
            return [(seg["p_vaddr"], seg["p_vaddr"] + seg["p_memsz"])
                    for seg in ELFFile(f).iter_segments()
                    if seg["p_type"] == "PT_LOAD" and seg["p_memsz"]]
    except (OSError, ELFError) as e:
        raise KmodsymsError(f"cannot read program headers of {vmlinux}: {e}") from None


def record_layout(kbuild: str, meta: Meta, strings: StringTable, tables: dict) -> bool:
    """Place every object section in vmlinux at build time, by the same
    search the loader would otherwise do, against ``System.map`` (kallsyms
    before KASLR), and record its link address, vmlinux's load segments and a
    few anchor symbols per segment by which the loader finds each segment's
    KASLR shift.  Needs ``vmlinux`` and ``System.map``; returns whether it
    recorded anything."""
    import json
    from .kallsyms import read_kallsyms
    from .placement import Placement
    from .symsfile import SymsFile
    vmlinux = os.path.join(kbuild, "vmlinux")
    system_map = os.path.join(kbuild, "System.map")
    if not (os.path.exists(vmlinux) and os.path.exists(system_map)):
        return False
    segments = load_segments(vmlinux)
    sysmap = read_kallsyms(system_map)
    try:
        placed = Placement(SymsFile(encode(meta, strings, tables), "dtrace_syms"), sysmap)
    except KmodsymsError as e:
        raise KmodsymsError(f"{system_map} does not match the objects of {kbuild} ({e}); "
                            "rebuild the kernel, or pass --no-layout") from None
    sections = tables["sections"]
    is_placed = placed.section_how != 0
    sections["address"] = np.where(is_placed, placed.section_base, NO_ADDRESS)
    sections["placement"] = placed.section_how
    # Anchors: lines whose name is unique on both sides, spread over each segment.
    entry = placed.line_entry
    unique = entry >= 0
    unique[unique] = placed.group_count[placed.entry_group[entry[unique]]] == 1
    lines = np.flatnonzero(unique)
    lines = lines[placed.lines_per_group[placed.entry_group[entry[lines]]] == 1]
    lines = lines[np.argsort(sysmap.address[lines], kind="stable")]
    anchors = []
    for index, (start, end) in enumerate(segments):
        inside = lines[(sysmap.address[lines] >= start) & (sysmap.address[lines] < end)]
        if len(inside):
            pick = inside[np.linspace(0, len(inside) - 1, min(ANCHORS_PER_SEGMENT, len(inside))).astype(int)]
            anchors += [(int(entry[line]), index) for line in dict.fromkeys(pick.tolist())]
    tables["segments"] = np.array(segments, dtype=TABLES[8][1])
    tables["anchors"] = np.array(anchors, dtype=TABLES[9][1])
    meta.placement = json.dumps(placed.stats.__dict__)
    return True
