"""The dtrace_syms format's facts are one table (src/kmodsyms/format/fileformat.py):
the C library's kms_format.h is generated from it and checked in, the
reader's dtypes are made from it, and docs/format.md's tables say the same."""

from __future__ import annotations

import re
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from kmodsyms.format import fileformat as ff
from kmodsyms.format import symsfile

ROOT = Path(__file__).resolve().parent.parent
FORMAT_MD = (ROOT / "docs" / "format.md").read_text()
TYPE_WORDS = {"B": "u8", "H": "u16", "I": "u32", "Q": "u64", "8s": "bytes"}
ROW = re.compile(r"^\|\s*(\d+)\s*\|\s*(\d+)\s*\|\s*([^|]*?)\s*\|\s*([^|]*?)\s*\|", re.M)


def _section(start: str) -> str:
    """docs/format.md from the heading that begins with START to the next heading."""
    at = FORMAT_MD.index(start)
    nxt = re.compile(r"^#{2,4} ", re.M).search(FORMAT_MD, at + len(start))
    return FORMAT_MD[at:nxt.start() if nxt else len(FORMAT_MD)]


def _field_word(name: str) -> str:
    return f"`{name}`" if name else "reserved"


def _compare_header(generated: str) -> None:
    assert (ROOT / "libkmodsyms" / "kms_format.h").read_text() == generated, \
        "libkmodsyms/kms_format.h is stale: python -m kmodsyms.format.fileformat --c-header > libkmodsyms/kms_format.h"


def test_checked_in_c_header_is_the_generated_one():
    _compare_header(subprocess.run([sys.executable, "-m", "kmodsyms.format.fileformat", "--c-header"],
                                   cwd=ROOT, capture_output=True, text=True, check=True).stdout)


