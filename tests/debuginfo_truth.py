"""The truth check of ``kmodsyms build --debuginfo`` on a distribution's
real debug package (test helper, and a script):

* ours: the dtrace_syms built from the package, loaded with the package's
  System.map, for every line that the package's kallsyms shows (decoded
  from the tables compiled into its vmlinux, :mod:`kallsyms_image`);
* theirs: a rebuild of the package's config, plus ``CONFIG_VMLINUX_MAP``
  and ``CONFIG_BUILTIN_MODULE_RANGES``, from the same source and compiler:
  the object whose bytes the linker put at a symbol's address
  (``vmlinux.map``, ``vmlinux.o.map``), that object's modules by kbuild's
  own ``.cmd`` files (``KBUILD_MODFILE``), and upstream's
  ``modules.builtin.ranges``.

A rebuild's addresses may differ from the package's (its version string,
certificates, build paths), so each line of the package is paired with the
rebuild's symbol of the same name: the k-th by address of that name with
the k-th, when both have as many; else among those of the same name and
size.  A pair whose sizes differ is no pair.

A zero-size symbol where one object's bytes end and another's (or none's)
begin, or in an object's empty section, may take any of them, as in
``kmodsyms verify`` (``ObjectMap.zero_size_objects``): it is right when ours
is one of them.

Usage: ``python tests/debuginfo_truth.py ROOT SOURCE REBUILD [SYMS]`` prints
the figures as JSON (ROOT: the -dbg and image packages unpacked, SOURCE:
the kernel's source, REBUILD: the rebuild's object tree, SYMS: a dtrace_syms
already built from ROOT)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
EXAMPLES = 40


def package_files(root: str) -> tuple[str, str] | None:
    """The debug vmlinux and System.map of the package unpacked in ``root``."""
    import glob
    found = sorted(glob.glob(os.path.join(root, "usr/lib/debug/boot/vmlinux-*")))
    if not found:
        return None
    release = os.path.basename(found[-1])[len("vmlinux-"):]
    return found[-1], os.path.join(root, f"usr/lib/debug/boot/System.map-{release}")


def build_from_package(root: str, source: str, out: str) -> dict:
    """Our dtrace_syms from the unpacked package; its --json summary."""
    run = subprocess.run([sys.executable, "-m", "kmodsyms", "build", "--debuginfo", "--root", root,
                          "--source", source, "-o", out, "--json"], cwd=ROOT, capture_output=True, text=True)
    if run.returncode:
        raise RuntimeError(run.stderr)
    return json.loads(run.stdout)


def _system_map(path: str) -> list[tuple[int, str, str]]:
    out = []
    with open(path, encoding="utf-8", errors="surrogateescape") as f:
        for line in f:
            address, kind, name = line.split()[:3]
            out.append((int(address, 16), kind, name))
    return out


def _sizes(vmlinux: str) -> dict[tuple[str, int], int]:
    from kmodsyms.scan.verify import read_elf_info
    return {(n.decode("utf-8", "surrogateescape"), a): s for (n, a), s in read_elf_info(vmlinux).sizes.items()}


def pair(ours: list[tuple[int, str, int]], theirs: list[tuple[int, str, int]]) -> dict[int, int]:
    """Index in ``ours`` -> index in ``theirs`` of the same symbol; both are
    (address, name, size) lists."""
    def groups(entries, key):
        found: dict = {}
        for i, e in enumerate(entries):
            found.setdefault(key(e), []).append(i)
        for v in found.values():
            v.sort(key=lambda i: entries[i][0])
        return found

    by_name_ours, by_name_theirs = groups(ours, lambda e: e[1]), groups(theirs, lambda e: e[1])
    by_size_ours, by_size_theirs = groups(ours, lambda e: e[1:]), groups(theirs, lambda e: e[1:])
    paired = {}
    for name, mine in by_name_ours.items():
        other = by_name_theirs.get(name, [])
        if len(mine) == len(other):
            paired.update(zip(mine, other))
            continue
        for i in mine:
            a, b = by_size_ours[ours[i][1:]], by_size_theirs.get(ours[i][1:], [])
            if len(a) == len(b):
                paired[i] = b[a.index(i)]
    return {i: t for i, t in paired.items() if ours[i][2] == theirs[t][2] or not (ours[i][2] and theirs[t][2])}


def compare(vmlinux: str, system_map: str, syms: str, rebuild: str) -> dict:
    """The figures of ``syms`` (built from the debug ``vmlinux`` and its
    ``system_map``) against the rebuild's maps, .cmd files and, when it has
    them, ranges.  Lines are those vmlinux's kallsyms tables list, or all of
    System.map's when it has none."""
    import numpy as np
    from kallsyms_image import proc_kallsyms

    from kmodsyms import load
    from kmodsyms.kernelnames import kernel_spelling
    from kmodsyms.scan.linkmap import vmlinux_object_map
    from kmodsyms.scan.modmap.kbuild import derive_thick
    from kmodsyms.scan.verify import parse_ranges, read_elf_info

    lines = load(syms=syms, kallsyms=system_map).lines()
    try:    # what kallsyms shows: the image's own tables
        shown = Counter(line.split()[2].decode("utf-8", "surrogateescape")
                        for line in proc_kallsyms(vmlinux).splitlines())
    except ValueError:
        shown = Counter(ln.name for ln in lines)
    seen: Counter = Counter()
    kept = []
    for ln in lines:
        if seen[ln.name] < shown[ln.name]:
            seen[ln.name] += 1
            kept.append(ln)
    sizes = _sizes(vmlinux)
    mine = [(ln.address, ln.name, sizes.get((ln.name, ln.address), 0)) for ln in kept]

    path = lambda n: os.path.join(rebuild, n)  # noqa: E731
    their_map = _system_map(path("System.map"))
    their_sizes = _sizes(path("vmlinux"))
    theirs = [(a, n, their_sizes.get((n, a), 0)) for a, _k, n in their_map]
    paired = pair(mine, theirs)

    om = vmlinux_object_map(path("vmlinux.map"), path("vmlinux.o.map") if os.path.exists(path("vmlinux.o.map"))
                            else None, path("vmlinux"))
    thick = derive_thick(rebuild)
    owners = thick.object_modules()

    def modules_of(obj):
        return tuple(sorted(kernel_spelling(thick.modules[m]) for m in owners.get(obj, ()))) if obj else ()

    first_at: dict[str, int] = {}
    for a, _k, n in their_map:
        first_at.setdefault(n, a)
    ranges = None
    if os.path.exists(path("modules.builtin.ranges")):
        with open(path("modules.builtin.ranges"), encoding="utf-8") as f:
            ranges = parse_ranges(f.read(), lambda n, _s: first_at.get(n), read_elf_info(path("vmlinux")).addresses)

    object_outcome: Counter = Counter()
    module_outcome: Counter = Counter()
    ranges_outcome: Counter = Counter()
    examples: dict[str, list] = {"object wrong": [], "object unattributed": [], "module wrong": [],
                                 "module unattributed": [], "ranges differ": [], "unpaired": []}
    unpaired = 0
    their_addresses = np.array([theirs[paired[i]][0] for i in range(len(kept)) if i in paired], dtype=np.uint64)
    hits = iter(ranges.lookup(their_addresses).tolist() if ranges else [])
    for i, ln in enumerate(kept):
        if i not in paired:
            unpaired += 1
            if len(examples["unpaired"]) < EXAMPLES:
                examples["unpaired"].append(ln.name)
            continue
        a, _n, size = theirs[paired[i]]
        truth = om.object_at(a)
        allowed = om.zero_size_objects(a) if size == 0 else {truth}
        ours = ln.object
        if ours in allowed:
            o = "right"
        elif ours is None:
            o = "unattributed"
        else:
            o = "wrong"
        object_outcome[o] += 1
        example = {"name": ln.name, "package_address": f"{ln.address:#x}", "rebuild_address": f"{a:#x}",
                   "size": size, "ours": ours, "theirs": truth}
        if o != "right" and len(examples[f"object {o}"]) < EXAMPLES:
            examples[f"object {o}"].append(example)
        mods = tuple(sorted(kernel_spelling(m) for m in ln.modules))
        allowed_mods = {modules_of(t) for t in allowed}
        m = "right" if mods in allowed_mods else "unattributed" if ours is None else "wrong"
        module_outcome[m] += 1
        if m != "right" and len(examples[f"module {m}"]) < EXAMPLES:
            examples[f"module {m}"].append({**example, "our_modules": list(mods),
                                            "their_modules": [list(x) for x in allowed_mods]})
        if ranges is None:
            continue
        h = next(hits)
        ranged = tuple(sorted(ranges.ranges[h].modules)) if h >= 0 else ()
        r = "agree" if mods == ranged or ranged in allowed_mods else "differ"
        ranges_outcome[r] += 1
        if r == "differ" and len(examples["ranges differ"]) < EXAMPLES:
            examples["ranges differ"].append({**example, "our_modules": list(mods), "ranges": list(ranged)})
    total = len(kept)
    return {"kallsyms_lines": total, "system_map_lines": len(lines), "paired": total - unpaired,
            "unpaired": unpaired, "object": dict(object_outcome), "module": dict(module_outcome),
            "ranges": dict(ranges_outcome),
            "object_right_percent": 100 * object_outcome["right"] / total,
            "module_right_percent": 100 * module_outcome["right"] / total,
            "examples": examples}


def main(argv: list[str]) -> int:
    root, source, rebuild = argv[:3]
    sys.path.insert(0, HERE)
    with tempfile.TemporaryDirectory() as tmp:
        syms = argv[3] if len(argv) > 3 else os.path.join(tmp, "dtrace_syms")
        summary = build_from_package(root, source, syms) if len(argv) <= 3 else None
        vmlinux, system_map = package_files(root)
        figures = compare(vmlinux, system_map, syms, rebuild)
    if summary:
        figures["build"] = {k: summary[k] for k in ("attribution", "self_check")}
    json.dump(figures, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
