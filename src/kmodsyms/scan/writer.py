"""Build a dtrace_syms file from a kernel build tree.

Pipeline: module map (thick file) + object list (vmlinux.a / built-in.a, and
what the final link takes beside it) ->
scan every object (in parallel, with a cache keyed by path, size and mtime)
-> tables (:mod:`kmodsyms.scan.tables`) -> one atomic write.  When no input
changed since the last build, its output stands and nothing is scanned.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from kmodsyms import __version__
from kmodsyms.errors import KmodsymsError
from kmodsyms.scan.cache import ScanCache
from kmodsyms.scan.elf.archive import final_link_objects, vmlinux_objects
from kmodsyms.scan.elf.elfscan import ObjectScan, scan_object
from kmodsyms.scan.modmap.thick import ThickMap


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
    layout: str = ""          # whether the link layout was recorded, and if not why


def kernel_release(kbuild: str) -> str:
    """``include/config/kernel.release`` of the tree, or "" if absent."""
    try:
        with open(os.path.join(kbuild, "include", "config", "kernel.release")) as f:
            return f.read().strip()
    except OSError:
        return ""


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
    # R57: what the final link takes beside them, after them in link order.
    objects += [o for o in final_link_objects(kbuild) if o not in set(objects)]
    owners = thick.object_modules()
    listed = set(objects)
    objects += [o for o in owners if o not in listed]
    stamps = {obj: _stamp(os.path.join(kbuild, obj)) for obj in objects}
    present = [obj for obj in objects if stamps[obj] is not None]
    missing = [obj for obj in objects if stamps[obj] is None]
    if missing and not allow_missing:
        raise KmodsymsError(
            f"{os.path.join(kbuild, missing[0])}: object does not exist"
            f"{f' (and {len(missing) - 1} more)' if len(missing) > 1 else ''}; "
            "finish the kernel build, or pass --allow-missing")
    cache = ScanCache(output + ".cache") if use_cache else None
    fingerprint = _fingerprint(kbuild, thick, {o: stamps[o] for o in present}, missing, layout)
    if cache is not None and cache.head.get("fingerprint") == fingerprint \
            and _output_crc(output) == cache.head.get("crc"):
        # Nothing changed since the last build: its output stands.
        if progress:
            progress(len(present))
        return BuildResult(output, len(present), cache.head["symbols"], len(thick.modules),
                           time.monotonic() - start, object_source, thick_source, missing,
                           len(present), cache.head.get("layout", ""))
    scans = scan_all(kbuild, present, stamps, jobs, progress, cache)
    from kmodsyms.format.fileformat import FLAG_MISSING_OBJECTS, header_crc
    from kmodsyms.format.symsfile import Meta, encode, write_atomic
    from kmodsyms.scan.elf.elfimage import Image, read_image
    from kmodsyms.scan.tables import assemble, record_layout
    vmlinux = os.path.join(kbuild, "vmlinux")
    vmlinux_image = read_image(vmlinux) if os.path.exists(vmlinux) else Image()
    meta = Meta(kernel_release=kernel_release(kbuild), build_id=vmlinux_image.build_id,
                tool_version=f"kmodsyms {__version__}", object_source=object_source,
                thick_source=_tree_relative(kbuild, thick_source), flags=FLAG_MISSING_OBJECTS if missing else 0)
    system_map = os.path.join(kbuild, "System.map")
    sysmap = None
    if not layout:
        layout_note = "no link layout (--no-layout): loading searches kallsyms"
    elif not vmlinux_image.segments:
        layout_note = "no link layout: the tree has no vmlinux; loading searches kallsyms"
    elif not os.path.exists(system_map):
        layout_note = "no link layout: the tree has no System.map; loading searches kallsyms"
    else:
        from kmodsyms.scan.sysmap import read_kallsyms
        sysmap = read_kallsyms(system_map, zero_is_hidden=False)
        layout_note = "link layout recorded"
    strings, tables = assemble(thick, owners, present, scans, missing,
                               set(sysmap.names_bytes(slice(None))) if sysmap is not None else None)
    if sysmap is not None:
        record_layout(kbuild, vmlinux_image, sysmap, meta, strings, tables)
    image = encode(meta, strings, tables)
    write_atomic(output, image)
    n_symbols = len(tables["symbols"])
    if cache is not None:
        cache.save({"fingerprint": fingerprint, "crc": header_crc(image), "symbols": n_symbols,
                    "layout": layout_note})
    return BuildResult(output, len(present), n_symbols, len(thick.modules),
                       time.monotonic() - start, object_source, thick_source, missing,
                       cache.hits if cache is not None else 0, layout_note)


def _stamp(path: str) -> tuple[int, int] | None:
    """(size, mtime in ns) of ``path``, as make judges staleness; None if absent."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


def _fingerprint(kbuild: str, thick: ThickMap, objects: dict[str, tuple[int, int]],
                 missing: list[str], layout: bool) -> str:
    """A digest of every input of a build: the module map, the stamp of
    each object (``objects``), of vmlinux, System.map and the release file,
    and of kmodsyms' own modules."""
    import hashlib
    digest = hashlib.sha256(f"kmodsyms {__version__} layout={layout}\n".encode())
    digest.update(thick.format().encode())
    digest.update(("\0".join(missing) + "\n").encode())
    extras = ["vmlinux", "System.map", os.path.join("include", "config", "kernel.release")]
    # The tool's own code is an input too (a changed kmodsyms must rebuild).
    package = os.path.dirname(os.path.abspath(__file__))
    tool = [os.path.join(package, f) for f in sorted(os.listdir(package)) if f.endswith(".py")]
    stamps = list(objects.items()) + [(rel, _stamp(os.path.join(kbuild, rel))) for rel in extras + tool]
    digest.update("".join(f"{rel}\0{stamp[0]}\0{stamp[1]}\n" if stamp else f"{rel}\0-\n"
                          for rel, stamp in stamps).encode())
    return digest.hexdigest()


def _output_crc(output: str) -> bytes | None:
    """The CRC field of an existing dtrace_syms, or None."""
    from kmodsyms.format.fileformat import CRC_COVERS_FROM, header_crc
    try:
        with open(output, "rb") as f:
            return header_crc(f.read(CRC_COVERS_FROM))
    except OSError:
        return None


def _tree_relative(kbuild: str, path: str) -> str:
    """``path`` relative to the build tree when it lies inside it, so that the
    same tree gives the same file however it was named on the command line."""
    if not os.path.exists(path):
        return path  # a description such as "derived from .cmd files"
    rel = os.path.relpath(os.path.abspath(path), os.path.abspath(kbuild))
    return path if rel.startswith("..") else rel


def scan_all(kbuild: str, objects: list[str], stamps: dict[str, tuple[int, int]], jobs: int,
             progress, cache) -> list[ObjectScan]:
    """Scan ``objects`` (paths relative to ``kbuild``, each with its
    ``stamps`` entry for the cache), in order."""
    results: list[ObjectScan | None] = [None] * len(objects)
    todo = []
    for i, obj in enumerate(objects):
        hit = cache.get(kbuild, obj, stamps[obj]) if cache is not None else None
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
            cache.put(kbuild, objects[i], stamps[objects[i]], results[i])
    return results  # type: ignore[return-value]


def _scan_batch(paths: list[str]) -> list[ObjectScan]:
    return [scan_object(p) for p in paths]
