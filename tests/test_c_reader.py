"""The C reader in contrib/c agrees with the Python reader (kmodsyms.symsfile)
on every name of the fixture's dtrace_syms, and on a sample of the corpus's,
and refuses damaged files with exit status 2 and a one-line message."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import zlib
from concurrent.futures import ThreadPoolExecutor

import pytest

from kmodsyms.errors import KmodsymsError
from kmodsyms.symsfile import read_syms

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CSRC = os.path.join(ROOT, "contrib", "c")


@pytest.fixture(scope="session")
def c_lookup(tmp_path_factory):
    """kmodsyms-c-lookup built from contrib/c into a temporary directory."""
    if not (shutil.which("make") and shutil.which(os.environ.get("CC", "cc"))):
        pytest.skip("cc or make is not installed")
    out = tmp_path_factory.mktemp("c-reader")
    proc = subprocess.run(["make", "-s", "-C", CSRC, f"O={out}"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    prog = out / "kmodsyms-c-lookup"
    assert prog.exists()
    return str(prog)


def run(prog: str, path: str, name: str) -> subprocess.CompletedProcess:
    return subprocess.run([prog, path, name], capture_output=True)


def expected(syms, name: str) -> str:
    lines = []
    for i in syms.find(name):
        e = syms.entry(i)
        lines.append(f"{','.join(e['modules']) or 'vmlinux'} {e['object']} {e['size']}\n")
    return "".join(lines)


def check_names(prog: str, path: str, syms, names) -> None:
    """Run the C reader once per name (in parallel, one process each) and
    compare with the Python reader."""
    names = list(names)
    jobs = min(8, os.cpu_count() or 1)
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        results = pool.map(lambda n: run(prog, path, n), names)
        for name, proc in zip(names, results):
            want = expected(syms, name)
            assert want, name
            assert proc.returncode == 0, (name, proc.stderr)
            assert proc.stderr == b""
            assert proc.stdout.decode("utf-8", "surrogateescape") == want, name


def distinct_names(syms) -> list[str]:
    return sorted({syms.symbol_name(i) for i in range(len(syms.symbols))})


def test_every_fixture_name(c_lookup, fixture_syms):
    syms = read_syms(fixture_syms)
    names = distinct_names(syms)
    assert len(names) > 50
    check_names(c_lookup, fixture_syms, syms, names)
    # the worked examples of docs/format.md
    assert run(c_lookup, fixture_syms, "mdio_bus_read").stdout == \
        b"libphy,fwnode_mdio drivers/net/phy/mdio_shared.o 14\n"
    assert b"ext4 fs/ext4/super.o 39\n" in run(c_lookup, fixture_syms, "init_once").stdout


@pytest.mark.parametrize("name", ["no_such_symbol", "", "init_onc", "init_oncee", "~~~"])
def test_absent_name(c_lookup, fixture_syms, name):
    proc = run(c_lookup, fixture_syms, name)
    assert proc.returncode == 1
    assert proc.stdout == b"" and proc.stderr == b""


def assert_refused(prog: str, path: str) -> str:
    proc = run(prog, path, "init_once")
    assert proc.returncode == 2, proc
    assert proc.stdout == b""
    err = proc.stderr.decode()
    assert err.endswith("\n") and err.count("\n") == 1, err
    return err


def test_truncated_file(c_lookup, fixture_syms, tmp_path):
    data = open(fixture_syms, "rb").read()
    for keep in (0, 10, 16, 100, 128, len(data) // 2, len(data) - 1):
        bad = tmp_path / f"trunc{keep}"
        bad.write_bytes(data[:keep])
        assert_refused(c_lookup, str(bad))


def test_flipped_byte(c_lookup, fixture_syms, tmp_path):
    data = open(fixture_syms, "rb").read()
    # magic, version, crc, header fields, directory, every table's area, the end
    positions = sorted({0, 8, 12, 16, 24, 28, 32, 56, 60, 100, 127}
                       | set(range(128, len(data), max(1, len(data) // 97))) | {len(data) - 1})
    for pos in positions:
        bad = tmp_path / "flipped"
        bad.write_bytes(data[:pos] + bytes([data[pos] ^ 0x01]) + data[pos + 1:])
        err = assert_refused(c_lookup, str(bad))
        if pos >= 16:
            assert "checksum" in err or "truncated" in err or "header size" in err, (pos, err)


def test_missing_file(c_lookup, tmp_path):
    assert_refused(c_lookup, str(tmp_path / "absent"))


def test_corpus_sample(c_lookup, corpus_syms):
    """Every 200th distinct name of the corpus and every 8th of the names
    that occur more than once: ~1,000 names, one process each (each run
    reads and validates the whole 10 MB file, CRC included: ~20 ms)."""
    syms = read_syms(corpus_syms)
    names = [syms.symbol_name(i) for i in range(len(syms.symbols))]
    repeated = sorted({a for a, b in zip(names, names[1:]) if a == b})
    distinct = sorted(set(names))
    sample = sorted(set(distinct[::200]) | set(repeated[::8]))
    assert len(sample) > 700
    check_names(c_lookup, corpus_syms, syms, sample)
    assert run(c_lookup, corpus_syms, "no_such_symbol_anywhere").returncode == 1


def _recrc(data: bytearray) -> bytes:
    struct.pack_into("<I", data, 12, zlib.crc32(bytes(data[16:])))
    return bytes(data)


def test_bad_tables_with_valid_crc(c_lookup, fixture_syms, tmp_path):
    """Damage that the CRC does not catch (the CRC is recomputed): every
    count, offset and index is still checked before use."""
    data = open(fixture_syms, "rb").read()
    directory = struct.unpack_from("<16I", data, 56)
    sym_at = directory[14]
    cases = {
        "huge count": (56 + 8 * 7 + 4, 0xFFFFFFFF),
        "table past end": (56 + 8 * 7 + 4, directory[15] + 1),
        "misaligned table": (56 + 8 * 6, directory[12] + 4),
        "table in header": (56 + 8 * 1, 64),
        "symbol name": (sym_at + 0, directory[1]),
        "symbol modset": (sym_at + 4, directory[7]),
        "symbol object": (sym_at + 8, directory[9]),
        "symbol section": (sym_at + 12, directory[13]),
        "section of another object": (sym_at + 40 * 80 + 12, 0),
        "module set": (directory[6] + 8 * 7 + 4, 0xFFFFFFFF),
        "module name": (directory[2], 0xFFFFFFF0),
        "header string": (32, directory[1]),
    }
    for what, (offset, value) in cases.items():
        bad = bytearray(data)
        struct.pack_into("<I", bad, offset, value)
        path = tmp_path / "bad"
        path.write_bytes(_recrc(bad))
        with pytest.raises(KmodsymsError):
            read_syms(str(path))          # the reference reader refuses it too
        assert_refused(c_lookup, str(path))
    # unsorted names: refused by the C reader (the Python reader does not check)
    bad = bytearray(data)
    first, second = data[sym_at:sym_at + 40], data[sym_at + 40:sym_at + 80]
    bad[sym_at:sym_at + 80] = second + first
    path = tmp_path / "unsorted"
    path.write_bytes(_recrc(bad))
    assert "sorted" in assert_refused(c_lookup, str(path))
