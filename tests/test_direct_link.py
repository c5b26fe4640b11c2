"""fixtures/kbuild-direct: a kernel linked straight from vmlinux.a (no
vmlinux.o), with -fPIC data.  Every kallsyms line gets the object and
module(s) the final link's map (vmlinux.map, which names the objects) puts
at its address, and the size vmlinux's own ELF symbol table gives it, with
the default build (link layout), for the full and the text-only kallsyms.
The hard case (issue 10, failure 2): statics whose section holds no name
unique to them, in sections that ld gathered interleaved with other names."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT
from kallsyms_variants import text_only
from test_corpora import ambiguity, built_in_lines, count_lines

from kmodsyms import load
from kmodsyms.scan.linkmap import parse_map, vmlinux_object_map
from kmodsyms.scan.modmap.thick import read_thick

DIRECT = os.path.join(ROOT, "fixtures", "kbuild-direct")
# The direct tree's kallsyms is its vmlinux moved by this KASLR offset
# (fixtures/kbuild-direct/README.md).
DIRECT_KASLR = 0x1C200000


@pytest.fixture(scope="module")
def direct_tree(tmp_path_factory):
    """A private copy of fixtures/kbuild-direct (builds write next to it)."""
    dest = tmp_path_factory.mktemp("kbuild-direct") / "kbuild-direct"
    shutil.copytree(DIRECT, dest, symlinks=True)
    return str(dest)


@pytest.fixture(scope="module")
def direct_syms(direct_tree):
    """dtrace_syms of the direct tree, default build (with its link layout)."""
    from kmodsyms.scan.writer import build
    out = os.path.join(direct_tree, "dtrace_syms")
    thick = os.path.join(direct_tree, "modules_thick.builtin")
    build(direct_tree, read_thick(thick), thick, out, jobs=1, use_cache=False)
    return out


def elf_sizes(tree: str) -> dict[tuple[str, int], int]:
    """(name, link address) -> st_size, from vmlinux's own symbol table."""
    from elftools.elf.elffile import ELFFile
    with open(os.path.join(tree, "vmlinux"), "rb") as f:
        symtab = ELFFile(f).get_section_by_name(".symtab")
        return {(s.name, s["st_value"]): s["st_size"] for s in symtab.iter_symbols()
                if isinstance(s["st_shndx"], int) and s["st_info"]["type"] not in ("STT_FILE", "STT_SECTION")}


def wrong_lines(resolver, tree: str) -> tuple[int, list]:
    """(checked, wrong): every core kallsyms line but the edges, and those
    whose object, module set or known size differ from the linker's.

    An *edge* is a zero-size symbol where one object's bytes end and
    another's (or none) begin, e.g. a linker-script symbol on the first byte
    of an object's input section: either neighbour is defensible (as in the
    corpora's truth.tsv)."""
    objects = vmlinux_object_map(os.path.join(tree, "vmlinux.map"), None, os.path.join(tree, "vmlinux"))
    thick = read_thick(os.path.join(tree, "modules_thick.builtin"))
    owners = thick.object_modules()
    sizes = elf_sizes(tree)
    starts = {}
    ends = {}
    for start, end, obj in zip(objects.start.tolist(), objects.end.tolist(), objects.object):
        starts.setdefault(start, set()).add(obj)
        ends.setdefault(end, set()).add(obj)
    checked, wrong = 0, []
    for line in built_in_lines(resolver):
        name = line.name
        link = line.address - DIRECT_KASLR
        size = sizes[(name, link)]
        if size == 0 and starts.get(link, set()) != ends.get(link, set()):
            continue
        checked += 1
        theirs = objects.object_at(link)
        their_modules = ",".join(thick.modules[m] for m in owners.get(theirs, ())) or "vmlinux"
        ours = line.object
        candidates = ambiguity(resolver, line)
        differ = candidates is not None and len({tuple(c) for c in candidates}) > 1
        our_modules = "ambiguous" if differ else ",".join(line.modules) or "vmlinux"
        our_size = line.size if line.size_kind == "exact" else None
        if (ours, our_modules) != (theirs, their_modules) or (our_size is not None and our_size != size):
            wrong.append((name, hex(link), ours, our_modules, our_size, theirs, their_modules, size))
    return checked, wrong


def test_tree_is_linked_from_its_objects():
    """The fixture has the shape it exists for: vmlinux.map names the objects
    of vmlinux.a (no vmlinux.o), and ld gathered each object's .data,
    .data.rel and .data.rel.local together, so the .data.rel.local sections
    holding set_root are apart."""
    assert not os.path.exists(os.path.join(DIRECT, "vmlinux.o"))
    inputs = [s for s in parse_map(os.path.join(DIRECT, "vmlinux.map")) if s.output == ".data" and s.size]
    assert {s.file for s in inputs} >= {"kernel/ucount.o", "ipc/ipc_sysctl.o", "ipc/mq_sysctl.o"}
    local = [k for k, s in enumerate(inputs) if s.name == ".data.rel.local"
             and s.file in ("kernel/ucount.o", "ipc/ipc_sysctl.o", "ipc/mq_sysctl.o")]
    assert len(local) == 3 and all(b - a > 1 for a, b in zip(local, local[1:]))


