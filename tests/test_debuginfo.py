"""``kmodsyms build --debuginfo``: a dtrace_syms from a debug vmlinux alone,
checked against the linker maps of the same link.

The fixture tree rebuilt with ``-g`` (fixtures/kbuild/build.sh in a copy,
``EXTRA_CFLAGS=-g EXTRA_AFLAGS=-g``) gives a debug vmlinux whose own
vmlinux.map and vmlinux.o.map name the object of every address: each
System.map symbol's object from debug info must be the linker's, and the
ones no rule decides must be the ones the linker put in no object.  The
module map is the tree's own (.cmd files' KBUILD_MODFILE): the object ->
module step is tests/test_makeeval.py's.  Skipped without gcc and binutils.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from conftest import FIXTURE

from kmodsyms.errors import KmodsymsError
from kmodsyms.scan.debuginfo.debuginfo import DebugInputs, build_from_debuginfo, release_of_vmlinux
from kmodsyms.scan.elf.archive import vmlinux_objects
from kmodsyms.scan.modmap.kbuild import cmd_modfiles
from kmodsyms.scan.modmap.makeeval import KbuildEval, KbuildObject

KMODSYMS = [sys.executable, "-m", "kmodsyms"]


@pytest.fixture(scope="module")
def debug_tree(tmp_path_factory):
    """A copy of the fixture tree built with -g."""
    absent = [t for t in ("gcc", "ld", "ar", "nm", "objcopy") if shutil.which(t) is None]
    if absent:
        pytest.skip(f"the fixture's toolchain is absent: {', '.join(absent)}")
    tree = str(tmp_path_factory.mktemp("debug") / "kbuild")
    shutil.copytree(FIXTURE, tree, symlinks=True)
    subprocess.run(["bash", os.path.join(tree, "build.sh")], check=True, capture_output=True,
                   env={**os.environ, "EXTRA_CFLAGS": "-g", "EXTRA_AFLAGS": "-g"})
    return tree


def tree_map(tree: str) -> KbuildEval:
    objects, _ = vmlinux_objects(tree)
    return KbuildEval(tuple(KbuildObject(o, tuple(cmd_modfiles(tree, o))) for o in objects), 0, "x86")


def inputs(tree: str) -> DebugInputs:
    return DebugInputs(os.path.join(tree, "vmlinux"), os.path.join(tree, "System.map"),
                       os.path.join(tree, ".config"), tree, "6.12.0-kmodsyms-fixture")


@pytest.fixture(scope="module")
def debug_syms(debug_tree):
    out = os.path.join(debug_tree, "dtrace_syms.debuginfo")
    result = build_from_debuginfo(inputs(debug_tree), out, None, kbuild_map=tree_map(debug_tree),
                                  kbuild_map_source="the tree's .cmd files", jobs=1)
    return out, result


def linker_objects(tree: str):
    """System.map's lines, and the object the linker maps put at each."""
    from kmodsyms.scan.linkmap import vmlinux_object_map
    from kmodsyms.scan.sysmap import read_kallsyms
    om = vmlinux_object_map(*(os.path.join(tree, n) for n in ("vmlinux.map", "vmlinux.o.map", "vmlinux")))
    ks = read_kallsyms(os.path.join(tree, "System.map"), zero_is_hidden=False)
    return ks, [om.object_at(int(a)) for a in ks.address.tolist()]


