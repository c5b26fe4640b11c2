"""Byte spans compared and hashed in bulk: names kept as (start, length)
into one buffer (kallsyms text, the dtrace_syms string table) are handled
eight bytes at a time, without a Python object per name."""

from __future__ import annotations

import numpy as np

# _LOW_BYTES[n]: a little-endian word mask keeping its first n bytes.
_LOW_BYTES = np.array([(1 << (8 * n)) - 1 for n in range(9)], dtype=np.uint64)
_MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)   # odd, well spread (golden ratio)


def words(buf) -> np.ndarray:
    """The 8-byte little-endian word at every byte offset of ``buf`` (a view:
    ``words[i]`` is ``buf[i:i + 8]``), for offsets up to ``len(buf) - 8``."""
    if len(buf) < 8:
        return np.zeros(0, dtype="<u8")
    return np.ndarray((len(buf) - 7,), dtype="<u8", buffer=buf, strides=(1,))


class _Words:
    """Gathers the word at any offset of a buffer, zero-padded past its end
    (the view of :func:`words` stops 7 bytes short of it)."""

    def __init__(self, buf):
        self.body = words(buf)
        tail = bytes(buf[max(0, len(buf) - 7):])
        self.tail_at = len(self.body)
        self.tail = words(tail + bytes(16))

    def __getitem__(self, at: np.ndarray) -> np.ndarray:
        inside = at < self.tail_at
        if inside.all():
            return self.body[at]
        out = np.empty(len(at), dtype="<u8")
        out[inside] = self.body[at[inside]]
        out[~inside] = self.tail[at[~inside] - self.tail_at]
        return out


def equal_spans(a, start_a: np.ndarray, b, start_b: np.ndarray,
                len_a: np.ndarray, len_b: np.ndarray) -> np.ndarray:
    """Whether each byte span ``a[start_a:+len_a]`` equals
    ``b[start_b:+len_b]``: one gather per eight bytes of name rather than
    one per byte."""
    same = len_a == len_b
    todo = np.flatnonzero(same & (len_a > 0))
    length = len_a[todo].astype(np.int64)
    sa, sb = start_a[todo].astype(np.int64), start_b[todo].astype(np.int64)
    words_a, words_b = _Words(a), _Words(b)
    done = 0
    while len(todo):
        left = np.minimum(length - done, 8)
        ok = ((words_a[sa + done] ^ words_b[sb + done]) & _LOW_BYTES[left]) == 0
        same[todo[~ok]] = False
        done += 8
        more = ok & (length > done)
        todo, length, sa, sb = todo[more], length[more], sa[more], sb[more]
    return same


def hash_spans(buf, start: np.ndarray, length: np.ndarray) -> np.ndarray:
    """A 64-bit hash of each span ``buf[start:+length]``: equal spans hash
    equal, different ones almost never do (confirm with :func:`equal_spans`)."""
    h = length.astype(np.uint64) * _MULTIPLIER
    todo = np.flatnonzero(length > 0)
    length = length[todo].astype(np.int64)
    start = start[todo].astype(np.int64)
    gather = _Words(buf)
    done = 0
    while len(todo):
        left = np.minimum(length - done, 8)
        mixed = (h[todo] ^ (gather[start + done] & _LOW_BYTES[left])) * _MULTIPLIER
        h[todo] = mixed ^ (mixed >> np.uint64(29))
        done += 8
        more = length > done
        todo, length, start = todo[more], length[more], start[more]
    return h


def spans_in_order(buf, start: np.ndarray, length: np.ndarray) -> bool:
    """Whether the NUL-free byte strings ``buf[start:+length]`` are in
    non-decreasing strcmp order: all neighbouring pairs at once, eight bytes
    at a time compared as big-endian numbers (bytes past a string's end are
    zero, as strcmp's NUL)."""
    gather = _Words(buf)
    a = np.flatnonzero(start[1:] != start[:-1])   # equal starts: equal strings
    b = a + 1
    done = 0
    while len(a):
        values = []
        for side in (a, b):
            left = np.clip(length[side].astype(np.int64) - done, 0, 8)
            word = gather[start[side].astype(np.int64) + done] & _LOW_BYTES[left]
            values.append(np.asarray(word, dtype=np.uint64).byteswap())
        if (values[0] > values[1]).any():
            return False
        # Pairs still equal so far and not both finished go on to the next word.
        done += 8
        more = (values[0] == values[1]) & (np.maximum(length[a], length[b]) > done)
        a, b = a[more], b[more]
    return True
