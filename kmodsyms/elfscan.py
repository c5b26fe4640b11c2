"""Scan one relocatable ELF object: its sections and defined symbols.

:func:`scan_object` reads the section headers and ``.symtab`` in bulk with
``struct`` (one pass, no per-symbol objects).  The tests hold it to
pyelftools, the ELF reader of record, object by object
(tests/elf_reference.py).

ELF class (32/64-bit) and byte order come from ``e_ident``, so objects of
every architecture a kernel is built for read the same way.

Kept symbols: defined (not ``SHN_UNDEF``), in a real section (not ``SHN_ABS``
or ``SHN_COMMON``), not ``STT_FILE``/``STT_SECTION``, not mapping symbols
(``$x``, ``$d``...) and not ``.L`` labels, which kallsyms never shows (the
rest of ``scripts/mksysmap``'s rules are applied to the whole table:
:func:`kmodsyms.kallsyms.never_listed`).

Kept sections: every ``SHF_ALLOC`` section of nonzero size, and every section
holding a kept symbol; each is recorded with its name, flags, alignment and
size, since once linked it occupies one contiguous interval of vmlinux.
"""

from __future__ import annotations

import struct
from array import array
from dataclasses import dataclass, field

from .elfdefs import (SHF_ALLOC, SHN_LORESERVE, SHN_UNDEF, SHN_XINDEX, SHT_NOBITS, SHT_SYMTAB,
                      SHT_SYMTAB_SHNDX, STT_FILE, STT_SECTION)
from .errors import KmodsymsError



@dataclass
class ObjectScan:
    """What one object contributes, as compact arrays (cheap to send back
    from a scanner process and to cache).  Symbols are in symbol-table order:
    ``sym_names`` holds each name followed by a NUL; ``sym_section`` indexes
    ``sec_name``/``sec_size``/...; ``sym_info`` is ``st_info`` (bind << 4 |
    type) per symbol."""

    sec_name: list[str] = field(default_factory=list)
    sec_flags: array = field(default_factory=lambda: array("Q"))
    sec_align: array = field(default_factory=lambda: array("Q"))
    sec_size: array = field(default_factory=lambda: array("Q"))
    sym_names: bytes = b""
    sym_value: array = field(default_factory=lambda: array("Q"))
    sym_size: array = field(default_factory=lambda: array("Q"))
    sym_info: bytes = b""
    sym_section: array = field(default_factory=lambda: array("I"))

    @property
    def sym_name(self) -> list[bytes]:
        return self.sym_names.split(b"\0")[:-1]


def _keep_symbol(name: bytes, info: int, shndx: int) -> bool:
    if shndx == SHN_UNDEF or not name:
        return False
    typ = info & 0xF
    if typ in (STT_SECTION, STT_FILE):
        return False
    # Mapping symbols ($x, $d...) and local labels: most of what kallsyms
    # never shows, dropped here at little cost; the rest of mksysmap's rules
    # apply when the tables are assembled (kmodsyms.kallsyms.never_listed).
    return name[:1] != b"$" and not name.startswith(b".L")


def _finish(sections, kept_syms) -> ObjectScan:
    """Shared tail of both readers.  ``sections`` is a list of
    (name, type, flags, align, size) by ELF section index; ``kept_syms`` is a
    list of (name, value, size, info, ELF section index)."""
    used = {s[4] for s in kept_syms}
    local = {}
    kept_sections = []
    for index, (name, _type, flags, align, size) in enumerate(sections):
        if index and ((flags & SHF_ALLOC and size) or index in used):
            local[index] = len(kept_sections)
            kept_sections.append((name, flags, align, size))
    names, flags, aligns, sizes = zip(*kept_sections) if kept_sections else ((),) * 4
    scan = ObjectScan(list(names), array("Q", flags), array("Q", aligns), array("Q", sizes))
    if kept_syms:
        sym_names, values, sym_sizes, infos, shndx = zip(*kept_syms)
        scan.sym_names = b"\0".join(sym_names) + b"\0"
        scan.sym_value, scan.sym_size = array("Q", values), array("Q", sym_sizes)
        scan.sym_info = bytes(infos)
        scan.sym_section = array("I", map(local.__getitem__, shndx))
    return scan


def scan_object(path: str, data: bytes | None = None) -> ObjectScan:
    """Scan the object at ``path`` (``data``: its bytes, if already read)."""
    if data is None:
        try:
            with open(path, "rb") as f:
                data = f.read()
        except IsADirectoryError:
            raise KmodsymsError(f"{path}: is a directory, expected an object file") from None
        except OSError as e:
            raise KmodsymsError(f"cannot read object {path}: {e.strerror}") from None
    try:
        return _scan_bytes(path, data)
    except (struct.error, IndexError, ValueError):
        raise KmodsymsError(f"{path}: truncated or corrupt ELF object") from None


