"""Debian's linux-source-* tarball built into the corpus cache, once per
machine and configuration: the kernels tests/test_kernel_source.py (-m slow)
reads as built and tests/test_live.py (-m live) boots.  One cache, one rule:
a tree lives under the tarball's size and mtime plus a digest of its
configuration recipe, so two configurations never overwrite each other, and
the slow and live suites share the x86_64 tree.  A relinked kernel is another
tree's copy linked again with another build timestamp: another build of the
same release, for a fraction of a build.
"""

from __future__ import annotations

import fcntl
import glob
import hashlib
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, replace

import numpy as np
import pytest

SOURCE_TARBALLS = "/usr/src/linux-source-*.tar.xz"
# tinyconfig, then: loadable modules (so modules.builtin is written),
# kallsyms, tristate drivers built in (configfs has several objects,
# binfmt_misc and crc-ccitt one each), and the independent truths: ld's maps
# and upstream's modules.builtin.ranges.
CONFIG_ENABLE = ("MODULES", "KALLSYMS", "CONFIGFS_FS", "BINFMT_MISC", "CRC_CCITT",
                 "EXPERT", "VMLINUX_MAP", "BUILTIN_MODULE_RANGES")
# What a busybox initramfs needs to boot under QEMU with a serial console,
# and what tests/test_live.py reads there: KASLR, module unloading, uid
# changes (MULTIUSER) and the sysctls kptr_restrict / perf_event_paranoid.
BOOTABLE_X86_64 = ("64BIT", "PRINTK", "TTY", "SERIAL_8250", "SERIAL_8250_CONSOLE",
                   "BLK_DEV_INITRD", "DEVTMPFS", "DEVTMPFS_MOUNT", "PROC_FS", "SYSFS",
                   "SYSCTL", "PROC_SYSCTL", "BINFMT_ELF", "BINFMT_SCRIPT", "MULTIUSER",
                   "FUTEX", "RELOCATABLE", "RANDOMIZE_BASE", "PERF_EVENTS", "MODULE_UNLOAD")
# The same for arm64 on QEMU's virt machine: its PL011 UART (ARM_AMBA, the
# GIC, the architected timer and PSCI, which reboots it, are selected by
# ARM64 itself; virt's UART is a device-tree AMBA device, no PCI).  KASLR
# takes its seed from the /chosen/kaslr-seed QEMU writes, or RNDR of
# -cpu max.
BOOTABLE_ARM64 = ("PRINTK", "TTY", "SERIAL_AMBA_PL011", "SERIAL_AMBA_PL011_CONSOLE",
                  "BLK_DEV_INITRD", "DEVTMPFS", "DEVTMPFS_MOUNT", "PROC_FS", "SYSFS",
                  "SYSCTL", "PROC_SYSCTL", "BINFMT_ELF", "BINFMT_SCRIPT", "MULTIUSER",
                  "FUTEX", "RELOCATABLE", "RANDOMIZE_BASE", "PERF_EVENTS", "MODULE_UNLOAD")
# Loadable: autofs4 of seven objects, crc7 of one.
LOADABLE = ("AUTOFS_FS", "CRC7")
# gawk: scripts/generate_builtin_ranges.awk writes modules.builtin.ranges.
BUILD_TOOLS = ("make", "flex", "bison", "bc", "tar", "xz", "gawk")


@dataclass(frozen=True)
class Kernel:
    """One kernel built from the tarball: an architecture and a configuration."""

    arch: str
    cross_compile: str          # CROSS_COMPILE prefix, "" for this machine's gcc
    enable: tuple[str, ...]     # =y beyond CONFIG_ENABLE
    disable: tuple[str, ...]    # =n
    modules: tuple[str, ...]    # =m
    kaslr_shift: int            # a boot's shift, for a kallsyms derived from vmlinux
    cache_name: str             # told apart from the other trees of the tarball in the cache
    relink_of: Kernel | None = None     # built as that kernel's tree, copied and relinked
    timestamp: str = ""                 # with this KBUILD_BUILD_TIMESTAMP

    def make_args(self) -> list[str]:
        return [f"ARCH={self.arch}"] + ([f"CROSS_COMPILE={self.cross_compile}"] if self.cross_compile else [])

    def tools(self) -> list[str]:
        return [f"{self.cross_compile}gcc", f"{self.cross_compile}ld"]

    def recipe(self) -> str:
        if self.relink_of is not None:
            return self.relink_of.recipe() + f"relinked KBUILD_BUILD_TIMESTAMP={self.timestamp}\n"
        return " ".join(self.make_args() + list(CONFIG_ENABLE + self.enable)
                        + [f"-{n}" for n in self.disable] + [f"m:{n}" for n in self.modules]) + "\n"


