"""A dtrace_syms for another kernel is refused against the live kernel;
leftovers of killed writers are cleaned up."""

import os
import struct
import subprocess
import sys
import time

import pytest

from kmodsyms.format.symsfile import TEMP_PREFIX, read_syms, write_atomic
from kmodsyms.scan.elf.elfimage import parse_notes


def test_other_release_is_refused(fixture_syms):
    """Against the running kernel's kallsyms (KMS_LOAD_LIVE), a file of
    another release is refused, naming both (the library's check)."""
    from kmodsyms.binding import _kms
    syms = read_syms(fixture_syms)
    if os.uname().release == syms.meta_kernel_release:
        pytest.skip("this machine runs the fixture's release")
    text = open(os.path.join(os.path.dirname(fixture_syms), "kallsyms"), "rb").read()
    with pytest.raises(_kms.Error) as e:
        _kms.Handle(syms=os.fsencode(fixture_syms), text=text, flags=_kms.LOAD_LIVE)
    code, message = e.value.args
    assert code == _kms.E_STALE
    assert f"is for kernel {syms.meta_kernel_release}, but {os.uname().release}" in message
    # --force (KMS_LOAD_FORCE) uses it anyway
    _kms.Handle(syms=os.fsencode(fixture_syms), text=text,
                flags=_kms.LOAD_LIVE | _kms.LOAD_FORCE)


def test_cli_refuses_a_foreign_file_for_the_live_kernel(fixture_syms):
    if os.uname().release == read_syms(fixture_syms).meta_kernel_release:
        pytest.skip("this machine runs the fixture's release")
    out = subprocess.run([sys.executable, "-m", "kmodsyms", "resolve", "--syms", fixture_syms,
                          "0xffffffff81000000"], capture_output=True, text=True)
    assert out.returncode == 2
    assert len(out.stderr.splitlines()) == 1 and "--force" in out.stderr


def test_build_id_from_notes():
    desc = bytes(range(20))
    note = struct.pack("<III", 4, len(desc), 3) + b"GNU\0" + desc
    other = struct.pack("<III", 6, 4, 1) + b"Linux\0\0\0" + b"abcd"
    assert parse_notes(other + note) == desc.hex()
    assert parse_notes(other) == ""


def test_stale_temp_files_of_killed_writers_are_removed(tmp_path):
    old = tmp_path / (TEMP_PREFIX + "killed")
    fresh = tmp_path / (TEMP_PREFIX + "running")
    old.write_bytes(b"partial")
    fresh.write_bytes(b"partial")
    an_hour_ago = time.time() - 7200
    os.utime(old, (an_hour_ago, an_hour_ago))
    write_atomic(str(tmp_path / "dtrace_syms"), b"data")
    assert not old.exists()          # stale: a killed writer's
    assert fresh.exists()            # may belong to a writer running now
    assert (tmp_path / "dtrace_syms").read_bytes() == b"data"
