"""Proof on a running kernel: Debian's linux-source built here
(tests/kernel_build.py: tinyconfig+, KASLR, two loadable modules; x86_64
with and without CONFIG_KALLSYMS_ALL, arm64 with it), booted under QEMU
with a busybox initramfs (tests/live_boot.py, tests/live/init.sh).  Inside the guest a
static kmodsyms-c runs with its defaults: /proc/kallsyms, the running
kernel's release and build-id, /lib/modules/$(uname -r) and /sys.

What the guest carried out is held to independent truths: ld's maps and
modules.builtin.ranges for every built-in line, each loaded module's .ko
(readelf -sW) placed by the live /sys/module/M/sections, the kernel's own
build-id, and kernel/ksyms_common.c's rule for unprivileged readers.

-m live (the first build of each tree takes minutes, once per machine and
shared with -m slow's tests/test_kernel_source.py; a KVM boot seconds, a
TCG one under a minute); skipped without the source tarball, a build tool,
QEMU, the guest's compiler or a static busybox of its architecture.
"""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest
from kallsyms_image import proc_kallsyms
from kernel_build import ARM64, ARM64_REBUILT, X86_64, X86_64_ALL, built_tree, link_truth
from live_boot import INSERT, RELOAD, boot_kernel, guest, kernel_release
from test_loadable import ByStart, innermost, is_mapping, readelf_symbols, section_bases

from kmodsyms import load
from kmodsyms.binding.records import SizeKind

pytestmark = pytest.mark.live
PHASES = ("1-loaded", "2-unloaded", "3-reloaded", "4-inserted")
# Each configuration booted, and another build of its release: x86_64's
# other configuration, arm64's own tree relinked.
KERNELS = {"text-only": (X86_64, X86_64_ALL), "all": (X86_64_ALL, X86_64),
           "arm64": (ARM64, ARM64_REBUILT)}


@pytest.fixture(scope="module", params=sorted(KERNELS))
def live(request, tmp_path_factory):
    """(kernel, tree, boot) of one configuration, booted once per session."""
    kernel, other = KERNELS[request.param]
    work = str(tmp_path_factory.mktemp(f"live-{request.param}"))
    ready = guest(kernel, work)
    tree, other_tree = built_tree(kernel), built_tree(other)
    assert kernel_release(tree, kernel) == kernel_release(other_tree, other)
    booted = boot_kernel(kernel, tree, other_tree, work, ready)
    print(f"\n{request.param}: booted with {booted.accel} in {booted.seconds:.1f} s")
    return request.param, kernel, tree, booted


