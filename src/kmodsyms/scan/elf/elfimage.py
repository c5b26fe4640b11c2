"""A linked ELF image (vmlinux): its loadable segments, its allocated output
sections, its GNU build-id and its symbol table.

Read through :mod:`kmodsyms.scan.elf.elffile` from the program and section headers,
then the notes, and the symbol table in bulk with numpy when asked: a few
reads of a file that is tens of megabytes.  The one reader of linked images
here (the build, ``verify`` and the link maps' section list use it); the
tests hold it to pyelftools.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from kmodsyms.errors import KmodsymsError
from kmodsyms.scan.elf.elfdefs import NT_GNU_BUILD_ID, PT_LOAD, PT_NOTE, SHF_ALLOC, SHT_NOTE, SHT_SYMTAB
from kmodsyms.scan.elf.elffile import ElfFile, cstring

_REMEDY = "rebuild the kernel (run make in its tree)"


def parse_notes(data: bytes, byteorder: str = "<") -> str:
    """The GNU build-id (hex) in a buffer of ELF notes, or ""."""
    pos = 0
    while pos + 12 <= len(data):
        namesz, descsz, ntype = struct.unpack_from(byteorder + "III", data, pos)
        name_at = pos + 12
        desc_at = name_at + (namesz + 3) // 4 * 4
        name = data[name_at:name_at + namesz].rstrip(b"\0")
        if name == b"GNU" and ntype == NT_GNU_BUILD_ID:
            return data[desc_at:desc_at + descsz].hex()
        pos = desc_at + (descsz + 3) // 4 * 4
    return ""


@dataclass
class Image:
    """What the build records of vmlinux."""

    segments: list[tuple[int, int]] = field(default_factory=list)   # [start, end) of each PT_LOAD with memory
    build_id: str = ""                                              # hex, or ""
    # [start, end) of each SHF_ALLOC output section with a size, by start:
    # the linker's placement rules hold within one output section.
    sections: list[tuple[int, int]] = field(default_factory=list)
    section_names: list[str] = field(default_factory=list)          # of ``sections``, in order
    symtab: int | None = None        # the section index of its .symtab; None when stripped


def read_image(path: str) -> Image:
    """The :class:`Image` of the ELF file at ``path``.  The build-id comes
    from the PT_NOTE segments, else from SHT_NOTE sections."""
    try:
        with open(path, "rb") as f:
            return image_of(ElfFile(path, f, "image", _REMEDY))
    except OSError as e:
        raise KmodsymsError(f"cannot read {path}: {e.strerror}") from None


def image_of(elf: ElfFile) -> Image:
    segments, build_id = [], ""
    for index, segment in enumerate(elf.segments()):
        if segment.type == PT_LOAD and segment.memsz:
            segments.append((segment.vaddr, segment.vaddr + segment.memsz))
        elif segment.type == PT_NOTE and not build_id and segment.filesz:
            build_id = parse_notes(elf.read(segment.offset, segment.filesz, f"segment {index}"),
                                   elf.layout.byteorder)
    sections = []
    for index, section in enumerate(elf.sections):
        if section.type == SHT_NOTE and section.size and not build_id:
            build_id = parse_notes(elf.section_data(index), elf.layout.byteorder)
        if section.flags & SHF_ALLOC and section.size:
            sections.append((section.addr, section.addr + section.size, elf.section_name(index)))
    sections.sort()
    return Image(segments, build_id, [(a, b) for a, b, _ in sections], [n for *_, n in sections],
                 elf.find_section(SHT_SYMTAB))


def read_symbols(path: str, image: Image):
    """The image's symbol table as a numpy array (``name`` offset,
    ``value``, ``size``, ``info``, ``shndx``) and its string table, or
    None when it has none."""
    if image.symtab is None:
        return None
    try:
        with open(path, "rb") as f:
            elf = ElfFile(path, f, "image", _REMEDY)
            return elf.symbol_array(image.symtab), elf.symbol_strings(image.symtab)
    except OSError as e:
        raise KmodsymsError(f"cannot read {path}: {e.strerror}") from None


def symbol_sizes(path: str, image: Image, wanted: list[tuple[int, bytes]]) -> list[int | None]:
    """The st_size of each of ``wanted`` (address, name) pairs in the
    image's symbol table (the largest of a name's entries at that address),
    None where it has none."""
    import numpy as np
    table = read_symbols(path, image)
    if table is None:
        return [None] * len(wanted)
    symbols, strings = table
    addresses = np.array([a for a, _ in wanted], dtype=np.uint64)
    sizes: dict[tuple[int, bytes], int] = {}
    for k in np.flatnonzero(np.isin(symbols["value"].astype(np.uint64), addresses)).tolist():
        key = (int(symbols["value"][k]), cstring(strings, int(symbols["name"][k])))
        sizes[key] = max(int(symbols["size"][k]), sizes.get(key, 0))
    return [sizes.get(pair) for pair in wanted]


def missing_symbols(path: str, image: Image, wanted: list[tuple[int, bytes]]) -> list[bytes] | None:
    """The names of ``wanted`` (address, name) pairs that the image's own
    symbol table does not have at that address, or None when it has no
    symbol table.  Only the wanted addresses' names are decoded."""
    import numpy as np
    table = read_symbols(path, image)
    if table is None:
        return None
    symbols, strings = table
    addresses = np.array([a for a, _ in wanted], dtype=np.uint64)
    present = set()
    for k in np.flatnonzero(np.isin(symbols["value"].astype(np.uint64), addresses)).tolist():
        offset = int(symbols["name"][k])
        present.add((int(symbols["value"][k]), cstring(strings, offset)))
    return [name for address, name in wanted if (address, name) not in present]
