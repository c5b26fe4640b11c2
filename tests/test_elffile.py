"""kmodsyms.scan.elf.elffile, the one ELF structures layer, held to pyelftools: every
section header, section's contents, program header and symbol of files of
both classes and byte orders (the fixture's objects, vmlinux and fuse.ko;
fixtures/cross' five architectures), in both its readings (from bytes and
from an open file); and every cut or corruption of a file is one error that
names the file and what to do, never a traceback."""

import glob
import os
import random

import pytest
from conftest import FIXTURE
from elftools.elf import enums
from elftools.elf.elffile import ELFFile

from kmodsyms.errors import KmodsymsError
from kmodsyms.scan.elf.elffile import ElfFile
from kmodsyms.scan.elf.elfscan import scan_elf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CROSS = sorted(glob.glob(os.path.join(ROOT, "fixtures", "cross", "*", "sample.o")))
FILES = ([os.path.join(FIXTURE, p) for p in ("vmlinux", "fs/fuse/fuse.ko", "kernel/fork.o",
                                              "arch/x86/lib/memcpy_64.o", "vmlinux.o")] + CROSS)
REMEDY = "do something about it"


def _values(prefix: str) -> dict[str, int]:
    """pyelftools' names of one kind of ELF value (every architecture's), to numbers."""
    out = {}
    for name in dir(enums):
        if name.startswith(prefix):
            out.update({k: v for k, v in getattr(enums, name).items() if k != "_default_"})
    return out


SH_TYPE, P_TYPE = _values("ENUM_SH_TYPE"), _values("ENUM_P_TYPE")
BIND, TYPE, SHNDX = _values("ENUM_ST_INFO_BIND"), _values("ENUM_ST_INFO_TYPE"), _values("ENUM_ST_SHNDX")


def number(value, names):
    return value if isinstance(value, int) else names[value]


def reference(path):
    """Section headers (name first), contents, program headers and
    .symtab entries (name offset, info, shndx, value, size), per pyelftools."""
    with open(path, "rb") as f:
        elf = ELFFile(f)
        sections = [(s.name, number(s["sh_type"], SH_TYPE), s["sh_flags"], s["sh_addr"],
                     s["sh_offset"], s["sh_size"], s["sh_link"], s["sh_info"],
                     s["sh_addralign"], s["sh_entsize"]) for s in elf.iter_sections()]
        contents = [b"" if s["sh_type"] == "SHT_NOBITS" else s.data() for s in elf.iter_sections()]
        segments = [(number(p["p_type"], P_TYPE), p["p_flags"], p["p_offset"], p["p_vaddr"],
                     p["p_paddr"], p["p_filesz"], p["p_memsz"], p["p_align"])
                    for p in elf.iter_segments()]
        symtab = elf.get_section_by_name(".symtab")
        symbols = [(s["st_name"], number(s["st_info"]["bind"], BIND) << 4
                    | number(s["st_info"]["type"], TYPE), number(s["st_shndx"], SHNDX),
                    s["st_value"], s["st_size"]) for s in symtab.iter_symbols()] if symtab else None
    return sections, contents, segments, symbols


@pytest.mark.parametrize("path", FILES, ids=lambda p: os.path.relpath(p, ROOT))
@pytest.mark.parametrize("source", ["bytes", "file"])
def test_tables_match_pyelftools(path, source):
    sections, contents, segments, symbols = reference(path)
    with open(path, "rb") as f:
        elf = ElfFile(path, f.read() if source == "bytes" else f, "object", REMEDY)
        assert [(elf.section_name(i), *h[1:]) for i, h in enumerate(elf.sections)] == sections
        assert [elf.section_data(i) for i in range(len(sections))] == contents
        assert [tuple(s) for s in elf.segments()] == segments
        symtab = elf.section_index(".symtab")
        if symbols is None:
            assert symtab is None
            return
        entries = elf.symbol_entries(symtab)
        assert [(name, info, shndx, value, size) for name, info, _o, shndx, value, size in entries] \
            == symbols
        array = elf.symbol_array(symtab)
        assert [tuple(int(row[f]) for f in ("name", "info", "other", "shndx", "value", "size"))
                for row in array] == entries


