"""The resolver (libkmodsyms, through the binding) against independent
truth: the fixture vmlinux's own ELF symbol table and linker maps, and the
real corpus' truth.tsv."""

import bisect
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import FIXTURE, FIXTURE_KASLR

from kmodsyms import load
from kmodsyms.binding import Symbolization
from kmodsyms.binding.records import SizeKind
from kmodsyms.errors import KmodsymsError, StaleError
from kmodsyms.scan.linkmap import vmlinux_object_map
from kmodsyms.scan.modmap.thick import read_thick

TYPE_RANK = {"STT_NOTYPE": 0}
BIND_RANK = {"STB_GLOBAL": 2, "STB_WEAK": 1, "STB_LOCAL": 0}


def vmlinux_symbols(tree):
    """(name, runtime address, size, type rank, bind rank) of every symbol of
    the fixture vmlinux that kallsyms shows, read with pyelftools."""
    from elftools.elf.elffile import ELFFile
    kallsyms = set()
    for line in open(os.path.join(tree, "kallsyms")):
        fields = line.split()
        if len(fields) == 3:
            kallsyms.add((fields[2], int(fields[0], 16)))
    out = []
    with open(os.path.join(tree, "vmlinux"), "rb") as f:
        elf = ELFFile(f)
        symtab = elf.get_section_by_name(".symtab")
        for sym in symtab.iter_symbols():
            shndx = sym["st_shndx"]
            if not isinstance(shndx, int) or sym["st_info"]["type"] in ("STT_FILE", "STT_SECTION"):
                continue
            percpu = elf.get_section(shndx).name == ".data..percpu"
            addr = sym["st_value"] + (0 if percpu else FIXTURE_KASLR)
            if (sym.name, addr) in kallsyms:
                out.append((sym.name, addr, sym["st_size"], TYPE_RANK.get(sym["st_info"]["type"], 1),
                            BIND_RANK[sym["st_info"]["bind"]], sym["st_value"], percpu))
    return out


def innermost(symbols, addr):
    """Brute force: the rule of docs/resolver.md, straight from its text."""
    holding = [s for s in symbols if s[2] and s[1] <= addr < s[1] + s[2]]
    if not holding:
        return None
    # greatest start; then smaller size; typed; stronger binding; then name
    return min(holding, key=lambda s: (-s[1], s[2], -s[3], -s[4], s[0]))


@pytest.fixture(scope="module")
def fixture_resolver(fixture_tree, fixture_syms):
    return load(syms=fixture_syms, kallsyms=os.path.join(fixture_tree, "kallsyms"))


