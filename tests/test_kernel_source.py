"""contrib/kbuild/Makefile.dtrace_syms included from a real kernel's top-level
Makefile, with the exact lines docs/kernel-integration.md tells a user to add.

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

import glob
import os
import re
import shutil
import subprocess
import sys

import pytest

from docblocks import section_blocks
from kmodsyms.symsfile import read_syms

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FRAGMENT = os.path.join(ROOT, "contrib", "kbuild", "Makefile.dtrace_syms")
SOURCE_TARBALLS = "/usr/src/linux-source-*.tar.xz"
# tinyconfig, then: a 64-bit x86 kernel (tinyconfig alone gives i386), loadable
# modules (so modules.builtin is written), kallsyms, and tristate drivers built
# in: configfs has several objects, binfmt_misc and crc-ccitt one each.
CONFIG_ENABLE = ("64BIT", "MODULES", "KALLSYMS", "CONFIGFS_FS", "BINFMT_MISC", "CRC_CCITT")
BUILD_TOOLS = ("make", "gcc", "ld", "flex", "bison", "bc", "tar", "xz")
KMODSYMS = f"{sys.executable} -m kmodsyms"

pytestmark = pytest.mark.slow


def documented_include_lines() -> str:
    """What docs/kernel-integration.md says to append to the top Makefile."""
    (block,) = section_blocks("docs/kernel-integration.md",
                              "### Included from the kernel's top-level Makefile", "make")
    return block


def _version_key(path: str):
    return [int(n) for n in re.findall(r"\d+", os.path.basename(path))]


def _run(cmd, cwd, **kw):
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, **kw)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
    return proc


def _build_tree(tarball: str, root: str) -> str:
    """Unpack, configure and build the kernel into ROOT (once: a stamp file
    records the configuration it was built with)."""
    stamp = os.path.join(root, ".complete")
    recipe = " ".join(CONFIG_ENABLE) + "\n"
    trees = glob.glob(os.path.join(root, "linux-source-*"))
    if os.path.exists(stamp) and open(stamp).read() == recipe and len(trees) == 1:
        return trees[0]
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    _run(["tar", "xJf", tarball, "-C", root], cwd=root)
    (tree,) = glob.glob(os.path.join(root, "linux-source-*"))
    _run(["make", "-s", "tinyconfig"], cwd=tree)
    enable = [arg for name in CONFIG_ENABLE for arg in ("--enable", name)]
    _run(["scripts/config", "--file", ".config", *enable], cwd=tree)
    _run(["make", "-s", "olddefconfig"], cwd=tree)
    with open(os.path.join(tree, ".config")) as f:
        config = f.read()
    missing = [name for name in CONFIG_ENABLE if f"\nCONFIG_{name}=y\n" not in config]
    assert not missing, f"tinyconfig dropped {missing}: their dependencies changed in this kernel"
    _run(["make", f"-j{os.cpu_count() or 1}"], cwd=tree)
    shutil.copy(os.path.join(tree, "Makefile"), os.path.join(tree, "Makefile.pristine"))
    with open(stamp, "w") as f:
        f.write(recipe)
    return tree


@pytest.fixture(scope="module")
def kernel_tree():
    tarballs = sorted(glob.glob(SOURCE_TARBALLS), key=_version_key)
    if not tarballs:
        pytest.skip(f"no {SOURCE_TARBALLS} (apt-get install linux-source-6.12)")
    absent = [tool for tool in BUILD_TOOLS if shutil.which(tool) is None]
    if absent:
        pytest.skip(f"kernel build tools absent: {', '.join(absent)}")
    from bench.corpus import _corpus_cache_dir
    st = os.stat(tarballs[-1])
    name = os.path.basename(tarballs[-1])[:-len(".tar.xz")]
    root = os.path.join(_corpus_cache_dir(), f"{name}-{st.st_size}-{int(st.st_mtime)}")
    tree = _build_tree(tarballs[-1], root)
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
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    for name in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL"):   # not a sub-make of whoever runs pytest
        env.pop(name, None)
    return _run(["make", f"KMODSYMS={KMODSYMS}", *args], cwd=tree, env=env)


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
    assert sorted(p.name for p in stage.rglob("*") if p.is_file()) == ["dtrace_syms"]

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
