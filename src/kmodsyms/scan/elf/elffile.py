"""The ELF structures layer: the one place that knows how an ELF file lays
out its file header, section headers, program headers and symbols, for both
classes (ELF32, ELF64) and both byte orders.

Layered as pyelftools is (structs -> sections -> symbols), below the two
readers of ELF files here: :mod:`kmodsyms.scan.elf.elfscan` (vmlinux's objects, in
bulk) and :mod:`kmodsyms.scan.elf.elfimage` (linked images: vmlinux).  Loaded
modules' ``.ko`` files are read at run time by libkmodsyms
(``libkmodsyms/kms_elf.c``), in this layer's words.  :class:`ElfFile` validates the
file header once and resolves extended numbering once (``e_shnum``,
``e_shstrndx`` and ``e_phnum`` kept in section 0 when they do not fit, and
symbols' SHN_XINDEX).  A table is read in one ``struct`` pass into tuples
of one field order for both classes (an object's tens of sections and
hundreds of symbols), or as a numpy structured array (a linked image's
hundreds of thousands of symbols).  Any way a file is malformed is one
:class:`~kmodsyms.errors.KmodsymsError` naming the file and what to do.
The constants are :mod:`kmodsyms.scan.elf.elfdefs`'.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from functools import cached_property, partial
from typing import BinaryIO, NamedTuple

from kmodsyms.errors import KmodsymsError
from kmodsyms.scan.elf.archive import ARCH_MAGIC, THIN_MAGIC
from kmodsyms.scan.elf.elfdefs import (
    ELFCLASS32,
    ELFCLASS64,
    ELFDATA2LSB,
    ELFDATA2MSB,
    ELFMAG,
    PN_XNUM,
    SHN_XINDEX,
    SHT_NOBITS,
    SHT_SYMTAB_SHNDX,
)


class Record:
    """One ELF structure in one class and byte order, read as ``struct``
    tuples (small tables) or as a numpy structured array of ``dtype``
    (large tables), whose fields are named as in :class:`SectionHeader`,
    :class:`Segment` and :meth:`ElfFile.symbol_entries`."""

    def __init__(self, byteorder: str, fields: list[tuple[str, str]]):
        self.byteorder, self.fields = byteorder, fields
        self.struct = struct.Struct(byteorder + "".join(code for _name, code in fields))
        self.size = self.struct.size

    @cached_property
    def dtype(self):
        import numpy as np  # only linked images' tables need it: not the object scan's processes
        return np.dtype([(name, self.byteorder + _NUMPY[code]) for name, code in self.fields])


_NUMPY = {"B": "u1", "H": "u2", "I": "u4", "Q": "u8"}


@dataclass(frozen=True)
class Layout:
    """The structures of one ELF class and byte order (``byteorder``: the
    ``struct``/numpy prefix, ``<`` or ``>``).  Fields are named without their
    prefix (``sh_``, ``p_``, ``st_``); ELF32 and ELF64 order some of them
    differently (symbols, program headers), section headers alike."""

    is64: bool
    byteorder: str
    header: struct.Struct        # Elf_Ehdr after e_ident, in the order of :class:`Header`
    section: Record              # Elf_Shdr, in the order of :class:`SectionHeader`
    segment: Record              # Elf_Phdr
    symbol: Record               # Elf_Sym
    word: struct.Struct          # Elf_Word: an entry of SHT_SYMTAB_SHNDX


def _layout(is64: bool, end: str) -> Layout:
    a = "Q" if is64 else "I"       # addresses, offsets, sizes and section flags: 8 bytes in ELF64
    section = [("name", "I"), ("type", "I"), ("flags", a), ("addr", a), ("offset", a), ("size", a),
               ("link", "I"), ("info", "I"), ("addralign", a), ("entsize", a)]
    if is64:
        segment = [("type", "I"), ("flags", "I"), ("offset", a), ("vaddr", a), ("paddr", a),
                   ("filesz", a), ("memsz", a), ("align", a)]
        symbol = [("name", "I"), ("info", "B"), ("other", "B"), ("shndx", "H"), ("value", a),
                  ("size", a)]
    else:
        segment = [("type", "I"), ("offset", a), ("vaddr", a), ("paddr", a), ("filesz", a),
                   ("memsz", a), ("flags", "I"), ("align", a)]
        symbol = [("name", "I"), ("value", a), ("size", a), ("info", "B"), ("other", "B"),
                  ("shndx", "H")]
    return Layout(is64, end, struct.Struct(f"{end}16xHHI{a}{a}{a}IHHHHHH"), Record(end, section),
                  Record(end, segment), Record(end, symbol), struct.Struct(end + "I"))


# By (EI_CLASS, EI_DATA), the two bytes of e_ident that say which layout.
LAYOUTS = {(c, d): _layout(c == ELFCLASS64, "<" if d == ELFDATA2LSB else ">")
           for c in (ELFCLASS32, ELFCLASS64) for d in (ELFDATA2LSB, ELFDATA2MSB)}


class Header(NamedTuple):
    """The ELF file header as stored (before extended numbering)."""

    type: int
    machine: int
    version: int
    entry: int
    phoff: int
    shoff: int
    flags: int
    ehsize: int
    phentsize: int
    phnum: int
    shentsize: int
    shnum: int
    shstrndx: int


class SectionHeader(NamedTuple):
    """One section header (the same fields, in the same order, in ELF32 and ELF64)."""

    name: int            # offset in the section-name table (:meth:`ElfFile.section_name`)
    type: int
    flags: int
    addr: int
    offset: int
    size: int
    link: int
    info: int
    addralign: int
    entsize: int


class Segment(NamedTuple):
    """One program header (ELF64's order; ELF32 stores ``flags`` after ``memsz``)."""

    type: int
    flags: int
    offset: int
    vaddr: int
    paddr: int
    filesz: int
    memsz: int
    align: int


# SectionHeader._make without its length check (the struct made the tuple):
# an object's section headers are made by the thousand.
_section_header = partial(tuple.__new__, SectionHeader)


class ElfFile:
    """One ELF file: its validated header, its section headers (``sections``,
    by section number), and on request its program headers, section
    contents and symbol tables.

    ``source`` is the file's bytes (objects, modules: read whole) or a file
    open for binary reading (images, tens of megabytes and more: only the
    tables asked for are read).  ``kind`` names what the file should be in
    errors ("object", "module", "image") and ``remedy`` says what to do
    about a bad one."""

    def __init__(self, path: str, source: bytes | BinaryIO, kind: str, remedy: str):
        self.path, self.kind, self.remedy = path, kind, remedy
        self._data = source if isinstance(source, bytes) else None
        self._file = None if isinstance(source, bytes) else source
        self._size = len(source) if isinstance(source, bytes) else os.fstat(source.fileno()).st_size
        self._names: bytes | None = None                  # the section-name table, when read
        self._index_tables: dict[int, bytes | None] = {}  # SHT_SYMTAB_SHNDX by symbol table, when read
        ident = self.read(0, min(64, self._size), "ELF header")
        if ident[:4] != ELFMAG:
            if ident[:8] in (ARCH_MAGIC, THIN_MAGIC):     # often passed where an object belongs
                self.fail(f"is an ar archive, expected an ELF {kind}")
            self.fail(f"not an ELF {kind}")
        if len(ident) < 6:
            self.fail("truncated ELF header")
        layout = LAYOUTS.get((ident[4], ident[5]))
        if layout is None:
            self.fail(f"unknown ELF class {ident[4]} or byte order {ident[5]}")
        if len(ident) < layout.header.size:
            self.fail("truncated ELF header")
        self.layout = layout
        self.header = header = Header._make(layout.header.unpack_from(ident))
        self.shnum, self.shstrndx, self.phnum = header.shnum, header.shstrndx, header.phnum
        self.sections: list[SectionHeader] = []
        if not header.shoff:
            return
        if header.shentsize < layout.section.size:
            self.fail(f"corrupt ELF header (section header size {header.shentsize})")
        if not header.shnum or header.shstrndx == SHN_XINDEX or header.phnum == PN_XNUM:
            # Extended numbering: what does not fit is kept in section 0.
            first = _section_header(self._entries(header.shoff, layout.section, 1, header.shentsize,
                                                  "section headers")[0])
            self.shnum = header.shnum or first.size
            if header.shstrndx == SHN_XINDEX:
                self.shstrndx = first.link
            if header.phnum == PN_XNUM:
                self.phnum = first.info
        self.sections = list(map(_section_header, self._entries(
            header.shoff, layout.section, self.shnum, header.shentsize, "section headers")))

    def fail(self, what: str):
        """Raise the error for this file: ``what`` is wrong with it."""
        raise KmodsymsError(f"{self.path}: {what}; {self.remedy}")

    def read(self, offset: int, size: int, what: str) -> bytes:
        """``size`` bytes at ``offset`` of the file (``what``: for errors)."""
        if offset + size > self._size:
            self.fail(f"truncated ELF {self.kind} ({what} past the end of the file)")
        if self._data is not None:
            return self._data[offset:offset + size]
        self._file.seek(offset)
        data = self._file.read(size)
        if len(data) != size:        # the file shrank while read
            self.fail(f"truncated ELF {self.kind} ({what} past the end of the file)")
        return data

    def _entries(self, offset: int, record: Record, count: int, stride: int, what: str) -> list[tuple]:
        """``count`` entries of ``record``, ``stride`` bytes apart, at ``offset``."""
        table = self.read(offset, count * stride, what)
        if stride == record.size:
            return list(record.struct.iter_unpack(table))
        return [record.struct.unpack_from(table, i * stride) for i in range(count)]

    # -------------------------------------------------------------- sections
    def section_data(self, index: int) -> bytes:
        """The contents of section ``index`` (b"" for SHT_NOBITS)."""
        section = self.sections[index]
        if section.type == SHT_NOBITS:
            return b""
        return self.read(section.offset, section.size, f"contents of section {index}")

    def section_name(self, index: int) -> str:
        if self._names is None:
            self._names = self.section_data(self.shstrndx) if self.shstrndx < self.shnum else b""
        return cstring(self._names, self.sections[index].name).decode("utf-8", "surrogateescape")

    def section_index(self, name: str) -> int | None:
        """The index of the first section called ``name``, or None."""
        return next((i for i in range(len(self.sections)) if self.section_name(i) == name), None)

    def find_section(self, sh_type: int, link: int | None = None) -> int | None:
        """The index of the first section of type ``sh_type`` (and, if given,
        that links to section ``link``), or None."""
        return next((i for i, s in enumerate(self.sections)
                     if s.type == sh_type and (link is None or s.link == link)), None)

    def extent(self) -> int:
        """Where the ELF ends: past its section header table and every
        section's contents, whichever is last (what follows, such as a
        module signature, is not part of it)."""
        end = max([self.header.shoff + self.shnum * self.header.shentsize] +
                  [s.offset + s.size for s in self.sections if s.type != SHT_NOBITS])
        if end > self._size:
            self.fail(f"truncated ELF {self.kind}")
        return end

    # -------------------------------------------------------------- segments
    def segments(self) -> list[Segment]:
        """The program headers."""
        if not self.header.phoff or not self.phnum:
            return []
        if self.header.phentsize < self.layout.segment.size:
            self.fail(f"corrupt ELF header (program header size {self.header.phentsize})")
        entries = self._entries(self.header.phoff, self.layout.segment, self.phnum,
                                self.header.phentsize, "program headers")
        if self.layout.is64:
            return list(map(Segment._make, entries))
        return [Segment(p_type, flags, offset, vaddr, paddr, filesz, memsz, align)
                for p_type, offset, vaddr, paddr, filesz, memsz, flags, align in entries]

    # --------------------------------------------------------------- symbols
    def symbol_entries(self, symtab: int) -> list[tuple]:
        """The symbols of symbol table section ``symtab``, as (name, info,
        other, shndx, value, size) tuples, ELF64's order, in both classes (a
        partial entry at the end is not one).  An object's few hundred read
        fastest this way."""
        data = self.section_data(symtab)
        symbol = self.layout.symbol
        entries = symbol.struct.iter_unpack(data[:len(data) - len(data) % symbol.size])
        if self.layout.is64:
            return list(entries)
        return [(name, info, other, shndx, value, size)
                for name, value, size, info, other, shndx in entries]

    def symbol_array(self, symtab: int):
        """The same as a numpy structured array of ``layout.symbol.dtype``:
        a linked image's hundreds of thousands read fastest this way."""
        import numpy as np
        data = self.section_data(symtab)
        return np.frombuffer(data, self.layout.symbol.dtype, len(data) // self.layout.symbol.size)

    def symbol_strings(self, symtab: int) -> bytes:
        """The string table of symbol table section ``symtab`` (its sh_link)."""
        link = self.sections[symtab].link
        return self.section_data(link) if link < self.shnum else b""

    def reserved_index(self, symtab: int, index: int, shndx: int) -> int | None:
        """The section of symbol ``index`` of section ``symtab`` whose
        st_shndx is the reserved index ``shndx`` (>= SHN_LORESERVE): for
        SHN_XINDEX, its entry in the SHT_SYMTAB_SHNDX table that links to
        ``symtab``; None for the others (SHN_ABS, SHN_COMMON,
        processor-specific), which are in no section."""
        if shndx != SHN_XINDEX:
            return None
        if symtab not in self._index_tables:
            table = self.find_section(SHT_SYMTAB_SHNDX, link=symtab)
            self._index_tables[symtab] = None if table is None else self.section_data(table)
        indices = self._index_tables[symtab]
        if indices is None:
            return None
        if 4 * index + 4 > len(indices):
            self.fail(f"corrupt ELF {self.kind} (section index table shorter than its symbols)")
        return self.layout.word.unpack_from(indices, 4 * index)[0]

def cstring(table: bytes, offset: int) -> bytes:
    """The NUL-terminated string of ``table`` at ``offset`` (past its end:
    b""; unterminated: to the end)."""
    stop = table.find(b"\0", offset)
    return table[offset:stop if stop >= 0 else len(table)]