def test_every_sized_symbol_against_vmlinux(fixture_tree, fixture_resolver):
    symbols = vmlinux_symbols(fixture_tree)
    objects = vmlinux_object_map(os.path.join(fixture_tree, "vmlinux.map"),
                                 os.path.join(fixture_tree, "vmlinux.o.map"),
                                 os.path.join(fixture_tree, "vmlinux"))
    thick = read_thick(os.path.join(fixture_tree, "modules_thick.builtin"))
    owners = thick.object_modules()
    # Per-cpu variables: kallsyms prints their offsets ('A'), not addresses,
    # so no address is answered by them (issue 10, part 3).
    offsets = sorted({a for _n, start, size, *_, percpu in symbols if size and percpu
                      for a in (start, start + size - 1)})
    assert offsets
    for addr in offsets:
        assert fixture_resolver.resolve(addr) == Symbolization(addr), hex(addr)
    symbols = [s for s in symbols if not s[-1]]
    probes = sorted({a for _n, start, size, *_ in symbols if size
                     for a in (start, start + size - 1, start + size // 2)})
    assert len(probes) > 100
    lines, sized = fixture_resolver.resolve_many(np.array(probes, dtype=np.uint64))
    for addr, line, is_sized in zip(probes, lines.tolist(), sized.tolist()):
        ref = innermost(symbols, addr)
        rec = fixture_resolver.record(addr, line)
        assert bool(is_sized) == rec.sized
        assert rec.sized and rec.symbol == ref[0] and rec.start == ref[1], hex(addr)
        assert rec.size == ref[2]
        link_addr = addr - (ref[1] - ref[5])
        obj = objects.object_at(link_addr)
        assert rec.object == obj, (hex(addr), rec)
        expected = [thick.modules[m] for m in owners.get(obj, ())] or ["vmlinux"]
        assert rec.modules == expected, (hex(addr), rec)
        assert rec.origin == ("core" if expected == ["vmlinux"] else "builtin")


def test_hard_cases_resolve_as_documented(fixture_resolver):
    r = fixture_resolver
    by_object = {rec.object: rec for rec in r.lookup("init_once")}
    assert by_object["fs/ext4/super.o"].modules == ["ext4"]
    assert by_object["fs/isofs/inode.o"].modules == ["isofs"]
    assert by_object["kernel/fork.o"].modules == ["vmlinux"]
    assert by_object[None].modules == ["fuse"] and by_object[None].origin == "loadable"
    shared = r.lookup("mdio_bus_read")
    assert [rec.modules for rec in shared] == [["libphy", "fwnode_mdio"]]
    assert [rec.object for rec in r.lookup("show_options", "isofs")] == ["fs/isofs/namei.o"]
    assert [rec.object for rec in r.lookup("msr_read", "vmlinux")] == ["arch/x86/lib/msr.o"]
    # Padding symbols are in no object's table but inside the object's section.
    pfx = r.lookup("__pfx_ext4_file_open")[0]
    assert pfx.object == "fs/ext4/file.o" and pfx.modules == ["ext4"] and pfx.size == 16
    # Pseudo-modules are kept and labelled.
    bpf = [rec for rec in r.modules() if rec == "bpf"]
    assert bpf == ["bpf"]
    ftrace = r.resolve(0xffffffffc0900004)
    assert ftrace.origin == "pseudo" and ftrace.module == "__builtin__ftrace"
    # The strong arch_setup_hook is kallsyms' one line; lib/weak.o's copy was overridden.
    weak = [rec for rec in r.lookup("arch_setup_hook")]
    assert len(weak) == 1 and weak[0].object == "arch/x86/kernel/setup.o"


def test_r32_an_address_in_no_symbol_and_no_section_is_nothing(fixture_resolver):
    nowhere = fixture_resolver.resolve(0x1234_5678_9abc_def0)
    assert nowhere == Symbolization(0x1234_5678_9abc_def0)


def test_r23_r24_linker_script_symbols_take_the_object_whose_bytes_they_are(fixture_tree,
                                                                         fixture_resolver):
    """Every symbol the linker script defines (``NAME = .`` in vmlinux.map:
    ``_stext``, ``__bss_stop``...), in no object's symbol table, that
    kallsyms shows: the object of the bytes at its link address, as the
    linker map lays them out (R23), with that object's modules; in no
    object's bytes, core kernel with no object (R24); never sized."""
    import re
    objects = vmlinux_object_map(os.path.join(fixture_tree, "vmlinux.map"),
                                 os.path.join(fixture_tree, "vmlinux.o.map"),
                                 os.path.join(fixture_tree, "vmlinux"))
    thick = read_thick(os.path.join(fixture_tree, "modules_thick.builtin"))
    owners = thick.object_modules()
    script = re.findall(r"^\s+0x([0-9a-f]+)\s+(\w+) = \.", open(os.path.join(fixture_tree,
                                                                          "vmlinux.map")).read(), re.M)
    seen = {}
    for link, name in script:
        recs = [rec for rec in fixture_resolver.lookup(name) if rec.origin in ("core", "builtin")]
        if not recs:
            continue
        (rec,) = recs
        obj = objects.object_at(int(link, 16))
        seen[name] = obj
        assert (rec.object, rec.modules, rec.sized) == \
            (obj, [thick.modules[m] for m in owners.get(obj, ())] or ["vmlinux"], False), name
    assert seen["_stext"] == "init/main.o" and seen["__bss_stop"] is None   # both rules met
    assert len(seen) > 10


def test_r26_a_sized_symbol_wins_and_its_ties_go_to_the_stronger_binding(fixture_tree,
                                                                          fixture_resolver):
    """``memcpy_tail``, an unsized label inside ``__memcpy``, is answered by
    the sized symbol holding it (R26 before R27); ``__memcpy`` (GLOBAL) and
    its alias ``memcpy`` (WEAK) have one start and one size in vmlinux's
    symbol table, and the stronger binding wins: the one answer the rule
    gives, from that table."""
    symbols = [s for s in vmlinux_symbols(fixture_tree) if not s[-1]]
    tail = fixture_resolver.lookup("memcpy_tail")[0]
    ref = innermost(symbols, tail.start)
    rivals = {s[0] for s in symbols if (s[1], s[2]) == (ref[1], ref[2])}
    assert ref[0] == "__memcpy" and rivals == {"__memcpy", "memcpy"}
    rec = fixture_resolver.resolve(tail.start)
    assert (rec.symbol, rec.start, rec.size, rec.sized) == (ref[0], ref[1], ref[2], True)


def test_json_record_and_text(fixture_resolver):
    rec = fixture_resolver.lookup("init_once", "ext4")[0]
    hit = fixture_resolver.resolve(rec.start + 0x10)
    doc = hit.to_json()
    assert doc["address"] == f"{rec.start + 0x10:#x}" and doc["start"] == f"{rec.start:#x}"
    assert doc["offset"] == 0x10 and doc["size"] == rec.size and doc["sized"] is True
    assert doc["module"] == "ext4" and doc["modules"] == ["ext4"] and doc["origin"] == "builtin"
    assert doc["type"] == "t" and doc["binding"] == "local" and doc["object"] == "fs/ext4/super.o"
    assert str(hit) == f"{rec.start + 0x10:#x} ext4`init_once+0x10 ({rec.size:#x} bytes, fs/ext4/super.o)"


def test_r36_a_file_of_another_kernel_is_refused(fixture_syms, corpus):
    with pytest.raises(StaleError, match="does not match"):
        load(syms=fixture_syms, kallsyms=os.path.join(corpus, "kallsyms"))


def test_r2_hidden_addresses_are_an_error(fixture_tree, fixture_syms):
    text = open(os.path.join(fixture_tree, "kallsyms"), "rb").read()
    hidden = b"\n".join(b"0000000000000000" + line[16:] for line in text.splitlines())
    with pytest.raises(KmodsymsError, match="kptr_restrict"):
        load(syms=fixture_syms, kallsyms_text=hidden)


def test_r1_a_malformed_kallsyms_line_names_its_number(fixture_tree, fixture_syms):
    lines = open(os.path.join(fixture_tree, "kallsyms"), "rb").read().splitlines()
    lines[6] = b"ffffffffzz600000 T broken"
    with pytest.raises(KmodsymsError, match=r"^kallsyms:7: expected"):
        load(syms=fixture_syms, kallsyms_text=b"\n".join(lines) + b"\n")


def test_corpus_matches_linker_maps(corpus, corpus_syms):
    """Every ok row of truth.tsv: object and modules as the linker maps say,
    100 %; sizes equal vmlinux's ELF sizes wherever ours is known."""
    r = load(syms=corpus_syms, kallsyms=os.path.join(corpus, "kallsyms"))
    rows = [ln.rstrip("\n").split("\t") for ln in open(os.path.join(corpus, "truth.tsv"))
            if not ln.startswith("#")]
    core = [line for line in r.lines() if line.origin not in ("loadable", "pseudo")]
    assert len(core) == len(rows)
    checked = wrong = ambiguous = 0
    for line, (addr, _t, name, obj, mods, elf_size, flag) in zip(core, rows):
        assert line.name == name and line.address == int(addr, 16)
        if line.object is None and r.record(line.address, line.index).ambiguous:
            ambiguous += 1
        if flag != "ok":
            continue
        checked += 1
        ours_mods = ",".join(line.modules) or "vmlinux"
        if (line.object or "-") != obj or ours_mods != mods or \
                (line.size_kind == "exact" and line.size != int(elf_size)):
            wrong += 1
    assert checked > 180_000
    assert wrong == 0
    assert ambiguous == 0


def test_cli_resolve_lookup_and_kallmodsyms(fixture_tree, fixture_syms):
    base = [sys.executable, "-m", "kmodsyms"]
    ks = os.path.join(fixture_tree, "kallsyms")
    r = load(syms=fixture_syms, kallsyms=ks)
    target = r.lookup("init_once", "isofs")[0]
    out = subprocess.run(base + ["resolve", "--syms", fixture_syms, "--kallsyms", ks,
                                 f"{target.start + 4:x}"], capture_output=True, text=True)
    assert out.returncode == 0
    assert out.stdout == f"{target.start + 4:#x} isofs`init_once+0x4 ({target.size:#x} bytes, fs/isofs/inode.o)\n"
    stdin = f"{target.start:#x}\n{target.start + 1:#x}\n"
    out = subprocess.run(base + ["resolve", "--json", "--syms", fixture_syms, "--kallsyms", ks, "-"],
                         input=stdin, capture_output=True, text=True)
    docs = [json.loads(ln) for ln in out.stdout.splitlines()]
    assert [d["offset"] for d in docs] == [0, 1]
    out = subprocess.run(base + ["lookup", "--syms", fixture_syms, "--kallsyms", ks, "isofs`init_once"],
                         capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.startswith(f"{target.start:#x} isofs`init_once")
    out = subprocess.run(base + ["lookup", "--syms", fixture_syms, "--kallsyms", ks, "ext4`no_such"],
                         capture_output=True, text=True)
    assert out.returncode == 1
    out = subprocess.run(base + ["resolve", "--syms", fixture_syms, "--kallsyms", ks, "0xZZ"],
                         capture_output=True, text=True)
    assert out.returncode == 2 and len(out.stderr.splitlines()) == 1 and "Traceback" not in out.stderr
    out = subprocess.run(base + ["kallmodsyms", "--syms", fixture_syms, "--kallsyms", ks],
                         capture_output=True, text=True)
    lines = out.stdout.splitlines()
    assert len(lines) == len(open(ks).read().splitlines())
    # Parse as dtrace-utils does: "%llx %llx %c %s [%s" after the tab.
    found = {}
    for line in lines:
        head, _, mods = line.partition("\t")
        addr, size, letter, name = head.split(" ")
        found.setdefault(name, []).append((int(addr, 16), int(size, 16), mods))
    assert (target.start, target.size, "[isofs]") in found["init_once"]
    assert any(m == "[libphy] [fwnode_mdio]" for _a, _s, m in found["mdio_bus_read"])
    assert any(m == "" for _a, _s, m in found["init_once"])  # core copy: no suffix


def test_symbols_of_a_module_against_the_linker_map(fixture_tree, fixture_resolver):
    """symbols(M): exactly the kallsyms lines whose bytes the linker map puts
    in an object of M (zero-size markers at a boundary aside)."""
    objects = vmlinux_object_map(os.path.join(fixture_tree, "vmlinux.map"),
                                 os.path.join(fixture_tree, "vmlinux.o.map"),
                                 os.path.join(fixture_tree, "vmlinux"))
    thick = read_thick(os.path.join(fixture_tree, "modules_thick.builtin"))
    owners = thick.object_modules()
    sized = {(name, addr) for name, addr, size, *_ in vmlinux_symbols(fixture_tree) if size}
    for module in ("ext4", "isofs", "libphy", "fwnode_mdio", "amd_uncore", "msr"):
        got = {(rec.symbol, rec.start) for rec in fixture_resolver.symbols(module)}
        expected = set()
        for name, addr in sized:
            link = addr - FIXTURE_KASLR if addr >= 1 << 63 else addr
            obj = objects.object_at(link)
            if obj and module in [thick.modules[m] for m in owners.get(obj, ())]:
                expected.add((name, addr))
        assert expected and expected <= got, module
        assert all(module in rec.modules for rec in fixture_resolver.symbols(module))
    assert [rec.module for rec in fixture_resolver.symbols("fuse")] == \
        ["fuse"] * len(fixture_resolver.symbols("fuse"))
    assert fixture_resolver.symbols("no_such_module") == []


def _placed_object_sections(tree):
    """Every object section vmlinux loads that holds a symbol of vmlinux's
    symbol table (pyelftools), from the linker maps alone (vmlinux.map
    composed with vmlinux.o.map): (start, end, object, executable) at its
    run-time address (per-cpu sections are linked at 0 and stay offsets),
    in address order.  (A section of no symbol, say a .rodata.cst2 of
    merged constants, is placed only when linker-made symbols bracket it,
    R17, which the fixture has none of.)"""
    from elftools.elf.elffile import ELFFile

    from kmodsyms.scan.linkmap import parse_map
    with open(os.path.join(tree, "vmlinux"), "rb") as f:
        elf = ELFFile(f)
        flags = {s.name: s["sh_flags"] for s in elf.iter_sections() if s["sh_flags"] & 2}
        at = sorted(sym["st_value"] for sym in elf.get_section_by_name(".symtab").iter_symbols()
                    if sym["st_info"]["type"] not in ("STT_FILE", "STT_SECTION")
                    and isinstance(sym["st_shndx"], int))
    final = parse_map(os.path.join(tree, "vmlinux.map"))
    in_vmlinux_o = {s.name: (s.address, s.output) for s in final if s.file.endswith("vmlinux.o")}
    pieces = [(s.address, s.size, s.file, s.output) for s in final if s.output in flags
              and s.file.endswith(".o") and not s.file.endswith("vmlinux.o")]
    for s in parse_map(os.path.join(tree, "vmlinux.o.map")):
        if s.name in in_vmlinux_o and in_vmlinux_o[s.name][1] in flags:
            base, output = in_vmlinux_o[s.name]
            pieces.append((base + s.address, s.size, s.file.split("(")[-1].rstrip(")"), output))
    shift = lambda link: link + (FIXTURE_KASLR if link >= 1 << 63 else 0)  # noqa: E731
    return sorted((shift(link), shift(link + size), obj, bool(flags[output] & 4))
                  for link, size, obj, output in pieces
                  if size and bisect.bisect_left(at, link) < bisect.bisect_left(at, link + size))


def test_module_ranges_against_the_linker_maps(fixture_tree, fixture_resolver):
    """Issue 24 item 3, R50: each module's ranges (kms_module_ranges())
    are its objects' sections as the linker maps place them, a run of them
    with no other object's between merged across ld's alignment padding
    (ext4's .text: super.o, inode.o and file.o with 9 and 1 bytes of
    padding between; its .rodata with 6 and 12), and no per-cpu section
    (ext4's ext4_es_pcpu_count is at offset 0x38): fails if either is
    undone."""
    sections = _placed_object_sections(fixture_tree)
    percpu = [s for s in sections if s[0] < 1 << 63]
    assert ("fs/ext4/super.o" in {s[2] for s in percpu}), percpu
    thick = read_thick(os.path.join(fixture_tree, "modules_thick.builtin"))
    owners = thick.object_modules()
    merged_across_padding = 0
    for m, module in enumerate(["vmlinux"] + thick.modules):
        want = []
        previous = None
        for start, end, obj, text in sections:
            member = (m - 1 in owners[obj]) if obj in owners else m == 0
            if start < 1 << 63 or not member:
                previous = None
                continue
            align = start & -start
            if previous is not None and want[-1][2] == text and start - want[-1][1] < align:
                merged_across_padding += start > want[-1][1]
                want[-1][1] = max(want[-1][1], end)
            else:
                want.append([start, end, text])
            previous = obj
        got = [[r.start, r.end, r.text] for r in fixture_resolver.module_ranges(module)]
        assert got == want, module
    assert merged_across_padding >= 4
    assert [[r.start, r.end, r.text] for r in fixture_resolver.module_ranges("ext4")][:1] == \
        [[0xffffffffab6003e0, 0xffffffffab60068b, True]]


def test_an_unknown_size_is_none(fixture_syms):
    """docs/resolver.md 11.1: an unknown size has one spelling, None in
    Python, in the line and in its record (kms_line's and kms_sym's 0 in C):
    the fixture's per-cpu markers have no ELF size and nothing bounds them."""
    resolver = load(syms=fixture_syms, kallsyms=os.path.join(FIXTURE, "kallsyms"))
    unknown = [ln for ln in resolver.lines() if ln.size_kind == SizeKind.UNKNOWN]
    assert {ln.name for ln in unknown} >= {"__per_cpu_start", "__per_cpu_end"}
    assert {ln.size for ln in unknown} == {None}
    records = [resolver.record(ln.address, ln.index) for ln in unknown]
    assert {(rec.size, rec.size_kind, rec.sized) for rec in records} == {(None, SizeKind.UNKNOWN, False)}
