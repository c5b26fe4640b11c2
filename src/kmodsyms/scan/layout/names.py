"""Matching kallsyms names to dtrace_syms names in bulk (shared by the
placement strategies)."""

from __future__ import annotations

import numpy as np

from kmodsyms.format.spans import equal_spans, hash_spans
from kmodsyms.format.symsfile import SymsFile
from kmodsyms.scan.layout.result import NO
from kmodsyms.scan.sysmap import Kallsyms


def _match_names(text, name_start: np.ndarray, name_end: np.ndarray, strings,
                 group_start: np.ndarray, group_length: np.ndarray) -> np.ndarray:
    """For each name ``text[name_start:name_end]``, the index of the equal one
    among the distinct names ``strings[group_start:+group_length]``, or -1."""
    length = (name_end - name_start).astype(np.int64)
    group_hash = hash_spans(strings, group_start, group_length)
    order = np.argsort(group_hash, kind="stable")
    sorted_hash = group_hash[order]
    name_hash = hash_spans(text, name_start, length)
    at = np.minimum(np.searchsorted(sorted_hash, name_hash), max(len(order) - 1, 0))
    result = np.full(len(length), NO, dtype=np.int64)
    if not len(order):
        return result
    cand = order[at]
    hit = sorted_hash[at] == name_hash
    hit[hit] = equal_spans(text, name_start[hit], strings, group_start[cand[hit]],
                           length[hit], group_length[cand[hit]])
    result[hit] = cand[hit]
    # Two distinct names with one hash: try the others of that hash.
    collided = np.flatnonzero(~hit & (sorted_hash[at] == name_hash))
    for k in collided.tolist():
        j = int(at[k]) + 1
        while j < len(order) and sorted_hash[j] == name_hash[k]:
            g = int(order[j])
            if equal_spans(text, name_start[k:k + 1], strings, group_start[g:g + 1],
                           length[k:k + 1], group_length[g:g + 1])[0]:
                result[k] = g
                break
            j += 1
    return result



def _same_names(ks: Kallsyms, lines: np.ndarray, syms: SymsFile, entries: np.ndarray) -> np.ndarray:
    """Whether each kallsyms line's name equals its entry's (vectorised)."""
    if not len(lines):
        return np.zeros(0, dtype=bool)
    k_start = ks.name_start[lines]
    return equal_spans(ks.text, k_start, syms.strings,
                       syms.symbols["name"][entries].astype(np.int64),
                       ks.name_end[lines] - k_start, syms.name_lengths()[entries])


