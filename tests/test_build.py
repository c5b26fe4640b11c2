"""kmodsyms build: the dtrace_syms file, checked against binutils and the
fixture's documented hard cases."""

import os
import shutil
import subprocess

import pytest
from elf_reference import rows

from kmodsyms.errors import KmodsymsError
from kmodsyms.format.fileformat import FORMAT_VERSION
from kmodsyms.format.symsfile import SymsFile, read_syms
from kmodsyms.scan.elf.archive import final_link_objects, vmlinux_objects
from kmodsyms.scan.elf.elfscan import scan_object
from kmodsyms.scan.modmap.thick import read_thick
from kmodsyms.scan.writer import build


def entries(syms, name):
    return [syms.entry(i) for i in syms.find(name)]


def test_round_trip_equals_a_fresh_scan(fixture_tree, fixture_syms):
    """Every symbol of every object, read back from the file, is what the
    scanner reads from the object itself, less the names System.map (and so
    kallsyms) never shows."""
    syms = read_syms(fixture_syms)
    shown = {line.split()[2] for line in open(os.path.join(fixture_tree, "System.map"))}
    objects = vmlinux_objects(fixture_tree)[0] + final_link_objects(fixture_tree)
    from_file = {}
    for i in range(len(syms.symbols)):
        e = syms.entry(i)
        from_file.setdefault(e["object"], []).append(
            (e["name"], e["section"], e["value"], e["size"], e["type"], e["binding"]))
    assert sorted(from_file) == sorted(objects)
    names = {0: "notype", 1: "object", 2: "func", 6: "tls"}
    binds = {0: "local", 1: "global", 2: "weak"}
    for obj in objects:
        scanned = [(n, s, v, z, names[t], binds[b])
                   for n, s, v, z, t, b in rows(scan_object(os.path.join(fixture_tree, obj))) if n in shown]
        assert sorted(from_file[obj]) == sorted(scanned), obj


def test_objects_linked_beside_vmlinux_o(fixture_tree, fixture_syms):
    """HARD CASE 10: after vmlinux.a's objects the file lists what the final
    link loads beside vmlinux.o, in vmlinux.map's order, placed where ld's
    map puts it: init/version-timestamp.o's init_uts_ns is that object's,
    in no module, and .data's last bytes of vmlinux.o before it are not."""
    from kmodsyms import load
    from kmodsyms.scan.linkmap import vmlinux_object_map
    syms = read_syms(fixture_syms)
    listed = [syms.object_path(i) for i in range(len(syms.objects))]
    with open(os.path.join(fixture_tree, "vmlinux.map")) as f:
        loads = [line.split()[1] for line in f if line.startswith("LOAD ")]
    assert loads[0] == "vmlinux.o" and listed == vmlinux_objects(fixture_tree)[0] + loads[1:] \
        == vmlinux_objects(fixture_tree)[0] + ["init/version-timestamp.o"]
    path = lambda name: os.path.join(fixture_tree, name)  # noqa: E731
    truth = vmlinux_object_map(path("vmlinux.map"), path("vmlinux.o.map"), path("vmlinux"))
    r = load(fixture_syms, path("System.map"))
    (line,) = [ln for ln in r.lines() if ln.name == "init_uts_ns"]
    assert line.object == truth.object_at(line.address) == "init/version-timestamp.o"
    assert list(line.modules) == [] and line.binding.value == "global" and line.size == 0x44
    before = r.resolve(line.address - 0x1c)         # mdio_bus_count, the last of vmlinux.o's .data
    assert before.object == truth.object_at(line.address - 0x1c) == "drivers/net/phy/mdio_shared.o"


