"""``kmodsyms build --debuginfo`` on a real kernel: Debian's linux-source
(tinyconfig, the built-in modules of tests/test_kernel_source.py, plus
DEBUG_INFO_DWARF5), built once into the corpus cache by that module's
machinery.  Its debug vmlinux, System.map, .config and modules.builtin are
what a distribution ships; its own source gives the Makefiles.  Checked
against the linker maps (the object of every System.map line) and
upstream's modules.builtin.ranges (``kmodsyms verify``).  Slow: the first
build of the tree takes minutes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from kernel_build import Kernel, built_tree
from test_kernel_source import ROOT

pytestmark = pytest.mark.slow

DEBUG_X86_64 = Kernel("x86", "", ("64BIT", "DEBUG_KERNEL", "DEBUG_INFO_DWARF5"),
                      ("DEBUG_INFO_NONE", "KALLSYMS_ALL"), (), 0x2a00000, "-x86-debuginfo")


@pytest.fixture(scope="module")
def debug_kernel():
    return built_tree(DEBUG_X86_64)


@pytest.fixture(scope="module")
def built(debug_kernel, tmp_path_factory):
    tree = debug_kernel
    out = str(tmp_path_factory.mktemp("debuginfo") / "dtrace_syms")
    run = subprocess.run([sys.executable, "-m", "kmodsyms", "build", "--debuginfo", "--vmlinux", os.path.join(tree, "vmlinux"),
                          "--system-map", os.path.join(tree, "System.map"), "--config", os.path.join(tree, ".config"),
                          "--modules-dir", tree, "--source", tree, "-o", out, "--json"],
                         cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    return out, json.loads(run.stdout)


def test_every_line_has_the_linkers_object_or_none(debug_kernel, built):
    from kmodsyms import load
    from kmodsyms.scan.linkmap import vmlinux_object_map
    tree = debug_kernel
    out, summary = built
    om = vmlinux_object_map(*(os.path.join(tree, n) for n in ("vmlinux.map", "vmlinux.o.map", "vmlinux")))
    lines = load(syms=out, kallsyms=os.path.join(tree, "System.map")).lines()
    ours = [line.object for line in lines]
    theirs = [om.object_at(line.address) for line in lines]
    # A zero-size symbol more than one object may hold (where one's bytes
    # end and the next's, or none's, begin; an empty section) may go to any,
    # as in kmodsyms verify.
    from kmodsyms.scan.verify import read_elf_info
    sizes = read_elf_info(os.path.join(tree, "vmlinux")).sizes
    wrong = [(ln.name, o, t) for ln, o, t in zip(lines, ours, theirs)
             if o is not None and o != t
             and not (sizes.get((ln.name.encode(), ln.address), 0) == 0
                      and o in om.zero_size_objects(ln.address))]
    assert wrong == []
    attributed = sum(1 for o, t in zip(ours, theirs) if t is not None and o == t)
    with_object = sum(1 for t in theirs if t is not None)
    assert attributed >= 0.99 * with_object, (attributed, with_object)
    assert summary["attribution"]["unattributed"] == len(summary["unattributed"])


def test_modules_agree_with_the_linker_maps_and_ranges(debug_kernel, built):
    proc = subprocess.run([sys.executable, "-m", "kmodsyms", "verify", "--kbuild", debug_kernel,
                           "--syms", built[0], "--json"], cwd=ROOT, capture_output=True, text=True)
    report = json.loads(proc.stdout)
    maps, ranges = report["comparisons"]["linker_maps"], report["comparisons"]["ranges"]
    assert maps["counts"]["agree"] > 10_000 and maps["disagreements"] == 0, maps["examples"]
    assert ranges["counts"]["differ"] == 0, ranges["examples"]


def test_module_map_equals_the_cmd_files(debug_kernel, built):
    from kmodsyms.scan.modmap.kbuild import derive_thick
    doc = json.loads(subprocess.run([sys.executable, "-m", "kmodsyms", "info", "--json", built[0]],
                                    cwd=ROOT, capture_output=True, text=True, check=True).stdout)
    assert doc["from_debug_info"] and [m["name"] for m in doc["modules"]] == derive_thick(debug_kernel).modules


def test_initcall_self_check(built):
    check = built[1]["self_check"]
    assert check["initcalls_checked"] > 0 and check["initcalls_wrong"] == 0


# ------------------------------------------------------- Debian's real package
@pytest.fixture(scope="module")
def debian_package(tmp_path_factory):
    """By hand: KMODSYMS_DEBUG_ROOT is Debian's linux-image-6.12.117+deb12-cloud-amd64-dbg
    and image packages unpacked with dpkg-deb -x, KMODSYMS_KERNEL_SOURCE its linux-source.
    The inputs, our dtrace_syms built from them, and the build's --json summary."""
    from debuginfo_truth import build_from_package, package_files
    root, source = os.environ.get("KMODSYMS_DEBUG_ROOT", ""), os.environ.get("KMODSYMS_KERNEL_SOURCE", "")
    args = package_files(root) if root else None
    if not args or not source or "cloud-amd64" not in args[0]:
        pytest.skip("set KMODSYMS_DEBUG_ROOT (Debian's cloud-amd64 -dbg package, unpacked) and "
                    "KMODSYMS_KERNEL_SOURCE")
    out = str(tmp_path_factory.mktemp("debian") / "dtrace_syms")
    return args, out, build_from_package(root, source, out)