# x86_64: 64BIT (tinyconfig alone gives i386), vmlinux.o pass, moved by
# KASLR in 2 MiB steps; bootable.  Without CONFIG_KALLSYMS_ALL kallsyms lists
# only the text ranges; X86_64_ALL lists everything, as distributions do.
# s390: big-endian, linked from vmlinux.a without a vmlinux.o pass, and
# (tinyconfig) no KASLR.
X86_64 = Kernel("x86", "", BOOTABLE_X86_64, ("KALLSYMS_ALL",), LOADABLE, 0x2a00000, "")
X86_64_ALL = Kernel("x86", "", BOOTABLE_X86_64 + ("KALLSYMS_ALL",), (), LOADABLE,
                    0x2a00000, "-all")
S390 = Kernel("s390", "s390x-linux-gnu-", (), ("KALLSYMS_ALL",), (), 0, "-s390")
# arm64: linked -pie in a single pass from vmlinux.a (no vmlinux.o), with
# CONFIG_KALLSYMS_ALL; bootable on QEMU's virt machine.  A boot's KASLR
# shift is the live suite's to read: no derived kallsyms uses this one.
ARM64 = Kernel("arm64", "aarch64-linux-gnu-", BOOTABLE_ARM64 + ("KALLSYMS_ALL",), (), LOADABLE,
               0, "-arm64")
# ARM64's tree relinked with another version timestamp: the same release
# (uname -r), another UTS version string, so another build-id.
ARM64_REBUILT = replace(ARM64, cache_name="-arm64-rebuilt", relink_of=ARM64,
                        timestamp="Thu Jan  1 00:00:00 UTC 2026")


def _version_key(path: str):
    return [int(n) for n in re.findall(r"\d+", os.path.basename(path))]


def run(cmd, cwd, **kw):
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, **kw)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
    return proc


def build_jobs() -> int:
    """make -j: KMODSYMS_KERNEL_JOBS, else every core."""
    return int(os.environ.get("KMODSYMS_KERNEL_JOBS") or os.cpu_count() or 1)


