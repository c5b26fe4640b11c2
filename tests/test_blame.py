"""Each bad pair of inputs gets one line that names the file at fault and
what to do (issue 14 §2), from the API and the CLI."""

import os
import shutil
import subprocess
import sys

import pytest
from conftest import FIXTURE

from kmodsyms import load
from kmodsyms.errors import KmodsymsError, StaleError
from kmodsyms.scan.modmap.thick import read_thick
from kmodsyms.scan.writer import build

KALLSYMS = os.path.join(FIXTURE, "kallsyms")


def cli(*args):
    out = subprocess.run([sys.executable, "-m", "kmodsyms", *args], capture_output=True, text=True)
    assert "Traceback" not in out.stderr and len(out.stderr.splitlines()) == 1, out.stderr
    return out.returncode, out.stderr


def test_swapped_syms_and_kallsyms(fixture_syms):
    code, err = cli("resolve", "--syms", KALLSYMS, "--kallsyms", fixture_syms, "0x1")
    assert code == 2 and f"{KALLSYMS} is a kallsyms text, not a dtrace_syms file" in err and "swapped" in err
    with pytest.raises(KmodsymsError, match=f"^{fixture_syms} is a dtrace_syms file, not a kallsyms: .*swapped"):
        load(syms=fixture_syms, kallsyms=fixture_syms)


def test_kallsyms_cut_mid_line_is_truncated(fixture_syms, tmp_path):
    cut = tmp_path / "kallsyms"
    cut.write_bytes(open(KALLSYMS, "rb").read()[:2000])
    code, err = cli("resolve", "--syms", fixture_syms, "--kallsyms", str(cut), "0x1")
    assert code == 2 and f"{cut} ends in the middle of line" in err and "truncated" in err


def test_kallsyms_cut_between_lines_is_truncated(fixture_syms, tmp_path):
    lines = open(KALLSYMS, "rb").read().splitlines(keepends=True)
    cut = tmp_path / "kallsyms"
    cut.write_bytes(b"".join(lines[:len(lines) // 3]))
    code, err = cli("resolve", "--syms", fixture_syms, "--kallsyms", str(cut), "0x1")
    assert code == 2 and err.startswith(f"kmodsyms: error: {cut} lacks ") and "truncated" in err
    assert "rebuild dtrace_syms" not in err


def test_another_kernels_kallsyms_names_both(fixture_syms, tmp_path):
    """The same names, the code moved: a rebuilt kernel's kallsyms."""
    lines = open(KALLSYMS, "rb").read().splitlines(keepends=True)
    moved = [b"%016x" % (int(ln[:16], 16) + 0x1000 + 0x40 * (i > 30)) + ln[16:]
             if i > 10 and b"\t" not in ln and not ln.startswith(b"0000") else ln for i, ln in enumerate(lines)]
    other = tmp_path / "kallsyms"
    other.write_bytes(b"".join(moved))
    with pytest.raises(StaleError, match=f"^{fixture_syms} does not match {other}: .*different kernels"):
        load(syms=fixture_syms, kallsyms=str(other))


def test_stale_system_map_is_blamed_at_build(tmp_path):
    tree = tmp_path / "tree"
    shutil.copytree(FIXTURE, tree)
    text = (tree / "System.map").read_bytes().splitlines(keepends=True)
    # another build of the tree: every symbol after the first few moved
    moved = [b"%016x" % (int(ln[:16], 16) + 0x30 * (i > 20)) + ln[16:] for i, ln in enumerate(text)]
    (tree / "System.map").write_bytes(b"".join(moved))
    thick = str(tree / "modules_thick.builtin")
    with pytest.raises(KmodsymsError, match=f"^{tree}/System.map does not match {tree}/vmlinux: .*stale"):
        build(str(tree), read_thick(thick), thick, str(tmp_path / "out"), use_cache=False)
    assert not (tmp_path / "out").exists()


def test_build_without_system_map_says_so(tmp_path):
    tree = tmp_path / "tree"
    shutil.copytree(FIXTURE, tree)
    os.unlink(tree / "System.map")
    out = subprocess.run([sys.executable, "-m", "kmodsyms", "build", "--kbuild", str(tree)],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "no link layout: the tree has no System.map" in out.stdout