def _doc_truth_table() -> dict[str, tuple[int, int]]:
    """docs/distributions.md's figures of the package against its rebuild:
    the rows of its table headed '| against the rebuild | object | module |'."""
    import re
    with open(os.path.join(ROOT, "docs", "distributions.md")) as f:
        text = f.read()
    head = "| against the rebuild | object | module |"
    if head not in text:
        return {}
    table = text[text.index(head):].split("\n\n", 1)[0]
    rows = re.findall(r"^\| ([^|]+?) \| ([\d,]+) \| ([\d,]+) \|$", table, re.M)
    return {k: (int(a.replace(",", "")), int(b.replace(",", ""))) for k, a, b in rows}


def test_debian_package_against_its_rebuild(debian_package):
    """KMODSYMS_DEBUG_REBUILD: the object tree of a rebuild of the package's
    config plus CONFIG_VMLINUX_MAP and CONFIG_BUILTIN_MODULE_RANGES from the
    same source and compiler (docs/distributions.md, "Checked against a
    rebuild").  Every line kallsyms shows: our object and modules against
    the linker maps' object and its .cmd file's modules."""
    from debuginfo_truth import compare
    rebuild = os.environ.get("KMODSYMS_DEBUG_REBUILD", "")
    if not os.path.isfile(os.path.join(rebuild, "vmlinux.map")):
        pytest.skip("set KMODSYMS_DEBUG_REBUILD (a rebuild of the package's config with VMLINUX_MAP)")
    args, out, _summary = debian_package
    figures = compare(args[0], args[1], out, rebuild)
    obj, mod = figures["object"], figures["module"]
    assert obj.get("wrong", 0) == 0, figures["examples"]["object wrong"]
    assert mod.get("wrong", 0) == 0, figures["examples"]["module wrong"]
    total = figures["kallsyms_lines"]
    assert obj["right"] >= 0.998 * total and mod["right"] >= 0.9999 * total, figures
    got = {"lines kallsyms shows": (total, total), "paired with the rebuild's": (figures["paired"],) * 2,
           **{k: (obj.get(k, 0), mod.get(k, 0)) for k in ("right", "wrong", "unattributed")}}
    table = _doc_truth_table()
    assert table, ("docs/distributions.md has no '| against the rebuild | object | module |' table "
                   f"(\"Checked against a rebuild\"); the measured rows: {got}")
    assert table == got