def test_every_symbol_has_the_linkers_object_or_none(debug_tree, debug_syms):
    from kmodsyms import load
    from kmodsyms.scan.linkmap import vmlinux_object_map
    out, result = debug_syms
    om = vmlinux_object_map(*(os.path.join(debug_tree, n)
                              for n in ("vmlinux.map", "vmlinux.o.map", "vmlinux")))
    # System.map read by the library as a kallsyms at the link addresses
    lines = load(syms=out, kallsyms=os.path.join(debug_tree, "System.map")).lines()
    ours = [line.object for line in lines]
    theirs = [om.object_at(line.address) for line in lines]
    wrong = [(ln.name, o, t) for ln, o, t in zip(lines, ours, theirs) if o is not None and o != t]
    assert wrong == []
    missed = sorted(ln.name for ln, o, t in zip(lines, ours, theirs) if o is None and t is not None)
    assert missed == []
    # What no rule decides is what the linker script made: in no object's symbol table.
    from kmodsyms.scan.elf.elfscan import scan_object
    defined = {name.decode() for o in vmlinux_objects(debug_tree)[0]
               for name in scan_object(os.path.join(debug_tree, o)).sym_name}
    assert set(result.unattributed).isdisjoint(defined)
    assert {ln.name for ln, t in zip(lines, theirs) if t is None} <= set(result.unattributed)
    assert result.counts["unattributed"] == len(result.unattributed) > 0
    for rule in ("file run", "code range", "variable", "padding"):
        assert result.counts[rule] > 0, rule


def test_modules_agree_with_the_linker_maps(debug_tree, debug_syms):
    from kmodsyms.scan.verify import verify
    report = verify(debug_tree, debug_syms[0])
    comparison = report.linker_maps
    assert comparison.disagreements == 0 and comparison.compared > 200


def test_initcall_self_check_passes(debug_syms):
    check = debug_syms[1].self_check
    assert check["initcalls_checked"] >= 5 and check["initcalls_wrong"] == 0


def test_info_says_it_came_from_debug_info(debug_syms):
    out = debug_syms[0]
    doc = json.loads(subprocess.run(KMODSYMS + ["info", "--json", out], capture_output=True, text=True,
                                    check=True).stdout)
    assert doc["from_debug_info"] and not doc["modules_guessed"]
    debug = doc["layout"]["placement"]["debug_info"]
    assert debug["unattributed"] == debug_syms[1].counts["unattributed"]
    text = subprocess.run(KMODSYMS + ["info", out], capture_output=True, text=True, check=True).stdout
    assert "built from:      debug info;" in text and "link layout:     from debug info" in text


