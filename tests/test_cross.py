"""The object scanner on other architectures' objects (fixtures/cross): both
ELF classes, both byte orders, ARM mapping symbols, awkward inputs, and
extended section numbering (SHN_XINDEX)."""

import filecmp
import os
import shutil
import struct
import subprocess

import pytest
from elf_reference import rows, scan_object_pyelftools
from test_elfscan import readelf_rows

from kmodsyms.errors import KmodsymsError
from kmodsyms.scan.elf.elfscan import scan_object

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CROSS = os.path.join(ROOT, "fixtures", "cross")
BUILD_SH = os.path.join(CROSS, "build.sh")

FUNC, OBJECT, NOTYPE = 2, 1, 0
LOCAL, GLOBAL, WEAK = 0, 1, 2

# arch: (binutils prefix, EI_CLASS, EI_DATA, ret size, small-insn size)
ARCHES = {
    "s390x": ("s390x-linux-gnu", 2, 2, 2, 4),
    "powerpc64": ("powerpc64-linux-gnu", 2, 2, 4, 4),
    "mips": ("mips-linux-gnu", 1, 2, 4, 4),
    "arm": ("arm-linux-gnueabihf", 1, 1, 4, 4),
    "aarch64": ("aarch64-linux-gnu", 2, 1, 4, 4),
}


def sample(arch):
    return os.path.join(CROSS, arch, "sample.o")


def expected_rows(arch):
    """What ARCH/sample.s says, by symbol name: (section, value, size, type, bind)."""
    _prefix, _cls, _data, ret, small = ARCHES[arch]
    rows = {
        "global_func": (".text", 0, 0x124, FUNC, GLOBAL),
        "local_func": (".text", 0x124, small + ret, FUNC, LOCAL),
        "weak_func": (".text", 0x124 + small + ret, ret, FUNC, WEAK),
        "unsized_label": (".text", 0x124 + small + 2 * ret, 0, NOTYPE, GLOBAL),
        "data_pad": (".data", 0, 0x100, OBJECT, LOCAL),
        "data_obj": (".data", 0x100, 24, OBJECT, GLOBAL),
        "rodata_obj": (".rodata", 0x10, 0x21, OBJECT, GLOBAL),
        "bss_obj": (".bss", 0x200, 0x1000, OBJECT, GLOBAL),
        "percpu_obj": (".data..percpu", 0x40, 0x40, OBJECT, GLOBAL),
        "init_func": (".init.text", 0, small + ret, FUNC, GLOBAL),
    }
    if arch == "arm":
        # Thumb: st_value is the address (after unsized_label's bx) | 1.
        rows["thumb_func"] = (".text", (0x124 + small + 3 * ret) | 1, 4, FUNC, GLOBAL)
    return rows


def raw_symbol_names(path):
    """Every name in .symtab, unfiltered (pyelftools)."""
    from elftools.elf.elffile import ELFFile
    with open(path, "rb") as f:
        return {s.name for s in ELFFile(f).get_section_by_name(".symtab").iter_symbols()}


def need_readelf():
    if not shutil.which("readelf"):
        pytest.skip("binutils readelf is absent")


# --- the five architectures -------------------------------------------------

@pytest.mark.parametrize("arch", sorted(ARCHES))
def test_fixture_has_the_class_and_byte_order_it_claims(arch):
    _prefix, ei_class, ei_data, _ret, _small = ARCHES[arch]
    with open(sample(arch), "rb") as f:
        ident = f.read(16)
    assert ident[:4] == b"\x7fELF"
    assert (ident[4], ident[5]) == (ei_class, ei_data)


@pytest.mark.parametrize("arch", sorted(ARCHES))
def test_fast_path_equals_pyelftools(arch):
    fast, ref = scan_object(sample(arch)), scan_object_pyelftools(sample(arch))
    assert rows(fast) == rows(ref)
    assert (fast.sec_name, fast.sec_size, fast.sec_align, fast.sec_flags) == \
           (ref.sec_name, ref.sec_size, ref.sec_align, ref.sec_flags)


@pytest.mark.parametrize("arch", sorted(ARCHES))
def test_matches_readelf(arch):
    need_readelf()
    assert rows(scan_object(sample(arch))) == readelf_rows(sample(arch))


@pytest.mark.parametrize("arch", sorted(ARCHES))
def test_host_readelf_agrees_with_the_arch_readelf(arch):
    """readelf_rows uses the host readelf; the arch's own must print the same."""
    need_readelf()
    own = shutil.which(ARCHES[arch][0] + "-readelf")
    if not own:
        pytest.skip(f"{ARCHES[arch][0]}-readelf is absent")
    for flag in ("-sW", "-SW"):
        outs = [subprocess.run([exe, flag, sample(arch)], capture_output=True, text=True,
                               check=True).stdout for exe in ("readelf", own)]
        assert outs[0] == outs[1], flag


