"""A focused DWARF reader for linked images (a debug vmlinux): for each
compile unit, its name, its code ranges, and its top-level variables with a
static address (``DW_OP_addr``) -- all that tells which unit, and so which
object, an address of the image came from.

DWARF 2 to 5, 32- and 64-bit DWARF, both byte orders: unit headers,
abbreviations, every attribute form (to step over what is not needed),
``.debug_ranges`` (v2-4) and ``.debug_rnglists`` (v5, ``DW_FORM_rnglistx``
too), ``.debug_addr`` (``DW_FORM_addrx*``, ``DW_OP_addrx``),
``.debug_str_offsets`` (``DW_FORM_strx*``) and ``.debug_line_str``.

Why not pyelftools, the field's library: it builds every DIE's attributes
as objects and parses each unit's abbreviations through construct; on
Debian's 6.12 debug vmlinux (2,401 units, 210 MB of .debug_info) it takes
over 30 s for the unit DIEs alone.  Here only the unit DIE and the unit's
top-level DIEs are decoded: a top-level DIE's children are stepped over by
its ``DW_AT_sibling`` (which GCC writes on every DIE with children) when it
has one, and each abbreviation's attributes are compiled once into the
byte counts to step over.
"""

from __future__ import annotations

import struct
from typing import Iterator, NamedTuple

from kmodsyms.errors import KmodsymsError

# Tags, attributes, forms, operations, range-list entries (DWARF 5, section 7).
DW_TAG_compile_unit, DW_TAG_partial_unit, DW_TAG_skeleton_unit = 0x11, 0x3C, 0x4A
DW_TAG_variable = 0x34
DW_AT_sibling, DW_AT_location, DW_AT_name = 0x01, 0x02, 0x03
DW_AT_low_pc, DW_AT_high_pc, DW_AT_comp_dir = 0x11, 0x12, 0x1B
DW_AT_declaration, DW_AT_specification, DW_AT_abstract_origin = 0x3C, 0x47, 0x31
DW_AT_ranges, DW_AT_str_offsets_base, DW_AT_addr_base, DW_AT_rnglists_base = 0x55, 0x72, 0x73, 0x74
DW_AT_GNU_ranges_base, DW_AT_GNU_addr_base = 0x2132, 0x2133
DW_OP_addr, DW_OP_addrx, DW_OP_GNU_addr_index = 0x03, 0xA1, 0xFB
DW_UT_compile, DW_UT_type, DW_UT_partial, DW_UT_skeleton, DW_UT_split_compile, DW_UT_split_type = range(1, 7)

(F_ADDR, _F_RESERVED, F_BLOCK2, F_BLOCK4, F_DATA2, F_DATA4, F_DATA8, F_STRING, F_BLOCK, F_BLOCK1, F_DATA1, F_FLAG,
 F_SDATA, F_STRP, F_UDATA, F_REF_ADDR, F_REF1, F_REF2, F_REF4, F_REF8, F_REF_UDATA, F_INDIRECT,
 F_SEC_OFFSET, F_EXPRLOC, F_FLAG_PRESENT, F_STRX, F_ADDRX, F_REF_SUP4, F_STRP_SUP, F_DATA16,
 F_LINE_STRP, F_REF_SIG8, F_IMPLICIT_CONST, F_LOCLISTX, F_RNGLISTX, F_REF_SUP8, F_STRX1, F_STRX2,
 F_STRX3, F_STRX4, F_ADDRX1, F_ADDRX2, F_ADDRX3, F_ADDRX4) = range(0x01, 0x2D)
F_GNU_ADDR_INDEX, F_GNU_STR_INDEX, F_GNU_REF_ALT, F_GNU_STRP_ALT = 0x1F01, 0x1F02, 0x1F20, 0x1F21

