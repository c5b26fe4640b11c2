"""kmodsyms.scan.elf.elfimage (vmlinux's segments and build-id, read with struct)
held to pyelftools: on the fixture's and the corpus' vmlinux, and on small
images of every ELF class and byte order assembled here byte by byte."""

import io
import os
import struct

import pytest
from conftest import FIXTURE
from elftools.elf.elffile import ELFFile

from kmodsyms.scan.elf.elfimage import read_image


def _reference(path_or_bytes):
    f = open(path_or_bytes, "rb") if isinstance(path_or_bytes, str) else io.BytesIO(path_or_bytes)
    with f:
        elf = ELFFile(f)
        segments = [(s["p_vaddr"], s["p_vaddr"] + s["p_memsz"]) for s in elf.iter_segments()
                    if s["p_type"] == "PT_LOAD" and s["p_memsz"]]
        build_ids = [n["n_desc"] for s in elf.iter_segments() if s["p_type"] == "PT_NOTE"
                     for n in s.iter_notes() if n["n_type"] == "NT_GNU_BUILD_ID"]
    return segments, build_ids[0] if build_ids else ""


def _reference_sections(path):
    with open(path, "rb") as f:
        return sorted((s["sh_addr"], s["sh_addr"] + s["sh_size"], s.name) for s in ELFFile(f).iter_sections()
                      if s["sh_flags"] & 0x2 and s["sh_size"])


def test_fixture_vmlinux():
    path = os.path.join(FIXTURE, "vmlinux")
    image = read_image(path)
    assert (image.segments, image.build_id) == _reference(path)
    assert len(image.build_id) == 40 and len(image.segments) >= 2
    assert [(a, b, n) for (a, b), n in zip(image.sections, image.section_names)] == _reference_sections(path)


def test_corpus_vmlinux(corpus):
    path = os.path.join(corpus, "vmlinux")
    image = read_image(path)
    assert (image.segments, image.build_id) == _reference(path)
    assert [(a, b, n) for (a, b), n in zip(image.sections, image.section_names)] == _reference_sections(path)


def _image(is64: bool, end: str, build_id: bytes) -> bytes:
    """An ET_EXEC image: ELF header, two PT_LOAD and one PT_NOTE program
    headers, the note; no sections."""
    ehsize, phentsize = (64, 56) if is64 else (52, 32)
    note = struct.pack(end + "III", 4, len(build_id), 3) + b"GNU\0" + build_id
    note_at = ehsize + 3 * phentsize
    loads = [(0xFFFFFFFF81000000 if is64 else 0xC0000000, 0x2000), (0x1000, 0x300)]
    ident = b"\x7fELF" + bytes([2 if is64 else 1, 1 if end == "<" else 2, 1]) + bytes(9)
    if is64:
        header = ident + struct.pack(end + "HHIQQQIHHHHHH", 2, 62, 1, loads[0][0], ehsize, 0, 0,
                                     ehsize, phentsize, 3, 64, 0, 0)
        phdrs = b"".join(struct.pack(end + "IIQQQQQQ", 1, 5, 0, a, a, 0, m, 0x1000) for a, m in loads)
        phdrs += struct.pack(end + "IIQQQQQQ", 4, 4, note_at, 0, 0, len(note), len(note), 4)
    else:
        header = ident + struct.pack(end + "HHIIIIIHHHHHH", 2, 8, 1, loads[0][0], ehsize, 0, 0,
                                     ehsize, phentsize, 3, 40, 0, 0)
        phdrs = b"".join(struct.pack(end + "IIIIIIII", 1, 0, a, a, 0, m, 5, 0x1000) for a, m in loads)
        phdrs += struct.pack(end + "IIIIIIII", 4, note_at, 0, 0, len(note), len(note), 4, 4)
    return header + phdrs + note


@pytest.mark.parametrize("is64", [True, False])
@pytest.mark.parametrize("end", ["<", ">"])
def test_every_class_and_byte_order(tmp_path, is64, end):
    data = _image(is64, end, bytes(range(1, 21)))
    path = tmp_path / "vmlinux"
    path.write_bytes(data)
    image = read_image(str(path))
    segments, build_id = image.segments, image.build_id
    assert (segments, build_id) == _reference(data)
    assert build_id == bytes(range(1, 21)).hex() and len(segments) == 2
