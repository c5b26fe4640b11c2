"""A run writes nothing but what the user names: no cache, no state, in a
home and XDG directories that are empty and read-only (but the scan cache
a build from a tree keeps beside its output, which its help and docs/cli.md
name); and deletes nothing, not even what an earlier kmodsyms cached."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

from conftest import FIXTURE, ROOT

KALLSYMS = os.path.join(FIXTURE, "kallsyms")


def _tree(root) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, n), root)
                  for d, dirs, files in os.walk(root) for n in dirs + files)


def _env(home, **more) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("XDG_")}
    env.update(HOME=str(home), PYTHONDONTWRITEBYTECODE="1",
               XDG_CACHE_HOME=str(home / "cache"), XDG_CONFIG_HOME=str(home / "config"),
               XDG_DATA_HOME=str(home / "data"), XDG_STATE_HOME=str(home / "state"),
               XDG_RUNTIME_DIR=str(home / "run"), **more)
    return env


def test_a_run_creates_nothing(fixture_syms, tmp_path):
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    files = ["--syms", fixture_syms, "--kallsyms", KALLSYMS]
    try:
        for d in (home, work):
            d.chmod(stat.S_IRUSR | stat.S_IXUSR)
        for args in (["resolve", *files, "0xffffffffab600400"], ["lookup", *files, "init_once"],
                     ["kallmodsyms", *files], ["modules", *files],
                     ["resolve", "--json", *files, "-"]):
            out = subprocess.run([sys.executable, "-m", "kmodsyms", *args], cwd=work,
                                 env=_env(home), capture_output=True, input="0x1\n", text=True)
            assert out.returncode == 0, out.stderr
    finally:
        for d in (home, work):
            d.chmod(stat.S_IRWXU)
    assert _tree(home) == [] and _tree(work) == []


def test_a_load_deletes_nothing(fixture_syms, tmp_path):
    """What lies in the caches a load does not read stays as it was: the
    files an earlier kmodsyms cached there (``resolve-*``, starting
    ``KMSNAP``), a killed writer's temp file and the user's own."""
    home = tmp_path / "home"
    cache = home / "cache" / "kmodsyms"
    cache.mkdir(parents=True)
    (cache / "resolve-5e2f-0badcafe").write_bytes(b"KMSNAP\0\7" + bytes(64))
    (cache / ".dtrace_syms.x1y2z3").write_bytes(b"partial")
    (cache / "notes.txt").write_text("mine")
    before = {p: (cache / p).read_bytes() for p in _tree(cache)}
    for args in (["resolve", "0x1"], ["lookup", "init_once"], ["kallmodsyms"], ["modules"]):
        out = subprocess.run([sys.executable, "-m", "kmodsyms", *args, "--syms", fixture_syms,
                              "--kallsyms", KALLSYMS], env=_env(home), capture_output=True,
                             text=True, cwd=ROOT)
        assert out.returncode == 0, out.stderr
    assert {p: (cache / p).read_bytes() for p in _tree(cache)} == before


def test_a_build_writes_its_output_and_the_cache_it_names(tmp_path):
    """Issue 31 item 9: 'build -o X' from a tree writes X and X.cache (and
    nothing else), 'build --no-cache -o X' X alone; build's --help and
    docs/cli.md say so, where cli.md said 'there is no cache'."""
    import shutil
    tree, home = tmp_path / "tree", tmp_path / "home"
    shutil.copytree(FIXTURE, tree, symlinks=True)
    home.mkdir()
    for name, more in (("cached", []), ("uncached", ["--no-cache"])):
        out = tmp_path / name
        out.mkdir()
        run = subprocess.run([sys.executable, "-m", "kmodsyms", "build", "--kbuild", str(tree), *more,
                              "-o", str(out / "dtrace_syms")], env=_env(home), capture_output=True, text=True)
        assert run.returncode == 0, run.stderr
        assert _tree(out) == (["dtrace_syms", "dtrace_syms.cache"] if not more else ["dtrace_syms"])
    assert _tree(home) == []
    usage = subprocess.run([sys.executable, "-m", "kmodsyms", "build", "--help"], capture_output=True,
                           text=True).stdout
    assert "--no-cache Neither read nor write OUTPUT.cache" in " ".join(usage.split())
    cli_md = open(os.path.join(ROOT, "docs", "cli.md")).read()
    assert "there is no cache" not in cli_md and "`OUTPUT.cache` beside its output" in cli_md
