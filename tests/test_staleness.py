"""A dtrace_syms for another kernel is refused against the live kernel;
leftovers of killed writers are cleaned up."""

import os
import struct
import subprocess
import sys
import time

import pytest

from kmodsyms import live
from kmodsyms.build.elfimage import parse_notes
from kmodsyms.errors import StaleError
from kmodsyms.format.symsfile import TEMP_PREFIX, read_syms, write_atomic


class _Uname:
    def __init__(self, release):
        self.release = release


def test_other_release_is_refused(fixture_syms, monkeypatch):
    syms = read_syms(fixture_syms)
    monkeypatch.setattr(live.os, "uname", lambda: _Uname("6.1.0-other"))
    with pytest.raises(StaleError, match="is for kernel 6.12.0-kmodsyms-fixture, but 6.1.0-other"):
        live.check_live(syms.source, syms.meta_kernel_release, syms.meta_build_id)


def test_other_build_id_is_refused(fixture_syms, monkeypatch):
    syms = read_syms(fixture_syms)
    monkeypatch.setattr(live.os, "uname", lambda: _Uname(syms.meta_kernel_release))
    monkeypatch.setattr(live, "running_build_id", lambda: "00" * 20)
    with pytest.raises(StaleError, match=f"build-id {syms.meta_build_id}"):
        live.check_live(syms.source, syms.meta_kernel_release, syms.meta_build_id)
    monkeypatch.setattr(live, "running_build_id", lambda: syms.meta_build_id)
    live.check_live(syms.source, syms.meta_kernel_release, syms.meta_build_id)  # the right kernel


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