# Step kinds: how to step over one attribute value.
_LEB, _CSTR, _ULEB_BLOCK, _BLOCK1, _BLOCK2, _BLOCK4, _INDIRECT = range(-1, -8, -1)
# Forms of a fixed size: the size, by form; "a" is the address size, "o" the offset size.
_FIXED = {F_DATA1: 1, F_REF1: 1, F_FLAG: 1, F_STRX1: 1, F_ADDRX1: 1,
          F_DATA2: 2, F_REF2: 2, F_STRX2: 2, F_ADDRX2: 2, F_STRX3: 3, F_ADDRX3: 3,
          F_DATA4: 4, F_REF4: 4, F_REF_SUP4: 4, F_STRX4: 4, F_ADDRX4: 4,
          F_DATA8: 8, F_REF8: 8, F_REF_SIG8: 8, F_REF_SUP8: 8, F_DATA16: 16,
          F_FLAG_PRESENT: 0, F_IMPLICIT_CONST: 0,
          F_ADDR: "a", F_STRP: "o", F_SEC_OFFSET: "o", F_REF_ADDR: "o", F_LINE_STRP: "o", F_STRP_SUP: "o",
          F_GNU_REF_ALT: "o", F_GNU_STRP_ALT: "o"}
_VARIABLE = {F_SDATA: _LEB, F_UDATA: _LEB, F_REF_UDATA: _LEB, F_STRX: _LEB, F_ADDRX: _LEB,
             F_LOCLISTX: _LEB, F_RNGLISTX: _LEB, F_GNU_ADDR_INDEX: _LEB, F_GNU_STR_INDEX: _LEB,
             F_STRING: _CSTR, F_BLOCK: _ULEB_BLOCK, F_EXPRLOC: _ULEB_BLOCK, F_BLOCK1: _BLOCK1,
             F_BLOCK2: _BLOCK2, F_BLOCK4: _BLOCK4, F_INDIRECT: _INDIRECT}
_REFS = (F_REF1, F_REF2, F_REF4, F_REF8, F_REF_UDATA)


class Unit(NamedTuple):
    """One compile unit of ``.debug_info``."""

    offset: int                              # of its header in .debug_info
    version: int
    name: str                                # DW_AT_name as written ("" when absent)
    comp_dir: str
    ranges: tuple[tuple[int, int], ...]      # [low, high) code ranges, as listed
    variables: tuple[tuple[int, bytes], ...]  # (address, name) of its top-level static variables


class Abbrev(NamedTuple):
    tag: int
    children: bool
    attrs: tuple[tuple[int, int, int], ...]   # (attribute, form, implicit constant)
    steps: tuple[int, ...]                     # per attribute: a byte count, or a step kind
    fixed: int                                 # total size when every step is a byte count, else -1
    sibling: int                               # byte offset of DW_AT_sibling (ref4) when fixed before it, else -1
    has_sibling: bool
    # A DW_TAG_variable with a DW_AT_location and no DW_AT_declaration: the
    # only DIEs whose attributes are read (a unit declares, in each header
    # it includes, far more variables than it defines).
    defines_variable: bool


class _Reader:
    """Little helpers over one section's bytes in one byte order."""

    def __init__(self, data: bytes, byteorder: str, what: str, path: str):
        self.data, self.what, self.path = data, what, path
        self.u16 = struct.Struct(byteorder + "H").unpack_from
        self.u32 = struct.Struct(byteorder + "I").unpack_from
        self.u64 = struct.Struct(byteorder + "Q").unpack_from
        self.big = byteorder == ">"

    def uint(self, pos: int, size: int) -> int:
        data = self.data
        if pos + size > len(data):
            raise self.corrupt(pos)
        if size == 8:
            return self.u64(data, pos)[0]
        if size == 4:
            return self.u32(data, pos)[0]
        if size == 2:
            return self.u16(data, pos)[0]
        if size == 1:
            return data[pos]
        return int.from_bytes(data[pos:pos + size], "big" if self.big else "little")

    def corrupt(self, pos: int) -> KmodsymsError:
        return KmodsymsError(f"{self.path}: corrupt DWARF ({self.what} at offset {pos:#x}); "
                             "is the debug file complete (not truncated, same package version)?")


def uleb(data: bytes, pos: int) -> tuple[int, int]:
    """An unsigned LEB128 at ``pos``: (value, position after it)."""
    byte = data[pos]
    if byte < 0x80:
        return byte, pos + 1
    value, shift = byte & 0x7F, 7
    while True:
        pos += 1
        byte = data[pos]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos + 1
        shift += 7


def sleb(data: bytes, pos: int) -> tuple[int, int]:
    """A signed LEB128 at ``pos``: (value, position after it)."""
    value, shift = 0, 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            if byte & 0x40:
                value -= 1 << shift
            return value, pos


