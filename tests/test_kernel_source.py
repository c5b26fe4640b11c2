"""A real kernel built from source: contrib/kbuild/Makefile.dtrace_syms
included from its top-level Makefile, with the exact lines
docs/kernel-integration.md tells a user to add; and our answers on it, a
configuration unlike the shared corpora's (tinyconfig: its kallsyms lists
text only, other built-in modules, the module map derived from kbuild's
.cmd files), checked against its linker maps and modules.builtin.ranges.

The tree is Debian's linux-source-* tarball (``apt-get install
linux-source-6.12``) configured with tinyconfig plus modules, kallsyms and a
few built-in modules, built once per machine into the corpus cache
(bench/corpus.py's rule) and reused.  kbuild's top Makefile runs make more
than once (need-sub-make, mixed-build); the fragment must do its work once,
in the pass kbuild's own targets run in, with no make warning.

Slow (the first build of the tree takes minutes), and skipped when the
tarball or a build tool is absent.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest
from docblocks import section_blocks
from kallsyms_image import proc_kallsyms
from kallsyms_variants import text_only
from kernel_build import S390, X86_64, built_tree, link_truth, ranges_cover, run
from test_clib import sanitized_answers

from kmodsyms.format.symsfile import read_syms

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FRAGMENT = os.path.join(ROOT, "contrib", "kbuild", "Makefile.dtrace_syms")
KMODSYMS = f"{sys.executable} -m kmodsyms"

pytestmark = pytest.mark.slow


def documented_include_lines() -> str:
    """What docs/kernel-integration.md says to append to the top Makefile."""
    (block,) = section_blocks("docs/kernel-integration.md",
                              "### Included from the kernel's top-level Makefile", "make")
    return block


@pytest.fixture(scope="module")
def kernel_tree():
    """The x86_64 tree, which the make-fragment tests change and restore."""
    tree = built_tree(X86_64)
    yield tree
    _restore(tree)


def _restore(tree: str) -> None:
    """The cached tree as built: kbuild's own Makefile, no fragment, no output."""
    shutil.copy(os.path.join(tree, "Makefile.pristine"), os.path.join(tree, "Makefile"))
    for name in ("scripts/Makefile.dtrace_syms", "dtrace_syms", "dtrace_syms.cache"):
        if os.path.exists(os.path.join(tree, name)):
            os.unlink(os.path.join(tree, name))


@pytest.fixture
def included(kernel_tree):
    """The kernel tree with the fragment copied to scripts/ and the
    documented lines appended to its top-level Makefile."""
    _restore(kernel_tree)
    shutil.copy(FRAGMENT, os.path.join(kernel_tree, "scripts", "Makefile.dtrace_syms"))
    with open(os.path.join(kernel_tree, "Makefile"), "a") as f:
        f.write("\n" + documented_include_lines())
    yield kernel_tree
    _restore(kernel_tree)


def make(tree, *args):
    env = dict(os.environ)
    for name in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL"):   # not a sub-make of whoever runs pytest
        env.pop(name, None)
    return run(["make", f"KMODSYMS={KMODSYMS}", *args], cwd=tree, env=env)


def kernel_release(tree) -> str:
    return make(tree, "-s", "kernelrelease").stdout.strip()


def vmlinux_build_id(tree) -> str:
    notes = subprocess.run(["readelf", "-n", os.path.join(tree, "vmlinux")], check=True,
                           capture_output=True, text=True).stdout
    return re.search(r"Build ID: ([0-9a-f]+)", notes).group(1)


def builtin_module_names(tree) -> set[str]:
    """modules.builtin's modules, spelt as the kernel spells module names."""
    with open(os.path.join(tree, "modules.builtin")) as f:
        return {os.path.basename(line.strip())[:-len(".ko")].replace("-", "_")
                for line in f if line.strip()}


