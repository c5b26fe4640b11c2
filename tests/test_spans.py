"""kmodsyms.format.spans against plain Python byte comparison, including spans
that end in the last bytes of their buffer (read through the padded tail)."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kmodsyms.format.spans import equal_spans, hash_spans, spans_in_order

# Small alphabets make equal and prefix-related spans common.
buffers = st.binary(min_size=0, max_size=40).map(lambda b: bytes(x % 3 + 1 for x in b))


@st.composite
def spans(draw, buf):
    n = draw(st.integers(0, 12))
    starts = [draw(st.integers(0, len(buf))) for _ in range(n)]
    lengths = [draw(st.integers(0, len(buf) - s)) for s in starts]
    return np.array(starts, dtype=np.int64), np.array(lengths, dtype=np.int64)


@settings(max_examples=300, derandomize=True, deadline=None)
@given(data=st.data(), a=buffers, b=buffers)
def test_equal_and_hash_agree_with_bytes(data, a, b):
    sa, la = data.draw(spans(a))
    sb, lb = data.draw(spans(b))
    k = min(len(sa), len(sb))
    sa, la, sb, lb = sa[:k], la[:k], sb[:k], lb[:k]
    want = [a[x:x + p] == b[y:y + q] for x, p, y, q in zip(sa, la, sb, lb)]
    assert equal_spans(a, sa, b, sb, la, lb).tolist() == want
    ha, hb = hash_spans(a, sa, la), hash_spans(b, sb, lb)
    for same, x, y in zip(want, ha.tolist(), hb.tolist()):
        if same:
            assert x == y


@settings(max_examples=300, derandomize=True, deadline=None)
@given(names=st.lists(st.binary(min_size=1, max_size=20).map(
    lambda b: bytes(x % 4 + 1 for x in b)), max_size=12), shuffle=st.booleans())
def test_order_check_is_strcmp_order(names, shuffle):
    if not shuffle:
        names = sorted(names)
    buf = b"\0".join(names) + b"\0"
    starts = np.cumsum([0] + [len(n) + 1 for n in names[:-1]]).astype(np.int64)[:len(names)]
    lengths = np.array([len(n) for n in names], dtype=np.int64)
    assert spans_in_order(buf, starts, lengths) == (names == sorted(names))