def test_resolve_and_kallmodsyms_read_it_as_any_other(debug_tree, debug_syms):
    kallsyms = os.path.join(debug_tree, "kallsyms")
    run = subprocess.run(KMODSYMS + ["kallmodsyms", "--syms", debug_syms[0], "--kallsyms", kallsyms],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    lines = [line for line in run.stdout.splitlines() if "\t[" in line]
    assert any(line.endswith("[ext4]") for line in lines) and any(line.endswith("[isofs]") for line in lines)


def test_guessed_modules_are_said_to_be_guessed(debug_tree, tmp_path):
    out = str(tmp_path / "guessed")
    run = subprocess.run(KMODSYMS + ["build", "--debuginfo", "--vmlinux", os.path.join(debug_tree, "vmlinux"),
                                     "--system-map", os.path.join(debug_tree, "System.map"),
                                     "--modules-dir", debug_tree, "--guess-modules", "-o", out],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    doc = json.loads(subprocess.run(KMODSYMS + ["info", "--json", out], capture_output=True, text=True,
                                    check=True).stdout)
    assert doc["modules_guessed"] and doc["module_map"].startswith("guessed")
    assert doc["layout"]["placement"]["builtin_modules_known"] is False
    text = subprocess.run(KMODSYMS + ["info", out], capture_output=True, text=True, check=True).stdout
    assert "modules GUESSED" in text


def test_without_the_source_it_refuses_in_one_line(debug_tree, tmp_path):
    out = str(tmp_path / "refused")
    run = subprocess.run(KMODSYMS + ["build", "--debuginfo", "--vmlinux", os.path.join(debug_tree, "vmlinux"),
                                     "--system-map", os.path.join(debug_tree, "System.map"),
                                     "--modules-dir", debug_tree, "-o", out],
                         capture_output=True, text=True)
    assert run.returncode == 2 and not os.path.exists(out)
    assert len(run.stderr.strip().splitlines()) == 1
    assert "install the kernel's source" in run.stderr and "--guess-modules" in run.stderr


def test_missing_inputs_are_one_line_each(debug_tree, tmp_path):
    base = ["build", "--debuginfo", "--vmlinux", os.path.join(debug_tree, "vmlinux"), "--guess-modules",
            "--modules-dir", debug_tree, "-o", str(tmp_path / "x")]
    run = subprocess.run(KMODSYMS + base + ["--system-map", str(tmp_path / "absent")],
                         capture_output=True, text=True)
    assert run.returncode == 2 and "no such System.map" in run.stderr
    run = subprocess.run(KMODSYMS + ["build", "--debuginfo", "--vmlinux", os.path.join(debug_tree, "vmlinux")],
                         capture_output=True, text=True)
    assert run.returncode == 2 and "-o FILE" in run.stderr
    with pytest.raises(KmodsymsError, match="no DWARF"):
        build_from_debuginfo(DebugInputs(os.path.join(FIXTURE, "vmlinux"), os.path.join(FIXTURE, "System.map"),
                                         "", FIXTURE), str(tmp_path / "y"), None, guess_modules=True)
    assert not os.path.exists(tmp_path / "y")


@pytest.mark.parametrize("path, release", [
    ("/usr/lib/debug/boot/vmlinux-6.12.117+deb12-cloud-amd64", "6.12.117+deb12-cloud-amd64"),
    ("/usr/lib/debug/lib/modules/6.12.0-55.el10.x86_64/vmlinux", "6.12.0-55.el10.x86_64"),
    ("/tmp/vmlinux", ""),
])
def test_release_from_the_distributions_paths(path, release):
    assert release_of_vmlinux(path) == release


def test_a_zero_size_static_stays_in_its_own_objects_run(tmp_path):
    """D1: zkey_a.c's only local is a zero-size static at the end of its
    .bss, at the address of zkey_b.c's first variable: its STT_FILE run
    names its unit, whatever the address says."""
    from kmodsyms.scan.debuginfo.debugattr import attribute
    from kmodsyms.scan.debuginfo.dwarf import Dwarf
    data = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "dwarf")
    for name in ("zkey_a", "zkey_b"):
        shutil.copy(os.path.join(data, name + ".c"), tmp_path)
        subprocess.run(["gcc", "-g", "-O2", "-fno-pic", "-fno-common", "-c", name + ".c"],
                       cwd=tmp_path, check=True)
    subprocess.run(["ld", "-e", "0", "-o", "image", "zkey_a.o", "zkey_b.o"], cwd=tmp_path, check=True)
    image = str(tmp_path / "image")
    units = list(Dwarf.from_elf(image).units())
    result = attribute(image, units, ["zkey_a.o", "zkey_b.o"], None)
    got = {name: (result.objects[o] if o >= 0 else None) for name, o in zip(result.names, result.obj.tolist())}
    key = result.names.index(b"__key.0")
    assert result.address[key] == result.address[result.names.index(b"zkey_b_counter")]
    assert got[b"__key.0"] == "zkey_a.o" and got[b"zkey_b_counter"] == "zkey_b.o"
    assert got[b"zkey_a"] == "zkey_a.o" and got[b"zkey_b"] == "zkey_b.o"


def test_the_distribution_commands_use_real_options():
    """Every option of docs/distributions.md's `kmodsyms build` commands,
    and of its table of defaults, is one `kmodsyms build --help` lists."""
    import re

    from conftest import ROOT
    with open(os.path.join(ROOT, "docs", "distributions.md")) as f:
        text = f.read()
    commands = re.findall(r"kmodsyms build (.*?)(?:\n(?!    )|$)", text.replace("\\\n", " "), re.S)
    used = {opt for command in commands for opt in re.findall(r"(?<!\S)(--[a-z-]+|-o)\b", command)}
    used |= set(re.findall(r"^\| `(--[a-z-]+)` \|", text, re.M))
    assert {"--debuginfo", "--root", "--release", "--vmlinux", "--source", "--system-map", "--config",
            "--modules-dir"} <= used
    helptext = subprocess.run(KMODSYMS + ["build", "--help"], capture_output=True, text=True,
                              env={**os.environ, "COLUMNS": "200"}, check=True).stdout
    assert all(opt in helptext for opt in used), used


def test_answers_from_guessed_modules_warn(debug_tree, tmp_path):
    out = str(tmp_path / "guessed")
    subprocess.run(KMODSYMS + ["build", "--debuginfo", "--vmlinux", os.path.join(debug_tree, "vmlinux"),
                               "--system-map", os.path.join(debug_tree, "System.map"),
                               "--modules-dir", debug_tree, "--guess-modules", "-o", out],
                   capture_output=True, text=True, check=True)
    run = subprocess.run(KMODSYMS + ["kallmodsyms", "--syms", out, "--kallsyms",
                                     os.path.join(debug_tree, "kallsyms")],
                         capture_output=True, text=True)
    assert run.returncode == 0 and "are guessed from modules.builtin.modinfo" in run.stderr


@pytest.mark.parametrize("out_of_tree", [False, True])
def test_units_the_final_link_adds_are_their_own_objects(tmp_path, out_of_tree):
    """D6: the final link adds .vmlinux.export.o and init/version-timestamp.o
    beside vmlinux.a; their units name those objects, whose symbols are in
    no module.  In an O= build (``out_of_tree``) a unit of the source tree
    has an absolute name and a generated one (.vmlinux.export.c) a relative
    one, as in Debian's build all have."""
    from kmodsyms.scan.debuginfo.debugattr import attribute, beside_objects
    from kmodsyms.scan.debuginfo.dwarf import Dwarf
    src = tmp_path / "src"
    build = tmp_path / "build" if out_of_tree else src
    for path, text in (("init/main.c", "int main_counter = 1;\nint start_kernel(void) { return main_counter; }\n"),
                       ("init/version-timestamp.c", "const char linux_banner[] = \"Linux\";\n")):
        (src / path).parent.mkdir(parents=True, exist_ok=True)
        (src / path).write_text(text)
    (build / "init").mkdir(parents=True, exist_ok=True)
    (build / ".vmlinux.export.c").write_text("const int __ksymtab_start_kernel = 2;\n")
    for source, obj in (("init/main.c", "init/main.o"), ("init/version-timestamp.c", "init/version-timestamp.o"),
                        (".vmlinux.export.c", ".vmlinux.export.o")):
        given = str(src / source) if out_of_tree and not source.startswith(".") else source
        subprocess.run(["gcc", "-g", "-O2", "-fno-pic", "-c", given, "-o", obj], cwd=build, check=True)
    subprocess.run(["ld", "-e", "0", "-o", "vmlinux", "init/main.o", "init/version-timestamp.o",
                    ".vmlinux.export.o"], cwd=build, check=True)
    image = str(build / "vmlinux")
    units = list(Dwarf.from_elf(image).units())
    beside = beside_objects(units, ["init/main.o"])
    assert beside == ["init/version-timestamp.o", ".vmlinux.export.o"]
    result = attribute(image, units, ["init/main.o"] + beside, None)
    got = {name: (result.objects[o] if o >= 0 else None) for name, o in zip(result.names, result.obj.tolist())}
    assert got[b"start_kernel"] == got[b"main_counter"] == "init/main.o"
    assert got[b"linux_banner"] == "init/version-timestamp.o"
    assert got[b"__ksymtab_start_kernel"] == ".vmlinux.export.o"


def test_a_weak_variable_at_the_end_of_the_strong_ones_object(tmp_path):
    """D2: weak_core.c's weak proto_a and proto_b locate the strong ones of
    weak_helpers.c, the last bytes of its .rodata, so both units claim them
    and no object of theirs lies above them.  weak_core.o comes before
    weak_helpers.o in link order, so it is not between weak_helpers.o and
    weak_next.o: the bytes are weak_helpers.o's (as kernel/bpf/helpers.c's
    bpf_*_proto, with kernel/bpf/core.c's weak ones)."""
    from kmodsyms.scan.debuginfo.debugattr import attribute
    from kmodsyms.scan.debuginfo.dwarf import Dwarf
    data = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "dwarf")
    names = ("weak_core", "weak_helpers", "weak_next")
    for name in names:
        shutil.copy(os.path.join(data, name + ".c"), tmp_path)
        subprocess.run(["gcc", "-g", "-O2", "-fno-pic", "-fno-common", "-fno-toplevel-reorder", "-c",
                        name + ".c"], cwd=tmp_path, check=True)
    subprocess.run(["ld", "-e", "0", "-o", "image"] + [n + ".o" for n in names], cwd=tmp_path, check=True)
    image = str(tmp_path / "image")
    units = list(Dwarf.from_elf(image).units())
    result = attribute(image, units, [n + ".o" for n in names], None)
    got = {name: (result.objects[o] if o >= 0 else None) for name, o in zip(result.names, result.obj.tolist())}
    assert got[b"core_own_proto"] == "weak_core.o" and got[b"next_proto"] == "weak_next.o"
    assert got[b"helpers_own_proto"] == got[b"proto_a"] == got[b"proto_b"] == "weak_helpers.o"
    # Linked the other way round, weak_core.o lies between the strong ones and
    # weak_next.o: their bytes could be either's, and no rule guesses.
    subprocess.run(["ld", "-e", "0", "-o", "image2", "weak_helpers.o", "weak_core.o", "weak_next.o"],
                   cwd=tmp_path, check=True)
    image = str(tmp_path / "image2")
    order = ["weak_helpers.o", "weak_core.o", "weak_next.o"]
    result = attribute(image, list(Dwarf.from_elf(image).units()), order, None)
    got = {name: (result.objects[o] if o >= 0 else None) for name, o in zip(result.names, result.obj.tolist())}
    assert got[b"helpers_own_proto"] == "weak_helpers.o" and got[b"core_own_proto"] == "weak_core.o"
    assert got[b"proto_a"] is None and got[b"proto_b"] is None