@pytest.mark.parametrize("arch", sorted(ARCHES))
def test_values_are_those_of_the_source(arch):
    """Decoded in the object's own byte order: a swapped read of 0x124 would
    give 0x24010000 (32-bit) or 0x2401000000000000 (64-bit)."""
    scanned = rows(scan_object(sample(arch)))
    got = {name: rest for name, *rest in scanned}
    assert len(got) == len(scanned), "a symbol is reported twice"
    assert {k: tuple(v) for k, v in got.items()} == expected_rows(arch)


@pytest.mark.parametrize("arch", sorted(ARCHES))
def test_skipped_symbols_are_in_symtab_but_not_scanned(arch):
    raw = raw_symbol_names(sample(arch))
    # The fixture really holds what must be skipped...
    assert {".Llocal_label", "undefined_sym", "abs_sym", "common_obj"} <= raw
    if arch == "arm":
        assert {"$a", "$d", "$t"} <= raw
    if arch == "aarch64":
        assert {"$x", "$d"} <= raw
    # ...and the scanner skips all of it.
    names = {r[0] for r in rows(scan_object(sample(arch)))}
    assert not any(n.startswith(".L") or n.startswith("$") for n in names)
    assert not names & {"undefined_sym", "abs_sym", "common_obj", ".text", ".data"}


@pytest.mark.parametrize("arch", sorted(ARCHES))
def test_sections(arch):
    scan = scan_object(sample(arch))
    sec = dict(zip(scan.sec_name, zip(scan.sec_size, scan.sec_align)))
    # Some assemblers (mips, s390x) round section sizes and alignments up.
    assert sec[".bss"][0] == 0x1200 and sec[".bss"][1] >= 8   # NOBITS: no file bytes
    assert sec[".data..percpu"] == (0x80, 64)
    assert sec[".rodata"][0] >= 0x31
    assert sec[".data"][0] >= 0x11C            # pad + data_obj + undefined_sym's word
    assert sec[".text"][0] >= 0x124
    assert ".symtab" not in sec and ".strtab" not in sec


# --- awkward inputs ---------------------------------------------------------

def bad(name):
    return os.path.join(CROSS, "bad", name)


def test_no_symtab_is_an_object_without_symbols():
    assert os.path.getsize(bad("no-symtab.o")) > 0
    for reader in (scan_object, scan_object_pyelftools):
        scan = reader(bad("no-symtab.o"))
        assert rows(scan) == []
        assert {".text", ".data", ".bss", ".rodata", ".data..percpu", ".init.text"} <= \
               set(scan.sec_name)


def test_truncated_section_headers():
    with pytest.raises(KmodsymsError, match="truncated"):
        scan_object(bad("truncated-shdrs.o"))
    with pytest.raises(KmodsymsError):
        scan_object_pyelftools(bad("truncated-shdrs.o"))


@pytest.mark.parametrize("name", ["archive.a", "thin-archive.a"])
def test_archive_is_named_as_such(name):
    for reader in (scan_object, scan_object_pyelftools):
        with pytest.raises(KmodsymsError, match="ar archive"):
            reader(bad(name))


def test_path_with_space():
    path = bad("with space.o")
    assert " " in path
    scanned = rows(scan_object(path))
    assert scanned == rows(scan_object(sample("mips")))
    assert scanned == rows(scan_object_pyelftools(path))
    if shutil.which("readelf"):
        assert scanned == readelf_rows(path)


def test_processor_specific_section_index_is_skipped(tmp_path):
    """A symbol in a processor-reserved index (here SHN_MIPS_SCOMMON, 0xff03:
    gp-relative common) is, like SHN_COMMON, in no section: skipped."""
    from elftools.elf.elffile import ELFFile
    data = bytearray(open(sample("mips"), "rb").read())
    with open(sample("mips"), "rb") as f:
        symtab = ELFFile(f).get_section_by_name(".symtab")
        index = next(i for i, s in enumerate(symtab.iter_symbols()) if s.name == "common_obj")
        offset = symtab["sh_offset"] + index * symtab["sh_entsize"]
    struct.pack_into(">H", data, offset + 14, 0xFF03)   # Elf32_Sym.st_shndx, big-endian
    path = tmp_path / "scommon.o"
    path.write_bytes(bytes(data))
    scanned = rows(scan_object(str(path)))
    assert scanned == rows(scan_object(sample("mips")))
    if shutil.which("readelf"):
        assert scanned == readelf_rows(str(path))


