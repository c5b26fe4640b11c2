"""What ``/proc/kallsyms`` of a built kernel lists for vmlinux, decoded from
the tables ``scripts/kallsyms.c`` compiled into it (test helper): the truth
of a configuration's kallsyms without booting the kernel.

The tables, as ``kernel/kallsyms.c`` reads them: ``kallsyms_num_syms``;
``kallsyms_names``, each name a length byte (two when the first has its
top bit set) then that many token numbers, the first character of the
expansion being the type letter; ``kallsyms_token_table`` and
``kallsyms_token_index``; ``kallsyms_offsets`` from
``kallsyms_relative_base`` (``CONFIG_KALLSYMS_ABSOLUTE_PERCPU`` kernels
encode per-cpu symbols otherwise, which this helper refuses).  A kernel
linked -pie with --no-apply-dynamic-relocs (arm64) holds 0 there: its value
is the addend of the relative dynamic relocation that the kernel applies to
it when it relocates itself.
Read with pyelftools, the ELF reader of record, not kmodsyms' own."""

from __future__ import annotations

import struct

from elftools.elf.constants import SH_FLAGS
from elftools.elf.descriptions import describe_reloc_type
from elftools.elf.elffile import ELFFile

TABLES = ("kallsyms_num_syms", "kallsyms_names", "kallsyms_token_table",
          "kallsyms_token_index", "kallsyms_offsets", "kallsyms_relative_base")


def proc_kallsyms(vmlinux: str, shift: int = 0) -> bytes:
    """vmlinux's lines of ``/proc/kallsyms`` for a boot that moved the
    kernel by ``shift`` (KASLR), in kallsyms order."""
    with open(vmlinux, "rb") as f:
        elf = ELFFile(f)
        order = "<" if elf.little_endian else ">"
        long = "Q" if elf.elfclass == 64 else "I"
        where = {s.name: s["st_value"] for s in elf.get_section_by_name(".symtab").iter_symbols()
                 if s.name in TABLES}
        missing = [name for name in TABLES if name not in where]
        if missing:
            raise ValueError(f"{vmlinux}: no {', '.join(missing)} (a kernel without CONFIG_KALLSYMS, "
                             "or with CONFIG_KALLSYMS_ABSOLUTE_PERCPU's other names)")

        def read(address: int, size: int) -> bytes:
            for section in elf.iter_sections():
                start = section["sh_addr"]
                if section["sh_type"] == "SHT_PROGBITS" and start <= address < start + section["sh_size"]:
                    return section.data()[address - start:address - start + size]
            raise ValueError(f"{vmlinux}: {address:#x} is in no section with contents")

        def relocated(address: int, stored: int) -> int:
            """What the kernel's self-relocation writes at ADDRESS: a relative
            dynamic relocation's addend (dynamic: SHT_RELA loaded with the
            image, not --emit-relocs' sections), else the STORED value."""
            rela = order + ("QQQ" if elf.elfclass == 64 else "III")     # an address: unsigned
            for section in elf.iter_sections():
                if section["sh_type"] != "SHT_RELA" or not section["sh_flags"] & SH_FLAGS.SHF_ALLOC:
                    continue
                for offset, info, addend in struct.iter_unpack(rela, section.data()):
                    kind = info & 0xFFFFFFFF if elf.elfclass == 64 else info & 0xFF
                    if offset == address and describe_reloc_type(kind, elf).endswith("_RELATIVE"):
                        return addend
            return stored

        count, = struct.unpack(order + "I", read(where["kallsyms_num_syms"], 4))
        base, = struct.unpack(order + long, read(where["kallsyms_relative_base"], struct.calcsize(long)))
        base = relocated(where["kallsyms_relative_base"], base)
        offsets = struct.unpack(f"{order}{count}I", read(where["kallsyms_offsets"], 4 * count))
        token_index = struct.unpack(f"{order}256H", read(where["kallsyms_token_index"], 512))
        tokens = read(where["kallsyms_token_table"], max(token_index) + 256)
        names = read(where["kallsyms_names"], 1 << 32)    # to its section's end
        digits = elf.elfclass // 4                          # %px: a pointer's width
    expand = [tokens[at:tokens.index(b"\0", at)] for at in token_index]
    lines = []
    at = 0
    for offset in offsets:
        length = names[at]
        at += 1
        if length & 0x80:
            length = (length & 0x7F) | names[at] << 7
            at += 1
        text = b"".join(expand[t] for t in names[at:at + length])
        at += length
        lines.append(b"%0*x %c %s\n" % (digits, base + offset + shift, text[0], text[1:]))
    return b"".join(lines)