def test_a_weak_variable_where_one_input_pattern_ends(tmp_path):
    """D2: as init/version.c's weak init_uts_ns and init/version-timestamp.o's
    strong one, which the final link puts after vmlinux.o's .data, where the
    linker script's next pattern (.data.second here) begins: the objects
    below (last.o) and above (first.o) bound nothing there, and the weak
    claimant (weak.o), linked between them, is not taken."""
    from kmodsyms.scan.debuginfo.debugattr import attribute
    from kmodsyms.scan.debuginfo.dwarf import Dwarf
    sources = {"last": "int last_var = 7;\n",
               "weak": "int shared __attribute__((weak)) = 5;\n",
               "first": 'int first_var __attribute__((section(".data.second"))) = 3;\n',
               "strong": "int shared = 1;\n"}
    for name, text in sources.items():
        (tmp_path / f"{name}.c").write_text(text)
        subprocess.run(["gcc", "-g", "-O2", "-fno-pic", "-fno-common", "-c", f"{name}.c"], cwd=tmp_path, check=True)
    (tmp_path / "link.lds").write_text("SECTIONS { . = 0x1000; .data : { *(.data) *(.data.second) } }\n")
    order = [f"{name}.o" for name in sources]
    subprocess.run(["ld", "-T", "link.lds", "-o", "image"] + order, cwd=tmp_path, check=True)
    image = str(tmp_path / "image")
    result = attribute(image, list(Dwarf.from_elf(image).units()), order, None)
    got = {name: (result.objects[o] if o >= 0 else None) for name, o in zip(result.names, result.obj.tolist())}
    assert got[b"last_var"] == "last.o" and got[b"first_var"] == "first.o"
    assert got[b"shared"] is None


