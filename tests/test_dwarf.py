"""kmodsyms.scan.debuginfo.dwarf against pyelftools (the field's DWARF reader) and
``readelf --debug-dump=info`` on images linked by the real toolchain from
tests/data/dwarf/*.c: DWARF 4 and 5, 32- and 64-bit DWARF, ELF32 and ELF64,
both byte orders (s390x), with each compiler's own choice of forms.
Skipped for a toolchain that is absent."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest
from elftools.elf.elffile import ELFFile

from kmodsyms.errors import KmodsymsError
from kmodsyms.scan.debuginfo.dwarf import Dwarf

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "dwarf")
SOURCES = ("sample.c", "plain.c")

# (id, compiler, flags, linker, linker flags)
VARIANTS = [
    ("x86_64-dwarf4", "gcc", ["-gdwarf-4"], "ld", []),
    ("x86_64-dwarf5", "gcc", ["-gdwarf-5"], "ld", []),
    ("x86_64-dwarf5-64bit", "gcc", ["-gdwarf-5", "-gdwarf64"], "ld", []),
    ("i386-dwarf4", "gcc", ["-m32", "-gdwarf-4"], "ld", ["-m", "elf_i386"]),
    ("i386-dwarf5", "gcc", ["-m32", "-gdwarf-5"], "ld", ["-m", "elf_i386"]),
    ("s390x-dwarf4", "s390x-linux-gnu-gcc", ["-gdwarf-4"], "s390x-linux-gnu-ld", []),
    ("s390x-dwarf5", "s390x-linux-gnu-gcc", ["-gdwarf-5"], "s390x-linux-gnu-ld", []),
]


@pytest.fixture(scope="module", params=VARIANTS, ids=[v[0] for v in VARIANTS])
def image(request, tmp_path_factory):
    name, cc, flags, ld, ldflags = request.param
    if not shutil.which(cc) or not shutil.which(ld):
        pytest.skip(f"{cc} or {ld} is not installed")
    out = tmp_path_factory.mktemp(name)
    objects = []
    for source in SOURCES:
        obj = str(out / (source[:-2] + ".o"))
        run = subprocess.run([cc, *flags, "-O2", "-fno-pic", "-c", os.path.join(DATA, source), "-o", obj],
                             capture_output=True, text=True)
        if run.returncode:
            pytest.skip(f"{cc} {' '.join(flags)} cannot compile here: {run.stderr.strip()[:200]}")
        objects.append(obj)
    linked = str(out / "image")
    subprocess.run([ld, *ldflags, "-e", "0", "-o", linked, *objects], check=True, capture_output=True)
    return linked


def reference_units(path: str) -> list[tuple]:
    """(name, comp_dir, ranges, variables) of each unit, read by pyelftools."""
    with open(path, "rb") as f:
        elf = ELFFile(f)
        dwarf = elf.get_dwarf_info()
        out = []
        for cu in dwarf.iter_CUs():
            top = cu.get_top_DIE()
            attrs = top.attributes
            name = attrs["DW_AT_name"].value.decode()
            comp_dir = attrs["DW_AT_comp_dir"].value.decode()
            low = attrs["DW_AT_low_pc"].value if "DW_AT_low_pc" in attrs else 0
            if "DW_AT_ranges" in attrs:
                ranges, base = [], low
                for entry in dwarf.range_lists().get_range_list_at_offset(attrs["DW_AT_ranges"].value, cu=cu):
                    if hasattr(entry, "base_address"):
                        base = entry.base_address
                    elif entry.is_absolute:
                        ranges.append((entry.begin_offset, entry.end_offset))
                    else:
                        ranges.append((base + entry.begin_offset, base + entry.end_offset))
            else:
                high = attrs["DW_AT_high_pc"]
                end = high.value if high.form == "DW_FORM_addr" else low + high.value
                ranges = [(low, end)]
            variables = []
            for die in top.iter_children():
                if die.tag != "DW_TAG_variable" or "DW_AT_declaration" in die.attributes:
                    continue
                loc = die.attributes.get("DW_AT_location")
                if loc is None or loc.form not in ("DW_FORM_exprloc", "DW_FORM_block1"):
                    continue
                expr = loc.value
                if expr[0] != 0x03 or len(expr) != 1 + cu["address_size"]:
                    continue
                address = int.from_bytes(bytes(expr[1:]), "little" if elf.little_endian else "big")
                named = die
                if "DW_AT_name" not in die.attributes and "DW_AT_specification" in die.attributes:
                    named = die.get_DIE_from_attribute("DW_AT_specification")
                variables.append((address, named.attributes["DW_AT_name"].value))
            out.append((cu["version"], name, comp_dir, tuple(r for r in ranges if r[0] < r[1]),
                        tuple(variables)))
        return out


def test_units_equal_pyelftools(image):
    ours = [(u.version, u.name, u.comp_dir, u.ranges, u.variables) for u in Dwarf.from_elf(image).units()]
    assert ours == reference_units(image)


def test_the_sample_has_what_the_test_needs(image):
    """The sources give every case: ranges, a specification, a .bss variable."""
    by_name = {u.name.rsplit("/", 1)[-1]: u for u in Dwarf.from_elf(image).units()}
    sample, plain = by_name["sample.c"], by_name["plain.c"]
    assert len(sample.ranges) == 2 and len(plain.ranges) == 1
    names = {n for _a, n in sample.variables}
    assert {b"global_counter", b"file_static", b"declared_only", b"keep"} <= names
    assert b"inner" not in names            # a function's static is not top level
    assert [n for _a, n in plain.variables] == [b"plain_bss"]


def test_variables_and_units_agree_with_readelf(image):
    """readelf prints each top-level DIE at depth 1: its DW_OP_addr locations
    and the units' names."""
    text = subprocess.run(["readelf", "--debug-dump=info", "--dwarf-depth=2", "-W", image],
                          capture_output=True, text=True, check=True).stdout
    addresses = sorted(int(a, 16) for a in re.findall(
        r"DW_AT_location\s*:.*\(DW_OP_addr: ([0-9a-f]+)\)\s*$", text, re.M))
    ours = Dwarf.from_elf(image).units()
    units = list(ours)
    assert sorted(a for u in units for a, _n in u.variables) == addresses
    # "DW_AT_name : (strp) (offset: 0x1f): /path/sample.c": the name is last.
    names = re.findall(r"DW_TAG_compile_unit.*?DW_AT_name\s*:[^\n]*?(\S+)\n", text, re.S)
    assert [u.name for u in units] == names


def test_no_dwarf_is_one_line(tmp_path):
    path = tmp_path / "plain"
    src = tmp_path / "x.c"
    src.write_text("int x(void) { return 1; }\n")
    subprocess.run(["gcc", "-c", "-o", str(tmp_path / "x.o"), str(src)], check=True)
    subprocess.run(["ld", "-e", "0", "-o", str(path), str(tmp_path / "x.o")], check=True)
    with pytest.raises(KmodsymsError, match="no DWARF"):
        Dwarf.from_elf(str(path))


def test_a_truncated_unit_is_one_line(image, tmp_path):
    dwarf = Dwarf.from_elf(image)
    dwarf.sections[".debug_info"] = dwarf.sections[".debug_info"][:40]
    dwarf.info.data = dwarf.sections[".debug_info"]
    with pytest.raises(KmodsymsError, match="corrupt DWARF"):
        list(dwarf.units())
