"""Read the GNU build-id note of an ELF file (vmlinux)."""

from __future__ import annotations

from .errors import KmodsymsError

NT_GNU_BUILD_ID = 3


def parse_notes(data: bytes, byteorder: str = "<") -> str:
    """The GNU build-id (hex) in a buffer of ELF notes, or ""."""
    import struct
    pos = 0
    while pos + 12 <= len(data):
        namesz, descsz, ntype = struct.unpack_from(byteorder + "III", data, pos)
        name_at = pos + 12
        desc_at = name_at + (namesz + 3) // 4 * 4
        name = data[name_at:name_at + namesz].rstrip(b"\0")
        if name == b"GNU" and ntype == NT_GNU_BUILD_ID:
            return data[desc_at:desc_at + descsz].hex()
        pos = desc_at + (descsz + 3) // 4 * 4
    return ""


def elf_build_id(path: str) -> str:
    """The build-id of the ELF file at ``path`` (hex), or "" if it has none."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import NoteSection
    try:
        with open(path, "rb") as f:
            elf = ELFFile(f)
            for section in elf.iter_sections():
                if isinstance(section, NoteSection):
                    for note in section.iter_notes():
                        if note["n_type"] == "NT_GNU_BUILD_ID":
                            return note["n_desc"]
    except (ELFError, OSError) as e:
        raise KmodsymsError(f"{path}: cannot read build-id ({e})") from None
    return ""