def test_the_package_truth_check_finds_wrong_modules(debug_tree, debug_syms, tmp_path):
    """tests/debuginfo_truth.py, the check of a distribution's package
    against a rebuild, on the fixture against its own maps: every line
    right; and a file whose modules were guessed from modules.builtin.modinfo
    alone (wrong for the modules that share a directory) fails it."""
    from debuginfo_truth import compare
    vmlinux, system_map = os.path.join(debug_tree, "vmlinux"), os.path.join(debug_tree, "System.map")
    figures = compare(vmlinux, system_map, debug_syms[0], debug_tree)
    assert figures["paired"] == figures["kallsyms_lines"] > 200
    assert figures["object"] == figures["module"] == {"right": figures["kallsyms_lines"]}
    guessed = str(tmp_path / "guessed")
    build_from_debuginfo(inputs(debug_tree), guessed, None, guess_modules=True, jobs=1)
    figures = compare(vmlinux, system_map, guessed, debug_tree)
    assert figures["module"]["wrong"] > 0 and figures["examples"]["module wrong"]


def test_the_package_truth_check_pairs_symbols_by_name_and_rank():
    """A rebuild moves symbols: each name's k-th by address pairs with the
    k-th; when the counts differ, those of the same name and size do."""
    from debuginfo_truth import pair
    ours = [(0x10, "f", 8), (0x20, "_rs.1", 4), (0x30, "_rs.1", 4), (0x40, "k", 0), (0x50, "k", 16)]
    theirs = [(0x110, "f", 8), (0x125, "_rs.1", 4), (0x135, "_rs.1", 4), (0x150, "k", 16)]
    assert pair(ours, theirs) == {0: 0, 1: 1, 2: 2, 4: 3}
    assert pair([(0x10, "f", 8)], [(0x10, "f", 9)]) == {}


