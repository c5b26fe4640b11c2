"""Shared test fixtures: the bundled miniature kernel tree, its built
dtrace_syms, and the real corpus from ../shared/kernels (skipped when absent)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURE = os.path.join(ROOT, "fixtures", "kbuild")
CORPUS_TARBALL = os.path.join(os.path.dirname(ROOT), "shared", "kernels",
                              "linux-6.12-defconfig.tar.xz")
# The fixture's kallsyms is the fixture vmlinux moved by this KASLR offset
# (fixtures/kbuild/README.md).
FIXTURE_KASLR = 0x2A600000


@pytest.fixture(scope="session")
def fixture_tree(tmp_path_factory):
    """A private copy of fixtures/kbuild (builds write next to it)."""
    dest = tmp_path_factory.mktemp("kbuild") / "kbuild"
    shutil.copytree(FIXTURE, dest, symlinks=True)
    return str(dest)


@pytest.fixture(scope="session")
def fixture_syms(fixture_tree):
    """dtrace_syms of the fixture tree, built once."""
    from kmodsyms.build import build
    from kmodsyms.thick import read_thick
    out = os.path.join(fixture_tree, "dtrace_syms")
    thick = os.path.join(fixture_tree, "modules_thick.builtin")
    build(fixture_tree, read_thick(thick), thick, out, jobs=1)
    return out


def _corpus_cache_dir() -> str:
    base = os.environ.get("KMODSYMS_CORPUS_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "kmodsyms-corpus")
    return base


@pytest.fixture(scope="session")
def corpus():
    """The unpacked linux-6.12-defconfig corpus, unpacked once per machine
    into a cache (keyed by the tarball's size and mtime)."""
    if not os.path.exists(CORPUS_TARBALL):
        pytest.skip("../shared/kernels/linux-6.12-defconfig.tar.xz is absent")
    st = os.stat(CORPUS_TARBALL)
    root = os.path.join(_corpus_cache_dir(), f"{st.st_size}-{int(st.st_mtime)}")
    tree = os.path.join(root, "linux-6.12-defconfig")
    stamp = os.path.join(root, ".complete")
    if not os.path.exists(stamp):
        shutil.rmtree(root, ignore_errors=True)
        os.makedirs(root)
        if shutil.which("tar"):
            subprocess.run(["tar", "xJf", CORPUS_TARBALL, "-C", root], check=True)
        else:
            with tarfile.open(CORPUS_TARBALL) as tar:
                tar.extractall(root)
        open(stamp, "w").close()
    return tree


@pytest.fixture(scope="session")
def corpus_syms(corpus, tmp_path_factory):
    """dtrace_syms of the corpus, built with the reference thick file."""
    from kmodsyms.build import build
    from kmodsyms.thick import read_thick
    out = str(tmp_path_factory.mktemp("corpus") / "dtrace_syms")
    thick = os.path.join(corpus, "modules_thick.builtin.reference")
    build(corpus, read_thick(thick), thick, out, use_cache=False)
    return out