def test_layouts_cover_both_classes_and_byte_orders():
    seen = set()
    for path in FILES:
        with open(path, "rb") as f:
            elf = ElfFile(path, f.read(), "object", REMEDY)
        seen.add((elf.layout.is64, elf.layout.byteorder))
    assert seen == {(True, "<"), (True, ">"), (False, "<"), (False, ">")}


def _bad(path: str, data: bytes):
    """Read ``data`` (a damaged ``path``) every way the readers do; the
    error, or None when it reads."""
    try:
        elf = ElfFile(path, data, "module", REMEDY)
        scan_elf(elf)
        elf.segments()
        [elf.section_name(i) for i in range(len(elf.sections))]
        elf.extent()
    except KmodsymsError as e:
        return str(e)
    return None


def _assert_clear(error: str, path: str):
    assert error.startswith(f"{path}: ") and error.endswith(f"; {REMEDY}") and "\n" not in error


@pytest.mark.parametrize("name", ["fs/fuse/fuse.ko", "../cross/mips/sample.o"])
def test_every_cut_is_a_clear_error(name):
    path = os.path.normpath(os.path.join(FIXTURE, name))
    data = open(path, "rb").read()
    assert ElfFile(path, data, "module", REMEDY).extent() == len(data)
    for cut in sorted(set(range(80)) | set(range(0, len(data), max(1, len(data) // 400)))):
        error = _bad(path, data[:cut])
        assert error is not None, cut          # the ELF ends at the end of the file
        _assert_clear(error, path)


@pytest.mark.parametrize("name", ["fs/fuse/fuse.ko", "../cross/mips/sample.o"])
def test_corrupt_headers_are_clear_errors(name):
    """Random bytes written over the file header and the section header
    table: the file reads (the damage was harmless) or is refused clearly."""
    path = os.path.normpath(os.path.join(FIXTURE, name))
    data = open(path, "rb").read()
    elf = ElfFile(path, data, "module", REMEDY)
    table = (elf.header.shoff, elf.header.shoff + elf.shnum * elf.header.shentsize)
    rng = random.Random(11)
    refused = 0
    for _ in range(400):
        damaged = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(64) if rng.random() < 0.4 else rng.randrange(*table)
            damaged[at] = rng.randrange(256)
        error = _bad(path, bytes(damaged))
        if error is not None:
            _assert_clear(error, path)
            refused += 1
    assert refused > 40


def test_extended_numbering_from_section_zero(tmp_path):
    """e_shnum = 0 and e_shstrndx = SHN_XINDEX: the count and the name
    table's index are section 0's sh_size and sh_link (written here into a
    real object, which then reads as before)."""
    import struct
    path = os.path.join(FIXTURE, "kernel/fork.o")
    data = bytearray(open(path, "rb").read())
    elf = ElfFile(path, bytes(data), "object", REMEDY)
    shoff, shnum, shstrndx = elf.header.shoff, elf.shnum, elf.shstrndx
    struct.pack_into("<HH", data, 0x3C, 0, 0xFFFF)                # e_shnum, e_shstrndx
    struct.pack_into("<Q", data, shoff + 0x20, shnum)             # section 0's sh_size
    struct.pack_into("<I", data, shoff + 0x28, shstrndx)          # section 0's sh_link
    moved = ElfFile(path, bytes(data), "object", REMEDY)
    assert (moved.shnum, moved.shstrndx) == (shnum, shstrndx)
    assert moved.sections[1:] == elf.sections[1:]
    assert [moved.section_name(i) for i in range(shnum)] == [elf.section_name(i) for i in range(shnum)]
    assert scan_elf(moved) == scan_elf(elf)