# ----------------------------------------- inputs held to the debug vmlinux
def _refused(debug_tree, tmp_path, **given) -> str:
    """The one line a --guess-modules build of the debug tree refuses
    ``given`` (option -> path) with; nothing written."""
    out = tmp_path / "refused"
    options = {"--vmlinux": os.path.join(debug_tree, "vmlinux"),
               "--system-map": os.path.join(debug_tree, "System.map"), "--modules-dir": debug_tree, **given}
    run = subprocess.run(KMODSYMS + ["build", "--debuginfo", "--guess-modules", "-o", str(out)]
                         + [w for pair in options.items() for w in pair], capture_output=True, text=True)
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 2 and len(lines) == 1, run.stderr
    assert not out.exists()
    return lines[0]


def _boot_image(tmp_path) -> str:
    """A distribution's real vmlinux-z: the /boot/vmlinuz-REL of a Debian
    linux-image package apt has cached, unpacked into ``tmp_path``."""
    import glob
    debs = sorted(p for p in glob.glob("/var/cache/apt/archives/linux-image-*.deb")
                  if "-dbg_" not in p and "-dbgsym_" not in p)
    if not debs or shutil.which("dpkg-deb") is None:
        pytest.skip("no linux-image .deb in apt's cache (apt-get download linux-image-cloud-amd64)")
    subprocess.run(["dpkg-deb", "-x", debs[0], str(tmp_path / "deb")], check=True)
    found = glob.glob(str(tmp_path / "deb" / "boot" / "vmlinuz-*"))
    if not found:
        pytest.skip(f"{debs[0]} holds no /boot/vmlinuz-*")
    return found[0]


def test_a_boot_image_or_system_map_is_not_the_debug_vmlinux(debug_tree, tmp_path):
    """Issue 31 item 2: --vmlinux given the boot image (vmlinuz) or a
    System.map: one line saying which it is and naming the debug package's
    vmlinux of that release, never 'rebuild the kernel (run make ...)' (a
    build from debug info has no tree)."""
    def advice(rel):
        return (f"give the debug vmlinux, /usr/lib/debug/boot/vmlinux-{rel} or "
                f"/usr/lib/debug/lib/modules/{rel}/vmlinux, from the kernel's debug package "
                f"(Debian: linux-image-{rel}-dbg; Fedora: kernel-debuginfo; docs/distributions.md)")
    vmlinuz = _boot_image(tmp_path)
    release = os.path.basename(vmlinuz)[len("vmlinuz-"):]
    assert _refused(debug_tree, tmp_path, **{"--vmlinux": vmlinuz}) == \
        f"kmodsyms: error: {vmlinuz}: the kernel's boot image (vmlinuz), not the debug vmlinux; {advice(release)}"
    system_map = os.path.join(debug_tree, "System.map")
    assert _refused(debug_tree, tmp_path, **{"--vmlinux": system_map, "--release": "6.12.0-fixture"}) == \
        f"kmodsyms: error: {system_map}: a System.map, not the debug vmlinux; {advice('6.12.0-fixture')}"
    other = tmp_path / "not-elf"
    other.write_bytes(b"\x00" * 4096)
    assert _refused(debug_tree, tmp_path, **{"--vmlinux": str(other), "--release": "6.12.0-fixture"}) == \
        f"kmodsyms: error: {other}: not an ELF image; {advice('6.12.0-fixture')}"


