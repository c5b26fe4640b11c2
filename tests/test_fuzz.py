"""Fuzzing the two inputs kmodsyms reads at run time: mutations of the real
fixture dtrace_syms and of the real fixture kallsyms, read by the build
side's reader (kmodsyms.format.symsfile) and by libkmodsyms through the
binding (kmodsyms.load()); ``make -C libkmodsyms check`` runs the library's
own fuzz cases under ASan/UBSan.

The contract (src/kmodsyms/errors.py): every input gives either a right answer or
a KmodsymsError; never another exception, a hang, a MemoryError or an
inconsistent answer.  Each case runs under a time budget (SIGALRM).

The default run tries a few hundred cases; ``python -m pytest -m slow
tests/test_fuzz.py`` runs the same properties with >= 10,000 cases each for
dtrace_syms and kallsyms (derandomized, no example database: the same cases
every run, so a CI failure reproduces locally with the same command).
"""

from __future__ import annotations

import contextlib
import os
import signal
import struct
import subprocess
import sys
import time
import warnings
import zlib

import numpy as np
import pytest
from conftest import FIXTURE, ROOT
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kmodsyms import load
from kmodsyms.errors import KmodsymsError
from kmodsyms.format.fileformat import FORMAT_VERSION, HEADER_SIZE
from kmodsyms.format.symsfile import TABLES, SymsFile

FIXTURE_KALLSYMS = os.path.join(FIXTURE, "kallsyms")
N_TABLES = len(TABLES)  # directory at offset 56: N_TABLES x (u32 offset, u32 count)
CASE_BUDGET = 5  # seconds per case; a hang is a bug

_COMMON = dict(deadline=None, derandomize=True, database=None, print_blob=True,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                      HealthCheck.filter_too_much,
                                      HealthCheck.function_scoped_fixture])
FAST_SYMS = settings(max_examples=400, **_COMMON)
FAST_KALLSYMS = settings(max_examples=200, **_COMMON)
SLOW = settings(max_examples=10_000, **_COMMON)
CLI_FAST = settings(max_examples=50, **_COMMON)
CLI_SLOW = settings(max_examples=500, **_COMMON)


class Hang(Exception):
    pass


@contextlib.contextmanager
def budget(seconds: int = CASE_BUDGET):
    """Fail the case (not the process) if it takes longer than ``seconds``."""
    def expired(signum, frame):
        raise Hang(f"case took more than {seconds}s")
    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


# --------------------------------------------------------------- the inputs
class Blob(bytes):
    """Bytes that print short (hypothesis prints every argument of a failing case)."""

    def __repr__(self):
        return f"<{len(self)} bytes>"


@pytest.fixture(scope="session")
def syms_bytes(fixture_syms) -> bytes:
    with open(fixture_syms, "rb") as f:
        return Blob(f.read())


@pytest.fixture(scope="session")
def kallsyms_bytes() -> bytes:
    with open(FIXTURE_KALLSYMS, "rb") as f:
        return Blob(f.read())


@pytest.fixture(scope="session")
def probes(kallsyms_bytes):
    """Addresses to resolve (every kallsyms address, +1, -1, and a few far
    away) and names to look up."""
    addrs, names = set(), set()
    for line in kallsyms_bytes.decode().splitlines():
        fields = line.split()
        a = int(fields[0], 16)
        addrs.update({a, a + 1, max(a - 1, 0)})
        names.add(fields[2])
    addrs.update({0, 1, (1 << 64) - 1, 0xFFFFFFFF81000000, 0xFFFFFFFFC0000000})
    addrs = np.array(sorted(addrs), dtype=np.uint64)
    return Probes((addrs, sorted(names)))


_IMAGES = None


def load_image(img: bytes, ks_text: bytes, force: bool = True):
    """kmodsyms.load() of the dtrace_syms image ``img`` (the library maps a
    file: each image is a new one, so that a handle still alive keeps the
    one it mapped) and the kallsyms text ``ks_text``."""
    import atexit
    import shutil
    import tempfile
    global _IMAGES
    if _IMAGES is None:
        _IMAGES = tempfile.mkdtemp(prefix="kmodsyms-fuzz-")
        atexit.register(shutil.rmtree, _IMAGES, True)
    path = os.path.join(_IMAGES, "dtrace_syms")
    with open(path + ".new", "wb") as f:
        f.write(img)
    os.replace(path + ".new", path)
    return load(syms=path, kallsyms_text=ks_text, kallsyms_name="fuzzed", force=force)


