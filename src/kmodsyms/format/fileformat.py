"""The dtrace_syms file format's facts, once (docs/format.md): the header's
fields, the tables in directory order with their entries' fields, and the
codes and flags they hold.

Everything else reads them from here: the reader and writer
(:mod:`kmodsyms.format.symsfile` makes its numpy dtypes and header structs
from :data:`HEADER` and :data:`TABLES`), the plain-Python paths that need
only the header (no numpy), and the C library, through ``kms_format.h``,
which this module writes::

    python -m kmodsyms.format.fileformat --c-header > libkmodsyms/kms_format.h

The header is checked in (the C build needs no Python); tests/test_fileformat.py
holds it, and docs/format.md's tables, equal to this module.
"""

from __future__ import annotations

import struct
import sys
from typing import NamedTuple

MAGIC = b"KMODSYMS"
FORMAT_VERSION = 3


class Field(NamedTuple):
    """One field of the header or of a table's entry.

    ``name`` is docs/format.md's (empty for a reserved field, written as
    zero); ``code`` its ``struct`` format character (``B``, ``H``, ``I``,
    ``Q``, or ``8s`` for the magic); ``count`` how many follow one another
    (the header strings, the directory)."""

    name: str
    code: str
    count: int = 1

    @property
    def size(self) -> int:
        return struct.calcsize("<" + self.code) * self.count


class Table(NamedTuple):
    """One table of the directory.  ``c_prefix`` names its entries' fields
    in C (``SYM_`` + ``VALUE``: ``SYM_VALUE``); a table whose entry is a
    bare integer (``plain``: the string table's bytes, the module-set
    members) is read as an array of that integer, not of records."""

    name: str
    c_prefix: str
    fields: tuple[Field, ...]
    plain: bool = False

    @property
    def entry_size(self) -> int:
        return sum(f.size for f in self.fields)

    def offsets(self) -> list[tuple[Field, int]]:
        return _offsets(self.fields)


def _offsets(fields) -> list[tuple[Field, int]]:
    at, out = 0, []
    for f in fields:
        out.append((f, at))
        at += f.size
    return out


# The six string offsets at 32..55 of the header, in order.
HEADER_STRINGS = ("kernel_release", "build_id", "tool_version", "object_source",
                  "thick_source", "placement")

TABLES: tuple[Table, ...] = (
    Table("strings", "STR_", (Field("byte", "B"),), plain=True),
    Table("modules", "MOD_", (Field("name", "I"),)),
    Table("modset_members", "MEMBER_", (Field("module", "I"),), plain=True),
    Table("modsets", "MODSET_", (Field("first", "I"), Field("count", "I"))),
    Table("objects", "OBJ_", (Field("path", "I"), Field("modset", "I"), Field("flags", "I"),
                              Field("", "I"))),
    Table("section_names", "SECNAME_", (Field("name", "I"),)),
    Table("sections", "SEC_", (Field("object", "I"), Field("name", "I"), Field("flags", "I"),
                               Field("align", "I"), Field("size", "Q"), Field("address", "Q"),
                               Field("placement", "I"), Field("", "I"))),
    Table("symbols", "SYM_", (Field("name", "I"), Field("modset", "I"), Field("object", "I"),
                              Field("section", "I"), Field("value", "Q"), Field("size", "Q"),
                              Field("type", "B"), Field("binding", "B"), Field("", "H"),
                              Field("", "I"))),
    Table("segments", "SEG_", (Field("start", "Q"), Field("end", "Q"))),
    Table("anchors", "ANCHOR_", (Field("symbol", "I"), Field("segment", "I"))),
    Table("vmlinux_symbols", "VSYM_", (Field("name", "I"), Field("", "I"), Field("address", "Q"),
                                       Field("size", "Q"))),
    Table("symbols_by_offset", "BYOFF_", (Field("symbol", "I"),), plain=True),
)
TABLE_INDEX = {t.name: i for i, t in enumerate(TABLES)}

HEADER: tuple[Field, ...] = (
    Field("magic", "8s"), Field("version", "I"), Field("crc32", "I"), Field("file_size", "Q"),
    Field("header_size", "I"), Field("flags", "I"),
    *(Field(s, "I") for s in HEADER_STRINGS),
    Field("directory", "I", 2 * len(TABLES)),   # (offset, count) per table
    Field("", "B", 8),
)
HEADER_AT = {f.name: at for f, at in _offsets(HEADER) if f.name}
HEADER_SIZE = sum(f.size for f in HEADER)
DIRECTORY_AT = HEADER_AT["directory"]
# Every table begins at a multiple of this, padded with zero bytes to it.
TABLE_ALIGN = 8
# A header claiming more than this many entries in any table is refused
# before anything is allocated (a real kernel has ~10^5-10^6 symbols).
MAX_ENTRIES = 1 << 28

# The CRC-32 field, and where the bytes it covers begin (everything after
# it, to the end of the file).
CRC_FIELD = slice(HEADER_AT["crc32"], HEADER_AT["crc32"] + 4)
CRC_COVERS_FROM = HEADER_AT["file_size"]

