"""The 64-bit hash of a name, one name at a time in plain Python: the same
value :func:`kmodsyms.format.spans.hash_spans` gives a whole column of names with
numpy, so that a name looked up in a snapshot (without numpy) is found in
the hash order the resolver saved."""

MULTIPLIER = 0x9E3779B97F4A7C15   # odd, well spread (golden ratio)
_MASK = (1 << 64) - 1


def name_hash(name: bytes) -> int:
    """Eight bytes at a time, little-endian, zero-padded: for each word
    ``h = ((h ^ word) * MULTIPLIER) mod 2**64`` then ``h ^= h >> 29``,
    starting from ``len(name) * MULTIPLIER``."""
    h = (len(name) * MULTIPLIER) & _MASK
    for at in range(0, len(name), 8):
        mixed = ((h ^ int.from_bytes(name[at:at + 8], "little")) * MULTIPLIER) & _MASK
        h = mixed ^ (mixed >> 29)
    return h