def _check_header(path: str, data: bytes) -> tuple[str, bool]:
    if data[:4] != b"\x7fELF":
        if data[:8] in (b"!<arch>\n", b"!<thin>\n"):
            raise KmodsymsError(f"{path}: is an ar archive, expected an object file")
        raise KmodsymsError(f"{path}: not an ELF object file")
    if len(data) < 52:
        raise KmodsymsError(f"{path}: truncated ELF header")
    ei_class, ei_data = data[4], data[5]
    if ei_class not in (1, 2) or ei_data not in (1, 2):
        raise KmodsymsError(f"{path}: unknown ELF class {ei_class} or byte order {ei_data}")
    return ("<" if ei_data == 1 else ">"), ei_class == 2


def _scan_bytes(path: str, data: bytes) -> ObjectScan:
    end, is64 = _check_header(path, data)
    if is64:
        e_shoff, = struct.unpack_from(end + "Q", data, 0x28)
        e_shentsize, e_shnum, e_shstrndx = struct.unpack_from(end + "HHH", data, 0x3A)
        sh_fmt = struct.Struct(end + "IIQQQQIIQQ")  # name type flags addr off size link info align entsize
    else:
        e_shoff, = struct.unpack_from(end + "I", data, 0x20)
        e_shentsize, e_shnum, e_shstrndx = struct.unpack_from(end + "HHH", data, 0x2E)
        sh_fmt = struct.Struct(end + "IIIIIIIIII")
    if e_shoff == 0:
        return ObjectScan()
    if e_shentsize < sh_fmt.size:
        raise KmodsymsError(f"{path}: corrupt ELF header (section header size {e_shentsize})")
    # Extended numbering: section 0 carries the real count and shstrndx.
    first = sh_fmt.unpack_from(data, e_shoff)
    if e_shnum == 0:
        e_shnum = first[5]
    if e_shstrndx == SHN_XINDEX:
        e_shstrndx = first[6]
    if e_shoff + e_shnum * e_shentsize > len(data):
        raise KmodsymsError(f"{path}: truncated ELF object (section headers past end of file)")
    if e_shentsize == sh_fmt.size:
        headers = list(sh_fmt.iter_unpack(data[e_shoff:e_shoff + e_shnum * e_shentsize]))
    else:
        headers = [sh_fmt.unpack_from(data, e_shoff + i * e_shentsize) for i in range(e_shnum)]

    def contents(h) -> bytes:
        off, size = h[4], h[5]
        if h[1] == SHT_NOBITS:
            return b""
        if off + size > len(data):
            raise KmodsymsError(f"{path}: truncated ELF object (section contents past end of file)")
        return data[off:off + size]

    shstr = contents(headers[e_shstrndx]) if e_shstrndx < e_shnum else b""

    def cstr(table: bytes, off: int) -> bytes:
        stop = table.find(b"\0", off)
        return table[off:stop if stop >= 0 else len(table)]

    def sections(used: set[int]) -> list:
        """(name, type, flags, align, size) by section index, the name
        decoded only where _finish keeps the section (allocated with bytes,
        or holding a kept symbol): relocation sections are most of them."""
        return [(cstr(shstr, h[0]).decode("utf-8", "surrogateescape")
                 if (h[2] & SHF_ALLOC and h[5]) or i in used else "", h[1], h[2], h[8], h[5])
                for i, h in enumerate(headers)]

    symtab = next((i for i, h in enumerate(headers) if h[1] == SHT_SYMTAB), None)
    if symtab is None:
        return _finish(sections(set()), [])
    sym_header = headers[symtab]
    symdata = contents(sym_header)
    strtab = contents(headers[sym_header[6]]) if sym_header[6] < e_shnum else b""
    xindex = next((contents(h) for h in headers
                   if h[1] == SHT_SYMTAB_SHNDX and h[6] == symtab), None)
    if is64:
        sym_fmt = struct.Struct(end + "IBBHQQ")  # name info other shndx value size
    else:
        sym_fmt = struct.Struct(end + "IIIBBH")  # name value size info other shndx
    usable = len(symdata) - len(symdata) % sym_fmt.size
    # Names by offset, from one split of the string table; st_name may also
    # point inside a string (suffix sharing), which cstr() handles.
    pieces = strtab.split(b"\0")
    starts = [0]
    for piece in pieces[:-1]:
        starts.append(starts[-1] + len(piece) + 1)
    name_at = dict(zip(starts, pieces))
    kept = []
    for index, fields in enumerate(sym_fmt.iter_unpack(symdata[:usable])):
        if is64:
            st_name, info, _other, shndx, value, size = fields
        else:
            st_name, value, size, info, _other, shndx = fields
        if shndx == SHN_UNDEF or (info & 0xF) in (STT_SECTION, STT_FILE):
            continue
        if shndx >= SHN_LORESERVE:
            if shndx != SHN_XINDEX or xindex is None:
                continue  # SHN_ABS, SHN_COMMON: in no section, cannot be placed
            shndx, = struct.unpack_from(end + "I", xindex, 4 * index)
        if shndx >= e_shnum:
            raise KmodsymsError(f"{path}: corrupt symbol table (section index {shndx})")
        name = name_at.get(st_name)
        if name is None:
            name = cstr(strtab, st_name)
        if _keep_symbol(name, info, shndx):
            kept.append((name, value, size, info, shndx))
    return _finish(sections({k[4] for k in kept}), kept)