def test_final_link_objects_as_link_vmlinux_sh_takes_them(tmp_path):
    """The objects scripts/link-vmlinux.sh adds: .vmlinux.export.o with
    CONFIG_MODULES, init/version-timestamp.o always, the kallsyms tables of
    the last pass with CONFIG_KALLSYMS (the newest file: a pass an earlier
    build needed and this one did not is older; never 6.12's empty pass 0;
    either naming), each only where the tree has it."""
    tree = tmp_path / "tree"
    (tree / "init").mkdir(parents=True)
    (tree / "include" / "config").mkdir(parents=True)

    def touch(name, when):
        (tree / name).write_bytes(b"")
        os.utime(tree / name, ns=(when, when))

    for name, when in [(".vmlinux.export.o", 5), ("init/version-timestamp.o", 1),
                       (".tmp_vmlinux0.kallsyms.o", 9), (".tmp_vmlinux1.kallsyms.o", 6),
                       (".tmp_vmlinux2.kallsyms.o", 7), (".tmp_vmlinux3.kallsyms.o", 2)]:
        touch(name, when * 10**9)
    everything = [".vmlinux.export.o", "init/version-timestamp.o", ".tmp_vmlinux2.kallsyms.o"]
    assert final_link_objects(str(tree)) == everything          # no auto.conf: what is there
    conf = tree / "include" / "config" / "auto.conf"
    conf.write_text("CONFIG_MODULES=y\nCONFIG_KALLSYMS=y\n")
    assert final_link_objects(str(tree)) == everything
    conf.write_text("CONFIG_KALLSYMS=y\n# CONFIG_MODULES is not set\n")
    assert final_link_objects(str(tree)) == everything[1:]
    conf.write_text("CONFIG_MODULES=y\n")
    assert final_link_objects(str(tree)) == everything[:2]
    conf.write_text("CONFIG_MODULES=y\nCONFIG_KALLSYMS=y\n")
    touch(".tmp_vmlinux3.kallsyms.o", 8 * 10**9)                  # this build needed a third pass
    assert final_link_objects(str(tree))[-1] == ".tmp_vmlinux3.kallsyms.o"
    for n in range(4):
        (tree / f".tmp_vmlinux{n}.kallsyms.o").unlink()
    touch(".tmp_vmlinux.kallsyms1.o", 3 * 10**9)                  # before 6.12
    touch(".tmp_vmlinux.kallsyms2.o", 4 * 10**9)
    assert final_link_objects(str(tree))[-1] == ".tmp_vmlinux.kallsyms2.o"
    (tree / ".vmlinux.export.o").unlink()
    assert final_link_objects(str(tree)) == ["init/version-timestamp.o", ".tmp_vmlinux.kallsyms2.o"]


def test_committed_fixture_file_is_a_fresh_build(fixture_syms):
    """fixtures/kbuild/dtrace_syms.expected, what the C tests (make -C
    libkmodsyms check) read without Python, is byte for byte what a fresh
    build of the fixture writes."""
    from conftest import FIXTURE
    with open(os.path.join(FIXTURE, "dtrace_syms.expected"), "rb") as f:
        committed = f.read()
    with open(fixture_syms, "rb") as f:
        assert f.read() == committed, ("fixtures/kbuild/dtrace_syms.expected is stale: kmodsyms build "
                                       "--kbuild fixtures/kbuild -o fixtures/kbuild/dtrace_syms.expected")


def test_sorted_by_name_then_modules_then_object(fixture_syms):
    syms = read_syms(fixture_syms)
    keys = []
    for i in range(len(syms.symbols)):
        e = syms.entry(i)
        keys.append((e["name"].encode(), tuple(e["modules"]), e["object"]))
    assert keys == sorted(keys)


def test_header(fixture_tree, fixture_syms):
    syms = read_syms(fixture_syms)
    assert syms.meta_kernel_release == "6.12.0-kmodsyms-fixture"
    readelf = shutil.which("readelf")
    if readelf:
        notes = subprocess.run([readelf, "-n", os.path.join(fixture_tree, "vmlinux")],
                               capture_output=True, text=True).stdout
        assert f"Build ID: {syms.meta_build_id}" in notes
    assert syms.meta_object_source == "vmlinux.a"
    assert syms.missing_objects == []