def exercise(r, addrs, names) -> None:
    """Every query of a loaded resolver, each answer self-consistent."""
    batch = r.resolve_many(addrs)
    assert len(batch.lines) == len(addrs)
    for a, line in list(zip(addrs.tolist(), batch.lines.tolist()))[::3]:
        rec = r.resolve(a)
        str(rec), rec.to_json()
        if rec.sized:
            assert rec.start <= a < rec.start + rec.size, rec
        if rec.symbol is not None:
            assert rec.start <= a
        assert r.record(a, line) == rec
    for name in names[::4]:
        for rec in r.lookup(name):
            assert rec.symbol == name
            str(rec)
    r.kallmodsyms()
    r.lines()
    for stat in r.module_stats:
        r.module_ranges(stat.name)


class Probes(tuple):
    def __repr__(self):
        return f"<{len(self[0])} addresses, {len(self[1])} names>"


def fix_crc(img: bytes | bytearray) -> bytes:
    """Recompute the header CRC (crc32 of bytes [16:], little-endian at 12)."""
    img = bytearray(img)
    if len(img) >= 16:
        struct.pack_into("<I", img, 12, zlib.crc32(bytes(img[16:])))
    return bytes(img)


def fix_size(img: bytes | bytearray) -> bytes:
    img = bytearray(img)
    if len(img) >= 24:
        struct.pack_into("<Q", img, 16, len(img))
    return bytes(img)


def directory(img: bytes) -> list[tuple[int, int]]:
    d = struct.unpack_from(f"<{2 * N_TABLES}I", img, 56)
    return [(d[2 * t], d[2 * t + 1]) for t in range(N_TABLES)]


