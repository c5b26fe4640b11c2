"""Scan one relocatable ELF object: its sections and defined symbols.

:func:`scan_object` reads the section headers and ``.symtab`` through
:mod:`kmodsyms.scan.elf.elffile` in bulk (one ``struct`` pass per table, no object
per symbol; names found with one ``bytes.find`` each): it runs on each of
the thousands of objects of vmlinux, most with tens to hundreds of symbols,
where this beats numpy's per-call cost.  The
tests hold it to pyelftools, the ELF reader of record, object by object
(tests/elf_reference.py).

ELF class (32/64-bit) and byte order come from ``e_ident``, so objects of
every architecture a kernel is built for read the same way.

Kept symbols: defined (not ``SHN_UNDEF``), in a real section (not ``SHN_ABS``
or ``SHN_COMMON``), not ``STT_FILE``/``STT_SECTION``, not mapping symbols
(``$x``, ``$d``...) and not ``.L`` labels, which kallsyms never shows (the
rest of ``scripts/mksysmap``'s rules are applied to the whole table:
:func:`kmodsyms.scan.sysmap.never_listed`).

Kept sections: every ``SHF_ALLOC`` section of nonzero size, and every section
holding a kept symbol; each is recorded with its name, flags, alignment and
size, since once linked it occupies one contiguous interval of vmlinux.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field

from kmodsyms.errors import KmodsymsError
from kmodsyms.scan.elf.elfdefs import SHF_ALLOC, SHN_LORESERVE, SHN_UNDEF, SHT_SYMTAB, STT_FILE, STT_SECTION
from kmodsyms.scan.elf.elffile import ElfFile

_REMEDY = "rebuild it (run make in the kernel tree)"


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
    return scan_elf(ElfFile(path, data, "object", _REMEDY))


def scan_elf(elf: ElfFile) -> ObjectScan:
    """The :class:`ObjectScan` of a relocatable ELF file."""
    sections = elf.sections
    symtab = elf.find_section(SHT_SYMTAB)
    kept = []                     # (name, value, size, info, section index)
    if symtab is not None:
        strings = elf.symbol_strings(symtab)
        shnum = elf.shnum
        # Names end at a NUL; one added after the table ends an
        # unterminated last name there, and names past it are b"".
        strings += b"\0"
        find = strings.find
        for index, (st_name, info, _other, shndx, value, size) in enumerate(elf.symbol_entries(symtab)):
            if shndx == SHN_UNDEF or (info & 0xF) in (STT_SECTION, STT_FILE):
                continue
            if shndx >= SHN_LORESERVE:
                shndx = elf.reserved_index(symtab, index, shndx)
                if not shndx:
                    continue          # SHN_ABS, SHN_COMMON: in no section, cannot be placed
            if shndx >= shnum:
                elf.fail(f"corrupt symbol table (section index {shndx})")
            name = strings[st_name:find(0, st_name)]
            # Mapping symbols ($x, $d...) and local labels: most of what
            # kallsyms never shows, dropped here at little cost; the rest of
            # mksysmap's rules apply when the tables are assembled
            # (kmodsyms.scan.sysmap.never_listed).
            if name and not name.startswith((b"$", b".L")):
                kept.append((name, value, size, info, shndx))
    used = {k[4] for k in kept}
    local = {}
    kept_sections = []
    for index, (_name, _type, flags, _addr, _offset, size, _link, _info, align, _entsize) \
            in enumerate(sections):
        if index and ((flags & SHF_ALLOC and size) or index in used):
            local[index] = len(kept_sections)
            kept_sections.append((elf.section_name(index), flags, align, size))
    return object_scan(kept_sections, kept, local)


def object_scan(sections: list[tuple], symbols: list[tuple], local: dict[int, int]) -> ObjectScan:
    """The :class:`ObjectScan` of the kept ``sections`` (name, flags,
    alignment, size) and ``symbols`` (name, value, size, info, ELF section
    index), ``local`` numbering the kept sections by ELF section index."""
    names, flags, aligns, sizes = zip(*sections) if sections else ((),) * 4
    sym_names, values, sym_sizes, infos, shndx = zip(*symbols) if symbols else ((),) * 5
    return ObjectScan(list(names), array("Q", flags), array("Q", aligns), array("Q", sizes),
                      b"\0".join(sym_names) + b"\0" if symbols else b"", array("Q", values),
                      array("Q", sym_sizes), bytes(infos), array("I", map(local.__getitem__, shndx)))