def test_a_config_given_with_guess_modules_must_be_one(debug_tree, tmp_path):
    """Issue 31 item 5: --config is not read with --guess-modules, but a
    file named must be a kernel config: /etc/passwd is refused."""
    assert _refused(debug_tree, tmp_path, **{"--config": "/etc/passwd"}) == \
        "kmodsyms: error: /etc/passwd: no '# Linux/ARCH VERSION Kernel Configuration' header line; " \
        "is it a kernel .config?"


def test_a_modules_dir_that_does_not_exist_is_refused(debug_tree, tmp_path):
    """Issue 31 item 5: --modules-dir naming nothing, with --debuginfo."""
    missing = tmp_path / "nonexistent"
    assert _refused(debug_tree, tmp_path, **{"--modules-dir": str(missing)}) == \
        f"kmodsyms: error: {missing}: no such modules directory; give --modules-dir " \
        "(/lib/modules/RELEASE, from the kernel's image package)"


@pytest.mark.parametrize("jobs", ["0", "-3"])
def test_jobs_below_one_are_refused(debug_tree, tmp_path, jobs):
    """Issue 31 item 5: -j 0 and -j -3, by build from a tree and from debug
    info (the only command that takes -j)."""
    line = f"kmodsyms: error: -j {jobs}: give a number of processes of 1 or more (default: the CPU count)"
    assert _refused(debug_tree, tmp_path, **{"-j": jobs}) == line
    tree = subprocess.run(KMODSYMS + ["build", "--kbuild", debug_tree, "-j", jobs, "-o", str(tmp_path / "t")],
                          capture_output=True, text=True)
    assert (tree.returncode, tree.stderr) == (2, line + "\n") and not (tmp_path / "t").exists()


def _system_map(debug_tree, tmp_path, edit) -> str:
    with open(os.path.join(debug_tree, "System.map")) as f:
        lines = f.read().splitlines(True)
    path = str(tmp_path / "System.map")
    with open(path, "w") as f:
        f.writelines(edit(lines))
    return path


def test_a_system_map_with_a_moved_symbol_is_refused(debug_tree, tmp_path):
    def move(lines):
        address, rest = lines[-1].split(" ", 1)
        return lines[:-1] + [f"{int(address, 16) + 16:016x} {rest}"]
    path = _system_map(debug_tree, tmp_path, move)
    assert "1 of its" in _refused(debug_tree, tmp_path, **{"--system-map": path})


def test_a_system_map_missing_symbols_is_refused(debug_tree, tmp_path):
    path = _system_map(debug_tree, tmp_path, lambda lines: lines[::2])
    line = _refused(debug_tree, tmp_path, **{"--system-map": path})
    with open(os.path.join(debug_tree, "System.map")) as f:
        names = [entry.split()[2] for entry in f]
    lost = set(names[1::2]) - set(names[::2])     # a name kept on another line is not lost
    assert f"lacks {len(lost)} symbols" in line


def test_a_placeholder_system_map_is_named_as_such(debug_tree, tmp_path):
    path = str(tmp_path / "System.map")
    with open(path, "w") as f:
        f.write("ffffffffffffffff B The real System.map is in the linux-image-REL-dbg package\n")
    assert "a placeholder, not a System.map" in _refused(debug_tree, tmp_path, **{"--system-map": path})