def test_included_fragment_builds_and_installs_once(included, tmp_path):
    tree = included
    stage = tmp_path / "stage"
    proc = make(tree, "dtrace_syms", "dtrace_syms_install", f"INSTALL_MOD_PATH={stage}")
    output = proc.stdout + proc.stderr
    assert "warning" not in output.lower(), output
    assert output.count("DTRACE_SYMS") == 1, output
    assert output.count("kernel/dtrace_syms") == 1, output

    release = kernel_release(tree)
    installed = stage / "lib" / "modules" / release / "kernel" / "dtrace_syms"
    with open(installed, "rb") as a, open(os.path.join(tree, "dtrace_syms"), "rb") as b:
        assert a.read() == b.read()
    # Beside it the modules.builtin.ranges that stock DTrace reads, with the
    # record that marks it as ours (docs/dtrace-utils.md), as `kmodsyms
    # ranges` writes it.
    assert sorted(p.name for p in stage.rglob("*") if p.is_file()) == \
        ["dtrace_syms", "modules.builtin.ranges", "modules.builtin.ranges.kmodsyms"]
    ranges = run([sys.executable, "-m", "kmodsyms", "ranges", "--syms", str(installed)], cwd=ROOT).stdout
    assert (installed.parent.parent / "modules.builtin.ranges").read_text() == ranges

    # Up to date now: kbuild's phony vmlinux does not make it stale.
    again = make(tree, "dtrace_syms")
    assert "DTRACE_SYMS" not in again.stdout + again.stderr

    syms = read_syms(str(installed))
    assert syms.meta_kernel_release == release
    assert syms.meta_build_id == vmlinux_build_id(tree)
    builtin = builtin_module_names(tree)
    assert {"configfs", "binfmt_misc", "crc_ccitt"} <= builtin
    assert set(syms.module_names) == builtin


def test_included_fragment_in_a_mixed_build(included, tmp_path):
    """A config target and ours in one make: kbuild runs each goal in its
    own make (mixed-build); ours must still run once, without warnings."""
    stage = tmp_path / "stage"
    proc = make(included, "olddefconfig", "dtrace_syms", "dtrace_syms_install",
                f"INSTALL_MOD_PATH={stage}")
    output = proc.stdout + proc.stderr
    assert "warning" not in output.lower(), output
    assert output.count("DTRACE_SYMS") == 1 and output.count("kernel/dtrace_syms") == 1, output
    assert (stage / "lib" / "modules" / kernel_release(included) / "kernel" / "dtrace_syms").is_file()


def test_included_fragment_keeps_the_default_goal_and_builds_nothing_else(included):
    """'make' after including the fragment is still kbuild's 'all' (nothing
    left to do in a built tree), and builds no dtrace_syms."""
    proc = make(included)
    assert "DTRACE_SYMS" not in proc.stdout + proc.stderr
    assert not os.path.exists(os.path.join(included, "dtrace_syms"))


# ------------------------------------------------------------------ exactness
@pytest.fixture(scope="module", params=[X86_64, S390], ids=lambda k: k.arch)
def any_kernel(request):
    """(kernel, tree) for each architecture; s390 needs gcc-s390x-linux-gnu."""
    kernel = request.param
    tree = built_tree(kernel)
    if kernel is X86_64:
        _restore(tree)
    return kernel, tree


@pytest.fixture(scope="module")
def tree_syms(any_kernel, tmp_path_factory):
    """dtrace_syms of the tree, built as a user would, with no module map
    given: kmodsyms derives it from kbuild's .cmd files."""
    _kernel, tree = any_kernel
    out = str(tmp_path_factory.mktemp("source") / "dtrace_syms")
    run([sys.executable, "-m", "kmodsyms", "build", "--kbuild", tree, "-o", out], cwd=ROOT)
    return out


@pytest.fixture(scope="module")
def booted_kallsyms(any_kernel, tmp_path_factory) -> str:
    """vmlinux's /proc/kallsyms for a boot moved by the kernel's KASLR
    shift, decoded from the tables scripts/kallsyms.c compiled into it."""
    kernel, tree = any_kernel
    path = tmp_path_factory.mktemp("boot") / "kallsyms"
    path.write_bytes(proc_kallsyms(os.path.join(tree, "vmlinux"), kernel.kaslr_shift))
    return str(path)


