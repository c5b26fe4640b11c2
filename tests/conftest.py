"""Shared test fixtures: the bundled miniature kernel tree, its built
dtrace_syms, and the real corpus from ../shared/kernels (skipped when absent)."""

from __future__ import annotations

import os
import shutil

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURE = os.path.join(ROOT, "fixtures", "kbuild")
# The fixture's kallsyms is the fixture vmlinux moved by this KASLR offset
# (fixtures/kbuild/README.md).
FIXTURE_KASLR = 0x2A600000


def pytest_report_header(config):
    """Where the corpus tests read the corpora and unpack them (hundreds of
    MB, kept between runs), said once at the start of the run, and that
    they skip when that place does not exist."""
    from bench.corpus import KERNELS, _corpus_cache_dir
    absent = "" if os.path.isdir(KERNELS) else " (absent: corpus tests skip)"
    return (f"kmodsyms corpora: read from {KERNELS}{absent} (KMODSYMS_KERNELS), unpacked into "
            f"{_corpus_cache_dir()} (KMODSYMS_CORPUS_CACHE)")


@pytest.fixture(scope="session", autouse=True)
def private_cache(tmp_path_factory):
    """The suite's runs (and its subprocesses') see a cache of their own,
    $XDG_CACHE_HOME, never the user's: tests/test_no_writes.py holds that
    nothing writes there."""
    from bench.corpus import _corpus_cache_dir
    path = str(tmp_path_factory.mktemp("xdg-cache"))
    saved = {name: os.environ.get(name) for name in ("XDG_CACHE_HOME", "KMODSYMS_CORPUS_CACHE")}
    # The unpacked corpus stays where it is cached between sessions.
    os.environ["KMODSYMS_CORPUS_CACHE"] = _corpus_cache_dir()
    os.environ["XDG_CACHE_HOME"] = path
    yield path
    for name, value in saved.items():
        if value is None:
            del os.environ[name]
        else:
            os.environ[name] = value


@pytest.fixture(scope="session")
def clib(tmp_path_factory) -> dict:
    """libkmodsyms and its consumers (kmodsyms-c, kms-dt-module, the perf
    dlfilter where perf's header is installed), built once per run by the
    library's own make, plainly and under ASan+UBSan:
    ``{"plain": dir, "asan": dir}``."""
    import subprocess
    if not (shutil.which("make") and shutil.which(os.environ.get("CC", "cc"))):
        pytest.skip("cc or make is not installed")
    out = str(tmp_path_factory.mktemp("clib"))
    proc = subprocess.run(["make", "-s", "-C", os.path.join(ROOT, "libkmodsyms"), f"O={out}", "all", "sanitized"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return {"plain": out, "asan": os.path.join(out, "asan")}


@pytest.fixture(scope="session")
def fixture_tree(tmp_path_factory):
    """A private copy of fixtures/kbuild (builds write next to it)."""
    dest = tmp_path_factory.mktemp("kbuild") / "kbuild"
    shutil.copytree(FIXTURE, dest, symlinks=True)
    return str(dest)


@pytest.fixture(scope="session")
def fixture_syms(fixture_tree):
    """dtrace_syms of the fixture tree, built once."""
    from kmodsyms.scan.modmap.thick import read_thick
    from kmodsyms.scan.writer import build
    out = os.path.join(fixture_tree, "dtrace_syms")
    thick = os.path.join(fixture_tree, "modules_thick.builtin")
    build(fixture_tree, read_thick(thick), thick, out, jobs=1)
    return out


@pytest.fixture(scope="session")
def corpus():
    """The unpacked linux-6.12-defconfig corpus, unpacked once per machine
    into a cache (the benchmark harness' rule, shared with it)."""
    from bench.corpus import cached_corpus
    tree = cached_corpus(log=lambda *_: None)
    if tree is None:
        from bench.corpus import CORPUS_TARBALL
        pytest.skip(f"{CORPUS_TARBALL} is absent")
    return tree


@pytest.fixture(scope="session")
def corpus_syms(corpus, tmp_path_factory):
    """dtrace_syms of the corpus, built with the reference thick file."""
    from kmodsyms.scan.modmap.thick import read_thick
    from kmodsyms.scan.writer import build
    out = str(tmp_path_factory.mktemp("corpus") / "dtrace_syms")
    thick = os.path.join(corpus, "modules_thick.builtin.reference")
    build(corpus, read_thick(thick), thick, out, use_cache=False)
    return out


@pytest.fixture(scope="session", params=["linux-6.12-defconfig", "linux-6.12-arm64"])
def any_corpus(request):
    """Each unpacked corpus of ../shared/kernels in turn (x86_64, arm64)."""
    from bench.corpus import cached_corpus
    tree = cached_corpus(log=lambda *_: None, name=request.param)
    if tree is None:
        from bench.corpus import corpus_tarball
        pytest.skip(f"{corpus_tarball(request.param)} is absent")
    return tree


_built: dict = {}


@pytest.fixture(scope="session")
def any_corpus_syms(any_corpus, tmp_path_factory):
    """dtrace_syms of ``any_corpus`` (default build: with its link layout)."""
    from kmodsyms.scan.modmap.thick import read_thick
    from kmodsyms.scan.writer import build
    if any_corpus not in _built:
        out = str(tmp_path_factory.mktemp("corpus") / "dtrace_syms")
        thick = os.path.join(any_corpus, "modules_thick.builtin.reference")
        build(any_corpus, read_thick(thick), thick, out, use_cache=False)
        _built[any_corpus] = out
    return _built[any_corpus]