def boundaries(img: bytes) -> list[int]:
    """Every structural boundary of an image: header end, each table's start
    and end, the middle of its first and last entry."""
    out = {16, 56, 56 + 8 * N_TABLES, HEADER_SIZE}
    for (off, count), (_name, dtype) in zip(directory(img), TABLES):
        size = dtype.itemsize
        end = off + count * size
        out.update({off, end})
        if count and size > 1:
            out.update({off + size // 2, end - size // 2, off + size})
    return sorted(b for b in out if 0 <= b <= len(img))


# ------------------------------------------------------ dtrace_syms mutation
def _without_layout(img: bytes) -> bytes:
    """The image with no link layout (segments and anchors empty), as a build
    without vmlinux writes it: the resolver then places by kallsyms alone."""
    names = [name for name, _dtype in TABLES]
    ops = [("dir", names.index(t), True, 0) for t in ("segments", "anchors") if t in names]
    return mutate_syms(img, (ops, "crc")) if ops else img


_U32_EDGES = [0, 1, 2, 7, 8, 127, 128, 129, 0xFF, 0x100, 0xFFFF, 1 << 28, (1 << 28) + 1,
              1 << 31, 0x7FFFFFFF, 0xFFFFFFFE, 0xFFFFFFFF]
_U64_EDGES = _U32_EDGES + [1 << 32, 1 << 63, (1 << 64) - 1, (1 << 64) - 16]

pos = st.integers(0, 1 << 20)
_op = st.one_of(
    st.tuples(st.just("flip"), pos, st.integers(0, 7)),
    st.tuples(st.just("byte"), pos, st.integers(0, 255)),
    st.tuples(st.just("u32"), pos, st.sampled_from(_U32_EDGES) | st.integers(0, 0xFFFFFFFF)),
    st.tuples(st.just("truncate_boundary"), pos, st.integers(-1, 1)),
    st.tuples(st.just("truncate"), pos),
    st.tuples(st.just("insert"), pos, st.binary(min_size=1, max_size=64)),
    st.tuples(st.just("delete"), pos, st.integers(1, 256)),
    st.tuples(st.just("swap_tables"), st.integers(0, N_TABLES - 1), st.integers(0, N_TABLES - 1)),
    st.tuples(st.just("dir"), st.integers(0, N_TABLES - 1), st.booleans(),
              st.sampled_from(_U32_EDGES) | st.integers(0, 0x4000)),
    # One field of one entry of one table (index and offset validation).
    st.tuples(st.just("field"), st.integers(1, N_TABLES - 1), pos, st.integers(0, 9),
              st.sampled_from(_U64_EDGES) | st.integers(0, 0x4000)),
)
# (ops, repair, layout): layout False first drops the link layout (segments
# and anchors), so that both placement paths are fuzzed.
syms_mutation = st.tuples(st.lists(_op, min_size=1, max_size=4),
                          st.sampled_from(["none", "crc", "crc+size"]), st.booleans())


def mutate_syms(base: bytes, mutation) -> bytes:
    ops, repair, *layout = mutation
    if layout and not layout[0]:
        base = _without_layout(base)
    img = bytearray(base)
    for op in ops:
        kind = op[0]
        n = len(img)
        if kind == "flip" and n:
            img[op[1] % n] ^= 1 << op[2]
        elif kind == "byte" and n:
            img[op[1] % n] = op[2]
        elif kind == "u32" and n >= 4:
            struct.pack_into("<I", img, op[1] % (n - 3), op[2])
        elif kind == "truncate_boundary" and n >= HEADER_SIZE:
            b = boundaries(bytes(img))
            cut = min(max(b[op[1] % len(b)] + op[2], 0), n)
            del img[cut:]
        elif kind == "truncate":
            del img[op[1] % (n + 1):]
        elif kind == "insert":
            at = op[1] % (n + 1)
            img[at:at] = op[2]
        elif kind == "delete" and n:
            at = op[1] % n
            del img[at:at + op[2]]
        elif kind == "swap_tables" and n >= HEADER_SIZE:
            i, j = 56 + 8 * op[1], 56 + 8 * op[2]
            a, b = bytes(img[i:i + 8]), bytes(img[j:j + 8])
            img[i:i + 8], img[j:j + 8] = b, a
        elif kind == "dir" and n >= HEADER_SIZE:
            struct.pack_into("<I", img, 56 + 8 * op[1] + 4 * op[2], op[3])
        elif kind == "field" and n >= HEADER_SIZE:
            _t, t, entry, field_no, value = op
            off, count = directory(bytes(img))[t]
            dtype = TABLES[t][1]
            names = dtype.names or (None,)
            fname = names[field_no % len(names)]
            fdtype, foff = (dtype.fields[fname][:2] if fname else (dtype, 0))
            at = off + (entry % max(count, 1)) * dtype.itemsize + foff
            width = fdtype.itemsize
            if at + width <= n:
                img[at:at + width] = (value % (1 << (8 * width))).to_bytes(width, "little")
    if repair == "crc+size":
        img = fix_size(img)
    if repair in ("crc", "crc+size"):
        img = fix_crc(img)
    return bytes(img)


def check_syms_image(img: bytes, ks_text: bytes, probes) -> str:
    """Feed one image through every reader; return 'refused' or 'accepted'.
    Raises on anything but success or KmodsymsError."""
    addrs, names = probes
    with budget(), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # uint64 wrap-around in numpy
        try:
            syms = SymsFile(img, "fuzzed")
        except KmodsymsError:
            try:
                exercise(load_image(img, ks_text), addrs, names)
            except KmodsymsError:
                pass
            return "refused"
        # Everything the readers expose must decode, and be self-consistent.
        n = len(syms.symbols)
        syms.module_symbol_counts()
        syms.missing_objects
        for i in sorted({0, n // 2, n - 1}) if n else []:
            e = syms.entry(i)
            assert syms.symbol_name(i) == e["name"]
        try:
            # find() checks the name order on first use (SymsFile.check_sorted)
            for name in names[::7] + [syms.symbol_name(i) for i in range(0, n, max(n // 8, 1))]:
                for i in syms.find(name):
                    assert syms.symbol_name(i) == name, f"find({name!r}) returned entry {i} " \
                                                         f"named {syms.symbol_name(i)!r}"
        except KmodsymsError:
            return "refused"
        try:
            r = load_image(img, ks_text)
        except KmodsymsError:
            return "accepted"
        exercise(r, addrs, names)
    return "accepted"


def _syms_property(syms_bytes, kallsyms_bytes, probes, mutation):
    check_syms_image(mutate_syms(syms_bytes, mutation), kallsyms_bytes, probes)


@FAST_SYMS
@given(mutation=syms_mutation)
def test_fuzz_dtrace_syms(syms_bytes, kallsyms_bytes, probes, mutation):
    _syms_property(syms_bytes, kallsyms_bytes, probes, mutation)


@pytest.mark.slow
@SLOW
@given(mutation=syms_mutation)
def test_fuzz_dtrace_syms_slow(syms_bytes, kallsyms_bytes, probes, mutation):
    _syms_property(syms_bytes, kallsyms_bytes, probes, mutation)


# Failures the fuzzers found (slow run) or targeted probes did, kept in the
# default run.  Each is a crc-valid file a reader must refuse or answer right.
REPRODUCERS = {
    # symbols count 0: Resolver -> IndexError in extent_of (no placed section)
    "no-symbols": ([("dir", 7, True, 0)], "crc"),
    # a bit flip in the string table unsorts two names: find() returns
    # 'amd_uncose_ctx' for 'amd_uncore_event_init'
    "string-bit-flip": ([("flip", 35752, 0)], "crc"),
    # symbol 65's name offset 0 (""): find('isofs_dir_entries') returns it
    "symbol-name-empty": ([("field", 7, 65, 0, 0)], "crc"),
    # symbol 80's name now another's: find('max_pfn_mapped') -> 'mdio_bus_count'
    "symbol-name-swapped": ([("field", 7, 80, 0, 0)], "crc"),
    # section 17's size 2^64-1: OverflowError in Resolver._place_bare_blocks
    "section-size-max": ([("field", 6, 17, 4, (1 << 64) - 1)], "crc"),
    "section-size-2^63": ([("field", 6, 17, 4, 1 << 63)], "crc"),
    # an anchor symbol's value near 2^64 (fixture symbol 47, the slow run's
    # ('u32', 38566, 1)): LinkedPlacer._shift_segments -> OverflowError
    # in _U64(link) since link = section address + value > 2^64
    "anchor-value-2^32": ([("field", 7, 47, 4, (1 << 32) + 0x10)], "crc"),
    "anchor-value-max": ([("field", 7, 47, 4, (1 << 64) - 1)], "crc"),
    # vmlinux_symbols entry 43 (__pfx_mdio_bus_match, R56) sized 2^32 + 16, so
    # that its end passes 2^64 (the slow run's ('u32', 597694, 1)): resolve
    # found it unsized, record(address, line) sized
    "vmlinux-size-wraps": ([("field", 10, 43, 3, (1 << 32) + 0x10)], "crc"),
}


@pytest.mark.parametrize("layout", [True, False])
@pytest.mark.parametrize("case", sorted(REPRODUCERS))
def test_fuzz_reproducers(syms_bytes, kallsyms_bytes, probes, case, layout):
    check_syms_image(mutate_syms(syms_bytes, REPRODUCERS[case] + (layout,)), kallsyms_bytes, probes)


def _suffix_shared(syms_bytes: bytes) -> tuple[bytes, int]:
    """The fixture image with every symbol name that is a proper suffix of
    another stored string pointed into that string (as ld's tail-merged
    .strtab does).  docs/format.md allows it: 'A reader must not assume
    offsets point to the start of a stored string'."""
    syms = SymsFile(syms_bytes)
    pieces, starts, o = bytes(syms.strings).split(b"\0"), [], 0
    for p in pieces:
        starts.append(o)
        o += len(p) + 1
    img = bytearray(syms_bytes)
    sym_off = directory(syms_bytes)[7][0]
    moved = 0
    for i in range(len(syms.symbols)):
        name = syms.symbol_name(i).encode()
        for p, start in zip(pieces, starts):
            if len(p) > len(name) and p.endswith(name):
                struct.pack_into("<I", img, sym_off + 40 * i, start + len(p) - len(name))
                moved += 1
                break
    return fix_crc(img), moved


@pytest.mark.parametrize("layout", [True, False])
def test_suffix_shared_string_offsets_are_read_right(syms_bytes, kallsyms_bytes, probes, layout):
    """Bug (placement.search.SearchPlacer._name_groups, the path for files without a
    link layout): a name at offset X is decoded as the stored string starting
    at or after X, so a spec-valid file with tail-shared names is refused
    ('symbol names are not sorted') or misnamed."""
    if not layout:
        syms_bytes = _without_layout(syms_bytes)
    img, moved = _suffix_shared(syms_bytes)
    assert moved >= 2
    shared, plain = SymsFile(img), SymsFile(syms_bytes)
    assert [shared.symbol_name(i) for i in range(len(shared.symbols))] == \
        [plain.symbol_name(i) for i in range(len(plain.symbols))]
    addrs, _names = probes
    if not layout:   # the library answers only from a link layout: one clear error
        for image in (syms_bytes, img):
            with pytest.raises(KmodsymsError, match="has no link layout.*rebuild it"):
                load_image(image, kallsyms_bytes, False)
        return
    want = [str(rec) for rec in map(load_image(syms_bytes, kallsyms_bytes, False).resolve,
                                    addrs.tolist())]
    got = [str(rec) for rec in map(load_image(img, kallsyms_bytes, False).resolve,
                                   addrs.tolist())]
    assert got == want


def test_every_truncation_boundary(syms_bytes, kallsyms_bytes, probes):
    """Truncation at every structural boundary (+-1), with and without the
    size and CRC repaired: never anything but KmodsymsError."""
    for cut in boundaries(syms_bytes):
        for c in {max(cut - 1, 0), cut, min(cut + 1, len(syms_bytes))}:
            if c == len(syms_bytes):
                continue
            for img in (syms_bytes[:c], fix_crc(fix_size(syms_bytes[:c]))):
                assert check_syms_image(img, kallsyms_bytes, probes) == "refused", c


def test_every_table_swap(syms_bytes, kallsyms_bytes, probes):
    for i in range(N_TABLES):
        for j in range(i + 1, N_TABLES):
            img = mutate_syms(syms_bytes, ([("swap_tables", i, j)], "crc"))
            check_syms_image(img, kallsyms_bytes, probes)


def _tiny_image(claim_table=None, count=0) -> bytes:
    """A 200-byte file: header, a 1-byte string table, every other table
    empty; optionally one table's count replaced by ``count``."""
    img = bytearray(200)
    img[:8] = b"KMODSYMS"
    struct.pack_into("<IIQI", img, 8, FORMAT_VERSION, 0, 200, HEADER_SIZE)
    for t in range(N_TABLES):
        struct.pack_into("<II", img, 56 + 8 * t, HEADER_SIZE, 1 if t == 0 else 0)
    if claim_table is not None:
        struct.pack_into("<II", img, 56 + 8 * claim_table, HEADER_SIZE, count)
    return fix_crc(img)


def test_tiny_image_is_valid():
    """The base of the next test is accepted: its refusal is the count's doing."""
    syms = SymsFile(_tiny_image())
    assert len(syms.symbols) == 0 and syms.find("x") == range(0, 0)


@pytest.mark.parametrize("table", range(N_TABLES))
@pytest.mark.parametrize("count", [1 << 28, (1 << 28) + 1, 1 << 31, 0xFFFFFFFF])
def test_huge_count_refused_before_allocating(table, count):
    """A 200-byte file whose directory claims 2^31 entries: refused at once."""
    img = _tiny_image(table, count)
    t0 = time.monotonic()
    with budget(2), pytest.raises(KmodsymsError, match="out of bounds"):
        SymsFile(img)
    assert time.monotonic() - t0 < 1


# --------------------------------------------------------- kallsyms mutation
_NAMES = [b"x" * 500, b"y" * 5000, "p\u00e9ch\u00e9".encode(), b"\xff\xfe\x80",
          b"with space", b"a\x00b", b"[bracket]", b"\xe2\x82", b"trailing ", b"\t[mod]",
          b"\tnot_a_module", b"init_once", b"rest_init", b"\r"]
line_no = st.integers(0, 10_000)
_kop = st.one_of(
    st.tuples(st.just("delete"), line_no),
    st.tuples(st.just("duplicate"), line_no),
    st.tuples(st.just("swap"), line_no, line_no),
    st.tuples(st.just("insert_bytes"), pos, st.binary(min_size=1, max_size=32)),
    st.tuples(st.just("crlf")),
    st.tuples(st.just("no_final_newline")),
    st.tuples(st.just("name"), line_no, st.sampled_from(_NAMES) | st.binary(min_size=1, max_size=40)),
    st.tuples(st.just("zero_address"), line_no),
    st.tuples(st.just("all_zero")),
    st.tuples(st.just("truncate"), pos),
    st.tuples(st.just("empty")),
    st.tuples(st.just("letter"), line_no, st.sampled_from(b"TtDdWwVvAaBbRr?U!")),
    st.tuples(st.just("move_address"), line_no, st.integers(-0x100, 0x100)),
)
kallsyms_mutation = st.lists(_kop, min_size=1, max_size=5)


def mutate_kallsyms(base: bytes, ops) -> bytes:
    text = base
    for op in ops:
        kind = op[0]
        lines = text.split(b"\n")
        n = len(lines)
        if kind == "delete":
            del lines[op[1] % n]
        elif kind == "duplicate":
            k = op[1] % n
            lines.insert(k, lines[k])
        elif kind == "swap":
            i, j = op[1] % n, op[2] % n
            lines[i], lines[j] = lines[j], lines[i]
        elif kind == "insert_bytes":
            at = op[1] % (len(text) + 1)
            text = text[:at] + op[2] + text[at:]
            continue
        elif kind == "crlf":
            text = text.replace(b"\n", b"\r\n")
            continue
        elif kind == "no_final_newline":
            text = text.rstrip(b"\n")
            continue
        elif kind == "name":
            k = op[1] % n
            f = lines[k].split(b" ", 2)
            if len(f) == 3:
                name, tab, mod = f[2].partition(b"\t")
                lines[k] = b" ".join(f[:2] + [op[2] + tab + mod])
        elif kind == "zero_address":
            k = op[1] % n
            f = lines[k].split(b" ", 1)
            lines[k] = b"0" * len(f[0]) + (b" " + f[1] if len(f) > 1 else b"")
        elif kind == "all_zero":
            lines = [b"0" * 16 + ln[16:] if len(ln) > 16 else ln for ln in lines]
        elif kind == "truncate":
            text = text[:op[1] % (len(text) + 1)]
            continue
        elif kind == "empty":
            text = b""
            continue
        elif kind == "letter":
            k = op[1] % n
            if len(lines[k]) > 17:
                lines[k] = lines[k][:17] + bytes([op[2]]) + lines[k][18:]
        elif kind == "move_address":
            k = op[1] % n
            f = lines[k].split(b" ", 1)
            try:
                a = (int(f[0], 16) + op[2]) % (1 << 64)
            except ValueError:
                continue
            lines[k] = b"%016x" % a + (b" " + f[1] if len(f) > 1 else b"")
        text = b"\n".join(lines)
    return text


def check_kallsyms_text(text: bytes, syms_bytes: bytes, probes) -> str:
    addrs, names = probes
    with budget():
        try:
            r = load_image(syms_bytes, text, force=False)
        except KmodsymsError:       # malformed, or stale (the anchors)
            return "refused"
        exercise(r, addrs, names)
    return "accepted"


@FAST_KALLSYMS
@given(ops=kallsyms_mutation)
def test_fuzz_kallsyms(syms_bytes, kallsyms_bytes, probes, ops):
    check_kallsyms_text(mutate_kallsyms(kallsyms_bytes, ops), syms_bytes, probes)


@pytest.mark.slow
@SLOW
@given(ops=kallsyms_mutation)
def test_fuzz_kallsyms_slow(syms_bytes, kallsyms_bytes, probes, ops):
    check_kallsyms_text(mutate_kallsyms(kallsyms_bytes, ops), syms_bytes, probes)


# ----------------------------------------------------------------- the CLI
# A user's terminal: a UTF-8 locale with strict encoding (C.UTF-8 containers
# get surrogateescape, hiding encoding bugs).
STRICT_IO = "utf-8:strict"


def run_cli(args, timeout=30):
    """``python -m kmodsyms ARGS`` as a real subprocess."""
    env = dict(os.environ, PYTHONIOENCODING=STRICT_IO)
    return subprocess.run([sys.executable, "-m", "kmodsyms", *args], cwd=ROOT, env=env,
                          capture_output=True, timeout=timeout)


class Forked:
    def __init__(self, returncode, stdout, stderr):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def run_cli_forked(args, budget_seconds=20):
    """``kmodsyms.__main__.main()`` in a forked child, exactly as ``python -m
    kmodsyms`` runs it (fresh argv, stdout/stderr on new files, strict
    UTF-8 stdout, an uncaught exception printed as a traceback with status
    1), without paying the interpreter and import start-up per case."""
    import io
    import tempfile
    import traceback
    out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    pid = os.fork()
    if pid == 0:  # child: never return into pytest
        code = 1
        try:
            signal.signal(signal.SIGALRM, signal.SIG_DFL)
            signal.alarm(budget_seconds)
            os.dup2(out.fileno(), 1)
            os.dup2(err.fileno(), 2)
            sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8",
                                          errors="strict")
            sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8",
                                          errors="backslashreplace")
            sys.argv = ["kmodsyms", *args]
            from kmodsyms.__main__ import main
            try:
                main()
                code = 0
            except SystemExit as e:
                if e.code is None or isinstance(e.code, int):
                    code = e.code or 0
                else:
                    sys.stderr.write(f"{e.code}\n")
                    code = 1
            except BaseException:
                traceback.print_exc()
                code = 1
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except BaseException:
                    traceback.print_exc(file=sys.__stderr__)
                    code = 1
        finally:
            os._exit(code)
    _pid, status = os.waitpid(pid, 0)
    out.seek(0)
    err.seek(0)
    return Forked(os.waitstatus_to_exitcode(status), out.read(), err.read())


def assert_clean_exit(proc, what):
    err = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode in (0, 2), f"{what}: exit {proc.returncode}: {err[-3000:]}"
    assert "Traceback" not in err, f"{what}: {err[-3000:]}"
    if proc.returncode == 2:
        assert len(err.strip().splitlines()) == 1, f"{what}: {err!r}"
        assert err.startswith("kmodsyms: error: "), f"{what}: {err!r}"


@pytest.fixture(scope="session")
def warm_cli(fixture_syms):
    """Run main() once in this process so that forked children start with
    typer's and click's lazy imports done (~20 ms per case instead of ~250)."""
    import io

    from kmodsyms.__main__ import main
    saved = sys.argv, sys.stdout, sys.stderr
    for args in (["info", fixture_syms],
                 ["resolve", "--syms", fixture_syms, "--kallsyms", FIXTURE_KALLSYMS, "0x0"]):
        sys.argv, sys.stdout, sys.stderr = ["kmodsyms", *args], io.StringIO(), io.StringIO()
        try:
            main()
        except SystemExit:
            pass
        finally:
            sys.argv, sys.stdout, sys.stderr = saved


def _cli_property(tmp_path_factory, syms_bytes, kallsyms_bytes, mutation, kops, runner):
    d = tmp_path_factory.mktemp("cli")
    syms_path, ks_path = d / "dtrace_syms", d / "kallsyms"
    syms_path.write_bytes(mutate_syms(syms_bytes, mutation))
    ks_path.write_bytes(mutate_kallsyms(kallsyms_bytes, kops) if kops else kallsyms_bytes)
    for args in (["info", str(syms_path)],
                 ["resolve", "--syms", str(syms_path), "--kallsyms", str(ks_path),
                  "0xffffffffab600400", "0xffffffffab600010", "0xffffffffc0a00010", "0x8"],
                 ["kallmodsyms", "--syms", str(syms_path), "--kallsyms", str(ks_path)],
                 ["dump", str(syms_path)],
                 ["lookup", "--syms", str(syms_path), "--kallsyms", str(ks_path), "init_once",
                  "ext4`init_once", "no_such_symbol"]):
        proc = runner(args)
        if args[0] == "lookup" and proc.returncode == 1:  # "no symbol ...": documented
            assert b"Traceback" not in proc.stderr, proc.stderr
            continue
        assert_clean_exit(proc, " ".join(args))


cli_kops = st.none() | kallsyms_mutation

CLI_REPRODUCERS = {
    # the string table's offset moved to 256 (inside the tables, CRC repaired):
    # the header's placement string decodes to text that is not JSON, and
    # 'info' raised JSONDecodeError
    "string-table-moved": ([("dir", 0, False, 256)], "crc", True),
}


@pytest.mark.parametrize("case", sorted(CLI_REPRODUCERS))
def test_fuzz_cli_reproducers(warm_cli, tmp_path_factory, syms_bytes, kallsyms_bytes, case):
    _cli_property(tmp_path_factory, syms_bytes, kallsyms_bytes, CLI_REPRODUCERS[case], None,
                  run_cli_forked)


@CLI_FAST
@given(mutation=syms_mutation, kops=cli_kops)
def test_fuzz_cli(warm_cli, tmp_path_factory, syms_bytes, kallsyms_bytes, mutation, kops):
    _cli_property(tmp_path_factory, syms_bytes, kallsyms_bytes, mutation, kops, run_cli_forked)


@pytest.mark.slow
@CLI_SLOW
@given(mutation=syms_mutation, kops=cli_kops)
def test_fuzz_cli_slow(warm_cli, tmp_path_factory, syms_bytes, kallsyms_bytes, mutation, kops):
    _cli_property(tmp_path_factory, syms_bytes, kallsyms_bytes, mutation, kops, run_cli_forked)


@pytest.mark.parametrize("case", ["intact", "crc-valid-bad-index", "kallsyms-empty",
                                  "kallsyms-high-byte-name", "syms-high-byte-module-name"])
def test_cli_real_subprocess(warm_cli, tmp_path, syms_bytes, kallsyms_bytes, case):
    """The same checks through a real ``python -m kmodsyms`` (anchors the
    forked runner above to the real thing)."""
    syms, ks = bytearray(syms_bytes), kallsyms_bytes
    if case == "bad-magic":
        syms[0] ^= 1
    elif case == "bad-crc":
        syms[-1] ^= 1
    elif case == "crc-valid-bad-index":
        syms = mutate_syms(syms_bytes, ([("field", 7, 3, 2, 0xFFFF)], "crc"))
    elif case == "huge-count":
        syms = mutate_syms(syms_bytes, ([("dir", 7, True, 1 << 31)], "crc"))
    elif case == "kallsyms-empty":
        ks = b""
    elif case == "syms-high-byte-module-name":  # 'ext4' -> 'e\xfft4' (crc-valid)
        s = SymsFile(syms_bytes)
        syms = mutate_syms(syms_bytes, ([("byte", directory(syms_bytes)[0][0] + int(s.modules["name"][2]) + 1,
                                          0xFF)], "crc"))
    elif case == "kallsyms-high-byte-name":
        ks = ks.replace(b" rest_init\n", b" rest_\xffinit\n")
    (tmp_path / "s").write_bytes(bytes(syms))
    (tmp_path / "k").write_bytes(ks)
    for args in (["info", str(tmp_path / "s")],
                 ["dump", str(tmp_path / "s")],
                 ["resolve", "--syms", str(tmp_path / "s"), "--kallsyms", str(tmp_path / "k"),
                  "0xffffffffab600010"]):
        real, forked = run_cli(args), run_cli_forked(args)
        assert_clean_exit(real, f"{case}: {args}")
        assert (real.returncode, real.stdout, real.stderr) == \
            (forked.returncode, forked.stdout, forked.stderr)