def _build_tree(tarball: str, root: str, kernel: Kernel) -> str:
    """Unpack, configure and build the kernel into ROOT (once: a stamp file
    records the configuration it was built with; a lock beside ROOT keeps
    two test runs from building it at once)."""
    os.makedirs(os.path.dirname(root), exist_ok=True)
    with open(root + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _build_tree_locked(tarball, root, kernel)


def _build_tree_locked(tarball: str, root: str, kernel: Kernel) -> str:
    stamp = os.path.join(root, ".complete")
    recipe = kernel.recipe()
    trees = glob.glob(os.path.join(root, "linux-source-*"))
    if os.path.exists(stamp) and open(stamp).read() == recipe and len(trees) == 1:
        return trees[0]
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    make = ["make"] + kernel.make_args()
    if kernel.relink_of is not None:
        base = _build_tree(tarball, tree_root(kernel.relink_of), kernel.relink_of)
        run(["cp", "-a", base, root], cwd=root)     # -a: mtimes kept, so make redoes only the link
        tree = os.path.join(root, os.path.basename(base))
        run(["nice"] + make + [f"KBUILD_BUILD_TIMESTAMP={kernel.timestamp}", f"-j{build_jobs()}"], cwd=tree)
        with open(stamp, "w") as f:
            f.write(recipe)
        return tree
    run(["tar", "xJf", tarball, "-C", root], cwd=root)
    (tree,) = glob.glob(os.path.join(root, "linux-source-*"))
    run(make + ["-s", "tinyconfig"], cwd=tree)
    enable = CONFIG_ENABLE + kernel.enable
    switches = [arg for name in enable for arg in ("--enable", name)] + \
        [arg for name in kernel.disable for arg in ("--disable", name)] + \
        [arg for name in kernel.modules for arg in ("--module", name)]
    run(["scripts/config", "--file", ".config", *switches], cwd=tree)
    run(make + ["-s", "olddefconfig"], cwd=tree)
    with open(os.path.join(tree, ".config")) as f:
        config = f.read()
    missing = [name for name in enable if f"\nCONFIG_{name}=y\n" not in config] + \
        [f"-{name}" for name in kernel.disable if f"\n# CONFIG_{name} is not set\n" not in config] + \
        [f"m:{name}" for name in kernel.modules if f"\nCONFIG_{name}=m\n" not in config]
    assert not missing, f"tinyconfig dropped {missing}: their dependencies changed in this kernel"
    run(["nice"] + make + [f"-j{build_jobs()}"], cwd=tree)
    shutil.copy(os.path.join(tree, "Makefile"), os.path.join(tree, "Makefile.pristine"))
    with open(stamp, "w") as f:
        f.write(recipe)
    return tree


def source_tarball() -> str:
    """The newest linux-source tarball; skips without one."""
    tarballs = sorted(glob.glob(SOURCE_TARBALLS), key=_version_key)
    if not tarballs:
        pytest.skip(f"no {SOURCE_TARBALLS} (apt-get install linux-source-6.12)")
    return tarballs[-1]


def tree_root(kernel: Kernel) -> str:
    """Where ``kernel``'s tree lives in the corpus cache."""
    from bench.corpus import _corpus_cache_dir
    tarball = source_tarball()
    st = os.stat(tarball)
    name = os.path.basename(tarball)[:-len(".tar.xz")]
    digest = hashlib.sha256(kernel.recipe().encode()).hexdigest()[:8]
    return os.path.join(_corpus_cache_dir(),
                        f"{name}{kernel.cache_name}-{st.st_size}-{int(st.st_mtime)}-{digest}")


def built_tree(kernel: Kernel) -> str:
    """The tree built for ``kernel`` in the corpus cache; skips without the
    tarball or a build tool."""
    tarball = source_tarball()
    absent = [tool for tool in BUILD_TOOLS + tuple(kernel.tools()) if shutil.which(tool) is None]
    if absent:
        pytest.skip(f"kernel build tools absent: {', '.join(absent)}")
    return _build_tree(tarball, tree_root(kernel), kernel)


@dataclass(frozen=True)
class LinkTruth:
    """What ld and kbuild say of a built tree, independently of kmodsyms'
    answers: the object at each link address (ld's maps), the built-in
    modules there (upstream's modules.builtin.ranges), the symbols the link
    script defines, and the objects' ends."""

    objects: object             # kmodsyms.linkmap.ObjectMap
    beside: object              # ObjectMap of what the final link takes beside vmlinux.o
    ranges: object              # kmodsyms.verify.BuiltinRanges
    sizes: dict                 # (name bytes, link address) -> ELF st_size
    linker_defined: frozenset[str]
    elf: object                 # kmodsyms.verify.ElfInfo: vmlinux's sections
    object_modules: dict        # object path -> its built-in modules, from its .cmd

    def is_object_end(self, name: str, at_link: int) -> bool:
        """A zero-size line at an object's very end: no object holds it."""
        return self.sizes.get((name.encode("utf-8", "surrogateescape"), at_link), 0) == 0 \
            and bool(self.objects.ends_at(at_link))

    def modules_at(self, at_link: int) -> list[str]:
        """modules.builtin.ranges' modules there; in a section its
        generator does not cover, kbuild's word for ld's object there."""
        hit = int(self.ranges.lookup([at_link])[0])
        if hit >= 0:
            return sorted(self.ranges.ranges[hit].modules)
        (section,) = self.elf.section_of(np.array([at_link], dtype=np.uint64))
        if not ranges_cover(section):
            obj = self.objects.object_at(at_link)
            return sorted(self.object_modules.get(obj, ())) or ["vmlinux"]
        return ["vmlinux"]

    def beside_vmlinux_o(self, at_link: int) -> str | None:
        """The object the final link took beside vmlinux.o
        (init/version-timestamp.o, .vmlinux.export.o) at the address."""
        return self.beside.object_at(at_link)

    def agrees(self, name: str, at_link: int, answer: str | None) -> bool:
        """ANSWER is ld's object at the address, or None for a symbol the
        link script defines (its own line, whatever object's bytes follow)."""
        if answer is None:
            return name in self.linker_defined
        return answer == self.objects.object_at(at_link)


def ranges_cover(section: str) -> bool:
    """Whether scripts/generate_builtin_ranges.awk writes ranges for an
    output section: only those named ".*", less .orc_*, *_sites and
    per-cpu ones (so never __param, __modver, __ksymtab...)."""
    return section.startswith(".") and not (section.startswith(".orc_") or
                                            section.endswith("_sites") or ".percpu" in section)


def cmd_modules(tree: str, obj: str, builtin: set[str]) -> tuple[str, ...]:
    """The built-in modules kbuild compiled OBJ for: DKBUILD_MODFILE of its
    .cmd file, as generate_builtin_ranges.awk's get_module_info() reads it
    (one name must be a built-in module; several are taken as they are)."""
    cmd = os.path.join(tree, os.path.dirname(obj), "." + os.path.basename(obj) + ".cmd")
    try:
        with open(cmd, encoding="utf-8", errors="surrogateescape") as f:
            first = f.readline()
    except OSError:
        return ()
    m = re.search(r"DKBUILD_MODFILE=['\"]+([^'\"]+)", first)
    if not m:
        return ()
    names = tuple(os.path.basename(n).replace("-", "_") for n in m.group(1).split())
    return names if len(names) > 1 or names[0] in builtin else ()


def link_truth(tree: str) -> LinkTruth:
    from kmodsyms.scan.linkmap import ObjectMap, alloc_sections, links_vmlinux_o, parse_map, vmlinux_object_map
    from kmodsyms.scan.verify import parse_ranges, read_elf_info

    path = lambda name: os.path.join(tree, name)  # noqa: E731
    objects = vmlinux_object_map(path("vmlinux.map"), path("vmlinux.o.map")
                                 if links_vmlinux_o(path("vmlinux.map")) else None, path("vmlinux"))
    link = {}
    with open(path("System.map")) as f:
        for line in f:
            address, _letter, name = line.split()
            link.setdefault(name, int(address, 16))
    elf = read_elf_info(path("vmlinux"))
    with open(path("modules.builtin.ranges")) as f:
        ranges = parse_ranges(f.read(), lambda name, _section: link.get(name), elf.addresses)
    # "0x... name = ." : what the link script defines; "0x... PROVIDE (name
    # = other)" too where the link used it (arm64's image-vars.h gives the
    # position-independent early code its __pi_ names so)
    with open(path("vmlinux.map")) as f:
        linker_defined = frozenset(re.findall(r"^\s+0x[0-9a-f]+\s+(?:PROVIDE \()?(\S+) = ", f.read(), re.M))
    loaded = alloc_sections(path("vmlinux"))
    final = parse_map(path("vmlinux.map")) if links_vmlinux_o(path("vmlinux.map")) else []
    beside = ObjectMap([(s.address, s.address + s.size, s.file) for s in final
                        if s.output in loaded and s.size and s.file.endswith(".o")
                        and not s.file.endswith("vmlinux.o")], "vmlinux.map")
    with open(path("modules.builtin")) as f:
        builtin = {os.path.basename(line.strip())[:-len(".ko")].replace("-", "_") for line in f if line.strip()}
    object_modules = {obj: cmd_modules(tree, obj, builtin) for obj in set(objects.object)}
    return LinkTruth(objects, beside, ranges, elf.sizes, linker_defined, elf, object_modules)