def test_processor_specific_section_index_pyelftools(tmp_path):
    test_processor_specific_section_index_is_skipped(tmp_path)
    path = tmp_path / "scommon.o"
    assert rows(scan_object_pyelftools(str(path))) == rows(scan_object(str(path)))


# --- extended section numbering ---------------------------------------------

XINDEX_ASSEMBLERS = {
    "x86_64": ["as", "--64"],
    "i386": ["as", "--32"],
    "s390x": ["s390x-linux-gnu-as", "-m64"],
    "mips": ["mips-linux-gnu-as", "-32", "-EB"],
}
XINDEX_FUNCS = 70000


@pytest.fixture(scope="module")
def xindex_objects(tmp_path_factory):
    """xindex/sample.s assembled by each available assembler (built on demand,
    cached for the module)."""
    out_dir = tmp_path_factory.mktemp("xindex")
    built = {}

    def get(target):
        if target not in built:
            argv = XINDEX_ASSEMBLERS[target]
            if not shutil.which(argv[0]) or not shutil.which("bash"):
                pytest.skip(f"{argv[0]} is absent")
            out = str(out_dir / f"{target}.o")
            subprocess.run(["bash", BUILD_SH, "xindex", out, *argv], check=True)
            built[target] = out
        return built[target]
    return get


def _section_count(path):
    with open(path, "rb") as f:
        head = f.read(64)
    return head[4], head[5], struct.unpack_from("<H" if head[5] == 1 else ">H", head,
                                                0x3C if head[4] == 2 else 0x30)[0]


@pytest.mark.parametrize("target", sorted(XINDEX_ASSEMBLERS))
def test_xindex_section_names(xindex_objects, target):
    path = xindex_objects(target)
    _cls, _data, e_shnum = _section_count(path)
    assert e_shnum == 0, "the object does not use extended section numbering"
    scanned = rows(scan_object(path))
    by_name = {r[0]: r for r in scanned}
    funcs = [r for r in scanned if r[0].startswith("f") and r[0][1:].isdigit()]
    assert len(funcs) == XINDEX_FUNCS
    for name, section, value, size, typ, bind in funcs:
        assert (section, value, size, typ, bind) == (".text." + name, 0, 1, FUNC, GLOBAL)
    assert by_name["late_data"][1:] == (".data.late", 0x18, 8, OBJECT, GLOBAL)
    assert by_name["early_data"][1:] == (".data", 0, 4, OBJECT, GLOBAL)
    assert set(by_name) == {f"f{i}" for i in range(XINDEX_FUNCS)} | {"late_data", "early_data"}


@pytest.mark.parametrize("target", sorted(XINDEX_ASSEMBLERS))
def test_xindex_matches_readelf(xindex_objects, target):
    need_readelf()
    path = xindex_objects(target)
    assert rows(scan_object(path)) == readelf_rows(path)


def test_xindex_fast_path_equals_pyelftools(xindex_objects):
    path = xindex_objects("x86_64")
    fast, ref = scan_object(path), scan_object_pyelftools(path)
    assert (fast.sec_name, fast.sec_size, fast.sec_align, fast.sec_flags) == \
           (ref.sec_name, ref.sec_size, ref.sec_align, ref.sec_flags)
    assert rows(fast) == rows(ref)


# --- the fixtures are what build.sh makes -----------------------------------

def test_build_sh_reproduces_the_committed_objects(tmp_path):
    tools = [ARCHES[a][0] + "-as" for a in ARCHES] + ["aarch64-linux-gnu-objcopy", "ar",
                                                      "readelf", "bash"]
    missing = [t for t in tools if not shutil.which(t)]
    if missing:
        pytest.skip("absent: " + " ".join(missing))
    copy = tmp_path / "cross"
    shutil.copytree(CROSS, copy, ignore=shutil.ignore_patterns("*.o", "*.a"))
    subprocess.run(["bash", str(copy / "build.sh")], check=True)
    committed = sorted(os.path.relpath(os.path.join(d, f), CROSS)
                       for d, _, fs in os.walk(CROSS) for f in fs if f.endswith((".o", ".a")))
    rebuilt = sorted(os.path.relpath(os.path.join(d, f), copy)
                     for d, _, fs in os.walk(copy) for f in fs if f.endswith((".o", ".a")))
    assert rebuilt == committed
    for rel in committed:
        assert filecmp.cmp(os.path.join(CROSS, rel), copy / rel, shallow=False), rel