def test_verify_agrees_with_the_linker_maps_and_ranges(any_kernel, tree_syms):
    """Every System.map line against ld's maps and upstream's ranges."""
    _kernel, tree = any_kernel
    proc = subprocess.run([sys.executable, "-m", "kmodsyms", "verify", "--kbuild", tree,
                           "--syms", tree_syms, "--json"], cwd=ROOT, capture_output=True, text=True)
    report = json.loads(proc.stdout)
    # An ambiguous line (verify then exits 1) must still have one module answer.
    assert report["ambiguous"] == report["ambiguous_same_modules"], report["ambiguous_examples"]
    assert proc.returncode == (1 if report["ambiguous"] else 0), proc.stderr
    maps, ranges = report["comparisons"]["linker_maps"], report["comparisons"]["ranges"]
    assert maps["counts"]["agree"] > 10_000 and maps["disagreements"] == 0, maps
    # The ranges cover only sections named ".*" (no __modver, MODULE_VERSION's
    # attribute, which ld's maps put in configfs; no __param): ours may say
    # more than they there, never otherwise.
    assert ranges["counts"]["differ"] == 0 and ranges["counts"]["only_theirs"] == 0, ranges
    assert all(not ranges_cover(sect) for sect, counts in ranges["per_section"].items()
               if counts["only_ours"]), ranges["per_section"]


def test_text_only_rule_is_the_kernels(any_kernel, booted_kallsyms):
    """tests/kallsyms_variants.text_only, which derives the corpora's
    text-only kallsyms, lists exactly what this CONFIG_KALLSYMS_ALL=n kernel
    compiled into itself."""
    kernel, tree = any_kernel
    with open(os.path.join(tree, "System.map"), "rb") as f:
        full = b"".join(b"%016x %s" % (int(line[:16], 16) + kernel.kaslr_shift, line[17:]) for line in f)
    derived = text_only(os.path.join(tree, "System.map"), full)
    with open(booted_kallsyms, "rb") as f:
        real = f.read()
    assert sorted(derived.splitlines()) == sorted(real.splitlines())
    assert len(real.splitlines()) < len(full.splitlines()) * 3 // 4    # text only indeed


def test_real_text_only_kallsyms_is_answered_as_the_linker_placed_it(any_kernel, tree_syms,
                                                                    booted_kallsyms):
    """Each line of the booted kernel's kallsyms: its object is the one ld's
    map has at its link address (none for what the link script defines),
    its modules the ones upstream's ranges give there (lines at an object's
    very end, with no bytes, excepted).  A line reported ambiguous names the
    right modules as its only candidates."""
    from kmodsyms import load

    kernel, tree = any_kernel
    truth = link_truth(tree)
    r = load(tree_syms, booted_kallsyms)
    checked = with_module = 0
    for line in r.lines():
        address = line.address
        at_link = address - kernel.kaslr_shift
        name = line.name.encode("utf-8", "surrogateescape")
        answer = r.record(address, line.index)     # the line itself, not an alias
        if truth.is_object_end(line.name, at_link):
            continue
        assert answer.symbol == name.decode(), (hex(address), answer)
        want = truth.modules_at(at_link)
        if answer.ambiguous:
            assert [sorted(c) for c in answer.candidates] == [want], (hex(address), answer)
            continue
        assert truth.agrees(name.decode(), at_link, answer.object), (hex(address), answer)
        assert sorted(answer.modules) == want, (hex(address), answer, want)
        checked += 1
        with_module += want != ["vmlinux"]
    assert checked > len(r) * 9 // 10 and with_module > 50, (checked, with_module)
    print(f"\n{kernel.arch}: {checked} of {len(r)} lines checked, {with_module} in a built-in module")


def test_sanitized_library_on_the_real_text_only_kallsyms(clib, tree_syms, booted_kallsyms):
    sanitized_answers(clib, tree_syms, booted_kallsyms, 20_000)
