"""The build's attribution of System.map's lines (docs/resolver.md R62):
the library's own, R20-R25 as a load runs them (libkmodsyms/kms_attr.c,
through the binding's ``attribute_at_link``), over the file the tables
make with the search's placement (:mod:`.search`) at its link addresses.
The build takes from it what it records: the anchors (R6), R56's table
and the placement statistics."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass

import numpy as np

from kmodsyms.errors import KmodsymsError
from kmodsyms.format.symsfile import Meta, StringTable, encode
from kmodsyms.scan.sysmap import Kallsyms


@dataclass
class Attribution:
    """Per line of System.map: the dtrace_syms entry it is (-1), the placed
    section it is attributed to (-1), and whether it is ambiguous (R25)."""

    entry: np.ndarray       # int32
    section: np.ndarray     # int32
    ambiguous: np.ndarray   # bool


def kallsyms_text(sysmap: Kallsyms) -> bytes:
    """System.map as kallsyms prints it: a line at address 0 (x86_64's
    per-cpu variables) with the letter A (R5), where the library takes any
    other line at 0 for one whose address is hidden."""
    text = np.frombuffer(sysmap.text, dtype=np.uint8).copy()
    letter = sysmap.name_start[sysmap.address == 0].astype(np.int64) - 2
    text[letter] = np.where(text[letter] >= ord("a"), ord("a"), ord("A"))
    return text.tobytes()


def attribute_at_link(meta: Meta, strings: StringTable, tables: dict, sysmap: Kallsyms) -> Attribution:
    """The library's attribution of ``sysmap``'s lines against the file
    ``encode(meta, strings, tables)`` writes (its sections at their link
    addresses, its segments), which it reads from a temporary file."""
    from kmodsyms.binding import _kms
    with tempfile.NamedTemporaryFile(prefix=".dtrace_syms.", suffix=".attribution") as f:
        f.write(encode(meta, strings.copy(), tables))   # (encode adds the header strings)
        f.flush()
        try:
            entry, section, ambiguous = _kms.attribute_at_link(os.fsencode(f.name), kallsyms_text(sysmap),
                                                               len(sysmap))
        except _kms.Error as e:
            raise KmodsymsError(f"cannot attribute the lines of {sysmap.source}: {e.args[1]}") from None
    return Attribution(np.frombuffer(entry, np.int32), np.frombuffer(section, np.int32),
                       np.frombuffer(ambiguous, np.uint8).astype(bool))