def json_lines(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def kallsyms_rows(path: str) -> list[tuple[int, str, str, str]]:
    """(address, letter, name, module or "") of each /proc/kallsyms line."""
    rows = []
    with open(path, encoding="utf-8", errors="surrogateescape") as f:
        for line in f:
            head, _tab, tag = line.rstrip("\n").partition("\t")
            address, letter, name = head.split(" ", 2)
            rows.append((int(address, 16), letter, name, tag[1:-1]))
    return rows


def system_map(tree: str) -> dict[str, int]:
    link = {}
    with open(os.path.join(tree, "System.map")) as f:
        for line in f:
            address, _letter, name = line.split()
            link.setdefault(name, int(address, 16))
    return link


def kaslr_shift(tree: str, kallsyms: str) -> int:
    """The offset the kernel chose: _text's live address minus its link address."""
    (live_text,) = [a for a, _l, name, mod in kallsyms_rows(kallsyms) if name == "_text" and not mod]
    return live_text - system_map(tree)["_text"]


def config(tree: str) -> dict[str, str]:
    """The tree's .config: CONFIG_NAME -> its value."""
    with open(os.path.join(tree, ".config")) as f:
        return dict(line.rstrip("\n").split("=", 1) for line in f if line.startswith("CONFIG_"))


def kallsyms_all(tree: str) -> bool:
    return config(tree).get("CONFIG_KALLSYMS_ALL") == "y"


def physical_text(boot) -> int:
    """_text's physical address in the guest: /proc/iomem's "Kernel code"
    starts there (both architectures' setup.c: __pa_symbol(_text))."""
    (start,) = [int(line.split("-")[0], 16) for line in boot.text("iomem").splitlines()
                if line.endswith(" : Kernel code")]
    return start


def kaslr_steps(kernel, tree: str, boot) -> tuple[int, int]:
    """(step, remainder): a KASLR shift is remainder modulo step.
    x86_64 picks the virtual offset in CONFIG_PHYSICAL_ALIGN slots
    (arch/x86/boot/compressed/kaslr.c find_random_virt_addr()); arm64
    takes the seed's bits above MIN_KIMG_ALIGN and the bits below from
    the image's physical placement, so that 2 MiB blocks map it
    (arch/arm64/kernel/pi/map_kernel.c early_map_kernel())."""
    if kernel.arch == "x86":
        return int(config(tree)["CONFIG_PHYSICAL_ALIGN"], 0), 0
    with open(os.path.join(tree, "arch", "arm64", "include", "asm", "boot.h")) as f:
        (size,) = re.findall(r"^#define MIN_KIMG_ALIGN\s+(SZ_\w+)$", f.read(), re.M)
    with open(os.path.join(tree, "include", "linux", "sizes.h")) as f:
        (align,) = re.findall(rf"^#define {size}\s+(0x[0-9a-fA-F]+)$", f.read(), re.M)
    step = int(align, 16)
    return step, physical_text(boot) % step


def resolver(boot, phase: str):
    """The Python resolver on what the guest showed in PHASE, as the guest's
    kmodsyms-c read it live (same files, same modules)."""
    snap = boot.path(phase)
    return load(boot.syms, os.path.join(snap, "proc", "kallsyms"),
                modules_dir=boot.modules_dir, sysfs_root=os.path.join(snap, "sys"),
                proc_modules=os.path.join(snap, "proc", "modules"))


def python_line_json(r, index: int) -> dict:
    """What kmodsyms-c's ``lines`` prints for a line, from the host's
    resolver (the binding) on the files the guest showed."""
    ln = r.line(index)
    return {"address": f"{ln.address:#x}", "size": ln.size if ln.size_kind == SizeKind.EXACT else 0,
            "type": ln.type, "name": ln.name,
            "modules": None if ln.origin == "core" else list(ln.modules),
            "origin": str(ln.origin.value) if ln.origin is not None else None,
            "binding": ln.binding.value if ln.binding is not None else None, "object": ln.object}


def tool(boot, phase: str, name: str) -> tuple[int, str, str]:
    base = boot.path(phase, "tool", name) if phase else boot.path(name)
    with open(base + ".rc") as f:
        rc = int(f.read())
    return rc, open(base + ".out", errors="replace").read(), open(base + ".err", errors="replace").read()


def loaded_modules(boot, phase: str) -> list[str]:
    with open(boot.path(phase, "proc", "modules")) as f:
        return sorted(line.split()[0] for line in f)


# ------------------------------------------------------------ the boot itself
def test_guest_ran_the_live_defaults_of_this_build(live):
    """The release and build-id the guest showed are this tree's, and every
    step's kmodsyms-c, given no path, loaded them (exit 0; a warning only
    for a module whose .ko it does not read)."""
    _name, kernel, tree, boot = live
    assert boot.text("release").strip() == kernel_release(tree, kernel)
    notes = subprocess.run(["readelf", "-n", os.path.join(tree, "vmlinux")], check=True,
                           capture_output=True, text=True).stdout
    build_id = re.search(r"Build ID: ([0-9a-f]+)", notes).group(1)
    with open(boot.path("notes"), "rb") as f:
        assert bytes.fromhex(build_id) in f.read()
    insmod = boot.text("insmod").split("\n")
    assert [line.split()[:2] for line in insmod if line] == [[RELOAD, "0"], [RELOAD, "0"], [INSERT, "0"]]
    assert insmod[2].split()[2].endswith(f"/tmp/{INSERT}.ko")      # from its installed .ko.xz
    for phase in PHASES:
        for name in ("lines", "kallmodsyms", "modules", "resolve"):
            rc, out, err = tool(boot, phase, name)
            if name == "modules" and phase == "2-unloaded":   # none loaded: said on stderr
                assert (rc, out, err) == (0, "", "kmodsyms-c: no loaded modules (no '[MODULE]' line "
                                                 "in /proc/kallsyms)\n"), (phase, name, err)
                continue
            assert rc == 0 and out, (phase, name, err)
            assert all(line.startswith(f"kmodsyms-c: warning: module {INSERT}: ")
                       for line in err.splitlines()), (phase, name, err)
    assert loaded_modules(boot, "1-loaded") == [RELOAD]
    assert loaded_modules(boot, "2-unloaded") == []
    assert loaded_modules(boot, "4-inserted") == sorted([RELOAD, INSERT])


# ------------------------------------------------------------------ exactness
def test_every_live_line_against_the_linker_maps_and_ranges(live):
    """Each live kallsyms line (with its modules loaded) as kmodsyms-c
    answered it in the guest: a built-in line's object is ld's at its link
    address (the live address less the kernel's own KASLR offset), its
    modules modules.builtin.ranges' there; a loaded module's line is that
    module's, from its installed .ko.  The guest's answers equal the Python
    resolver's on the same files, line by line."""
    name, kernel, tree, boot = live
    kallsyms = boot.path("1-loaded", "proc", "kallsyms")
    rows = kallsyms_rows(kallsyms)
    got = json_lines(boot.path("1-loaded", "tool", "lines.out"))
    assert [(int(c["address"], 16), c["type"], c["name"]) for c in got] == [r[:3] for r in rows]
    shift = kaslr_shift(tree, kallsyms)
    step, remainder = kaslr_steps(kernel, tree, boot)
    assert shift and shift % step == remainder, (hex(shift), hex(step), hex(remainder))     # moved, in its steps
    truth = link_truth(tree)
    r = resolver(boot, "1-loaded")
    ko = {m: os.path.relpath(p, boot.modules_dir) for m, p in module_files(boot).items()}
    checked = right = ambiguous = ends = beside = 0
    for line, (address, _letter, symbol, module) in enumerate(rows):
        assert got[line] == python_line_json(r, line), (line, got[line])
        if module:
            assert got[line]["modules"] == [module] and got[line]["origin"] == "loadable", got[line]
            checked += 1
            if is_mapping(symbol):      # R46: arm64's $x and $d, listed with no size or object
                right += (got[line]["size"], got[line]["object"]) == (0, None)
            else:
                right += got[line]["object"] == ko[module]
            continue
        at_link = address - shift
        if truth.is_object_end(symbol, at_link):
            ends += 1
            continue
        beside += truth.beside_vmlinux_o(at_link) is not None and symbol not in truth.linker_defined
        checked += 1
        answer = r.record(address, line)
        want = truth.modules_at(at_link)
        if answer.ambiguous:        # R35: a candidate per unplaced copy, each in ranges' modules
            ambiguous += 1
            assert answer.candidates and all(sorted(c) == want for c in answer.candidates), \
                (hex(address), answer)
            continue
        assert truth.agrees(symbol, at_link, answer.object), (hex(address), answer)
        assert sorted(answer.modules) == want, (hex(address), answer, want)
        right += 1
    assert right == checked - ambiguous and checked + ends == len(rows), (checked, right)
    assert ends < len(rows) // 50, ends
    print(f"\n{name}: {checked} of {len(rows)} live lines checked ({beside} of objects linked "
          f"beside vmlinux.o), {right} right, {ambiguous} ambiguous, KASLR offset {shift:#x}; "
          f"{ends} zero-size object ends not checked")


def test_objects_linked_beside_vmlinux_o_are_named(live):
    """x86_64 links vmlinux from vmlinux.o plus .vmlinux.export.o,
    init/version-timestamp.o and the kallsyms tables of the last pass
    (docs/resolver.md R57); their lines (all data: CONFIG_KALLSYMS_ALL only)
    name them as ld's map does, in no module, and a text-only kernel lists
    none of them."""
    from kmodsyms.scan.linkmap import links_vmlinux_o
    _name, _kernel, tree, boot = live
    if not links_vmlinux_o(os.path.join(tree, "vmlinux.map")):
        pytest.skip("vmlinux linked in a single pass from vmlinux.a (arm64): no vmlinux.o to link beside")
    kallsyms = boot.path("1-loaded", "proc", "kallsyms")
    shift, truth = kaslr_shift(tree, kallsyms), link_truth(tree)
    got = json_lines(boot.path("1-loaded", "tool", "lines.out"))
    beside = [(c, truth.beside_vmlinux_o(int(c["address"], 16) - shift)) for c in got
              if c["origin"] != "loadable" and c["name"] not in truth.linker_defined
              and truth.beside_vmlinux_o(int(c["address"], 16) - shift)]
    if not kallsyms_all(tree):
        assert beside == []
        return
    assert [(c["object"], c["modules"]) for c, _obj in beside] == [(obj, None) for _c, obj in beside]
    assert {obj for _c, obj in beside} == set(truth.beside.object) >= {
        ".vmlinux.export.o", "init/version-timestamp.o"}, set(truth.beside.object)


def module_files(boot) -> dict[str, str]:
    """Each module's installed file under the modules directory."""
    out = {}
    for dirpath, _dirs, files in os.walk(boot.modules_dir):
        for f in files:
            if ".ko" in f:
                out[f.split(".ko")[0].replace("-", "_")] = os.path.join(dirpath, f)
    return out


def plain_ko(path: str, work) -> str:
    """PATH itself, or its decompressed copy in WORK."""
    if not path.endswith(".xz"):
        return path
    out = os.path.join(str(work), os.path.basename(path)[:-3])
    with open(out, "wb") as f:
        subprocess.run(["xz", "-dc", path], stdout=f, check=True)
    return out


def ko_sections(ko: str) -> dict[str, tuple[int, bool]]:
    """The .ko's sections: name -> (size, whether the module keeps it in
    its core after init).  The core holds what is allocated in the file
    (sysfs also lists the .symtab and .strtab the kernel loads into init
    memory), but not .init* nor .exit* (module_init_layout_section())."""
    from elftools.elf.constants import SH_FLAGS
    from elftools.elf.elffile import ELFFile
    with open(ko, "rb") as f:
        return {sec.name: (sec["sh_size"], bool(sec["sh_flags"] & SH_FLAGS.SHF_ALLOC)
                           and not sec.name.startswith((".init", ".exit")))
                for sec in ELFFile(f).iter_sections()}


def sysfs_placed(boot, phase: str, module: str, ko: str) -> list[tuple]:
    """The .ko's symbols at the addresses the live kernel put them: each
    section's base from /sys/module/M/sections/NAME, then base + value.
    The kernel lists no empty section there (an empty .bss), though
    kallsyms shows the zero-size symbols in it: those are left out."""
    base = section_bases(boot.path(phase, "sys", "module", module, "sections"))
    return [(n, base[sec] + value, size, typed, bind) for n, sec, value, size, typed, bind
            in readelf_symbols(ko) if sec in base and not is_mapping(n)]


def in_empty_sections(ko: str) -> set[str]:
    """Names of the .ko's symbols in sections of no bytes."""
    sections = ko_sections(ko)
    return {n for n, sec, *_ in readelf_symbols(ko) if sec in sections and sections[sec][0] == 0}


def test_loaded_module_sizes_against_their_ko(live, tmp_path):
    """In every step, each loaded module's kallsyms lines sit where its
    /sys/module/M/sections put its .ko's symbols, and kmodsyms-c gave each
    line of a sized symbol its readelf size, binding and the .ko as object
    (a compressed .ko too, once libkmodsyms reads it; until then its lines
    are unsized and its status says why)."""
    _name, _kernel, _tree, boot = live
    files = module_files(boot)
    for phase in PHASES:
        got = json_lines(boot.path(phase, "tool", "lines.out"))
        statuses = {m["name"]: m for m in json_lines(boot.path(phase, "tool", "modules.out"))}
        assert sorted(statuses) == loaded_modules(boot, phase), phase
        for module in loaded_modules(boot, phase):
            ko = plain_ko(files[module], tmp_path)
            placed = sysfs_placed(boot, phase, module, ko)
            at = {(n, a): (size, bind) for n, a, size, _t, bind in placed}
            empty = in_empty_sections(ko)
            lines = [c for c in got if c["modules"] == [module]]
            unplaced = [c for c in lines if (c["name"], int(c["address"], 16)) not in at]
            assert lines and all(c["name"] in empty or is_mapping(c["name"]) for c in unplaced), \
                (phase, module, unplaced)
            rel = os.path.relpath(files[module], boot.modules_dir)
            if statuses[module]["status"] == "unsupported":
                assert files[module].endswith(".xz") and "xz" in statuses[module]["reason"], statuses
                assert all(c["size"] == 0 and c["object"] is None for c in lines)
                continue
            assert statuses[module]["status"] == "matched" and statuses[module]["file"] == rel, statuses
            sized = 0
            for c in unplaced:      # zero-size, in a section sysfs does not list; R46: a mapping symbol no .ko's
                assert (c["size"], c["object"]) == (0, None if is_mapping(c["name"]) else rel), (phase, c)
            for c in lines:
                if c in unplaced:
                    continue
                size, bind = at[c["name"], int(c["address"], 16)]
                assert (c["size"], c["binding"], c["object"]) == (size, bind, rel), (phase, c)
                sized += size > 0
            assert sized == statuses[module]["sized"] > 0, (phase, module)
            core = int(open(boot.path(phase, "sys", "module", module, "coresize")).read())
            text = [a for n, a, s, *_ in placed if s]
            assert core > 0 and max(text) - min(text) < core * 4, (phase, module)


def vmlinux_sized_lines(tree: str, rows, shift: int) -> list[tuple]:
    """vmlinux's sized symbols (readelf -sW) that are live core kallsyms
    lines, at their live addresses: what the innermost-sized rule picks from."""
    shown = {(a, n) for a, _l, n, mod in rows if not mod}
    out = []
    for n, _sec, value, size, typed, bind in readelf_symbols(os.path.join(tree, "vmlinux")):
        if size and (value + shift, n) in shown:
            out.append((n, value + shift, size, typed, bind))
    return out


def test_random_live_addresses_get_the_innermost_sized_symbol(live, tmp_path):
    """The guest's random addresses (tests/live/addresses.c: on lines, inside
    them, in gaps, just beyond), resolved there: where a sized symbol holds
    one, the answer is the innermost (docs/resolver.md §4, from readelf's
    sizes and the live sysfs placement); where none does, the answer is
    unsized or none."""
    _name, _kernel, tree, boot = live
    for phase in ("1-loaded", "4-inserted"):
        kallsyms = boot.path(phase, "proc", "kallsyms")
        rows = kallsyms_rows(kallsyms)
        shift = kaslr_shift(tree, kallsyms)
        statuses = {m["name"]: m["status"] for m in json_lines(boot.path(phase, "tool", "modules.out"))}
        sized = vmlinux_sized_lines(tree, rows, shift)
        files = module_files(boot)
        core_sections = []          # (start, end, module, .ko) of what sysfs places in a module's core
        for module in loaded_modules(boot, phase):
            if statuses[module] != "matched":
                continue
            ko = plain_ko(files[module], tmp_path)
            # a text-only kernel shows no data line of a module (is_core_symbol())
            shown = {(a, n) for a, _l, n, mod in rows if mod == module}
            sized += [s for s in sysfs_placed(boot, phase, module, ko) if s[2] and (s[1], s[0]) in shown]
            in_ko = ko_sections(ko)
            for sec, start in section_bases(boot.path(phase, "sys", "module", module, "sections")).items():
                size, core = in_ko.get(sec, (0, False))
                if core and size:
                    core_sections.append((start, start + size, module,
                                          os.path.relpath(files[module], boot.modules_dir)))
        by_start = ByStart(sized)
        addresses = [int(a, 16) for a in open(boot.path(phase, "addresses")).read().split()]
        records = json_lines(boot.path(phase, "tool", "resolve.out"))
        assert len(records) == len(addresses) >= 4000
        hits = 0
        for address, rec in zip(addresses, records):
            assert int(rec["address"], 16) == address
            want = innermost(by_start, address)
            if want is None:
                assert not rec["sized"], (phase, hex(address), rec)
                for start, end, module, path in core_sections:     # R32
                    if start <= address < end:
                        assert (rec["module"], rec["object"]) == (module, path), (phase, hex(address), rec)
            else:
                assert rec["sized"] and (rec["symbol"], int(rec["start"], 16), rec["size"]) == \
                    tuple(want[:3]), (phase, hex(address), rec, want)
                hits += 1
        assert hits > len(addresses) // 2, hits


# ------------------------------------------------------------ modules come and go
def test_fresh_loads_are_right_after_each_module_change(live):
    """Before and after an unload, a reload and an insmod, the guest's fresh
    load names exactly /proc/modules' modules, every module line in its own
    module, and the reloaded module's lines at its new sysfs places (the
    size check of each step is test_loaded_module_sizes_against_their_ko)."""
    _name, _kernel, _tree, boot = live
    for phase in PHASES:
        rows = kallsyms_rows(boot.path(phase, "proc", "kallsyms"))
        got = json_lines(boot.path(phase, "tool", "lines.out"))
        assert len(got) == len(rows)
        assert sorted({r[3] for r in rows if r[3]}) == loaded_modules(boot, phase), phase
        for (address, _letter, _symbol, module), c in zip(rows, got):
            if module:
                assert c["modules"] == [module] and c["origin"] == "loadable", (phase, c)
            else:
                assert c["origin"] in ("core", "builtin"), (phase, c)
    core = lambda phase: [r for r in kallsyms_rows(boot.path(phase, "proc", "kallsyms")) if not r[3]]  # noqa: E731
    assert core("1-loaded") == core("2-unloaded") == core("3-reloaded") == core("4-inserted")
    assert not [c for c in json_lines(boot.path("2-unloaded", "tool", "lines.out"))
                if c["origin"] == "loadable"]


def test_python_refresh_follows_the_live_module_changes(live, tmp_path):
    """Resolver.refresh() over the live steps: the kallsyms and
    /proc/modules it reads replaced by the next step's, its answers equal a
    fresh load's of that step, and its ModuleChanges name what changed."""
    import shutil
    _name, _kernel, _tree, boot = live
    work = tmp_path / "proc"
    work.mkdir()
    sysfs = tmp_path / "sys"

    def show(phase):
        for name in ("kallsyms", "modules"):
            shutil.copy(boot.path(phase, "proc", name), work / name)
        shutil.rmtree(sysfs, ignore_errors=True)
        if os.path.isdir(boot.path(phase, "sys")):
            shutil.copytree(boot.path(phase, "sys"), sysfs)
        else:                   # no module loaded: no /sys/module/M to show
            sysfs.mkdir()

    show(PHASES[0])
    r = load(boot.syms, str(work / "kallsyms"), modules_dir=boot.modules_dir,
             sysfs_root=str(sysfs), proc_modules=str(work / "modules"))
    expected = {"2-unloaded": ([], [RELOAD]), "3-reloaded": ([RELOAD], []),
                "4-inserted": ([INSERT], [])}
    for phase in PHASES[1:]:
        show(phase)
        changes = r.refresh()
        assert (sorted(changes.loaded), sorted(changes.unloaded)) == expected[phase], (phase, changes)
        fresh = resolver(boot, phase)
        assert list(r.kallmodsyms_lines()) == list(fresh.kallmodsyms_lines()), phase
        assert list(r.module_stats) == list(fresh.module_stats)


def test_c_refresh_follows_the_live_module_changes(live):
    """kmodsyms-c refresh in the guest (tests/live/init.sh): one load at the
    first step, kms_refresh() after each module change.  Each step names
    the modules /proc/modules gained and lost since the last, reports the
    modules and statuses a fresh load of that step does, as many lines as
    the live kallsyms has, and writes the refreshed lines: the fresh
    load's, line for line, which the other tests hold to the linker maps
    and each .ko."""
    _name, _kernel, _tree, boot = live
    rc, err = int(boot.text("refresh.rc")), boot.text("refresh.err")
    assert rc == 0 and all(line.startswith(f"kmodsyms-c: warning: module {INSERT}: ")
                           for line in err.splitlines()), (rc, err)
    steps = json_lines(boot.path("refresh.out"))
    assert [s["step"] for s in steps] == list(range(len(PHASES))), steps
    before = None
    for phase, got in zip(PHASES, steps):
        now = loaded_modules(boot, phase)
        if before is None:
            assert (got["loaded"], got["unloaded"], got["reloaded"]) == ([], [], []), got
        else:
            assert (sorted(got["loaded"]), sorted(got["unloaded"]), got["reloaded"]) == \
                (sorted(set(now) - set(before)), sorted(set(before) - set(now)), []), (phase, got)
        assert got["modules"] == json_lines(boot.path(phase, "tool", "modules.out")), phase
        assert sorted(m["name"] for m in got["modules"]) == now, phase
        rows = kallsyms_rows(boot.path(phase, "proc", "kallsyms"))
        assert got["lines"] == len(rows), phase
        if before is not None:
            refreshed = json_lines(boot.path(phase, "tool", "refresh-lines.out"))
            assert [(int(c["address"], 16), c["type"], c["name"]) for c in refreshed] == \
                [r[:3] for r in rows], phase
            assert refreshed == json_lines(boot.path(phase, "tool", "lines.out")), phase
        before = now
    assert [(s["loaded"], s["unloaded"]) for s in steps[1:]] == \
        [([], [RELOAD]), ([RELOAD], []), ([INSERT], [])]


# ------------------------------------------------------------------ staleness
def test_another_build_of_the_same_release_is_refused_by_build_id(live):
    """The guest's /other/dtrace_syms is of another build of the same
    release (same `uname -r`: x86_64's other configuration, arm64's tree
    relinked with another timestamp): the live load refuses it naming
    the build-id, --force uses it with a warning, and this build's own file
    (every other step) loads."""
    _name, _kernel, _tree, boot = live
    rc, out, err = tool(boot, "1-loaded", "stale")
    assert rc == 2 and out == "" and len(err.splitlines()) == 1, (rc, err)
    assert "build-id" in err and "/other/dtrace_syms" in err, err
    rc, out, err = tool(boot, "1-loaded", "forced")
    assert rc == 0 and out, err
    assert tool(boot, "1-loaded", "lines")[0] == 0


# ------------------------------------------------------------- unprivileged
# tests/live/init.sh's cases: kernel.kptr_restrict, kernel.perf_event_paranoid
# and the reader (uid 1000 without capabilities, or root with CAP_SYSLOG).
READERS = {"open": (0, 1, "user"), "paranoid": (0, 2, "user"), "paranoid-root": (0, 2, "root"),
           "restricted": (1, 1, "user"), "restricted-paranoid": (1, 2, "user"),
           "restricted-as-root": (1, 2, "root"), "restricted-root": (2, -1, "root")}


def shown_to(kptr: int, paranoid: int, who: str) -> bool:
    """kernel/ksyms_common.c kallsyms_show_value() of the 6.12 source, for
    a kernel with CONFIG_PERF_EVENTS: root has CAP_SYSLOG, the user not."""
    if kptr == 0 and paranoid <= 1:
        return True
    return kptr <= 1 and who == "root"


def _user_tool(boot, case):
    base = boot.path("user", case, "tool")
    return (int(open(base + ".rc").read()), open(base + ".out").read(), open(base + ".err").read())


def _reader(boot, case) -> tuple[int, int, str]:
    """The case's sysctls as the guest set them, and its reader."""
    kptr, paranoid, who = READERS[case]
    assert boot.text("user", case, "sysctl").split() == \
        ["kernel.kptr_restrict", "=", str(kptr), "kernel.perf_event_paranoid", "=", str(paranoid)]
    return kptr, paranoid, who


@pytest.mark.parametrize("case", sorted(c for c, r in READERS.items() if shown_to(*r)))
def test_reader_sees_addresses_when_the_sysctls_allow(live, case):
    """Where the kernel's rule shows the reader addresses (the uid-1000 reader
    at kptr_restrict 0 and perf_event_paranoid 1; root at kptr_restrict 1),
    the live kallsyms has them and kmodsyms-c loads (the unprivileged one
    without reading the root-only /sys/module/M/sections)."""
    _name, _kernel, _tree, boot = live
    _reader(boot, case)
    head = boot.text("user", case, "kallsyms-head")
    assert not head.startswith("0000000000000000"), head
    rc, out, err = _user_tool(boot, case)
    assert rc == 0 and out, err


@pytest.mark.parametrize("case, cause, remedy, wrong", [
    # kptr_restrict=0 but perf_event_paranoid=2: kallsyms_for_perf() says no
    ("paranoid", "kernel.perf_event_paranoid is 2", "sysctl kernel.perf_event_paranoid=1",
     "kptr_restrict"),
    # kptr_restrict=1, no CAP_SYSLOG; perf_event_paranoid=1, so 0 would show them
    ("restricted", "kernel.kptr_restrict is 1", "sysctl kernel.kptr_restrict=0", None),
    # the same with perf_event_paranoid=2: kptr_restrict=0 alone would not
    ("restricted-paranoid", "kernel.kptr_restrict is 1", "as root", "kptr_restrict=0"),
    # kptr_restrict=2 hides addresses from root too: being root is no remedy
    ("restricted-root", "kernel.kptr_restrict is 2", "sysctl kernel.kptr_restrict=1", "run as root"),
])
def test_hidden_addresses_name_the_real_cause(live, case, cause, remedy, wrong):
    """Where the kernel's rule shows the reader zeros, the live kallsyms has
    them, and kmodsyms-c refuses in one line naming the setting that hides
    them and a remedy that would show them, and no remedy that cannot."""
    _name, _kernel, _tree, boot = live
    assert not shown_to(*_reader(boot, case))
    head = boot.text("user", case, "kallsyms-head")
    assert head.startswith("0000000000000000"), head
    rc, out, err = _user_tool(boot, case)
    assert rc == 2 and out == "" and len(err.splitlines()) == 1, (rc, err)
    assert err.startswith("kmodsyms-c: error: /proc/kallsyms: every address is 0: "), err
    assert cause in err and remedy in err and not (wrong and wrong in err), err


# ------------------------------------------- what the live kernel adds to derived texts
def test_live_core_lines_are_the_derived_kallsyms(live):
    """The core part of the live /proc/kallsyms equals what
    tests/kallsyms_image.py decodes from vmlinux's tables at the kernel's
    own offset, line for line: what the derived texts assume."""
    _name, _kernel, tree, boot = live
    kallsyms = boot.path("1-loaded", "proc", "kallsyms")
    shift = kaslr_shift(tree, kallsyms)
    with open(kallsyms, "rb") as f:
        core = [line for line in f.read().splitlines(keepends=True) if b"\t[" not in line]
    assert core == proc_kallsyms(os.path.join(tree, "vmlinux"), shift).splitlines(keepends=True)


def exported_symbols(ko: str) -> set[str]:
    """What the module exports: the names its __ksymtab_NAME entries give."""
    return {n[len("__ksymtab_"):] for n, *_ in readelf_symbols(ko) if n.startswith("__ksymtab_")}


def derived_module_lines(ko: str, module: str, text_only: bool) -> list[tuple[str, str]]:
    """(letter, name) of a loaded module's lines as the derived kallsyms
    texts write them: fixtures/kbuild/mkkallsyms.py's order and set (its
    symbol table order, .init* left out), lettered as the kernel does
    (kallsyms_variants.kernel_module_letters), text sections only for a
    text-only kernel (kallsyms_variants.text_only's module rule)."""
    import importlib.util

    from kallsyms_variants import MODULE_TEXT_LETTERS, kernel_module_letters
    spec = importlib.util.spec_from_file_location(
        "mkkallsyms", os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                   "fixtures", "kbuild", "mkkallsyms.py"))
    mkkallsyms = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mkkallsyms)
    text = "".join(line + "\n" for line in mkkallsyms.module_symbols(ko, 0xffffffffc0000000, module))
    exported = {(module.encode(), name.encode()) for name in exported_symbols(ko)}
    out = []
    for line in kernel_module_letters(text.encode(), exported).decode().splitlines():
        _address, letter, name = line.split("\t")[0].split(" ", 2)
        if not text_only or letter.encode() in MODULE_TEXT_LETTERS:
            out.append((letter, name))
    return out


