"""The object scanner against two independent readers: binutils' readelf
and pyelftools (the ELF reader of record)."""

import glob
import os
import re
import shutil
import subprocess

import pytest
from elf_reference import rows, scan_object_pyelftools

from kmodsyms.errors import KmodsymsError
from kmodsyms.scan.elf.elfscan import scan_object

TYPES = {"NOTYPE": 0, "OBJECT": 1, "FUNC": 2, "TLS": 6}
BINDS = {"LOCAL": 0, "GLOBAL": 1, "WEAK": 2}
MAPPING = re.compile(r"\$[adtx](\..*)?$")


def fixture_objects(tree):
    return sorted(glob.glob(os.path.join(tree, "**", "*.o"), recursive=True))


def readelf_rows(path):
    """(name, section, value, size, type, binding) of kept symbols, per readelf."""
    sections = {}
    out = subprocess.run(["readelf", "-SW", path], capture_output=True, text=True,
                         check=True).stdout
    for m in re.finditer(r"^\s*\[\s*(\d+)\]\s+(\S+)", out, re.M):
        sections[int(m.group(1))] = m.group(2)
    out = subprocess.run(["readelf", "-sW", path], capture_output=True, text=True,
                         check=True).stdout
    rows = []
    in_symtab = False
    for line in out.splitlines():
        if line.startswith("Symbol table"):
            in_symtab = "'.symtab'" in line
            continue
        fields = line.split(None, 7)
        if not in_symtab or len(fields) < 8 or not fields[0].rstrip(":").isdigit():
            continue
        _num, value, size, typ, bind, _vis, ndx, name = fields
        if not ndx.isdigit() or typ not in TYPES or ndx == "0":
            continue
        if name.startswith(".L") or MAPPING.match(name):
            continue
        size = int(size, 16) if size.startswith("0x") else int(size)
        rows.append((name, sections[int(ndx)], int(value, 16), size, TYPES[typ], BINDS[bind]))
    return rows


def test_every_fixture_object_matches_readelf(fixture_tree):
    if not shutil.which("readelf"):
        pytest.skip("binutils readelf is absent")
    objects = fixture_objects(fixture_tree)
    assert len(objects) >= 20
    for path in objects:
        assert rows(scan_object(path)) == readelf_rows(path), path


def test_fast_path_equals_pyelftools(fixture_tree):
    for path in fixture_objects(fixture_tree) + [os.path.join(fixture_tree, "fs/fuse/fuse.ko")]:
        fast, ref = scan_object(path), scan_object_pyelftools(path)
        assert rows(fast) == rows(ref), path
        assert (fast.sec_name, fast.sec_size, fast.sec_align, fast.sec_flags) == \
               (ref.sec_name, ref.sec_size, ref.sec_align, ref.sec_flags), path


def test_fast_path_equals_pyelftools_on_corpus_sample(corpus):
    from kmodsyms.scan.elf.archive import vmlinux_objects
    objects, _ = vmlinux_objects(corpus)
    for obj in objects[::25]:
        path = os.path.join(corpus, obj)
        assert rows(scan_object(path)) == rows(scan_object_pyelftools(path)), obj


def test_sections_sizes_and_skipped_kinds(fixture_tree):
    scan = scan_object(os.path.join(fixture_tree, "arch/x86/lib/memcpy_64.o"))
    names = {r[0] for r in rows(scan)}
    assert {"__memcpy", "memcpy", "memcpy_tail", "memcpy_orig"} <= names
    assert not any(n.startswith(".L") for n in names)
    text = scan.sec_name.index(".text")
    assert scan.sec_size[text] > 0


@pytest.mark.parametrize("make_bad, message", [
    (lambda p, data: p.write_bytes(b"garbage" * 10), "not an ELF"),
    (lambda p, data: p.write_bytes(data[:200]), "truncated"),
    (lambda p, data: p.write_bytes(b"!<arch>\n"), "ar archive"),
    (lambda p, data: p.write_bytes(data[:40]), "truncated"),
])
def test_bad_objects_are_clear_errors(tmp_path, fixture_tree, make_bad, message):
    data = open(os.path.join(fixture_tree, "kernel/fork.o"), "rb").read()
    bad = tmp_path / "bad.o"
    make_bad(bad, data)
    with pytest.raises(KmodsymsError, match=message):
        scan_object(str(bad))


def test_directory_is_not_an_object(tmp_path):
    with pytest.raises(KmodsymsError, match="directory"):
        scan_object(str(tmp_path))