# header flags
FLAG_MISSING_OBJECTS = 1   # some objects were missing at build time (--allow-missing)
FLAG_FROM_DEBUG_INFO = 2   # built from a debug vmlinux's DWARF, not from the objects
FLAG_GUESSED_MODULES = 4   # the module map is modules.builtin.modinfo's file= guess
FLAG_FORCED = 8            # written with --force past a failed check (thick_source says which)
# objects.flags
OBJECT_MISSING = 1         # this object was missing: no sections, no symbols
# sections.address of a section not placed at build time
NO_ADDRESS = 0xFFFFFFFFFFFFFFFF
# sections.placement: how the build placed it (docs/resolver.md: by the anchors'
# vote, R11; by elimination or shape, R12-R13; by link order or bracketing
# symbols, R14-R17)
PLACEMENT_CODES = {"UNPLACED": 0, "BY_ANCHOR": 1, "BY_ELIMINATION": 2, "BY_NEIGHBOURS": 3}


def struct_format(fields) -> str:
    """The little-endian ``struct`` format of FIELDS, one after another."""
    return "<" + "".join(f"{f.count}{f.code}" if f.count > 1 else f.code for f in fields)


def header_crc(head: bytes) -> bytes | None:
    """The CRC field of a dtrace_syms file, given at least its first 16
    bytes; None if they are not a dtrace_syms header."""
    return bytes(head[CRC_FIELD]) if len(head) >= CRC_COVERS_FROM and head[:len(MAGIC)] == MAGIC else None


def c_header() -> str:
    """libkmodsyms/kms_format.h: this module's facts as C names."""
    out = [
        "/* SPDX-License-Identifier: GPL-2.0-only OR UPL-1.0 */",
        "/*",
        " * The dtrace_syms format's facts (docs/format.md), generated from",
        " * src/kmodsyms/format/fileformat.py, their one table, by",
        " *   python -m kmodsyms.format.fileformat --c-header > libkmodsyms/kms_format.h",
        " * Do not edit: change fileformat.py and run that (tests/test_fileformat.py",
        " * fails while this file differs from what it writes).",
        " */",
        "#ifndef KMS_FORMAT_H",
        "#define KMS_FORMAT_H",
        "",
        "#include <stdint.h>",
        "",
        f'#define FORMAT_MAGIC "{MAGIC.decode()}"',
        f"#define FORMAT_MAGIC_SIZE {len(MAGIC)}u",
        f"#define FORMAT_VERSION {FORMAT_VERSION}u",
        f"#define HEADER_SIZE {HEADER_SIZE}u",
        f"#define TABLE_ALIGN {TABLE_ALIGN}u",
        f"#define MAX_ENTRIES (UINT32_C(1) << {MAX_ENTRIES.bit_length() - 1})",
        f"#define CRC_COVERS_FROM {CRC_COVERS_FROM}u /* the CRC-32 covers bytes [this, file_size) */",
        "",
        "/* Header fields: byte offsets. */",
    ]
    for f, at in _offsets(HEADER):
        if f.name:
            out.append(f"#define HDR_{f.name.upper()} {at}u")
    out.append(f"#define HDR_STRINGS_COUNT {len(HEADER_STRINGS)}u /* u32 string offsets from "
               f"HDR_{HEADER_STRINGS[0].upper()} on */")
    out += ["", "/* The tables, in directory order (the pair of table t at HDR_DIRECTORY + 8 * t). */",
            "enum {"]
    out += [f"    T_{_c_table(t.name)}," for t in TABLES]
    out += ["    T_COUNT", "};", ""]
    out.append("static const uint32_t entry_size[T_COUNT] = {"
               + ", ".join(str(t.entry_size) for t in TABLES) + "};")
    out.append("static const char *const table_names[T_COUNT] = {")
    out += [f'    "{t.name}",' for t in TABLES]
    out += ["};", "", "/* Entry fields: byte offsets within an entry. */"]
    for t in TABLES:
        if t.plain:
            continue
        for f, at in t.offsets():
            if f.name:
                out.append(f"#define {t.c_prefix}{f.name.upper()} {at}u")
    out += ["", "/* Codes and flags. */",
            f"#define FLAG_MISSING_OBJECTS {FLAG_MISSING_OBJECTS}u /* header flags */",
            f"#define FLAG_FROM_DEBUG_INFO {FLAG_FROM_DEBUG_INFO}u",
            f"#define FLAG_GUESSED_MODULES {FLAG_GUESSED_MODULES}u",
            f"#define FLAG_FORCED {FLAG_FORCED}u",
            f"#define OBJECT_MISSING {OBJECT_MISSING}u /* objects.flags */",
            f"#define NO_ADDRESS UINT64_C(0x{NO_ADDRESS:X}) /* sections.address: not placed */"]
    out += [f"#define PLACEMENT_{k} {v}u /* sections.placement */" for k, v in PLACEMENT_CODES.items()]
    out += ["", "#endif /* KMS_FORMAT_H */", ""]
    return "\n".join(out)


def _c_table(name: str) -> str:
    # the C names of the tables, as the library has always spelled them
    return {"modset_members": "MEMBERS", "section_names": "SECNAMES",
            "vmlinux_symbols": "VSYMS", "symbols_by_offset": "BY_OFFSET"}.get(name, name.upper())


def main(argv: list[str]) -> int:
    if argv != ["--c-header"]:
        print("usage: python -m kmodsyms.format.fileformat --c-header > libkmodsyms/kms_format.h",
              file=sys.stderr)
        return 2
    sys.stdout.write(c_header())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
