"""``kmodsyms build --debuginfo`` on Debian's own kernel packages, newest
first: Debian unstable's newest cloud-amd64 kernel (7.x, whose kbuild
computes the object lists in scripts/Makefile.build) and Debian 13's,
downloaded from the archive this machine's apt configuration names
(tests/debian_archive.py) and unpacked as a root (tests/debian_kernels.py).

The truth is the kernel's own evidence, not our earlier output:

* every ``__initcall__kmod_MOD__`` symbol (``module_init()``'s, named after
  its object's KBUILD_MODNAME) answers MOD when MOD is a built-in module
  of ``modules.builtin.modinfo`` and the initcall's compile unit (its
  DWARF) lies in that module's directory (its ``MOD.file=``), and
  ``vmlinux`` otherwise: fs/dax.o's initcall says ``dax`` but is in no
  module, though drivers/dax/dax is built in;
* every built-in module with an initcall owns lines;
* an input of another kernel is refused in one line naming it, and
  nothing is written.

KMODSYMS_DEBIAN_KERNELS=all adds every other flavour and release Debian
carries (unstable's amd64, rt-amd64 and arm64; Debian 12's 6.12 and 6.1):
several GB to download, so not by default.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from debian_kernels import debian_kernel

pytestmark = pytest.mark.slow

KMODSYMS = [sys.executable, "-m", "kmodsyms"]
DEFAULT = [("sid", "cloud-amd64", "amd64"), ("trixie", "cloud-amd64", "amd64")]
EVERY = DEFAULT + [("sid", "amd64", "amd64"), ("sid", "rt-amd64", "amd64"), ("sid", "arm64", "arm64"),
                   ("bookworm", "cloud-amd64", "amd64")]
KERNELS = EVERY if os.environ.get("KMODSYMS_DEBIAN_KERNELS") == "all" else DEFAULT
INITCALL = "__initcall__kmod_"


# docs/distributions.md's command, which build() runs with the packages' tree as --root
KMODSYMS_COMMAND = ["kmodsyms", "build", "--debuginfo", "-o", "dtrace_syms"]


def build(kernel, out: str, *options: str) -> subprocess.CompletedProcess:
    command = KMODSYMS + KMODSYMS_COMMAND[1:]
    command[command.index("dtrace_syms")] = out
    return subprocess.run(command + ["--root", kernel.root, "--quiet", "--json", *options],
                          capture_output=True, text=True)


@pytest.fixture(scope="module", params=KERNELS, ids=lambda k: f"{k[0]}-{k[1]}")
def built(request, tmp_path_factory):
    """The kernel, and the dtrace_syms built from its packages with the
    defaults alone (--root: the packages' own layout)."""
    kernel = debian_kernel(*request.param)
    out = str(tmp_path_factory.mktemp("debian") / "dtrace_syms")
    run = build(kernel, out)
    assert run.returncode == 0, run.stderr
    return kernel, out, json.loads(run.stdout)


def test_the_defaults_find_each_input_where_the_packages_put_it(built):
    kernel, _out, summary = built
    inputs = summary["inputs"]
    beside = os.path.dirname(os.path.realpath(kernel.vmlinux))
    assert os.path.dirname(inputs["system_map"]) == beside, inputs
    assert os.path.basename(os.path.normpath(inputs["modules_dir"])) == kernel.release
    assert inputs["source"] == kernel.source
    assert summary["forced"] == ""


def _initcall_units(kernel, config: str, addresses: list[int]) -> dict[int, str]:
    """Each initcall entry's compile unit: that of the function it calls,
    read from the entry's bytes in the vmlinux (a 32-bit offset from the
    entry with CONFIG_HAVE_ARCH_PREL32_RELOCATIONS, else a pointer;
    include/linux/init.h) and looked up in the DWARF's code ranges.  The
    entries are assembler-defined: no DWARF of their own."""
    import bisect

    from elftools.elf.elffile import ELFFile

    from kmodsyms.scan.debuginfo.dwarf import Dwarf
    with open(config) as f:
        prel32 = "\nCONFIG_HAVE_ARCH_PREL32_RELOCATIONS=y\n" in f.read()
    ranges = sorted((lo, hi, unit.name) for unit in Dwarf.from_elf(kernel.vmlinux).units(variables=False)
                    for lo, hi in unit.ranges)
    starts = [r[0] for r in ranges]
    found = {}
    with open(kernel.vmlinux, "rb") as f:
        elf = ELFFile(f)
        order = "little" if elf.little_endian else "big"
        width = 4 if prel32 else elf.elfclass // 8
        sections = [s for s in elf.iter_sections() if s["sh_flags"] & 2 and s["sh_type"] == "SHT_PROGBITS"]
        data = {}
        for address in addresses:
            section = next((s for s in sections if s["sh_addr"] <= address < s["sh_addr"] + s["sh_size"]), None)
            if section is None:
                continue
            raw = data.setdefault(section.name, section.data())
            at = address - section["sh_addr"]
            value = int.from_bytes(raw[at:at + width], order, signed=prel32)
            target = address + value if prel32 else value
            k = bisect.bisect_right(starts, target) - 1
            if k >= 0 and target < ranges[k][1]:
                found[address] = ranges[k][2]
    return found


def _builtin_files(modules_dir: str) -> dict[str, set[str]]:
    """Each built-in module's name -> its directories, from
    modules.builtin.modinfo's MOD.file=DIR/NAME: a name may be two modules'
    (arm64's drivers/bus/arm-cci and drivers/perf/arm-cci, both built in)."""
    with open(os.path.join(modules_dir, "modules.builtin.modinfo"), "rb") as f:
        entries = f.read().decode("utf-8", "surrogateescape").split("\0")
    dirs: dict[str, set[str]] = {}
    for key, _eq, value in (e.partition("=") for e in entries):
        if key.endswith(".file"):
            dirs.setdefault(key[:-len(".file")], set()).add(os.path.dirname(value))
    return dirs


def _expected(token: str, unit: str, builtin: dict[str, set[str]]) -> str:
    """The module the kernel's evidence gives an initcall: its name's
    token names a built-in module (GCC's gnu11 turns a pasted ``unix``
    into ``1``), and its unit lies in a directory of that module's."""
    from kmodsyms.kernelnames import name_token
    named = [m for m in builtin if token in (m, name_token(m))]
    if len(named) == 1 and any(f"/{d}/" in f"/{unit}" for d in builtin[named[0]]):
        return named[0]
    return "vmlinux"


def test_every_initcall_answers_the_module_the_kernel_names(built):
    kernel, out, summary = built
    import kmodsyms
    resolver = kmodsyms.load(syms=out, kallsyms=summary["inputs"]["system_map"])
    initcalls = [line.address for line in resolver.lines() if line.name.startswith(INITCALL)]
    units = _initcall_units(kernel, summary["inputs"]["config"], initcalls)
    builtin = _builtin_files(summary["inputs"]["modules_dir"])
    wrong, checked, modules = [], 0, set()
    for line in resolver.lines():
        if not line.name.startswith(INITCALL) or line.address not in units:
            continue
        token = line.name[len(INITCALL):].split("__", 1)[0]
        expected = _expected(token, units[line.address], builtin)
        answer = resolver.resolve(line.address).module
        checked += 1
        modules.add(expected)
        if answer != expected:
            wrong.append((line.name, units[line.address], answer, expected))
    assert checked >= 0.95 * len(initcalls)
    assert wrong == []
    assert len(modules - {"vmlinux"}) >= 0.5 * len(builtin)
    silent = [m for m in modules - {"vmlinux"} if not resolver.module_ranges(m)]
    assert silent == []


def _refusals(sid, trixie, fixture_map):
    """Each input of another kernel, the option that gives it, and how the
    one line names it."""
    rel, other = sid.release, trixie.release
    yield "--system-map", os.path.join(sid.root, "usr/lib/modules", rel, "System.map"), "a placeholder"
    yield "--system-map", os.path.join(trixie.root, "usr/lib/debug/boot", f"System.map-{other}"), \
        "another kernel's System.map"
    yield "--system-map", fixture_map, "another kernel's System.map"
    yield "--config", os.path.join(trixie.root, "boot", f"config-{other}"), "the config of another kernel"
    modules = os.path.join(trixie.root, "lib/modules", other)
    yield "--modules-dir", modules if os.path.isdir(modules) else os.path.join(trixie.root, "usr/lib/modules",
                                                                                 other), "the modules of"
    yield "--source", trixie.source, "not of the kernel's"


@pytest.fixture(scope="module")
def unstable_and_13():
    """Debian unstable's and Debian 13's newest cloud-amd64 kernels."""
    return debian_kernel("sid"), debian_kernel("trixie")


def test_inputs_of_another_kernel_are_refused_in_one_line(unstable_and_13, tmp_path):
    from conftest import FIXTURE
    sid, trixie = unstable_and_13
    for option, path, says in _refusals(sid, trixie, os.path.join(FIXTURE, "System.map")):
        out = tmp_path / option.strip("-")
        run = build(sid, str(out), option, path)
        lines = run.stderr.strip().splitlines()
        assert run.returncode == 2 and len(lines) == 1, (option, run.stderr)
        assert path in lines[0] and says in lines[0], (option, lines[0])
        assert not out.exists() and not list(tmp_path.glob(f"{out.name}*"))


def test_force_writes_a_file_that_says_so_at_every_load(unstable_and_13, tmp_path):
    sid, trixie = unstable_and_13
    out = str(tmp_path / "forced")
    config = os.path.join(trixie.root, "boot", f"config-{trixie.release}")
    run = build(sid, out, "--config", config, "--force")
    assert run.returncode == 0, run.stderr
    assert "written anyway (--force)" in run.stderr and config in json.loads(run.stdout)["forced"]
    info = json.loads(subprocess.run(KMODSYMS + ["info", "--json", out], capture_output=True, text=True,
                                     check=True).stdout)
    assert info["forced"]
    resolve = subprocess.run(KMODSYMS + ["resolve", "--syms", out, "--kallsyms",
                                         json.loads(run.stdout)["inputs"]["system_map"], "0"],
                             capture_output=True, text=True)
    assert "--force" in resolve.stderr


def _doc() -> str:
    from conftest import ROOT
    with open(os.path.join(ROOT, "docs", "distributions.md")) as f:
        return f.read()


def test_the_docs_row_of_the_kernel_is_its_build(built):
    kernel, _out, summary = built
    table = _doc().split("<!-- debian-kernels -->", 1)[1].split("<!-- /debian-kernels -->", 1)[0]
    rows = {line.split(" | ")[0].strip("| "): line for line in table.splitlines() if line.startswith("| ")}
    a, k = summary["attribution"], summary["self_check"]
    unattributed = a["unattributed"] + a["no object"]
    expected = (f"| {kernel.release} | {a['symbols']:,} | {a['symbols'] - unattributed:,} | {unattributed:,} | "
                f"{summary['modules']} | {k['initcalls_checked']:,}, {k['initcalls_wrong']} | "
                f"{k['params_checked']}, {k['params_wrong']}, {k['params_outside']} |")
    assert rows.get(kernel.release) == expected


RULES = {"D1 (file run)": "file run", "D2 (code range)": "code range", "D2 (variable)": "variable",
         "D3 (`__pfx_`)": "padding", "D4 (`__SCT__`)": "static call", "unattributed (D5)": "unattributed",
         "D6 (beside `vmlinux.a`; counted in D1, D2)": "beside vmlinux.a"}


def test_the_docs_column_of_each_rule_is_the_build(built):
    kernel, _out, summary = built
    table = _doc().split("<!-- debian-rules -->", 1)[1].split("<!-- /debian-rules -->", 1)[0]
    lines = [[cell.strip() for cell in line.strip("|").split("|")] for line in table.strip().splitlines()]
    if kernel.release not in lines[0]:
        pytest.skip(f"docs/distributions.md's table of rules has no column for {kernel.release}")
    column = lines[0].index(kernel.release)
    got = {row[0]: row[column] for row in lines[2:]}
    assert got == {label: f"{summary['attribution'][key]:,}" for label, key in RULES.items()}


SUITES = {"Debian 14 (unstable)": "sid", "Debian 13 (trixie)": "trixie", "Debian 12 (bookworm)": "bookworm"}


def test_each_debian_release_has_the_packages_its_docs_command_installs(unstable_and_13):
    """docs/distributions.md's command per release: the release's archive
    has the -dbg package of its newest kernel of that X.Y and the
    linux-source-X.Y of the same version, and the command runs the build
    the tests run (with --root for the packages' tree)."""
    import re

    from debian_archive import Suite
    rows = re.findall(r"^\| (Debian [^|]+?) \| (\d+\.\d+) \| `apt-get install (linux-image-\$\(uname -r\)-dbg) "
                      r"(linux-source-(\d+\.\d+)) && (kmodsyms build --debuginfo -o dtrace_syms)` \|$", _doc(), re.M)
    assert {r[0].split(",")[0] for r in rows} == set(SUITES), rows
    for release, version, _dbg, source, source_version, command in rows:
        assert version == source_version
        suite = Suite(SUITES[release.split(",")[0]]).update()
        names = suite.search(rf"^linux-image-{re.escape(version)}\.[0-9][^ ]*-cloud-amd64-dbg$")
        assert names, (release, version)
        versions = suite.versions(source, *names)
        assert versions[0] and versions[0] in versions[1:], (release, source, versions)
        assert command.split() == KMODSYMS_COMMAND