def test_module_lines_are_what_the_derived_texts_write(live, tmp_path):
    """What the live kernel prints for a loaded module, against what our
    derived kallsyms texts write for it: the same names in the same order
    (the .ko's symbol table order, its freed .init symbols gone, .exit
    kept), each upper case exactly when the module exports it (a global
    cleanup_module is `t`), and with CONFIG_KALLSYMS_ALL=n only the
    executable sections' lines."""
    _name, _kernel, tree, boot = live
    files = module_files(boot)
    for module in loaded_modules(boot, "4-inserted"):
        ko = plain_ko(files[module], tmp_path)
        rows = [(letter, symbol) for _a, letter, symbol, mod
                in kallsyms_rows(boot.path("4-inserted", "proc", "kallsyms")) if mod == module]
        exported = exported_symbols(ko)
        assert all(letter.isupper() == (symbol in exported) for letter, symbol in rows), (module, rows)
        assert rows == derived_module_lines(ko, module, not kallsyms_all(tree)), module
    # a mapping symbol's name ($x) is in .text too
    init = [n for n, sec, *_ in readelf_symbols(plain_ko(files[RELOAD], tmp_path))
            if sec == ".init.text" and not is_mapping(n)]
    live_names = {r[2] for r in kallsyms_rows(boot.path("4-inserted", "proc", "kallsyms"))}
    assert init and not live_names & set(init)      # freed after init_module ran