def test_every_line_against_linker_map(direct_tree, direct_syms):
    r = load(syms=direct_syms, kallsyms=os.path.join(direct_tree, "kallsyms"))
    checked, wrong = wrong_lines(r, direct_tree)
    assert checked > 45 and wrong == []
    assert count_lines(r)[0] == 0


def test_text_only_kallsyms(direct_tree, direct_syms):
    """CONFIG_KALLSYMS_ALL=n: the committed kallsyms.text-only is what the
    kernel's rule derives from the full one, and its lines resolve alike."""
    text = open(os.path.join(direct_tree, "kallsyms.text-only"), "rb").read()
    assert text == text_only(os.path.join(direct_tree, "System.map"),
                             open(os.path.join(direct_tree, "kallsyms"), "rb").read())
    r = load(syms=direct_syms, kallsyms_text=text, kallsyms_name="kallsyms.text-only")
    checked, wrong = wrong_lines(r, direct_tree)
    assert checked > 20 and wrong == []


def test_duplicate_only_sections(direct_tree, direct_syms):
    """HARD CASES 1 and 2 of the README, as the linker map places them:
    set_root, alone in .data.rel.local in a core object and two built-in
    modules; err_text, alone in .data.rel.ro.local in two core objects,
    where the ld -r block model would swap them."""
    r = load(syms=direct_syms, kallsyms=os.path.join(direct_tree, "kallsyms"))
    objects = vmlinux_object_map(os.path.join(direct_tree, "vmlinux.map"), None,
                                 os.path.join(direct_tree, "vmlinux"))
    for rec in r.lookup("set_root") + r.lookup("err_text"):
        assert rec.object == objects.object_at(rec.start - DIRECT_KASLR), rec
    set_root = {rec.object: (rec.modules, rec.size) for rec in r.lookup("set_root")}
    assert set_root == {"kernel/ucount.o": (["vmlinux"], 24), "ipc/ipc_sysctl.o": (["ipc_sysctl"], 24),
                        "ipc/mq_sysctl.o": (["mq_sysctl"], 24)}
    assert [rec.object for rec in r.lookup("set_root", "mq_sysctl")] == ["ipc/mq_sysctl.o"]
    err_text = sorted((rec.object, rec.modules) for rec in r.lookup("err_text"))
    assert err_text == [("kernel/trace/trace_events_hist.o", ["vmlinux"]),
                        ("kernel/trace/trace_probe.o", ["vmlinux"])]


def test_same_name_in_sections_of_two_names(direct_tree, direct_syms):
    """HARD CASE 3 of the README: static alg, alone in .data.rel.local in
    crypto/sha1_generic.o and crypto/sha256_generic.o (32 bytes), and alone
    in .data.rel in crypto/chacha_generic.o between them (48 bytes).  ld
    lays out each section name's copies in link order; the sizes tell which
    line is chacha's, so each line has its object, as vmlinux.map says."""
    r = load(syms=direct_syms, kallsyms=os.path.join(direct_tree, "kallsyms"))
    objects = vmlinux_object_map(os.path.join(direct_tree, "vmlinux.map"), None,
                                 os.path.join(direct_tree, "vmlinux"))
    sizes = elf_sizes(direct_tree)
    got = sorted((rec.start, rec.object, rec.modules, rec.size) for rec in r.lookup("alg"))
    assert [(obj, size) for _a, obj, _m, size in got] == [
        ("crypto/sha1_generic.o", 32), ("crypto/chacha_generic.o", 48), ("crypto/sha256_generic.o", 32)]
    for start, obj, modules, size in got:
        assert obj == objects.object_at(start - DIRECT_KASLR)
        assert size == sizes[("alg", start - DIRECT_KASLR)]
        assert modules == [obj.split("/")[1][:-2]]


def test_link_order_of_two_section_names_needs_the_sizes():
    """HARD CASE 3's shape, as the link-order rule sees it: the copies of
    .data.rel.local (sha1, sha256: 32 bytes) and of .data.rel (chacha: 48)
    each in link order, three lines of one output section.  Without the
    lines' sizes three assignments fit (undecided); with them, one."""
    from kmodsyms.scan.layout.search import _only_link_order_assignment
    orders, sections, copy_sizes = [[0, 2], [1]], [5, 5, 5], [32, 48, 32]
    assert _only_link_order_assignment(orders, sections, [None] * 3, copy_sizes) is None
    assert _only_link_order_assignment(orders, sections, [32, 48, 32], copy_sizes) == [0, 1, 2]
    assert _only_link_order_assignment(orders, sections, [48, 32, 32], copy_sizes) == [1, 0, 2]
    # one section name: the link order alone decides; lines of two output
    # sections cannot be copies of one section name
    assert _only_link_order_assignment([[0, 1, 2]], sections, [None] * 3, copy_sizes) == [0, 1, 2]
    assert _only_link_order_assignment([[0, 1, 2]], [5, 5, 6], [None] * 3, copy_sizes) is None


def test_verify_reads_the_direct_map(direct_tree, direct_syms):
    """`kmodsyms verify` takes the objects from vmlinux.map itself: no
    vmlinux.o.map is needed, and every System.map line agrees."""
    run = subprocess.run([sys.executable, "-m", "kmodsyms", "verify", "--kbuild", direct_tree,
                          "--syms", direct_syms], capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "linker maps (vmlinux.map): agree" in run.stdout and "differ 0, only-ours 0, only-theirs 0" in run.stdout
