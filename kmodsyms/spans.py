"""Byte spans compared in bulk: names kept as (start, length) into one
buffer (kallsyms text, the dtrace_syms string table) are compared without
making a Python object per name."""

from __future__ import annotations

import numpy as np


def equal_spans(a: bytes, start_a: np.ndarray, b: bytes, start_b: np.ndarray,
                len_a: np.ndarray, len_b: np.ndarray) -> np.ndarray:
    """Whether each byte span ``a[start_a:+len_a]`` equals
    ``b[start_b:+len_b]``.  Compared eight bytes at a time through views of
    ``a`` and ``b`` as little-endian words at every byte offset, so the work
    is one gather per eight bytes of name rather than one per byte."""
    same = len_a == len_b
    todo = np.flatnonzero(same & (len_a > 0))
    length = len_a[todo].astype(np.int64)
    sa, sb = start_a[todo].astype(np.int64), start_b[todo].astype(np.int64)
    # A span whose last word would run past the end of its buffer (only
    # possible in the last 7 bytes) is compared as bytes.
    span = (length + 7) & ~7
    tail = (sa + span > len(a)) | (sb + span > len(b))
    for k in np.flatnonzero(tail).tolist():
        i, n = int(sa[k]), int(length[k])
        same[todo[k]] = a[i:i + n] == b[int(sb[k]):int(sb[k]) + n]
    keep = ~tail
    todo, length, sa, sb = todo[keep], length[keep], sa[keep], sb[keep]
    words_a, words_b = words(a), words(b)
    ok = np.ones(len(todo), dtype=bool)
    done = 0
    while len(todo):
        left = np.minimum(length - done, 8)
        diff = (words_a[sa + done] ^ words_b[sb + done]) & _LOW_BYTES[left]
        ok = diff == 0
        same[todo[~ok]] = False
        done += 8
        more = ok & (length > done)
        todo, length, sa, sb = todo[more], length[more], sa[more], sb[more]
    return same


# _LOW_BYTES[n]: a little-endian word mask keeping its first n bytes.
_LOW_BYTES = np.array([(1 << (8 * n)) - 1 for n in range(9)], dtype=np.uint64)


def words(buf: bytes) -> np.ndarray:
    """The 8-byte little-endian word at every byte offset of ``buf`` (a view:
    ``words[i]`` is ``buf[i:i + 8]``)."""
    if len(buf) < 8:
        return np.zeros(0, dtype="<u8")
    return np.ndarray((len(buf) - 7,), dtype="<u8", buffer=buf, strides=(1,))