class Dwarf:
    """The DWARF sections of one linked ELF image (a dict of section name
    -> bytes, as read from it), its byte order (``<``/``>``) and address
    size."""

    def __init__(self, sections: dict[str, bytes], byteorder: str, address_size: int, path: str):
        self.sections, self.byteorder, self.path = sections, byteorder, path
        self.address_size = address_size
        self.info = _Reader(sections.get(".debug_info", b""), byteorder, ".debug_info", path)
        self._abbrev_tables: dict[tuple[int, int, int, int], dict[int, Abbrev]] = {}
        self._shapes: dict[tuple[int, int, int], dict[bytes, Abbrev]] = {}
        self._plans: dict[int, list] = {}   # by id() of an abbreviation table kept in _abbrev_tables

    @classmethod
    def from_elf(cls, path: str) -> "Dwarf":
        """The DWARF of the ELF image at ``path``."""
        from kmodsyms.scan.elf.elffile import ElfFile
        remedy = "give the debug vmlinux (from the kernel's -dbg/-debuginfo package)"
        try:
            with open(path, "rb") as f:
                elf = ElfFile(path, f, "image", remedy)
                sections = {}
                for index in range(len(elf.sections)):
                    name = elf.section_name(index)
                    if name.startswith(".debug_") and name != ".debug_frame" and name not in (
                            ".debug_line", ".debug_loclists", ".debug_loc"):
                        sections[name] = elf.section_data(index)
                byteorder, size = elf.layout.byteorder, 8 if elf.layout.is64 else 4
        except OSError as e:
            raise KmodsymsError(f"cannot read {path}: {e.strerror}") from None
        if not sections.get(".debug_info"):
            raise KmodsymsError(f"{path}: no DWARF (.debug_info); {remedy}")
        return cls(sections, byteorder, size, path)

    # ------------------------------------------------------------ units
    def unit_offsets(self) -> list[int]:
        """The offset of every unit header in .debug_info, in order."""
        info, data, offsets, pos = self.info, self.info.data, [], 0
        while pos + 4 <= len(data):
            length = info.uint(pos, 4)
            header = 4
            if length == 0xFFFFFFFF:
                length, header = info.uint(pos + 4, 8), 12
            elif length >= 0xFFFFFFF0:
                raise info.corrupt(pos)
            offsets.append(pos)
            pos += header + length
        return offsets

    def units(self, offsets: list[int] | None = None, variables: bool = True) -> Iterator[Unit]:
        """The compile (and partial) units at ``offsets`` (default: all)."""
        for offset in self.unit_offsets() if offsets is None else offsets:
            unit = self.unit(offset, variables)
            if unit is not None:
                yield unit

    def unit(self, offset: int, variables: bool = True) -> Unit | None:
        """The unit whose header is at ``offset``; None for a type or
        skeleton unit (no code of its own)."""
        info, data = self.info, self.info.data
        length = info.uint(offset, 4)
        offset_size, pos = 4, offset + 4
        if length == 0xFFFFFFFF:
            length, offset_size, pos = info.uint(offset + 4, 8), 8, offset + 12
        end = pos + length
        if end > len(data):
            raise info.corrupt(offset)
        version = info.uint(pos, 2)
        pos += 2
        if version >= 5:
            unit_type, address_size = data[pos], data[pos + 1]
            abbrev_offset = info.uint(pos + 2, offset_size)
            pos += 2 + offset_size
            if unit_type in (DW_UT_skeleton, DW_UT_split_compile):
                pos += 8
            elif unit_type in (DW_UT_type, DW_UT_split_type):
                return None
            elif unit_type not in (DW_UT_compile, DW_UT_partial):
                return None   # a vendor's unit type: nothing here to read
        elif 2 <= version <= 4:
            abbrev_offset = info.uint(pos, offset_size)
            address_size = data[pos + offset_size]
            pos += offset_size + 1
        else:
            raise KmodsymsError(f"{self.path}: DWARF version {version} at .debug_info offset "
                                f"{offset:#x} is not one this reader knows (2 to 5)")
        # DWARF 2's DW_FORM_ref_addr is address-sized, later ones offset-sized.
        abbrevs = self._abbrevs(abbrev_offset, address_size, offset_size,
                                address_size if version == 2 else offset_size)
        ctx = _Context(self, offset, version, address_size, offset_size, abbrevs)
        code, pos = uleb(data, pos)
        if code == 0:
            return None
        top = abbrevs.get(code)
        if top is None:
            raise info.corrupt(pos)
        if top.tag not in (DW_TAG_compile_unit, DW_TAG_partial_unit, DW_TAG_skeleton_unit):
            return None
        values, pos = ctx.attributes(top, pos)
        ctx.set_bases(values)
        name = ctx.string(values.get(DW_AT_name))
        comp_dir = ctx.string(values.get(DW_AT_comp_dir))
        ranges = ctx.unit_ranges(values)
        found: tuple[tuple[int, bytes], ...] = ()
        if variables and top.children:
            found = ctx.top_level_variables(pos, end)
        return Unit(offset, version, name, comp_dir, ranges, found)

    # ---------------------------------------------------------- abbrevs
    def _abbrevs(self, offset: int, address_size: int, offset_size: int,
                 ref_addr_size: int) -> dict[int, Abbrev]:
        key = (offset, address_size, offset_size, ref_addr_size)
        table = self._abbrev_tables.get(key)
        if table is None:
            table = self._abbrev_tables[key] = self._read_abbrevs(*key)
        return table

    def _read_abbrevs(self, offset: int, address_size: int, offset_size: int,
                      ref_addr_size: int) -> dict[int, Abbrev]:
        """One unit's abbreviation table.  Units share most declarations
        byte for byte (a struct member's, a parameter's), so each distinct
        declaration is decoded once: its bytes (tag to the closing 0, 0) are
        looked up first, up to the first two zero bytes.  A declaration
        can run past them (an implicit constant of 0); then the lookup misses,
        as no decoded declaration ends there, and it is decoded in full."""
        data = self.sections.get(".debug_abbrev", b"")
        shapes = self._shapes.setdefault((address_size, offset_size, ref_addr_size), {})
        table: dict[int, Abbrev] = {}
        pos = offset
        find = data.find
        try:
            while True:
                code = data[pos]
                if code < 0x80:
                    pos += 1
                else:
                    code, pos = uleb(data, pos)
                if code == 0:
                    return table
                stop = find(b"\0\0", pos) + 2
                abbrev = shapes.get(data[pos:stop]) if stop > 1 else None
                if abbrev is None:
                    abbrev, stop = self._decode_abbrev(data, pos, address_size, offset_size,
                                                       ref_addr_size)
                    shapes[data[pos:stop]] = abbrev
                table[code] = abbrev
                pos = stop
        except IndexError:
            raise KmodsymsError(f"{self.path}: corrupt DWARF (.debug_abbrev at {offset:#x})") from None

    def _decode_abbrev(self, data: bytes, pos: int, address_size: int, offset_size: int,
                       ref_addr_size: int) -> tuple[Abbrev, int]:
        """The declaration at ``pos`` (past its code) and where it ends."""
        tag, pos = uleb(data, pos)
        children = data[pos] != 0
        pos += 1
        attrs, steps = [], []
        fixed, sibling = 0, -1
        while True:
            attr, pos = uleb(data, pos)
            form, pos = uleb(data, pos)
            if attr == 0 and form == 0:
                break
            const = 0
            if form == F_IMPLICIT_CONST:
                const, pos = sleb(data, pos)
            size = _FIXED.get(form, _VARIABLE.get(form))
            if size is None:
                raise KmodsymsError(f"{self.path}: unknown DWARF form {form:#x} in "
                                    f".debug_abbrev at {pos:#x}")
            if size == "a":
                size = address_size
            elif size == "o":
                size = ref_addr_size if form == F_REF_ADDR else offset_size
            if attr == DW_AT_sibling and form == F_REF4 and fixed >= 0:
                sibling = fixed
            attrs.append((attr, form, const))
            steps.append(size)
            if size < 0:
                fixed = -1
            elif fixed >= 0:
                fixed += size
        names = {attr for attr, _f, _c in attrs}
        defines = tag == DW_TAG_variable and DW_AT_location in names and DW_AT_declaration not in names
        return Abbrev(tag, children, tuple(attrs), tuple(steps), fixed, sibling,
                      DW_AT_sibling in names, defines), pos


