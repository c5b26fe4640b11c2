"""Installing dtrace_syms: contrib/kbuild/Makefile.dtrace_syms, 'kmodsyms
install' and kmodsyms.scan.install.install()."""

import glob
import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import time

import pytest
from docblocks import section_blocks

from kmodsyms.errors import KmodsymsError
from kmodsyms.format.symsfile import read_syms
from kmodsyms.scan.install import install
from kmodsyms.scan.modmap.choose import DERIVED, choose_module_map

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FRAGMENT = os.path.join(ROOT, "contrib", "kbuild", "Makefile.dtrace_syms")
RELEASE = "6.12.0-kmodsyms-fixture"
KMODSYMS = f"{sys.executable} -m kmodsyms"

needs_make = pytest.mark.skipif(shutil.which("make") is None, reason="make is absent")


@pytest.fixture
def tree(fixture_tree, tmp_path):
    """A private copy of the fixture tree, without any dtrace_syms in it."""
    dest = tmp_path / "kbuild"
    shutil.copytree(fixture_tree, dest, symlinks=True)
    for name in ("dtrace_syms", "dtrace_syms.cache"):
        if (dest / name).exists():
            (dest / name).unlink()
    return str(dest)


def make(tree, *args, check=True):
    cmd = ["make", "-f", FRAGMENT, "-C", tree, f"KMODSYMS={KMODSYMS}", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def cli(*args):
    return subprocess.run([sys.executable, "-m", "kmodsyms", *args],
                          capture_output=True, text=True)


def dest_of(mod_path, release=RELEASE):
    return os.path.join(str(mod_path), "lib", "modules", release, "kernel", "dtrace_syms")


def assert_installed(path, source):
    st = os.lstat(path)
    assert stat.S_ISREG(st.st_mode)
    assert stat.S_IMODE(st.st_mode) == 0o644
    with open(path, "rb") as a, open(source, "rb") as b:
        assert a.read() == b.read()
    assert read_syms(path).meta_kernel_release == RELEASE
    for d in ("lib", "lib/modules", f"lib/modules/{RELEASE}", f"lib/modules/{RELEASE}/kernel"):
        full = os.path.join(os.path.dirname(path).split("/lib/modules/")[0], d)
        assert stat.S_IMODE(os.stat(full).st_mode) == 0o755, full


def ranges_of(mod_path, release=RELEASE):
    return os.path.join(str(mod_path), "lib", "modules", release, "modules.builtin.ranges")


def leftovers(directory):
    return [n for n in os.listdir(directory) if n.startswith(".dtrace_syms.")]


# -- the make fragment ---------------------------------------------------------

@needs_make
def test_make_builds_and_installs(tree, tmp_path):
    mod_path = tmp_path / "staging"
    make(tree, "dtrace_syms", "dtrace_syms_install", f"INSTALL_MOD_PATH={mod_path}")
    built = os.path.join(tree, "dtrace_syms")
    assert_installed(dest_of(mod_path), built)
    assert leftovers(os.path.dirname(dest_of(mod_path))) == []


@needs_make
def test_make_rebuilds_only_when_an_input_is_newer(tree):
    make(tree, "dtrace_syms")
    built = os.path.join(tree, "dtrace_syms")
    old = time.time() - 100
    os.utime(built, (old, old))
    for name in ("vmlinux", "vmlinux.a", "modules.builtin", "modules_thick.builtin",
                 "include/config/kernel.release"):
        os.utime(os.path.join(tree, name), (old - 100, old - 100))
    proc = make(tree, "dtrace_syms")
    assert "DTRACE_SYMS" not in proc.stdout
    assert os.stat(built).st_mtime == old
    os.utime(os.path.join(tree, "vmlinux.a"))
    proc = make(tree, "dtrace_syms")
    assert "DTRACE_SYMS" in proc.stdout
    assert os.stat(built).st_mtime > old
    read_syms(built)


@needs_make
def test_make_install_alone_does_not_build(tree, tmp_path):
    proc = make(tree, "dtrace_syms_install", f"INSTALL_MOD_PATH={tmp_path / 'm'}", check=False)
    assert proc.returncode != 0
    assert not os.path.exists(os.path.join(tree, "dtrace_syms"))
    assert not os.path.exists(dest_of(tmp_path / "m"))


@needs_make
def test_make_clean(tree):
    make(tree, "dtrace_syms")
    assert os.path.exists(os.path.join(tree, "dtrace_syms.cache"))
    make(tree, "dtrace_syms_clean")
    assert not os.path.exists(os.path.join(tree, "dtrace_syms"))
    assert not os.path.exists(os.path.join(tree, "dtrace_syms.cache"))


# Where users' kmodsyms is when make runs without KMODSYMS: on PATH; only as
# python3 -m kmodsyms; in a venv whose bin sudo's secure_path left out (sudo -E
# keeps VIRTUAL_ENV); in ~/.local/bin (pipx, pip --user).
SECURE_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


def _wrapper(path, command: str) -> str:
    """An executable at ``path`` running ``command`` (this checkout's kmodsyms)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(f"#!/bin/sh\nexec {command} \"$@\"\n")
    os.chmod(path, 0o755)
    return str(path)


def _located(tmp_path, case: str) -> dict:
    """The environment of a make that finds kmodsyms one way (``case``), or none."""
    env = {k: v for k, v in os.environ.items() if k not in ("KMODSYMS", "VIRTUAL_ENV", "PYTHONPATH",
                                                             "SUDO_USER")}
    home = tmp_path / "home"
    home.mkdir()
    env.update(HOME=str(home), PATH=SECURE_PATH)
    if case == "path":
        env["PATH"] = os.path.dirname(_wrapper(tmp_path / "bin" / "kmodsyms",
                                               f"{sys.executable} -m kmodsyms")) + ":" + SECURE_PATH
    elif case == "python3 -m":
        env["PATH"] = os.path.dirname(_wrapper(tmp_path / "bin" / "python3", sys.executable)) \
            + ":" + SECURE_PATH
    elif case == "venv":
        _wrapper(tmp_path / "venv" / "bin" / "kmodsyms", f"{sys.executable} -m kmodsyms")
        env["VIRTUAL_ENV"] = str(tmp_path / "venv")
    elif case == "pipx":
        _wrapper(home / ".local" / "bin" / "kmodsyms", f"{sys.executable} -m kmodsyms")
    return env


@needs_make
@pytest.mark.parametrize("case", ["path", "python3 -m", "venv", "pipx"])
def test_make_finds_kmodsyms_where_users_install_it(tree, tmp_path, case):
    env = _located(tmp_path, case)
    mod_path = tmp_path / "staging"
    proc = subprocess.run(["make", "-f", FRAGMENT, "-C", tree, "dtrace_syms", "dtrace_syms_install",
                           f"INSTALL_MOD_PATH={mod_path}"], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert_installed(dest_of(mod_path), os.path.join(tree, "dtrace_syms"))


@needs_make
@pytest.mark.parametrize("goal", ["dtrace_syms", "dtrace_syms_install"])
def test_make_without_kmodsyms_says_how_to_name_it(tree, tmp_path, goal):
    if subprocess.run(["python3", "-m", "kmodsyms", "--help"], capture_output=True,
                      env={"PATH": SECURE_PATH}, cwd=tree).returncode == 0:
        pytest.skip("the system's python3 has kmodsyms installed")
    env = _located(tmp_path, "none")
    proc = subprocess.run(["make", "-f", FRAGMENT, "-C", tree, goal, f"INSTALL_MOD_PATH={tmp_path / 'm'}"],
                          capture_output=True, text=True, env=env)
    assert proc.returncode != 0
    errors = [line for line in proc.stderr.splitlines() if "***" in line]
    assert len(errors) == 1 and "pass KMODSYMS=/path/to/kmodsyms" in errors[0], proc.stderr
    assert "Error 127" not in proc.stderr and "not found" in errors[0]
    # docs/kernel-integration.md shows the install's line as make prints it
    with open(os.path.join(ROOT, "docs", "kernel-integration.md")) as f:
        assert goal != "dtrace_syms_install" or "\n" + errors[0].replace(os.path.dirname(FRAGMENT) + "/", "") + "\n" in f.read()
    assert not os.path.exists(os.path.join(tree, "dtrace_syms")) and not os.path.exists(tmp_path / "m")


# The pass structure of kbuild's top-level Makefile (6.12, lines 23-45, 208-238
# and 294-364, reduced to what decides which pass does the work): a first
# pass that re-invokes make to add --no-print-directory (need-sub-make) and
# gives every goal an empty recipe, and for config goals mixed with others a
# pass that runs each goal in its own make (mixed-build).  Kbuild's targets
# exist only in the working pass.  tests/test_kernel_source.py (slow) does the
# same on a real kernel tree.
KBUILD_PASSES = """\
__all:
this-makefile := $(lastword $(MAKEFILE_LIST))
abs_srctree := $(realpath $(dir $(this-makefile)))
ifneq ($(sub_make_done),1)
MAKEFLAGS += -rR
export sub_make_done := 1
endif
ifeq ($(filter --no-print-directory, $(MAKEFLAGS)),)
need-sub-make := 1
endif
ifeq ($(need-sub-make),1)
$(filter-out $(this-makefile), $(MAKECMDGOALS)) __all: __sub-make
\t@:
__sub-make:
\t$(Q)$(MAKE) --no-print-directory -f $(abs_srctree)/Makefile $(MAKECMDGOALS)
else
ifneq ($(filter %config,$(MAKECMDGOALS)),)
ifneq ($(filter-out %config,$(MAKECMDGOALS)),)
mixed-build := 1
endif
endif
ifdef mixed-build
$(MAKECMDGOALS): __build_one_by_one
\t@:
__build_one_by_one:
\t$(Q)set -e; for i in $(MAKECMDGOALS); do $(MAKE) -f $(abs_srctree)/Makefile $$i; done
else
objtree := .
KERNELRELEASE = $(shell cat include/config/kernel.release)
__all: all
all:
\t@echo kernel-default-goal
olddefconfig:
\t@echo kernel-config
.PHONY: vmlinux
vmlinux:
\t@echo kernel-vmlinux-recipe
vmlinux.a: FORCE
\t@echo kernel-vmlinux.a-recipe
FORCE:
endif
endif
"""


def kernel_style_tree(tree):
    """TREE with the kbuild pass structure as its top Makefile, the fragment
    in scripts/ and the include block of docs/kernel-integration.md appended."""
    (include,) = section_blocks("docs/kernel-integration.md",
                                "### Included from the kernel's top-level Makefile", "make")
    os.makedirs(os.path.join(tree, "scripts"), exist_ok=True)
    shutil.copy(FRAGMENT, os.path.join(tree, "scripts", "Makefile.dtrace_syms"))
    with open(os.path.join(tree, "Makefile"), "w") as f:
        f.write(KBUILD_PASSES + include)
    return lambda *a: subprocess.run(["make", "-C", tree, f"KMODSYMS={KMODSYMS}", *a],
                                     capture_output=True, text=True)


@needs_make
def test_fragment_included_from_a_kernel_style_makefile(tree, tmp_path):
    """The kernel's default goal stays; the targets run once, in the working
    pass, and make warns of nothing (in the first pass, a fragment that
    defined its recipes overrode kbuild's: 'ignoring old recipe', two
    installs)."""
    run = kernel_style_tree(tree)
    proc = run()
    assert proc.returncode == 0 and "kernel-default-goal" in proc.stdout, proc.stderr
    assert not os.path.exists(os.path.join(tree, "dtrace_syms"))
    mod_path = tmp_path / "m"
    proc = run("dtrace_syms", "dtrace_syms_install", f"INSTALL_MOD_PATH={mod_path}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "warning" not in proc.stderr, proc.stderr
    assert proc.stdout.count("DTRACE_SYMS") == 1 and proc.stdout.count("  INSTALL ") == 1, proc.stdout
    assert_installed(dest_of(mod_path), os.path.join(tree, "dtrace_syms"))


@needs_make
def test_fragment_included_in_a_mixed_build(tree, tmp_path):
    run = kernel_style_tree(tree)
    mod_path = tmp_path / "m"
    proc = run("olddefconfig", "dtrace_syms", "dtrace_syms_install", f"INSTALL_MOD_PATH={mod_path}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "warning" not in proc.stderr, proc.stderr
    assert "kernel-config" in proc.stdout
    assert proc.stdout.count("DTRACE_SYMS") == 1 and proc.stdout.count("  INSTALL ") == 1, proc.stdout
    assert_installed(dest_of(mod_path), os.path.join(tree, "dtrace_syms"))


@needs_make
def test_fragment_included_rebuilds_only_when_an_input_is_newer(tree):
    """kbuild's 'vmlinux' is phony and 'vmlinux.a' forced: the fragment's
    inputs are the files, compared by time, not those targets (which would
    rebuild dtrace_syms on every make)."""
    run = kernel_style_tree(tree)
    first = run("dtrace_syms")
    assert first.returncode == 0 and first.stdout.count("DTRACE_SYMS") == 1, first.stderr
    again = run("dtrace_syms")
    assert again.returncode == 0, again.stderr
    assert "DTRACE_SYMS" not in again.stdout and "kernel-vmlinux" not in again.stdout, again.stdout
    # A relink touches vmlinux.a without changing any object: kmodsyms keeps
    # its output, the fragment still marks it up to date.
    old = time.time() - 100
    os.utime(os.path.join(tree, "dtrace_syms"), (old, old))
    os.utime(os.path.join(tree, "vmlinux.a"), (old + 10, old + 10))
    assert run("dtrace_syms").stdout.count("DTRACE_SYMS") == 1
    assert "DTRACE_SYMS" not in run("dtrace_syms").stdout


# -- the distribution packaging recipes of docs/kernel-integration.md ----------

def fragment_variables() -> set[str]:
    with open(FRAGMENT) as f:
        return set(re.findall(r"^(\w+) \?=", f.read(), re.M))


def files_below(directory) -> list[str]:
    return [os.path.join(d, n) for d, _, names in os.walk(directory) for n in names]


def run_packaging_lines(lines, tree):
    """Run the snippet's make lines in order, as the package build would
    (KMODSYMS from the environment, as a packager's own would be)."""
    variables = fragment_variables()
    for line in lines:
        assert "$(" not in line and "%{" not in line, f"unknown variable left in {line!r}"
        args = shlex.split(line)
        assert args[:2] == ["make", "-f"] and args[2] == FRAGMENT and args[3] == "-C", line
        for arg in args[5:]:
            name = arg.split("=", 1)[0]
            assert "=" not in arg or name in variables, f"{name} is no variable of the fragment"
        proc = subprocess.run(args, capture_output=True, text=True,
                              env={**os.environ, "KMODSYMS": KMODSYMS})
        assert proc.returncode == 0, line + "\n" + proc.stdout + proc.stderr


@needs_make
def test_debian_rules_snippet(tree, tmp_path):
    (rules,) = section_blocks("docs/kernel-integration.md", "### Debian: `debian/rules`", "make")
    m = re.search(r"^DTRACE_SYMS_MK := \$\(CURDIR\)/debian/(\S+)$", rules, re.M)
    assert m and m.group(1) == os.path.basename(FRAGMENT)
    pkgdir = tmp_path / "debian" / "linux-image"
    subst = {"$(MAKE)": "make", "$(DTRACE_SYMS_MK)": FRAGMENT, "$(objtree)": tree,
             "$(pkgdir)": str(pkgdir)}
    lines = [line.strip() for line in rules.splitlines() if "$(DTRACE_SYMS_MK)" in line]
    assert [line.split()[-1].split("=")[0] for line in lines] == ["dtrace_syms", "INSTALL_MOD_PATH"]
    for old, new in subst.items():
        lines = [line.replace(old, new) for line in lines]
    run_packaging_lines(lines, tree)
    # What the .install list names: exactly the installed files.
    with open(os.path.join(ROOT, "docs", "kernel-integration.md")) as f:
        listed = re.search(r"`\.install` list \(or its `dh_install` call\):\n(.*?)\.\n", f.read(), re.S)
    patterns = re.findall(r"`([^`]+)`", listed.group(1))
    installed = sorted(p for pattern in patterns for p in glob.glob(str(pkgdir / pattern)))
    assert installed == sorted(files_below(pkgdir))
    assert dest_of(pkgdir) in installed and ranges_of(pkgdir) in installed
    assert_installed(dest_of(pkgdir), os.path.join(tree, "dtrace_syms"))


@needs_make
def test_rpm_spec_snippet(tree, tmp_path):
    (spec,) = section_blocks("docs/kernel-integration.md", "### RPM: the kernel `.spec`", "spec")
    m = re.search(r"^(Source\d+): (\S+)$", spec, re.M)
    assert m and m.group(2) == os.path.basename(FRAGMENT)
    buildroot = tmp_path / "buildroot"
    subst = {"%{" + m.group(1).upper() + "}": FRAGMENT, "%{objtree}": tree,
             "%{buildroot}": str(buildroot), "%{kversion}": RELEASE}
    sections = dict(re.findall(r"^%(build|install|files)\n(.*?)(?=^%\w+\n|\Z)", spec, re.S | re.M))
    def commands(text):
        out = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]
        for old, new in subst.items():
            out = [line.replace(old, new) for line in out]
        return out
    run_packaging_lines(commands(sections["build"]), tree)
    run_packaging_lines(commands(sections["install"]), tree)
    # %files lists every file installed (rpmbuild refuses unpackaged ones)
    listed = [str(buildroot) + line for line in commands(sections["files"])]
    assert sorted(listed) == sorted(files_below(buildroot))
    assert dest_of(buildroot) in listed and ranges_of(buildroot) in listed
    assert_installed(dest_of(buildroot), os.path.join(tree, "dtrace_syms"))


# -- kmodsyms install ------------------------------------------------------------

def test_cli_install_default_release_builds_if_absent(tree, tmp_path):
    mod_path = tmp_path / "m"
    proc = cli("install", "--kbuild", tree, "--mod-path", str(mod_path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [dest_of(mod_path), ranges_of(mod_path)]
    built = os.path.join(tree, "dtrace_syms")      # built first, as 'kmodsyms build' would
    assert_installed(dest_of(mod_path), built)
    # Installing again replaces the file (atomically) and leaves no temp file.
    proc = cli("install", "--kbuild", tree, "--mod-path", str(mod_path), "--syms", built)
    assert proc.returncode == 0, proc.stderr
    assert_installed(dest_of(mod_path), built)
    assert leftovers(os.path.dirname(dest_of(mod_path))) == []


def test_cli_refuses_a_symlinked_lib_modules(tree, tmp_path):
    mod_path = tmp_path / "m"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (mod_path / "lib").mkdir(parents=True)
    os.symlink(elsewhere, mod_path / "lib" / "modules")
    proc = cli("install", "--kbuild", tree, "--mod-path", str(mod_path))
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert "symbolic link" in lines[0] and "lib/modules" in lines[0]
    assert os.listdir(elsewhere) == []
    assert proc.stdout == ""


@pytest.mark.parametrize("component", ["lib", "release", "kernel", "file"])
def test_refuses_a_symlink_at_any_component(tree, tmp_path, component):
    mod_path = tmp_path / "m"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    parts = {"lib": "lib", "release": f"lib/modules/{RELEASE}",
             "kernel": f"lib/modules/{RELEASE}/kernel",
             "file": f"lib/modules/{RELEASE}/kernel/dtrace_syms"}
    link = mod_path / parts[component]
    link.parent.mkdir(parents=True)
    os.symlink(elsewhere / "target", link) if component == "file" else os.symlink(elsewhere, link)
    with pytest.raises(KmodsymsError, match="symbolic link"):
        install(tree, mod_path=str(mod_path))
    assert os.listdir(elsewhere) == []
    assert os.path.islink(link)


def test_merged_usr_lib_link_is_followed(tree, tmp_path):
    """MOD_PATH/lib -> usr/lib (merged /usr, e.g. '/' on Oracle Linux) stays
    inside MOD_PATH and is allowed; a lib link anywhere else is not."""
    mod_path = tmp_path / "m"
    (mod_path / "usr" / "lib").mkdir(parents=True)
    os.symlink("usr/lib", mod_path / "lib")
    dest = install(tree, mod_path=str(mod_path)).syms
    assert dest == dest_of(mod_path)
    real = mod_path / "usr" / "lib" / "modules" / RELEASE / "kernel" / "dtrace_syms"
    assert real.is_file() and stat.S_IMODE(real.stat().st_mode) == 0o644


def test_refuses_a_release_mismatch(tree, tmp_path):
    mod_path = tmp_path / "m"
    proc = cli("install", "--kbuild", tree, "--mod-path", str(mod_path),
               "--release", "6.99.0-other")
    assert proc.returncode == 2
    assert len(proc.stderr.splitlines()) == 1
    assert RELEASE in proc.stderr and "6.99.0-other" in proc.stderr
    assert not os.path.exists(mod_path / "lib")


def test_refuses_a_corrupt_source(tree, tmp_path):
    bad = tmp_path / "dtrace_syms"
    bad.write_bytes(b"not a dtrace_syms file")
    mod_path = tmp_path / "m"
    with pytest.raises(KmodsymsError, match="not a dtrace_syms file"):
        install(tree, syms=str(bad), mod_path=str(mod_path))
    assert not os.path.exists(mod_path)


@pytest.mark.parametrize("release", ["", "..", "a/b", "."])
def test_refuses_a_release_that_is_not_one_component(tree, tmp_path, release):
    with pytest.raises(KmodsymsError, match="bad kernel release"):
        install(tree, mod_path=str(tmp_path / "m"), release=release)


def test_missing_kernel_release_is_a_clear_error(tree, tmp_path):
    os.unlink(os.path.join(tree, "include", "config", "kernel.release"))
    proc = cli("install", "--kbuild", tree, "--mod-path", str(tmp_path / "m"))
    assert proc.returncode == 2
    assert "kernel.release" in proc.stderr and "--release" in proc.stderr
    assert len(proc.stderr.splitlines()) == 1


def test_failing_install_leaves_no_temp_file(tree, tmp_path):
    """The rename fails (a directory sits where the file goes): exit 2, and
    nothing left behind in the destination directory."""
    mod_path = tmp_path / "m"
    blocker = dest_of(mod_path)
    os.makedirs(os.path.join(blocker, "keep"))
    proc = cli("install", "--kbuild", tree, "--mod-path", str(mod_path))
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.splitlines()) == 1 and "cannot write" in proc.stderr
    assert sorted(os.listdir(os.path.dirname(blocker))) == ["dtrace_syms"]
    assert os.listdir(blocker) == ["keep"]


def test_failing_write_leaves_no_temp_file_and_keeps_the_old_file(tree, tmp_path, monkeypatch):
    mod_path = tmp_path / "m"
    dest = install(tree, mod_path=str(mod_path)).syms
    before = open(dest, "rb").read()

    def broken_fsync(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(KmodsymsError, match="No space left"):
        install(tree, mod_path=str(mod_path))
    assert sorted(os.listdir(os.path.dirname(dest))) == ["dtrace_syms"]
    assert open(dest, "rb").read() == before


# -- a distribution's file: --syms and --release, no tree -------------------------

def test_install_needs_no_tree(fixture_syms, tmp_path):
    """A distribution user has a file and a release, not a build tree."""
    mod_path = tmp_path / "stage"
    proc = cli("install", "--syms", fixture_syms, "--release", RELEASE, "--mod-path", str(mod_path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [dest_of(mod_path), ranges_of(mod_path)]
    assert proc.stderr == ""
    assert_installed(dest_of(mod_path), fixture_syms)


def test_release_defaults_to_the_one_the_file_records(fixture_tree, fixture_syms, tmp_path):
    with open(os.path.join(fixture_tree, "include", "config", "kernel.release")) as f:
        release = f.read().strip()
    mod_path = tmp_path / "stage"
    proc = cli("install", "--syms", fixture_syms, "--mod-path", str(mod_path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == dest_of(mod_path, release)


def test_a_release_the_file_was_not_built_for_is_refused(fixture_syms, tmp_path):
    mod_path = tmp_path / "stage"
    proc = cli("install", "--syms", fixture_syms, "--release", "6.99.0-other", "--mod-path", str(mod_path))
    assert proc.returncode == 2
    assert len(proc.stderr.splitlines()) == 1, proc.stderr
    assert RELEASE in proc.stderr and "6.99.0-other" in proc.stderr
    assert proc.stdout == "" and not mod_path.exists()


def test_neither_a_file_nor_a_tree_is_one_line(tmp_path):
    proc = cli("install", "--release", RELEASE, "--mod-path", str(tmp_path / "m"))
    assert proc.returncode == 2
    assert len(proc.stderr.splitlines()) == 1 and "--syms" in proc.stderr, proc.stderr
    assert not (tmp_path / "m").exists()


# -- modules.builtin.ranges beside it, where dtrace-utils reads it ---------------------

# A file that kmodsyms install did not write, as the kernel's
# scripts/generate_builtin_ranges.awk writes one (its anchor line, then a
# range per run of a module's objects).
KERNELS_OWN = ".text 00000000-00000000 = _stext\n.text 00000030-00000096 msr\n"


def ranges_text(syms) -> bytes:
    """What 'kmodsyms ranges' writes for SYMS."""
    proc = subprocess.run([sys.executable, "-m", "kmodsyms", "ranges", "--syms", syms],
                          capture_output=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def install_cli(syms, mod_path, *more):
    return cli("install", "--syms", syms, "--release", RELEASE, "--mod-path", str(mod_path), *more)


def kernels_own(mod_path) -> str:
    path = ranges_of(mod_path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(KERNELS_OWN)
    return path


def other_syms(tree, tmp_path) -> str:
    """A dtrace_syms of the same release with other ranges: the fixture
    built with a module map that lacks msr."""
    thick = tmp_path / "modules_thick.builtin"
    with open(os.path.join(tree, "modules_thick.builtin")) as f:
        thick.write_text("".join(line for line in f if not line.startswith("arch/x86/kernel/msr.o:")))
    out = str(tmp_path / "other_syms")
    proc = cli("build", "--kbuild", tree, "--thick", str(thick), "-o", out)
    assert proc.returncode == 0, proc.stderr
    return out


def test_ranges_written_when_the_kernel_has_none(fixture_syms, tmp_path):
    mod_path = tmp_path / "m"
    proc = install_cli(fixture_syms, mod_path)
    assert proc.returncode == 0, proc.stderr
    path = ranges_of(mod_path)
    assert ranges_of(mod_path) in proc.stdout.splitlines()
    st = os.lstat(path)
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o644
    with open(path, "rb") as f:
        assert f.read() == ranges_text(fixture_syms)
    assert leftovers(os.path.dirname(path)) == []


def test_the_kernels_own_ranges_are_kept_without_force(fixture_syms, tmp_path):
    mod_path = tmp_path / "m"
    path = kernels_own(mod_path)
    proc = install_cli(fixture_syms, mod_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [dest_of(mod_path)]
    (line,) = proc.stderr.splitlines()
    assert "kept" in line and path in line and "kernel's own" in line and "--force" in line
    assert open(path).read() == KERNELS_OWN
    assert_installed(dest_of(mod_path), fixture_syms)


def test_force_replaces_the_kernels_own_and_says_so(fixture_syms, tmp_path):
    mod_path = tmp_path / "m"
    path = kernels_own(mod_path)
    proc = install_cli(fixture_syms, mod_path, "--force")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [dest_of(mod_path), path]
    (line,) = proc.stderr.splitlines()
    assert "--force" in line and "replaced" in line and "kernel's own" in line and path in line
    with open(path, "rb") as f:
        assert f.read() == ranges_text(fixture_syms)
    # now ours: the next install replaces it without a word
    proc = install_cli(fixture_syms, mod_path)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr


def test_reinstall_replaces_our_own_ranges(tree, fixture_syms, tmp_path):
    mod_path = tmp_path / "m"
    assert install_cli(fixture_syms, mod_path).returncode == 0
    other = other_syms(tree, tmp_path)
    assert ranges_text(other) != ranges_text(fixture_syms)
    proc = install_cli(other, mod_path)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert proc.stdout.splitlines() == [dest_of(mod_path), ranges_of(mod_path)]
    with open(ranges_of(mod_path), "rb") as f:
        assert f.read() == ranges_text(other)


def test_our_file_changed_since_is_not_ours(fixture_syms, tmp_path):
    """Rewritten since we wrote it (a kernel's modules_install over it, an
    admin's edit): another's, kept."""
    mod_path = tmp_path / "m"
    assert install_cli(fixture_syms, mod_path).returncode == 0
    path = kernels_own(mod_path)
    proc = install_cli(fixture_syms, mod_path)
    assert proc.returncode == 0 and "kept" in proc.stderr
    assert open(path).read() == KERNELS_OWN


def test_a_symlinked_ranges_file_is_refused_before_anything_is_written(fixture_syms, tmp_path):
    mod_path = tmp_path / "m"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.makedirs(os.path.dirname(ranges_of(mod_path)))
    os.symlink(elsewhere / "target", ranges_of(mod_path))
    proc = install_cli(fixture_syms, mod_path, "--force")
    assert proc.returncode == 2
    (line,) = proc.stderr.splitlines()
    assert "symbolic link" in line and "modules.builtin.ranges" in line
    assert os.listdir(elsewhere) == [] and not os.path.exists(dest_of(mod_path))


def test_a_file_without_a_link_layout_is_installed_without_ranges(tree, tmp_path):
    out = str(tmp_path / "nolayout")
    assert cli("build", "--kbuild", tree, "--no-layout", "-o", out).returncode == 0
    mod_path = tmp_path / "m"
    proc = install_cli(out, mod_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [dest_of(mod_path)]
    (line,) = proc.stderr.splitlines()
    assert "no link layout" in line and "modules.builtin.ranges" in line
    assert not os.path.exists(ranges_of(mod_path))


# -- the Debian kernel hooks (contrib/debian) -----------------------------------------

HOOKS = os.path.join(ROOT, "contrib", "debian")
needs_run_parts = pytest.mark.skipif(shutil.which("run-parts") is None or shutil.which("sha256sum") is None,
                                     reason="run-parts or sha256sum is absent")


def run_hooks(kind, root, tmp_path, release=RELEASE, **env):
    """/etc/kernel/KIND.d run as linux-run-hooks runs it for a package
    (run-parts, the release and the image path), on the staged ROOT."""
    (tmp_path / "tmp").mkdir(exist_ok=True)
    env = {**os.environ, "KMODSYMS_ROOT": str(root), "KMODSYMS": KMODSYMS,
           "TMPDIR": str(tmp_path / "tmp"), "DEB_MAINT_PARAMS": "'configure'", **env}
    hooks = os.path.join(HOOKS, f"{kind}.d")
    proc = subprocess.run(["run-parts", "--report", "--exit-on-error", f"--arg={release}",
                           f"--arg=/boot/vmlinuz-{release}", hooks],
                          capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL)
    # --report names a hook before its first output: not the hook's own line
    proc.stderr = proc.stderr.replace(os.path.join(hooks, "kmodsyms") + ":\n", "", 1)
    return proc


@needs_run_parts
def test_postrm_removes_both_files_and_their_directories(fixture_syms, tmp_path):
    root = tmp_path / "root"
    assert install_cli(fixture_syms, root).returncode == 0
    proc = run_hooks("postrm", root, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "" and proc.stderr == ""
    assert not os.path.exists(os.path.join(root, "lib", "modules", RELEASE))
    assert os.listdir(os.path.join(root, "lib", "modules")) == []


@needs_run_parts
def test_postrm_keeps_the_kernels_own_ranges(fixture_syms, tmp_path):
    root = tmp_path / "root"
    path = kernels_own(root)
    assert install_cli(fixture_syms, root).returncode == 0
    proc = run_hooks("postrm", root, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert "kept" in line and path in line
    assert open(path).read() == KERNELS_OWN
    assert not os.path.exists(dest_of(root))


@needs_run_parts
def test_a_real_kernels_own_ranges_are_kept_by_install_and_postrm(corpus, corpus_syms, tmp_path):
    """The corpus's modules.builtin.ranges, as its kernel's build wrote it
    (CONFIG_BUILTIN_MODULE_RANGES), installed as modules_install does."""
    root = tmp_path / "root"
    release = read_syms(corpus_syms).meta_kernel_release
    theirs = os.path.join(corpus, "modules.builtin.ranges")
    path = ranges_of(root, release)
    os.makedirs(os.path.dirname(path))
    shutil.copy(theirs, path)
    proc = cli("install", "--syms", corpus_syms, "--mod-path", str(root))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [dest_of(root, release)]
    assert "kept" in proc.stderr and path in proc.stderr
    proc = run_hooks("postrm", root, tmp_path, release=release)
    assert proc.returncode == 0 and "kept" in proc.stderr, proc.stderr
    assert not os.path.exists(dest_of(root, release))
    with open(path, "rb") as a, open(theirs, "rb") as b:
        assert a.read() == b.read()


@needs_run_parts
def test_postrm_keeps_our_file_edited_since(fixture_syms, tmp_path):
    root = tmp_path / "root"
    assert install_cli(fixture_syms, root).returncode == 0
    with open(ranges_of(root), "a") as f:
        f.write(".text 00001000-00001010 edited\n")
    proc = run_hooks("postrm", root, tmp_path)
    assert proc.returncode == 0 and "kept" in proc.stderr, proc.stderr
    assert os.path.exists(ranges_of(root)) and not os.path.exists(dest_of(root))


@needs_run_parts
def test_postinst_without_the_debug_vmlinux_says_so_and_writes_nothing(tmp_path):
    root = tmp_path / "root"
    (root / "lib" / "modules" / RELEASE).mkdir(parents=True)
    proc = run_hooks("postinst", root, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert f"linux-image-{RELEASE}-dbg" in line
    assert os.listdir(root / "lib" / "modules" / RELEASE) == []


@pytest.fixture(scope="module")
def debian_root(tmp_path_factory):
    """A root where the fixture's kernel is installed as Debian installs
    one, with its -dbg package: the fixture built with -g, its vmlinux and
    System.map at /usr/lib/debug/boot, modules.builtin in /lib/modules."""
    absent = [t for t in ("gcc", "ld", "ar", "nm", "objcopy") if shutil.which(t) is None]
    if absent:
        pytest.skip(f"the fixture's toolchain is absent: {', '.join(absent)}")
    from conftest import FIXTURE
    tree = tmp_path_factory.mktemp("debug") / "kbuild"
    shutil.copytree(FIXTURE, tree, symlinks=True)
    subprocess.run(["bash", str(tree / "build.sh")], check=True, capture_output=True,
                   env={**os.environ, "EXTRA_CFLAGS": "-g", "EXTRA_AFLAGS": "-g"})
    root = tmp_path_factory.mktemp("debian") / "root"
    debug = root / "usr" / "lib" / "debug" / "boot"
    debug.mkdir(parents=True)
    shutil.copy(tree / "vmlinux", debug / f"vmlinux-{RELEASE}")
    shutil.copy(tree / "System.map", debug / f"System.map-{RELEASE}")
    (root / "lib" / "modules" / RELEASE).mkdir(parents=True)
    shutil.copy(tree / "modules.builtin", root / "lib" / "modules" / RELEASE)
    return root


@needs_run_parts
def test_postinst_builds_from_the_debug_package_and_installs_both(debian_root, tmp_path):
    """The fixture has no kernel source: the build guesses the modules
    (KMODSYMS_BUILD_OPTIONS), as a Debian host without linux-source can."""
    root = tmp_path / "root"
    shutil.copytree(debian_root, root, symlinks=True)
    proc = run_hooks("postinst", root, tmp_path, KMODSYMS_BUILD_OPTIONS="--guess-modules")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    syms = dest_of(root)
    info = json.loads(cli("info", "--json", syms).stdout)
    assert info["kernel_release"] == RELEASE and info["modules_guessed"]
    assert read_syms(syms).meta_kernel_release == RELEASE
    with open(ranges_of(root), "rb") as f:
        assert f.read() == ranges_text(syms)
    assert os.listdir(tmp_path / "tmp") == []
    # and the kernel's removal takes both away
    proc = run_hooks("postrm", root, tmp_path)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert os.listdir(root / "lib" / "modules" / RELEASE) == ["modules.builtin"]


@needs_run_parts
def test_postinst_whose_build_fails_reports_it_and_does_not_fail_the_kernel(debian_root, tmp_path):
    """Without the source (and no --guess-modules) the build refuses: the
    hook says so and exits 0, so that the kernel's package still installs."""
    root = tmp_path / "root"
    shutil.copytree(debian_root, root, symlinks=True)
    proc = run_hooks("postinst", root, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "install the kernel's source" in proc.stderr and "not installed" in proc.stderr
    assert not os.path.exists(dest_of(root)) and not os.path.exists(ranges_of(root))
    assert os.listdir(tmp_path / "tmp") == []


# -- the module map ----------------------------------------------------------------

def test_choose_module_map_order(tree, tmp_path):
    thick = os.path.join(tree, "modules_thick.builtin")
    assert choose_module_map(tree)[1] == thick
    explicit = str(tmp_path / "explicit.builtin")
    shutil.copy(thick, explicit)
    assert choose_module_map(tree, explicit)[1] == explicit
    objs = os.path.join(tree, "modules.builtin.objs")
    os.rename(thick, objs)
    assert choose_module_map(tree)[1] == objs
    from_objs = choose_module_map(tree)[0]
    os.unlink(objs)
    derived, source = choose_module_map(tree)
    assert source == DERIVED
    assert derived.modules == from_objs.modules


@needs_make
def test_make_never_remakes_the_kernel_products(tree):
    """vmlinux.o newer than vmlinux (as a fresh checkout can leave them):
    make's built-in '%: %.o' must not try to relink vmlinux with cc."""
    later = os.path.getmtime(os.path.join(tree, "vmlinux")) + 10
    os.utime(os.path.join(tree, "vmlinux.o"), (later, later))
    proc = make(tree, "dtrace_syms")
    assert " cc " not in proc.stdout and os.path.exists(os.path.join(tree, "dtrace_syms"))
