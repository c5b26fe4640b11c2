"""Read GNU ld link maps (``-Map``): where each input section was placed.

A kernel build with CONFIG_VMLINUX_MAP writes ``vmlinux.map``, the map of
the final link, in one of two shapes:

* the final link takes its objects from ``vmlinux.o`` (x86_64 with IBT,
  LTO), beside the few scripts/link-vmlinux.sh adds, which the map names: then
  ``vmlinux.o.map`` (the ``ld -r`` that made vmlinux.o from vmlinux.a's
  objects) says where each object section lies in vmlinux.o, and composing
  the two maps says where it lies in vmlinux;
* vmlinux is linked straight from vmlinux.a (arm64 and most others): the
  map names each object as an input file, at its address in vmlinux; a
  ``vmlinux.o.map`` beside it (modpost's ``ld -r``) says nothing about
  vmlinux and is not read.

Either way it is the linker's own answer, independent of kmodsyms'
placement, which ``kmodsyms verify`` and the tests compare against.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from kmodsyms.errors import KmodsymsError

_FULL = re.compile(r"^ (\S+)\s+0x([0-9a-fA-F]+)\s+0x([0-9a-fA-F]+)\s+(\S.*)$")
_NAME_ONLY = re.compile(r"^ ([^\s*]\S*)$")
_WRAPPED = re.compile(r"^\s+0x([0-9a-fA-F]+)\s+0x([0-9a-fA-F]+)\s+(\S.*)$")
_OUTPUT = re.compile(r"^([^\s*]\S*)(\s|$)")


@dataclass
class InputSection:
    name: str
    address: int
    size: int
    file: str
    output: str  # the output section it went into


def parse_map(path: str) -> list[InputSection]:
    """Every input section the map lists in its memory map (after "Linker
    script and memory map"), with its address, size and input file."""
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise KmodsymsError(f"cannot read link map {path}: {e.strerror}") from None
    try:
        start = lines.index("Linker script and memory map") + 1
    except ValueError:
        raise KmodsymsError(f"{path}: not a GNU ld map (no 'Linker script and memory map')") from None
    out = []
    pending = None
    output = ""
    for line in lines[start:]:
        m = _OUTPUT.match(line)
        if m:
            output = m.group(1)
            pending = None
            continue
        m = _FULL.match(line)
        if m and not line.startswith(" *"):
            name, addr, size, file = m.groups()
            out.append(InputSection(name, int(addr, 16), int(size, 16), file.strip(), output))
            pending = None
            continue
        m = _NAME_ONLY.match(line)
        if m:
            pending = m.group(1)
            continue
        m = _WRAPPED.match(line)
        if m and pending:
            addr, size, file = m.groups()
            out.append(InputSection(pending, int(addr, 16), int(size, 16), file.strip(), output))
        pending = None
    return out


class ObjectMap:
    """Address ranges of vmlinux that came from each object, sorted, and
    where each object's empty input sections lie."""

    def __init__(self, ranges: list[tuple[int, int, str]], source: str):
        self.source = source    # the maps it was read from, for reports
        held = sorted(r for r in ranges if r[1] > r[0])
        self.start = np.array([r[0] for r in held], dtype=np.uint64)
        self.end = np.array([r[1] for r in held], dtype=np.uint64)
        self.object = [r[2] for r in held]
        # An object's end: where its bytes stop and no section of its own
        # follows (one object's consecutive sections, as .vmlinux.export.o's
        # ___ksymtab+NAME ones, are one run of its bytes).
        ends: dict[int, set[str]] = {}
        for k, (_start, end, obj) in enumerate(held):
            if not (k + 1 < len(held) and held[k + 1][0] == end and held[k + 1][2] == obj):
                ends.setdefault(end, set()).add(obj)
        self._ends = {a: frozenset(o) for a, o in ends.items()}
        # An object whose section there holds no bytes (a .bss of zero-size
        # lockdep keys only) still holds its zero-size symbols there.
        empty: dict[int, set[str]] = {}
        for start, end, obj in ranges:
            if start == end:
                empty.setdefault(start, set()).add(obj)
        self._empty = {a: frozenset(o) for a, o in empty.items()}

    def object_at(self, address: int) -> str | None:
        """The object whose bytes are at ``address``, or None."""
        i = int(np.searchsorted(self.start, np.uint64(address), side="right")) - 1
        if i >= 0 and address < int(self.end[i]):
            return self.object[i]
        return None

    def ends_at(self, address: int) -> frozenset[str]:
        """The objects whose bytes end at ``address``."""
        return self._ends.get(address, frozenset())

    def zero_size_objects(self, address: int) -> frozenset[str | None]:
        """Where a zero-size symbol at ``address`` may belong, every choice
        as defensible as the others: the object whose bytes are there (None:
        none's), those whose bytes end there, and those with an empty
        section there."""
        return frozenset({self.object_at(address)}) | self.ends_at(address) | self._empty.get(address, frozenset())


def alloc_sections(elf_path: str) -> set[str]:
    """Names of the SHF_ALLOC sections of an ELF file (vmlinux): the ones
    that occupy memory; a map also lists .comment and friends at 0."""
    from kmodsyms.scan.elf.elfimage import read_image
    return set(read_image(elf_path).section_names)


def links_vmlinux_o(vmlinux_map: str) -> bool:
    """Whether the final link's map takes its objects from ``vmlinux.o``
    (else it names them itself)."""
    return any(s.file.endswith("vmlinux.o") for s in parse_map(vmlinux_map))


def vmlinux_object_map(vmlinux_map: str, vmlinux_o_map: str | None, vmlinux: str) -> ObjectMap:
    """Each object section's range in vmlinux (only sections that vmlinux
    loads, per its section headers): from ``vmlinux_map`` alone when it
    names the objects, else composed with ``vmlinux_o_map``."""
    loaded = alloc_sections(vmlinux)
    inputs = [s for s in parse_map(vmlinux_map) if s.output in loaded]
    final = [s for s in inputs if s.file.endswith("vmlinux.o")]
    if not final:
        return ObjectMap([(s.address, s.address + s.size, _object_path(s.file))
                          for s in inputs if s.file.endswith((".o", ".o)"))], "vmlinux.map")
    if vmlinux_o_map is None:
        raise KmodsymsError(f"{vmlinux_map} links vmlinux.o: its objects are in vmlinux.o.map, which is missing")
    # vmlinux.o's section name -> its address and size in vmlinux.  ld -r
    # keeps one output section per name, so the name identifies it.
    placed = {s.name: (s.address, s.size) for s in final}
    # What the final link takes beside vmlinux.o (scripts/link-vmlinux.sh:
    # .vmlinux.export.o, init/version-timestamp.o, the kallsyms tables) it
    # names itself, at their addresses in vmlinux.
    ranges = [(s.address, s.address + s.size, _object_path(s.file)) for s in inputs
              if s.file.endswith((".o", ".o)")) and not s.file.endswith("vmlinux.o")]
    # An object's piece lies inside its vmlinux.o section.  Where the final
    # link merges a section's strings (SHF_MERGE: .rodata.str1.8), the
    # section shrinks, yet vmlinux.o.map keeps each piece's offset from
    # before merging: those past the merged end hold none of its bytes.
    for s in parse_map(vmlinux_o_map):
        if s.file.endswith((".o", ".o)")) and s.name in placed:
            base, size = placed[s.name]
            start, end = base + s.address, min(base + s.address + s.size, base + size)
            if start <= end:
                ranges.append((start, end, _object_path(s.file)))
    return ObjectMap(ranges, "vmlinux.map + vmlinux.o.map")


def _object_path(file: str) -> str:
    # "vmlinux.a(fs/ext4/super.o)" or a plain path
    m = re.match(r"^.*\((.*)\)$", file)
    return m.group(1) if m else file