def test_fixture_hard_cases(fixture_syms):
    syms = read_syms(fixture_syms)
    # Same static name in two built-in modules and the core kernel.
    got = {(tuple(e["modules"]), e["object"]) for e in entries(syms, "init_once")}
    assert got == {((), "kernel/fork.o"), (("ext4",), "fs/ext4/super.o"),
                   (("isofs",), "fs/isofs/inode.o")}
    assert {tuple(e["modules"]) for e in entries(syms, "debug_level")} == \
        {(), ("ext4",), ("isofs",)}
    # One object in two modules: both, in thick-file order.
    for e in entries(syms, "mdio_bus_read"):
        assert e["modules"] == ["libphy", "fwnode_mdio"]
    # Dash module, one-file module, and the "core" case (lib/msr.o is core).
    assert all(e["modules"] == ["amd_uncore"] for i in range(len(syms.symbols))
               for e in [syms.entry(i)] if e["object"] == "arch/x86/events/amd/uncore.o")
    msr = {e["object"]: e["modules"] for e in entries(syms, "msr_read")}
    assert msr == {"arch/x86/kernel/msr.o": ["msr"], "arch/x86/lib/msr.o": []}
    # Weak and strong definitions of one name are both kept.
    assert sorted(e["binding"] for e in entries(syms, "arch_setup_hook")) == ["global", "weak"]
    # Assembly: aliases at one address, nested sized and unsized labels.
    memcpy = {e["name"]: e for n in ("__memcpy", "memcpy", "memcpy_tail", "memcpy_orig")
              for e in entries(syms, n)}
    assert memcpy["__memcpy"]["value"] == memcpy["memcpy"]["value"]
    assert memcpy["memcpy_tail"]["size"] == 0 and memcpy["memcpy_tail"]["type"] == "notype"
    assert memcpy["memcpy_orig"]["size"] > 0
    # Sections by name: init/exit text, cold part, per-cpu data.
    sections = {syms.entry(i)["section"] for i in range(len(syms.symbols))}
    assert {".init.text", ".exit.text", ".text.unlikely", ".data..percpu", ".bss",
            ".rodata", ".data"} <= sections
    assert any(syms.entry(i)["name"].endswith(".cold") for i in range(len(syms.symbols)))


def test_corpus_counts_against_nm(corpus, corpus_syms):
    nm = shutil.which("nm")
    if not nm:
        pytest.skip("binutils nm is absent")
    syms = read_syms(corpus_syms)
    objects, _ = vmlinux_objects(corpus)
    out = subprocess.run([nm, "--defined-only", *objects], cwd=corpus, check=True,
                         capture_output=True, text=True).stdout
    shown = {line.split()[2] for line in open(os.path.join(corpus, "System.map"))}
    count = 0
    for line in out.splitlines():
        fields = line.split()
        if len(fields) != 3:
            continue  # "file.o:" headers and blank lines
        _value, letter, name = fields
        # We skip absolute (A/a) and common (C) symbols, and names that
        # System.map (and so kallsyms) never shows.
        if letter in "aAC" or name not in shown:
            continue
        count += 1
    assert len(syms.symbols) == count
    assert len(syms.module_names) == 345
    assert all(c > 0 for c in syms.module_symbol_counts())


def test_missing_object_fails_without_partial_output(fixture_tree, tmp_path):
    tree = tmp_path / "tree"
    shutil.copytree(fixture_tree, tree)
    os.unlink(tree / "fs/isofs/dir.o")
    thick = read_thick(str(tree / "modules_thick.builtin"))
    out = tmp_path / "out" / "dtrace_syms"
    out.parent.mkdir()
    with pytest.raises(KmodsymsError, match="fs/isofs/dir.o: object does not exist"):
        build(str(tree), thick, "t", str(out))
    assert os.listdir(out.parent) == []
    result = build(str(tree), thick, "t", str(out), allow_missing=True)
    assert result.missing == ["fs/isofs/dir.o"]
    assert read_syms(str(out)).missing_objects == ["fs/isofs/dir.o"]


def test_cache_rebuild_is_identical(fixture_tree, tmp_path):
    thick = read_thick(os.path.join(fixture_tree, "modules_thick.builtin"))
    out = str(tmp_path / "dtrace_syms")
    first = build(fixture_tree, thick, "t", out)
    data = open(out, "rb").read()
    second = build(fixture_tree, thick, "t", out)
    assert second.cached == first.objects
    assert open(out, "rb").read() == data


def test_corrupt_files_are_refused(fixture_syms):
    data = open(fixture_syms, "rb").read()
    SymsFile(data)
    for bad in (data[:-1], data[:100], data[:8], b"XXXXXXXX" + data[8:],
                data[:200] + bytes([data[200] ^ 1]) + data[201:]):
        with pytest.raises(KmodsymsError):
            SymsFile(bad)
    wrong_version = data[:8] + (99).to_bytes(4, "little") + data[12:]
    with pytest.raises(KmodsymsError, match=f"version 99.*reads version {FORMAT_VERSION}"):
        SymsFile(wrong_version)
