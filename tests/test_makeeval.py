"""The module map from kbuild's Makefiles (kmodsyms.scan.modmap.makeeval), held equal to
kbuild's own answer: the ``KBUILD_MODFILE`` each object was compiled with
(its ``.cmd`` file) and the link order of ``vmlinux.a``, on both shared
corpora (x86_64 defconfig, arm64 tinyconfig).  The corpora carry no
Makefiles: they come from Debian's linux-source tarball of the same version
(6.12.117), whose Makefiles are unpacked once into the corpus cache.
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import tarfile
import tempfile

import pytest

from kmodsyms.errors import KmodsymsError
from kmodsyms.scan.elf.archive import vmlinux_objects
from kmodsyms.scan.modmap.kbuild import cmd_modfiles, derive_thick, read_modules_builtin
from kmodsyms.scan.modmap.makeeval import auto_conf, config_srcarch, evaluate, scratch_root, start, thick_from_eval, unpack_makefiles

SOURCE_TARBALLS = "/usr/src/linux-source-6.12*.tar.xz"


@pytest.fixture(scope="session")
def kernel_makefiles():
    """The Makefiles, Kbuild files and scripts/ of Debian's linux-source-6.12,
    unpacked once per machine into the corpus cache."""
    tarballs = sorted(glob.glob(SOURCE_TARBALLS))
    if not tarballs:
        pytest.skip(f"no {SOURCE_TARBALLS} (apt-get install linux-source-6.12)")
    from bench.corpus import _corpus_cache_dir
    st = os.stat(tarballs[-1])
    root = os.path.join(_corpus_cache_dir(), f"makefiles-{st.st_size}-{int(st.st_mtime)}")
    stamp = os.path.join(root, ".complete")
    if not os.path.exists(stamp):
        os.makedirs(root, exist_ok=True)
        tree = unpack_makefiles(tarballs[-1], root)
        with open(stamp, "w") as f:
            f.write(tree)
    with open(stamp) as f:
        return f.read()


@pytest.fixture(scope="session")
def evaluated(any_corpus, kernel_makefiles):
    """kbuild's Makefiles evaluated against the corpus' .config."""
    return evaluate(kernel_makefiles, os.path.join(any_corpus, ".config"))


def test_config_header_names_the_source_architecture(any_corpus):
    expected = "arm64" if "arm64" in any_corpus else "x86"
    assert config_srcarch(os.path.join(any_corpus, ".config")) == expected


def test_objects_and_link_order_are_vmlinux_a(any_corpus, evaluated):
    result = evaluated
    objects, _ = vmlinux_objects(any_corpus)
    assert [o.path for o in result.objects] == objects


def test_every_modfile_is_the_one_kbuild_compiled_with(any_corpus, evaluated):
    result = evaluated.modfiles()
    objects, _ = vmlinux_objects(any_corpus)
    compared = 0
    for obj in objects:
        from_cmd = cmd_modfiles(any_corpus, obj)
        if from_cmd:   # objcopy-made objects (arm64's *.pi.o, kvm_nvhe.o) have no compiler line
            assert result[obj] == tuple(from_cmd), obj
            compared += 1
    assert compared > 0.99 * len(objects)


def test_module_map_equals_the_cmd_derivation(any_corpus, evaluated):
    result = evaluated
    builtin = read_modules_builtin(any_corpus)
    from_makefiles = thick_from_eval(result, builtin)
    assert from_makefiles.format() == derive_thick(any_corpus).format()
    with open(os.path.join(any_corpus, "modules_thick.builtin.reference")) as f:
        assert from_makefiles.format() == f.read()


def test_a_tarball_is_read_as_its_directory(any_corpus, kernel_makefiles, evaluated, tmp_path):
    tarball = str(tmp_path / "linux-source.tar.gz")
    with tarfile.open(tarball, "w:gz", compresslevel=1) as tar:
        tar.add(kernel_makefiles, arcname="linux-source-x")
    config = os.path.join(any_corpus, ".config")
    assert evaluate(tarball, config) == evaluated


def test_build_without_cmd_files_takes_the_map_from_the_makefiles(corpus, kernel_makefiles, tmp_path):
    """``kmodsyms build --source``: the same module map as the .cmd files give."""
    out = str(tmp_path / "dtrace_syms")
    run = subprocess.run([sys.executable, "-m", "kmodsyms", "build", "--kbuild", corpus,
                          "--source", kernel_makefiles, "-o", out, "--no-cache", "--no-layout"],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "evaluated from kbuild's Makefiles" in run.stdout
    info = subprocess.run([sys.executable, "-m", "kmodsyms", "info", "--json", out],
                          capture_output=True, text=True, check=True).stdout
    import json
    doc = json.loads(info)
    assert doc["module_map"].startswith("evaluated from kbuild's Makefiles")
    reference = derive_thick(corpus)
    assert [m["name"] for m in doc["modules"]] == reference.modules


def test_strings_lose_their_quotes_as_in_auto_conf(tmp_path):
    config = tmp_path / ".config"
    config.write_text('#\n# Linux/x86 6.12.117 Kernel Configuration\n'
                      'CONFIG_A=y\n# CONFIG_B is not set\nCONFIG_C="x \\"q\\" \\\\ y"\nCONFIG_D=""\n')
    assert auto_conf(str(config)) == 'CONFIG_A=y\nCONFIG_C=x "q" \\ y\nCONFIG_D=\n'


@pytest.mark.parametrize("text, message", [
    ("CONFIG_A=y\n", "no '# Linux/ARCH VERSION Kernel Configuration' header"),
    ("# Linux/x86 6.12 Kernel Configuration\n", "no CONFIG_ symbol set"),
])
def test_a_file_that_is_no_config_is_refused(tmp_path, kernel_makefiles, text, message):
    config = tmp_path / ".config"
    config.write_text(text)
    with pytest.raises(KmodsymsError, match=message):
        evaluate(kernel_makefiles, str(config))


def test_a_directory_that_is_no_kernel_source_is_refused(tmp_path):
    config = tmp_path / ".config"
    config.write_text("# Linux/x86 6.12 Kernel Configuration\nCONFIG_A=y\n")
    with pytest.raises(KmodsymsError, match="no Kbuild; give the top of a kernel source tree"):
        evaluate(str(tmp_path), str(config))
    with pytest.raises(KmodsymsError, match="no such kernel source"):
        evaluate(str(tmp_path / "absent"), str(config))


def _build_with_source(tmp_path, config: str | None, source: str) -> str:
    """The one error line of 'build --kbuild TREE --source SOURCE' on a
    copy of the fixture tree whose .config is ``config`` (None: none);
    nothing written."""
    import shutil

    from conftest import FIXTURE
    tree = tmp_path / "tree"
    shutil.copytree(FIXTURE, tree, symlinks=True)
    if config is not None:
        (tree / ".config").write_text(config)
    out = tmp_path / "out"
    run = subprocess.run([sys.executable, "-m", "kmodsyms", "build", "--kbuild", str(tree), "--source",
                          source, "-o", str(out)], capture_output=True, text=True)
    assert run.returncode == 2 and len(run.stderr.splitlines()) == 1, run.stderr
    assert not out.exists()
    return run.stderr.rstrip("\n")


def test_a_config_without_its_header_names_no_option_that_is_not_there(tmp_path, kernel_makefiles):
    """Issue 31 item 2: the .config error gives no advice build cannot
    take (it said "(or give --arch)"; build has no --arch)."""
    line = _build_with_source(tmp_path, "CONFIG_A=y\n", kernel_makefiles)
    assert line == (f"kmodsyms: error: {tmp_path}/tree/.config: no '# Linux/ARCH VERSION Kernel "
                    "Configuration' header line; is it a kernel .config?")


def test_a_debian_package_as_the_source_is_named_in_one_line(tmp_path):
    """Issue 31 item 3: linux-source-X.Y's .deb given as --source: one line
    saying what it is and where its tarball is, no tarfile internals."""
    debs = sorted(glob.glob("/var/cache/apt/archives/linux-source-*.deb"))
    if not debs:
        pytest.skip("no linux-source .deb in apt's cache (apt-get download linux-source-6.12)")
    line = _build_with_source(tmp_path, "# Linux/x86 6.12.0 Kernel Configuration\nCONFIG_A=y\n", debs[0])
    assert line == (f"kmodsyms: error: {debs[0]}: a Debian package, not a source tarball: its tarball "
                    "is inside (dpkg-deb -x PACKAGE DIR, then give DIR/usr/src/linux-source-X.Y.tar.xz)")


def _stat_fs_type(path: str) -> str:
    return subprocess.run(["stat", "-f", "-c", "%T", path], capture_output=True, text=True,
                          check=True).stdout.strip()


def test_the_scratch_tree_honours_tmpdir(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)     # gettempdir() caches its answer
    assert scratch_root() == str(tmp_path)


def test_the_scratch_tree_is_on_a_memory_filesystem_where_there_is_one(monkeypatch, kernel_makefiles,
                                                                        tmp_path):
    """Without TMPDIR, the unpacking's thousands of small files go to a
    tmpfs (as ``stat -f`` names the filesystem), /tmp's own or /dev/shm."""
    monkeypatch.delenv("TMPDIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", None)
    if "tmpfs" not in {_stat_fs_type(tempfile.gettempdir()), _stat_fs_type("/dev/shm")}:
        pytest.skip("neither the temporary directory nor /dev/shm is a tmpfs here")
    config = tmp_path / "config"
    config.write_text("# Linux/x86 6.12.0 Kernel Configuration\nCONFIG_X86=y\n")
    pending = start(kernel_makefiles, str(config), arch="x86_64")
    try:
        parent = os.path.dirname(pending.scratch.name)
        assert parent == scratch_root()
        assert _stat_fs_type(parent) == "tmpfs"
    finally:
        pending.cancel()
    assert not os.path.exists(pending.scratch.name)
