"""The debug vmlinux as a build from debug info reads it, once: its symbol
table, its section headers, its build-id, and who it is, in its own words
(``linux_banner``: ``Linux version RELEASE (USER@HOST) (COMPILER, LINKER)
VERSION``, the string init/version-timestamp.c compiles in).  The other
inputs are checked against this (:mod:`.debugcheck`)."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from kmodsyms.errors import KmodsymsError
from kmodsyms.scan.elf.elfdefs import SHT_NOBITS, SHT_SYMTAB
from kmodsyms.scan.elf.elffile import ElfFile
from kmodsyms.scan.elf.elfimage import Image, image_of

# A System.map's (or kallsyms') first line: "ADDRESS TYPE NAME".
_SYMBOL_LINE = re.compile(rb"[0-9a-fA-F]{8,16} [A-Za-z?] \S")
# A kernel's: "Linux version REL (USER@HOST) (COMPILER, LINKER) #VERSION"
_BANNER = re.compile(rb"Linux version (\S+)(?: \((.*)\) (#.*))?")

# Linux's architectures (SRCARCH) by ELF machine (the gABI's EM_ numbers).
SRCARCH_BY_MACHINE = {3: "x86", 62: "x86", 183: "arm64", 40: "arm", 8: "mips", 20: "powerpc",
                      21: "powerpc", 22: "s390", 243: "riscv", 258: "loongarch", 2: "sparc",
                      43: "sparc", 15: "parisc", 42: "sh", 4: "m68k", 94: "xtensa", 164: "hexagon",
                      195: "arc", 252: "csky", 92: "openrisc", 138: "microblaze", 41: "alpha",
                      88: "m68k", 106: "nios2"}


@dataclass
class DebugVmlinux:
    path: str
    image: Image
    machine: int
    symbols: np.ndarray           # the .symtab entries (name offset, value, size, info, shndx)
    names: list[bytes]            # each entry's name
    section_names: list[str]
    section_flags: list[int]
    banner: str                   # linux_banner, without its newline ("" when absent)

    @property
    def release(self) -> str:
        """UTS_RELEASE, as ``uname -r`` prints it ("" without a banner)."""
        found = _BANNER.match(self.banner.encode("utf-8", "surrogateescape"))
        return found.group(1).decode("utf-8", "surrogateescape") if found else ""

    @property
    def srcarch(self) -> str:
        return SRCARCH_BY_MACHINE.get(self.machine, "")


def remedy(release: str) -> str:
    """What to give instead of a file that is not the debug vmlinux of
    ``release``: where the kernel's debug package puts it (there is no
    build tree to rebuild it in)."""
    rel = release or "RELEASE"
    return (f"give the debug vmlinux, /usr/lib/debug/boot/vmlinux-{rel} or "
            f"/usr/lib/debug/lib/modules/{rel}/vmlinux, from the kernel's debug package "
            f"(Debian: linux-image-{rel}-dbg; Fedora: kernel-debuginfo; docs/distributions.md)")


def not_the_debug_vmlinux(head: bytes) -> str:
    """What a file whose first bytes are ``head`` is when it is one of those
    given for the debug vmlinux by mistake: the kernel's boot image
    (vmlinuz: x86's boot protocol header, arm64's Image, an EFI zboot or a
    gzip'd image) or a System.map; "" otherwise."""
    if head[0x202:0x206] == b"HdrS" or head[0x38:0x3c] == b"ARM\x64" or head[4:8] == b"zimg" \
            or head[:2] == b"\x1f\x8b":
        return "the kernel's boot image (vmlinuz), not the debug vmlinux"
    if _SYMBOL_LINE.match(head):
        return "a System.map, not the debug vmlinux"
    return ""


def check_debug_vmlinux_kind(path: str, release: str) -> None:
    """Refuse a boot image or a System.map given as the debug vmlinux, in
    one line saying which it is (before the other inputs are looked at)."""
    try:
        with open(path, "rb") as f:
            what = not_the_debug_vmlinux(f.read(4096))
    except OSError:
        return      # read_debug_vmlinux() says why
    if what:
        raise KmodsymsError(f"{path}: {what}; {remedy(release)}")


def read_debug_vmlinux(path: str, release: str = "") -> DebugVmlinux:
    """Read ``path``, the debug vmlinux of ``release`` (for the advice);
    refused in one line when it is no linked image with a symbol table."""
    advice = remedy(release)
    try:
        with open(path, "rb") as f:
            elf = ElfFile(path, f, "image", advice)
            image = image_of(elf)
            symtab = elf.find_section(SHT_SYMTAB)
            if symtab is None:
                raise KmodsymsError(f"{path}: no symbol table (a stripped vmlinux); {advice}")
            table = elf.symbol_array(symtab)
            strings = elf.symbol_strings(symtab) + b"\0"
            names = [strings[o:strings.index(b"\0", o)] for o in table["name"].tolist()]
            banner = _banner(elf, table, names)
            return DebugVmlinux(path, image, elf.header.machine, table, names,
                                [elf.section_name(i) for i in range(len(elf.sections))],
                                [s.flags & 0xFFFFFFFF for s in elf.sections], banner)
    except OSError as e:
        raise KmodsymsError(f"cannot read {path}: {e.strerror}") from None


def _banner(elf: ElfFile, table: np.ndarray, names: list[bytes]) -> str:
    """The contents of ``linux_banner`` (the last that reads as one: the
    strong definition of init/version-timestamp.o comes after version.o's
    weak one)."""
    found = ""
    for k in (i for i, name in enumerate(names) if name == b"linux_banner"):
        shndx, value, size = int(table["shndx"][k]), int(table["value"][k]), int(table["size"][k])
        if not 0 < shndx < len(elf.sections) or not 0 < size < 4096:
            continue
        section = elf.sections[shndx]
        if section.type == SHT_NOBITS or not section.addr <= value < section.addr + section.size:
            continue
        data = elf.read(section.offset + value - section.addr, min(size, section.addr + section.size - value),
                        "linux_banner")
        text = data.split(b"\0", 1)[0].rstrip(b"\n")
        if _BANNER.match(text):
            found = text.decode("utf-8", "surrogateescape")
    return found
