"""R20-R25 and R62: the build's attribution of System.map's lines
(src/kmodsyms/scan/layout/search.py) and the library's at a load
(libkmodsyms/kms_attr.c, run by kmsi_attribute_at_link over the built
file's sections at their link addresses, System.map as kallsyms) give every
line the same entry, the same section and the same ambiguity, on the
fixture and on both corpora; they differ only where R62 says: the build
keeps, as a line's entry, a zero-size copy of its name at its address that
owns no byte of its own section (R22), which a load leaves unmatched or
swaps for another such copy."""

from __future__ import annotations

import os

import numpy as np

from kmodsyms.binding import _kms
from kmodsyms.format.symsfile import SymsFile
from kmodsyms.scan.elf.elfimage import read_image, symbol_sizes
from kmodsyms.scan.layout import SearchPlacer
from kmodsyms.scan.layout.result import LINE_AMBIGUOUS, UNPLACED
from kmodsyms.scan.sysmap import Kallsyms, read_kallsyms


def kallsyms_text(sysmap: Kallsyms) -> bytes:
    """System.map as kallsyms prints it: a line at address 0 (x86_64's
    per-cpu variables) with the letter A (R5), where a load takes any other
    line at 0 for one whose address is hidden."""
    text = np.frombuffer(sysmap.text, dtype=np.uint8).copy()
    letter = sysmap.name_start[sysmap.address == 0].astype(np.int64) - 2
    text[letter] = np.where(text[letter] >= ord("a"), ord("a"), ord("A"))
    return text.tobytes()


def both_attributions(kbuild: str, syms_path: str):
    """The build's search and the library's load over one built file and
    its tree's System.map: (placer, (entry, section, ambiguous) of each)."""
    sysmap = read_kallsyms(os.path.join(kbuild, "System.map"), zero_is_hidden=False)
    vmlinux = os.path.join(kbuild, "vmlinux")
    image = read_image(vmlinux)
    with open(syms_path, "rb") as f:
        syms = SymsFile(f.read(), syms_path)
    placer = SearchPlacer(syms, sysmap, output_sections=image.sections,
                          symbol_sizes=lambda wanted: symbol_sizes(vmlinux, image, wanted))
    placed = placer.result()
    # the search places as the file records (the library reads these addresses)
    recorded = syms.sections["placement"] != UNPLACED
    assert np.array_equal(placed.section_how != UNPLACED, recorded)
    assert np.array_equal(placed.section_base[recorded], syms.sections["address"][recorded])
    entry, section, ambiguous = _kms.attribute_at_link(os.fsencode(syms_path), kallsyms_text(sysmap),
                                                       len(sysmap))
    build = placed.line_entry, placed.line_section, placed.line_how == LINE_AMBIGUOUS
    load = (np.frombuffer(entry, np.int32), np.frombuffer(section, np.int32),
            np.frombuffer(ambiguous, np.uint8).astype(bool))
    return placer, build, load


def owns_no_byte(syms: SymsFile, entries: np.ndarray) -> np.ndarray:
    """R22: whether each entry (>= 0) is at or past its section's end."""
    sym = syms.symbols[entries]
    return sym["value"] >= syms.sections["size"][sym["section"]]


def check_alike(kbuild: str, syms_path: str) -> int:
    """Assert R62's claim over one file; return how many lines R62 parts."""
    placer, (b_entry, b_section, b_amb), (l_entry, l_section, l_amb) = both_attributions(kbuild, syms_path)
    syms = placer.syms
    core = placer.core_lines
    assert len(core) and (b_entry[core] >= 0).sum() > len(core) // 2     # not vacuous
    assert np.array_equal(b_amb[core], l_amb[core])                      # R25
    kept = core[b_entry[core] >= 0]
    kept = kept[owns_no_byte(syms, b_entry[kept])]                      # R62's lines
    shared = np.setdiff1d(core, kept)
    assert np.array_equal(b_entry[shared], l_entry[shared])              # R21
    assert np.array_equal(b_section[shared], l_section[shared])          # R21-R24
    # R62's lines: the load has no entry, or another copy of the name at the
    # line's address: that of the section whose bytes are there (R20), or of
    # one ending there (R22)
    swapped = kept[l_entry[kept] >= 0]
    sym = syms.symbols[l_entry[swapped]]
    assert (sym["name"] == syms.symbols["name"][b_entry[swapped]]).all()
    assert (syms.sections["address"][sym["section"]] + sym["value"] == placer.ks.address[swapped]).all()
    # and the same section, but where the build's copy is in an empty
    # section (R22: core kernel) and the load's at the end of another
    moved = kept[b_section[kept] != l_section[kept]]
    assert (b_section[moved] == -1).all() and (l_entry[moved] >= 0).all()
    assert (l_section[moved] == syms.symbols["section"][l_entry[moved]]).all()
    return len(kept)


def test_r62_build_and_load_attribute_alike_on_the_fixture(fixture_tree, fixture_syms):
    check_alike(fixture_tree, fixture_syms)


def test_r62_build_and_load_attribute_alike_on_the_corpora(any_corpus, any_corpus_syms):
    assert check_alike(any_corpus, any_corpus_syms) > 0      # the corpora have R62's lines