# How to step over a DIE of one abbreviation (the plan's kind).
_STEP, _JUMP, _SEEK, _DEFINES, _WALK = range(5)


def _plan(abbrevs: dict[int, Abbrev]) -> list:
    """Per abbreviation code: (kind, byte count or sibling offset, has children)."""
    plans: list = [None] * (max(abbrevs, default=0) + 1)
    for code, a in abbrevs.items():
        if a.defines_variable:
            plans[code] = (_DEFINES, 0, a.children)
        elif a.children and a.sibling >= 0:
            plans[code] = (_JUMP, a.sibling, a.children)
        elif a.children and a.has_sibling:
            plans[code] = (_SEEK, 0, a.children)
        elif a.fixed >= 0:
            plans[code] = (_STEP, a.fixed, a.children)
        else:
            plans[code] = (_WALK, 0, a.children)
    return plans


class _Context:
    """Reading one unit: its sizes, abbreviations and base offsets."""

    def __init__(self, dwarf: Dwarf, offset: int, version: int, address_size: int,
                 offset_size: int, abbrevs: dict[int, Abbrev]):
        self.dwarf, self.offset, self.version = dwarf, offset, version
        self.address_size, self.offset_size, self.abbrevs = address_size, offset_size, abbrevs
        self.info = dwarf.info
        self.str_offsets_base = 8 if offset_size == 4 else 16   # DWARF 5's default header size
        self.addr_base = 8 if offset_size == 4 else 16
        self.rnglists_base = 0
        self.low_pc = 0

    # Attribute values: an int, bytes (strings, blocks), or (form, int) for
    # indices and offsets whose meaning needs the unit's bases.
    def attributes(self, abbrev: Abbrev, pos: int) -> tuple[dict[int, object], int]:
        values = {}
        try:
            for (attr, form, const), step in zip(abbrev.attrs, abbrev.steps):
                value, pos = self.value(form, step, const, pos)
                values[attr] = (form, value)
        except IndexError:
            raise self.info.corrupt(pos) from None
        return values, pos

    def value(self, form: int, step: int, const: int, pos: int):
        data, info = self.info.data, self.info
        if step >= 0:
            if form == F_IMPLICIT_CONST:
                return const, pos
            if form == F_FLAG_PRESENT:
                return 1, pos
            if form == F_DATA16:
                return data[pos:pos + 16], pos + 16
            return info.uint(pos, step), pos + step
        if step == _LEB:
            return (sleb if form == F_SDATA else uleb)(data, pos)
        if step == _CSTR:
            stop = data.index(b"\0", pos)
            return data[pos:stop], stop + 1
        if step == _INDIRECT:
            real, pos = uleb(data, pos)
            size = _FIXED.get(real, _VARIABLE.get(real))
            if size is None:
                raise info.corrupt(pos)
            size = {"a": self.address_size, "o": self.offset_size}.get(size, size)
            value, pos = self.value(real, size, 0, pos)
            return (real, value), pos   # unwrapped by the caller's form checks (rare: never from GCC)
        if step == _ULEB_BLOCK:
            size, pos = uleb(data, pos)
        elif step == _BLOCK1:
            size, pos = data[pos], pos + 1
        elif step == _BLOCK2:
            size, pos = info.uint(pos, 2), pos + 2
        else:
            size, pos = info.uint(pos, 4), pos + 4
        if pos + size > len(data):
            raise info.corrupt(pos)
        return data[pos:pos + size], pos + size

    def set_bases(self, values: dict) -> None:
        for attr, name in ((DW_AT_str_offsets_base, "str_offsets_base"), (DW_AT_addr_base, "addr_base"),
                           (DW_AT_GNU_addr_base, "addr_base"), (DW_AT_rnglists_base, "rnglists_base"),
                           (DW_AT_GNU_ranges_base, "rnglists_base")):
            if attr in values:
                setattr(self, name, values[attr][1])
        low = values.get(DW_AT_low_pc)
        if low is not None:
            self.low_pc = self.address(*low)

    # ----------------------------------------------------------- values
    def section(self, name: str) -> _Reader:
        return _Reader(self.dwarf.sections.get(name, b""), self.dwarf.byteorder, name, self.dwarf.path)

    def string(self, value) -> str:
        if value is None:
            return ""
        form, raw = value
        if form == F_STRING:
            text = raw
        elif form in (F_STRP, F_LINE_STRP, F_STRX, F_STRX1, F_STRX2, F_STRX3, F_STRX4, F_GNU_STR_INDEX):
            if form not in (F_STRP, F_LINE_STRP):
                offsets = self.section(".debug_str_offsets")
                raw = offsets.uint(self.str_offsets_base + raw * self.offset_size, self.offset_size)
            table = self.dwarf.sections.get(".debug_line_str" if form == F_LINE_STRP else ".debug_str", b"")
            stop = table.find(b"\0", raw)
            text = table[raw:stop if stop >= 0 else len(table)]
        else:
            return ""   # a supplementary file's string (DW_FORM_strp_sup): not in this file
        return text.decode("utf-8", "surrogateescape")

    def address(self, form: int, raw: int) -> int:
        if form in (F_ADDRX, F_ADDRX1, F_ADDRX2, F_ADDRX3, F_ADDRX4, F_GNU_ADDR_INDEX):
            return self.indexed_address(raw)
        return raw

    def indexed_address(self, index: int) -> int:
        return self.section(".debug_addr").uint(self.addr_base + index * self.address_size,
                                                self.address_size)

    # ----------------------------------------------------------- ranges
    def unit_ranges(self, values: dict) -> tuple[tuple[int, int], ...]:
        if DW_AT_ranges in values:
            form, raw = values[DW_AT_ranges]
            if self.version >= 5:
                if form == F_RNGLISTX:
                    table = self.section(".debug_rnglists")
                    raw = self.rnglists_base + table.uint(self.rnglists_base + raw * self.offset_size,
                                                          self.offset_size)
                return tuple(r for r in self.rnglist(raw) if r[0] < r[1])
            return tuple(r for r in self.range_list(raw) if r[0] < r[1])
        if DW_AT_low_pc in values and DW_AT_high_pc in values:
            low = self.low_pc
            form, raw = values[DW_AT_high_pc]
            high = self.address(form, raw) if form in (F_ADDR, F_ADDRX, F_ADDRX1, F_ADDRX2, F_ADDRX3,
                                                       F_ADDRX4, F_GNU_ADDR_INDEX) else low + raw
            return ((low, high),) if low < high else ()
        return ()

    def range_list(self, offset: int) -> Iterator[tuple[int, int]]:
        """A DWARF 2-4 ``.debug_ranges`` list."""
        table, size = self.section(".debug_ranges"), self.address_size
        top = (1 << (8 * size)) - 1
        base = self.low_pc
        while True:
            begin, end = table.uint(offset, size), table.uint(offset + size, size)
            offset += 2 * size
            if begin == 0 and end == 0:
                return
            if begin == top:
                base = end
                continue
            yield base + begin, base + end

    def rnglist(self, offset: int) -> Iterator[tuple[int, int]]:
        """A DWARF 5 ``.debug_rnglists`` list (section 2.17.3)."""
        table = self.section(".debug_rnglists")
        data, size = table.data, self.address_size
        base = self.low_pc
        try:
            while True:
                kind = data[offset]
                offset += 1
                if kind == 0:        # DW_RLE_end_of_list
                    return
                if kind == 1:        # base_addressx
                    index, offset = uleb(data, offset)
                    base = self.indexed_address(index)
                elif kind == 2:      # startx_endx
                    a, offset = uleb(data, offset)
                    b, offset = uleb(data, offset)
                    yield self.indexed_address(a), self.indexed_address(b)
                elif kind == 3:      # startx_length
                    a, offset = uleb(data, offset)
                    n, offset = uleb(data, offset)
                    start = self.indexed_address(a)
                    yield start, start + n
                elif kind == 4:      # offset_pair
                    a, offset = uleb(data, offset)
                    b, offset = uleb(data, offset)
                    yield base + a, base + b
                elif kind == 5:      # base_address
                    base, offset = table.uint(offset, size), offset + size
                elif kind == 6:      # start_end
                    a, b = table.uint(offset, size), table.uint(offset + size, size)
                    offset += 2 * size
                    yield a, b
                elif kind == 7:      # start_length
                    a = table.uint(offset, size)
                    n, offset = uleb(data, offset + size)
                    yield a, a + n
                else:
                    raise table.corrupt(offset - 1)
        except IndexError:
            raise table.corrupt(offset) from None

    # -------------------------------------------------------- variables
    def top_level_variables(self, pos: int, end: int) -> tuple[tuple[int, bytes], ...]:
        """(address, name) of the unit's top-level DW_TAG_variable DIEs whose
        location is one static address.  The loop runs once per top-level
        DIE (millions in a kernel): each abbreviation's step is planned once
        (:func:`_plan`)."""
        data, abbrevs, base = self.info.data, self.abbrevs, self.offset
        plans = self.dwarf._plans.get(id(abbrevs))
        if plans is None:
            plans = self.dwarf._plans[id(abbrevs)] = _plan(abbrevs)
        u32 = self.info.u32
        found = []
        depth = 1
        try:
            while pos < end:
                code = data[pos]
                if code < 0x80:
                    pos += 1
                else:
                    code, pos = uleb(data, pos)
                if code == 0:
                    depth -= 1
                    if depth == 0:
                        break
                    continue
                kind, arg, children = plans[code]
                if kind == _JUMP:
                    target = base + u32(data, pos + arg)[0]
                    if target > pos:
                        pos = target
                        continue
                    pos = self.skip(abbrevs[code], pos)
                elif kind == _STEP:
                    pos += arg
                elif kind == _DEFINES and depth == 1:
                    start = pos
                    abbrev = abbrevs[code]
                    values, pos = self.attributes(abbrev, pos)
                    variable = self.variable(values)
                    if variable is not None:
                        found.append(variable)
                    if children:
                        sibling = values.get(DW_AT_sibling)
                        if sibling is not None and sibling[0] in _REFS and sibling[1] + base > start:
                            pos = base + sibling[1]
                            continue
                elif kind == _SEEK:
                    # A sibling after a variable-size attribute: step to it.
                    abbrev = abbrevs[code]
                    target = self.sibling(abbrev, pos)
                    if target > pos:
                        pos = target
                        continue
                    pos = self.skip(abbrev, pos)
                else:
                    pos = self.skip(abbrevs[code], pos)
                if children:
                    depth += 1
        except (IndexError, KeyError, TypeError):
            raise self.info.corrupt(pos) from None
        return tuple(found)

    def sibling(self, abbrev: Abbrev, pos: int) -> int:
        """Where the DIE at ``pos`` (past its code) says its next sibling is
        (-1: it does not, or not as a reference)."""
        for k, (attr, form, const) in enumerate(abbrev.attrs):
            if attr == DW_AT_sibling:
                if form not in _REFS:
                    return -1
                value, _ = self.value(form, abbrev.steps[k], const, self.skip(abbrev, pos, k))
                return self.offset + value
        return -1

    def skip(self, abbrev: Abbrev, pos: int, count: int | None = None) -> int:
        """Step over one DIE's attributes (its first ``count``: all by default)."""
        data = self.info.data
        attrs, steps = abbrev.attrs, abbrev.steps
        if count is not None:
            attrs, steps = attrs[:count], steps[:count]
        for (_attr, form, const), step in zip(attrs, steps):
            if step >= 0:
                pos += step
            elif step == _CSTR:
                pos = data.index(b"\0", pos) + 1
            elif step == _LEB:
                while data[pos] >= 0x80:
                    pos += 1
                pos += 1
            else:
                _value, pos = self.value(form, step, const, pos)
        return pos

    def variable(self, values: dict) -> tuple[int, bytes] | None:
        if DW_AT_declaration in values:
            return None
        location = values.get(DW_AT_location)
        if location is None or not isinstance(location[1], bytes):
            return None   # none, or a location list: not one static address
        expr = location[1]
        if len(expr) == 1 + self.address_size and expr[0] == DW_OP_addr:
            address = int.from_bytes(expr[1:], "big" if self.info.big else "little")
        elif expr and expr[0] in (DW_OP_addrx, DW_OP_GNU_addr_index):
            index, after = uleb(expr, 1)
            if after != len(expr):
                return None
            address = self.indexed_address(index)
        else:
            return None
        return address, self.name_of(values)

    def name_of(self, values: dict, depth: int = 0) -> bytes:
        name = values.get(DW_AT_name)
        if name is not None:
            return self.string(name).encode("utf-8", "surrogateescape")
        for attr in (DW_AT_specification, DW_AT_abstract_origin):
            ref = values.get(attr)
            if ref is not None and ref[0] in _REFS and depth < 4:
                pos = self.offset + ref[1]
                code, pos = uleb(self.info.data, pos)
                abbrev = self.abbrevs.get(code)
                if abbrev is not None:
                    target, _ = self.attributes(abbrev, pos)
                    return self.name_of(target, depth + 1)
        return b""
