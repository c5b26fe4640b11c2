"""The snapshot cache: where it lives (XDG rules, /var/cache for root,
never creating a home), its bound (count and bytes, least recently used
out first), snapshots of another boot deleted when seen, and
``kmodsyms cache --list`` / ``--clear``."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import FIXTURE, ROOT
from kmodsyms import load, snapshot

KALLSYMS = os.path.join(FIXTURE, "kallsyms")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty cache of this test's own."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg" / "kmodsyms"


def _kallsyms_copies(tmp_path, count):
    paths = []
    for i in range(count):
        path = tmp_path / f"kallsyms{i}"
        path.write_bytes(open(KALLSYMS, "rb").read())
        paths.append(str(path))
    return paths


def test_where_the_cache_lives(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert snapshot.cache_dir() == str(tmp_path / "xdg" / "kmodsyms")
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/dir")     # not absolute: ignored
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert snapshot.cache_dir() == "/var/cache/kmodsyms"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert snapshot.cache_dir() == str(tmp_path / "home" / ".cache" / "kmodsyms")
    monkeypatch.delenv("HOME")
    assert snapshot.cache_dir() is None


def test_a_missing_home_is_never_created(fixture_syms, tmp_path, monkeypatch):
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setenv("HOME", str(tmp_path / "nohome"))
    load(fixture_syms, KALLSYMS)
    assert not os.path.exists(tmp_path / "nohome")
    # A home without ~/.cache gets one, private.
    os.mkdir(tmp_path / "nohome")
    load(fixture_syms, KALLSYMS)
    assert oct(os.stat(tmp_path / "nohome" / ".cache").st_mode & 0o777) == "0o700"
    assert len(os.listdir(tmp_path / "nohome" / ".cache" / "kmodsyms")) == 1


def test_bounded_least_recently_used_first(fixture_syms, tmp_path, cache, monkeypatch):
    monkeypatch.setattr(snapshot, "MAX_SNAPSHOTS", 3)
    paths = _kallsyms_copies(tmp_path, 5)
    for path in paths[:3]:
        load(fixture_syms, path)
    for age, path in enumerate(paths[:3]):   # made within one clock tick: order them
        os.utime(snapshot.snapshot_path(fixture_syms, path), (age + 1, age + 1))
    assert snapshot.open_saved(fixture_syms, paths[0]) is not None   # used: now the newest
    load(fixture_syms, paths[3])
    kept = {snap.kallsyms for snap in snapshot.cached_snapshots()}
    assert kept == {paths[0], paths[2], paths[3]}     # paths[1]: least recently used
    # By bytes: a bound below two snapshots keeps only the newest.
    monkeypatch.setattr(snapshot, "MAX_CACHE_BYTES", 1)
    load(fixture_syms, paths[4])
    assert [snap.kallsyms for snap in snapshot.cached_snapshots()] == [paths[4]]


def test_snapshots_of_another_boot_are_deleted(fixture_syms, tmp_path, cache, monkeypatch):
    (path,) = _kallsyms_copies(tmp_path, 1)
    monkeypatch.setattr(snapshot, "boot_id", lambda: "earlierboot00000")
    load(fixture_syms, path)
    (old,) = os.listdir(cache)
    monkeypatch.setattr(snapshot, "boot_id", lambda: "thisboot00000000")
    assert snapshot.open_saved(fixture_syms, path) is None
    assert snapshot.cached_snapshots() == [] and not os.path.exists(cache / old)
    assert snapshot.boot_id() != "noboot" or not os.path.exists(snapshot.BOOT_ID)


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "kmodsyms", *args], capture_output=True,
                          text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT})


def test_cache_list_and_clear(fixture_syms, tmp_path, cache):
    paths = _kallsyms_copies(tmp_path, 2)
    for path in paths:
        assert _cli("resolve", "--syms", fixture_syms, "--kallsyms", path, "0x1").returncode == 0
    listed = json.loads(_cli("cache", "--list", "--json").stdout)
    assert listed["directory"] == str(cache)
    assert sorted(s["kallsyms"] for s in listed["snapshots"]) == paths
    assert all(s["syms"] == fixture_syms for s in listed["snapshots"])
    text = _cli("cache", "--list").stdout.splitlines()
    assert text[0].startswith(f"{cache}: 2 snapshots") and len(text) == 3
    cleared = _cli("cache", "--clear")
    assert (cleared.returncode, cleared.stdout) == (0, f"{cache}: 2 snapshots deleted\n")
    assert os.listdir(cache) == []