def test_a_modules_directory_of_another_release_is_refused(debug_tree, tmp_path):
    other = tmp_path / "modules"
    shutil.copytree(debug_tree, other, ignore=shutil.ignore_patterns("*.o", "*.ko", "vmlinux*"))
    (other / "include" / "config" / "kernel.release").write_text("6.12.0-another\n")
    line = _refused(debug_tree, tmp_path, **{"--modules-dir": str(other)})
    assert "the modules of 6.12.0-another, not of" in line and "6.12.0-kmodsyms-fixture" in line


def test_a_config_of_another_version_is_refused(debug_tree, tmp_path):
    from kmodsyms.scan.debuginfo.debugcheck import check_config
    from kmodsyms.scan.debuginfo.debugimage import read_debug_vmlinux
    vm = read_debug_vmlinux(os.path.join(debug_tree, "vmlinux"))
    config = tmp_path / "config"
    config.write_text("# Linux/x86 6.12.0 Kernel Configuration\nCONFIG_A=y\n")
    assert check_config(str(config), vm) == "6.12.0"
    config.write_text("# Linux/x86 6.13.0 Kernel Configuration\nCONFIG_A=y\n")
    with pytest.raises(KmodsymsError, match="the config of another kernel"):
        check_config(str(config), vm)
    config.write_text("# Linux/arm64 6.12.0 Kernel Configuration\nCONFIG_A=y\n")
    with pytest.raises(KmodsymsError, match="of arm64, not x86"):
        check_config(str(config), vm)


def test_modules_builtin_is_held_to_its_modinfo(tmp_path):
    from kmodsyms.scan.debuginfo.debugcheck import builtin_from_modinfo
    modinfo = (b"ext4.file=fs/ext4/ext4\0ext4.license=GPL\0ext4.file=fs/ext4/ext4\0"
               b"a.file=drivers/x/a drivers/x/b\0b.parmtype=p:int\0")
    assert builtin_from_modinfo(modinfo) == ["kernel/fs/ext4/ext4.ko", "kernel/drivers/x/a.ko",
                                             "kernel/drivers/x/b.ko"]


@pytest.mark.parametrize("tree", ["--debuginfo", "--kbuild"])
def test_sigterm_stops_a_build_and_leaves_nothing(debug_tree, tmp_path, tree):
    """Killed (SIGTERM) while it unpacks the source: exit 143, no output,
    nothing left in $TMPDIR, no process left behind; from debug info and
    from a build tree without .cmd files (its module map from --source)."""
    import glob
    import signal
    import time
    tarballs = sorted(glob.glob("/usr/src/linux-source-*.tar.xz"))
    if not tarballs:
        pytest.skip("no /usr/src/linux-source-*.tar.xz (apt-get install linux-source-6.12)")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    config = tmp_path / "config"
    config.write_text("# Linux/x86 6.12.0 Kernel Configuration\nCONFIG_A=y\n")
    out = tmp_path / "dtrace_syms"
    if tree == "--kbuild":
        kbuild = tmp_path / "kbuild"
        shutil.copytree(FIXTURE, kbuild, symlinks=True)
        shutil.copy(config, kbuild / ".config")
        inputs = ["--kbuild", str(kbuild)]
    else:
        inputs = ["--debuginfo", "--vmlinux", os.path.join(debug_tree, "vmlinux"),
                  "--system-map", os.path.join(debug_tree, "System.map"),
                  "--modules-dir", debug_tree, "--config", str(config)]
    proc = subprocess.Popen(KMODSYMS + ["build", *inputs, "--source", tarballs[-1], "-o", str(out)],
                            env={**os.environ, "TMPDIR": str(scratch)}, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not list(scratch.glob("kmodsyms-make-*/source/*")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, proc.stderr.read()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    assert proc.stderr.read() == ""
    assert list(scratch.iterdir()) == [] and not out.exists()
    children = subprocess.run(["pgrep", "-af", str(scratch)], capture_output=True, text=True).stdout
    assert children == ""
