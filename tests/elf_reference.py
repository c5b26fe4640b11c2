"""The reference readers the tests hold kmodsyms' fast ELF paths to:
pyelftools, the ELF reader of record, walking the same tables."""

from kmodsyms.errors import KmodsymsError
from kmodsyms.scan.elf.elfdefs import SHF_ALLOC, SHN_LORESERVE, SHN_XINDEX, SHT_NOBITS, SHT_SYMTAB
from kmodsyms.scan.elf.elfscan import ObjectScan, object_scan


def rows(scan: ObjectScan):
    """(name, section name, value, size, type, binding) per symbol: the
    comparable form of a scan."""
    return [
        (n.decode("utf-8", "surrogateescape"), scan.sec_name[s], v, z, i & 0xF, i >> 4)
        for n, v, z, i, s in zip(scan.sym_name, scan.sym_value, scan.sym_size,
                                 scan.sym_info, scan.sym_section)
    ]


def scan_object_pyelftools(path: str) -> ObjectScan:
    """The same scan through pyelftools (the reference reader)."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableIndexSection, SymbolTableSection

    with open(path, "rb") as f:
        data = f.read()
    if data[:8] in (b"!<arch>\n", b"!<thin>\n"):
        raise KmodsymsError(f"{path}: is an ar archive, expected an object file")
    import io
    try:
        elf = ELFFile(io.BytesIO(data))
        sections = [(s.name, s["sh_type"] if isinstance(s["sh_type"], int) else
                     _SHT.get(s["sh_type"], -1), s["sh_flags"], s["sh_addralign"], s["sh_size"])
                    for s in elf.iter_sections()]
        kept = []
        symtab = elf.get_section_by_name(".symtab")
        if isinstance(symtab, SymbolTableSection):
            xindex = next((s for s in elf.iter_sections()
                           if isinstance(s, SymbolTableIndexSection)), None)
            for index, sym in enumerate(symtab.iter_symbols()):
                shndx = sym["st_shndx"]
                if not isinstance(shndx, int):   # SHN_UNDEF / ABS / COMMON as strings
                    continue
                if shndx == SHN_XINDEX and xindex is not None:
                    shndx = xindex.get_section_index(index)
                elif shndx >= SHN_LORESERVE:     # other reserved indices: in no section
                    continue
                info = _STB[sym["st_info"]["bind"]] << 4 | _STT[sym["st_info"]["type"]]
                name = sym.name.encode("utf-8", "surrogateescape")
                if _kept(name, info, shndx):
                    kept.append((name, sym["st_value"], sym["st_size"], info, shndx))
    except ELFError as e:
        raise KmodsymsError(f"{path}: corrupt ELF object ({e})") from None
    used = {k[4] for k in kept}
    local, kept_sections = {}, []
    for index, (name, _type, flags, align, size) in enumerate(sections):
        if index and ((flags & SHF_ALLOC and size) or index in used):
            local[index] = len(kept_sections)
            kept_sections.append((name, flags, align, size))
    return object_scan(kept_sections, kept, local)


def _kept(name: bytes, info: int, shndx: int) -> bool:
    """kmodsyms.scan.elf.elfscan's rule, from its docstring: defined in a section,
    not STT_SECTION/STT_FILE, named, not a mapping symbol or .L label."""
    return (shndx != 0 and (info & 0xF) not in (3, 4) and name != b""
            and not name.startswith((b"$", b".L")))


_SHT = {"SHT_NOBITS": SHT_NOBITS, "SHT_SYMTAB": SHT_SYMTAB}
_STB = {"STB_LOCAL": 0, "STB_GLOBAL": 1, "STB_WEAK": 2, "STB_GNU_UNIQUE": 10}
_STT = {"STT_NOTYPE": 0, "STT_OBJECT": 1, "STT_FUNC": 2, "STT_SECTION": 3, "STT_FILE": 4,
        "STT_COMMON": 5, "STT_TLS": 6, "STT_GNU_IFUNC": 10, "STT_LOOS": 10}
