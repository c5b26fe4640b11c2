"""The dtrace_syms header's fixed facts (docs/format.md), in plain Python:
the quick ``resolve`` path and the build cache read them without numpy or
the reader (:mod:`kmodsyms.format.symsfile`)."""

from __future__ import annotations

MAGIC = b"KMODSYMS"
FORMAT_VERSION = 1
HEADER_SIZE = 160
# Bytes 12..16 of the header: the CRC-32 of everything after byte 16, which
# identifies the file's content (the build cache and snapshots key on it).
CRC_FIELD = slice(12, 16)
CRC_COVERS_FROM = 16


def header_crc(head: bytes) -> bytes | None:
    """The CRC field of a dtrace_syms file, given at least its first 16
    bytes; None if they are not a dtrace_syms header."""
    return bytes(head[CRC_FIELD]) if len(head) >= CRC_COVERS_FROM and head[:len(MAGIC)] == MAGIC else None