def test_generator_refuses_other_arguments():
    r = subprocess.run([sys.executable, "-m", "kmodsyms.format.fileformat"], cwd=ROOT,
                       capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.startswith("usage:") and not r.stdout


def test_the_c_header_names_every_field_at_its_offset():
    header = ff.c_header()
    defined = dict(re.findall(r"^#define (\w+) (\d+)u\b", header, re.M))
    for table in ff.TABLES:
        if table.plain:
            continue
        for f, at in table.offsets():
            if f.name:
                assert defined[table.c_prefix + f.name.upper()] == str(at)
    assert re.search(r"entry_size\[T_COUNT\] = \{(.*)\};", header).group(1) == \
        ", ".join(str(t.entry_size) for t in ff.TABLES)
    assert defined["HEADER_SIZE"] == str(ff.HEADER_SIZE) == "160"
    assert defined["HDR_DIRECTORY"] == "56" and defined["HDR_KERNEL_RELEASE"] == "32"


def test_every_field_is_naturally_aligned():
    for fields in [ff.HEADER] + [t.fields for t in ff.TABLES]:
        for f, at in ff._offsets(fields):
            width = 1 if f.code == "8s" else struct.calcsize("<" + f.code)
            assert at % width == 0, (f, at)
    assert ff.HEADER_SIZE % ff.TABLE_ALIGN == 0


def test_the_reader_dtypes_are_the_table():
    assert [name for name, _ in symsfile.TABLES] == [t.name for t in ff.TABLES]
    for (name, dtype), table in zip(symsfile.TABLES, ff.TABLES):
        assert dtype.itemsize == table.entry_size, name
        if not table.plain:
            for f, at in table.offsets():
                if f.name:
                    assert dtype.fields[f.name][1] == at, (name, f.name)
    assert symsfile._HEADER.size == ff.DIRECTORY_AT
    assert symsfile._LEAD.size == ff.CRC_COVERS_FROM


def test_docs_header_table_agrees():
    rows = ROW.findall(_section("## Header ("))
    expected = []
    for f, at in ff._offsets(ff.HEADER):
        expected.append((str(at), str(f.size), _field_word(f.name)))
    assert [(o, s, name) for o, s, _t, name in rows] == expected
    for (o, s, typ, name), (f, _at) in zip(rows, ff._offsets(ff.HEADER)):
        if f.count == 1:
            assert typ == TYPE_WORDS[f.code], name
        elif f.name == "directory":
            assert typ == f"{len(ff.TABLES)} × (u32, u32)"
    assert f"## Header ({ff.HEADER_SIZE} bytes)" in FORMAT_MD


def test_docs_directory_table_agrees():
    rows = re.findall(r"^\|\s*(\d+)\s*\|\s*(\w+)\s*\|\s*(\d+)[^|]*\|\s*(\d+), (\d+)\s*\|", FORMAT_MD, re.M)
    assert rows == [(str(i), t.name, str(t.entry_size), str(ff.DIRECTORY_AT + 8 * i),
                     str(ff.DIRECTORY_AT + 8 * i + 4)) for i, t in enumerate(ff.TABLES)]


@pytest.mark.parametrize("index", range(1, len(ff.TABLES)))
def test_docs_entry_tables_agree(index):
    table = ff.TABLES[index]
    heading = re.search(rf"^### {index}\. {table.name}\b.*?(\d+) bytes per entry", FORMAT_MD, re.M)
    assert heading, f"docs/format.md has no '### {index}. {table.name}' section"
    assert int(heading.group(1)) == table.entry_size
    rows = ROW.findall(_section(heading.group(0)))
    assert rows == [(str(at), str(f.size), TYPE_WORDS[f.code], _field_word(f.name))
                    for f, at in table.offsets()]


def test_a_changed_fact_fails_the_docs_check(monkeypatch):
    """Not vacuous: a table that says otherwise than the docs is caught."""
    sections = ff.TABLES[6]
    moved = sections._replace(fields=(sections.fields[1], sections.fields[0]) + sections.fields[2:])
    monkeypatch.setattr(ff, "TABLES", ff.TABLES[:6] + (moved,) + ff.TABLES[7:])
    with pytest.raises(AssertionError):
        test_docs_entry_tables_agree(6)
    with pytest.raises(AssertionError):
        _compare_header(ff.c_header())


def test_vmlinux_symbols_are_in_address_order(fixture_syms):
    """docs/format.md §10: vmlinux_symbols by address, then name (bytewise):
    the load walks them beside kallsyms' core lines (R56)."""
    f = symsfile.read_syms(fixture_syms)
    table = f.vmlinux_symbols
    keys = [(int(v["address"]), f.string(int(v["name"])).encode()) for v in table]
    assert len(keys) > 10 and keys == sorted(keys)


def test_symbols_by_offset_is_the_symbols_by_section_and_offset(fixture_syms):
    """docs/format.md §11: every symbol once, by section, then value, then
    index (sorted here in plain Python, not as the writer sorts)."""
    f = symsfile.read_syms(fixture_syms)
    section, value = f.symbols["section"].tolist(), f.symbols["value"].tolist()
    want = sorted(range(len(section)), key=lambda i: (section[i], value[i], i))
    assert len(want) > 100 and f.symbols_by_offset.tolist() == want


def test_symbols_by_offset_out_of_order_is_refused(fixture_syms, tmp_path):
    """docs/format.md validation 9: two rows of symbols_by_offset swapped,
    the CRC repaired, and the Python reader and a load (libkmodsyms) both
    refuse the file, in the same words, where the table as written loads."""
    import kmodsyms
    from kmodsyms.errors import KmodsymsError
    data = bytearray(open(fixture_syms, "rb").read())
    at = struct.unpack_from("<I", data, ff.DIRECTORY_AT + 8 * ff.TABLE_INDEX["symbols_by_offset"])[0]
    kallsyms = ROOT / "fixtures" / "kbuild" / "kallsyms"
    assert kmodsyms.load(syms=fixture_syms, kallsyms=str(kallsyms)).resolve(0xffffffffab600400)
    data[at:at + 8] = data[at + 4:at + 8] + data[at:at + 4]
    struct.pack_into("<I", data, 12, zlib.crc32(bytes(data[16:])))
    bad = tmp_path / "dtrace_syms"
    bad.write_bytes(bytes(data))
    words = "symbols_by_offset is not the symbols in section and offset order; rebuild it"
    with pytest.raises(KmodsymsError, match=words):
        symsfile.read_syms(str(bad))
    with pytest.raises(KmodsymsError, match=words):
        kmodsyms.load(syms=str(bad), kallsyms=str(kallsyms))


def test_docs_name_the_format_version():
    """docs/format.md's title, header table and compatibility section name
    the version this code writes and reads, and no other."""
    said = re.findall(r"\(version (\d+)\)|format version, \*\*(\d+)\*\*|exactly version (\d+)", FORMAT_MD)
    assert len(said) == 3 and {int(n) for m in said for n in m if n} == {ff.FORMAT_VERSION}
