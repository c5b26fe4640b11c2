"""A linked ELF image (vmlinux): its loadable segments, its allocated output
sections, its GNU build-id and its symbol table.

Read with ``struct`` from the ELF, program and section headers (class and
byte order from ``e_ident``), then the notes, and the symbol table in bulk
with numpy when asked: a few reads of a file that is tens of megabytes.
The one reader of linked images here (the build, ``verify`` and the link
maps' section list use it); the tests hold it to pyelftools.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from .elfdefs import SHF_ALLOC, SHN_XINDEX, SHT_SYMTAB
from .errors import KmodsymsError

NT_GNU_BUILD_ID = 3
PT_LOAD = 1
PT_NOTE = 4
SHT_NOTE = 7
PN_XNUM = 0xFFFF


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
    # Where its .symtab and that table's strings are: (offset, size) each,
    # and the ELF class and byte order to read it; None when stripped.
    symtab: tuple[int, int, int, int, bool, str] | None = None


def read_image(path: str) -> Image:
    """The :class:`Image` of the ELF file at ``path``.  The build-id comes
    from the PT_NOTE segments, else from SHT_NOTE sections."""
    try:
        with open(path, "rb") as f:
            return _read_image(f)
    except OSError as e:
        raise KmodsymsError(f"cannot read {path}: {e.strerror}") from None
    except (struct.error, ValueError):
        raise KmodsymsError(f"{path}: truncated or corrupt ELF image") from None


def _read_image(f) -> Image:
    ident = f.read(64)
    if ident[:4] != b"\x7fELF" or ident[4] not in (1, 2) or ident[5] not in (1, 2):
        raise ValueError("not ELF")
    end = "<" if ident[5] == 1 else ">"
    if ident[4] == 2:
        phoff, shoff = struct.unpack_from(end + "QQ", ident, 0x20)
        phentsize, phnum, shentsize, shnum = struct.unpack_from(end + "HHHH", ident, 0x36)
        ph = struct.Struct(end + "IIQQQQQQ")   # type flags offset vaddr paddr filesz memsz align
        sh = struct.Struct(end + "IIQQQQIIQQ")
        pick = (0, 2, 3, 5, 6)                  # type offset vaddr filesz memsz
    else:
        phoff, shoff = struct.unpack_from(end + "II", ident, 0x1C)
        phentsize, phnum, shentsize, shnum = struct.unpack_from(end + "HHHH", ident, 0x2A)
        ph = struct.Struct(end + "IIIIIIII")   # type offset vaddr paddr filesz memsz flags align
        sh = struct.Struct(end + "IIIIIIIIII")
        pick = (0, 1, 2, 4, 5)

    def read(offset: int, size: int) -> bytes:
        f.seek(offset)
        data = f.read(size)
        if len(data) != size:
            raise ValueError("past the end")
        return data

    shstrndx = struct.unpack_from(end + "H", ident, 0x3E if ident[4] == 2 else 0x32)[0]
    if (phnum == PN_XNUM or shnum == 0 or shstrndx == SHN_XINDEX) and shoff:
        first = sh.unpack(read(shoff, sh.size))      # extended numbering lives in section 0
        phnum = first[7] if phnum == PN_XNUM else phnum
        shnum = shnum or first[5]
        shstrndx = first[6] if shstrndx == SHN_XINDEX else shstrndx
    segments, build_id = [], ""
    if phoff and phnum:
        table = read(phoff, phnum * phentsize)
        for i in range(phnum):
            header = ph.unpack_from(table, i * phentsize)
            p_type, offset, vaddr, filesz, memsz = (header[k] for k in pick)
            if p_type == PT_LOAD and memsz:
                segments.append((vaddr, vaddr + memsz))
            elif p_type == PT_NOTE and not build_id and filesz:
                build_id = parse_notes(read(offset, filesz), end)
    sections, symtab = [], None
    if shoff and shnum:
        table = read(shoff, shnum * shentsize)
        headers = [sh.unpack_from(table, i * shentsize) for i in range(shnum)]
        names = read(headers[shstrndx][4], headers[shstrndx][5]) if shstrndx < shnum else b""
        for h in headers:                 # name type flags addr offset size link ...
            if h[1] == SHT_NOTE and h[5] and not build_id:
                build_id = parse_notes(read(h[4], h[5]), end)
            if h[2] & SHF_ALLOC and h[5]:
                name = names[h[0]:names.find(b"\0", h[0])] if h[0] < len(names) else b""
                sections.append((h[3], h[3] + h[5], name.decode("utf-8", "surrogateescape")))
            if h[1] == SHT_SYMTAB and h[6] < shnum:
                strings = headers[h[6]]
                symtab = (h[4], h[5], strings[4], strings[5], ident[4] == 2, end)
    sections.sort()
    return Image(segments, build_id, [(a, b) for a, b, _ in sections], [n for *_, n in sections], symtab)


def read_symbols(path: str, image: Image):
    """The image's symbol table as a numpy array (``name`` offset,
    ``value``, ``size``, ``info``, ``shndx``) and its string table, or
    None when it has none."""
    import numpy as np
    if image.symtab is None:
        return None
    sym_at, sym_size, str_at, str_size, is64, end = image.symtab
    dtype = np.dtype([("name", end + "u4"), ("info", "u1"), ("other", "u1"), ("shndx", end + "u2"),
                      ("value", end + "u8"), ("size", end + "u8")] if is64 else
                     [("name", end + "u4"), ("value", end + "u4"), ("size", end + "u4"),
                      ("info", "u1"), ("other", "u1"), ("shndx", end + "u2")])
    try:
        with open(path, "rb") as f:
            f.seek(sym_at)
            symbols = np.frombuffer(f.read(sym_size - sym_size % dtype.itemsize), dtype=dtype)
            f.seek(str_at)
            strings = f.read(str_size)
    except OSError as e:
        raise KmodsymsError(f"cannot read {path}: {e.strerror}") from None
    return symbols, strings


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
        present.add((int(symbols["value"][k]), strings[offset:strings.find(b"\0", offset)]))
    return [name for address, name in wanted if (address, name) not in present]
