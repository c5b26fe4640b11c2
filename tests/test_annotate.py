"""``kmodsyms annotate`` on real ``perf script`` output, oops traces and
folded stacks, against the linker maps' truth (truth.tsv) of the corpus.

tests/data/perf-script-*.txt are real ``perf script`` output (perf 6.1.192,
``perf record -a -g -e cpu-clock`` and ``perf record -a -e cpu-clock``)
captured on a 6.18 x86_64 VM, cut to the samples whose kernel frames name a
symbol that occurs once in the corpus kallsyms.  The test moves each such
frame to that symbol's corpus address plus perf's offset, written as perf
writes it (``%16lx``), and leaves every other byte as perf printed it; the
annotated text must then differ only in the DSO of frames of built-in
modules, which must be truth.tsv's module.
"""

from __future__ import annotations

import bisect
import os
import random
import re
import shutil
import subprocess
import sys

import pytest
from conftest import FIXTURE, ROOT

from kmodsyms import load
from kmodsyms.cli.annotate import Annotator

DATA = os.path.join(ROOT, "tests", "data")
PERF_CAPTURES = ("perf-script-callchain.txt", "perf-script-flat.txt")
FRAME = re.compile(r"(?P<address>[0-9a-f]{16}) (?P<symbol>\S+) \(\[kernel\.kallsyms\]\)")


def _kallsyms_lines(path):
    with open(path) as f:
        for line in f:
            address, letter, rest = line.rstrip("\n").split(" ", 2)
            name, _, module = rest.partition("\t")
            yield int(address, 16), letter, name, module


def _truth(corpus, sizes=None):
    """(address, name) -> module, from the linker maps (truth.tsv); and
    into ``sizes``, (address, name) -> vmlinux's ELF size."""
    truth = {}
    with open(os.path.join(corpus, "truth.tsv")) as f:
        for line in f:
            if not line.startswith("#"):
                address, _letter, name, _obj, modules, size, _flag = line.rstrip("\n").split("\t")
                truth[int(address, 16), name] = modules.split(",")[0]
                if sizes is not None:
                    sizes[int(address, 16), name] = int(size)
    return truth


def _annotate(resolver, text, folded=False):
    annotator = Annotator(resolver, folded)
    return "".join(annotator.line(line) for line in text.splitlines(True))


def _run(args, stdin):
    return subprocess.run([sys.executable, "-m", "kmodsyms", *args], input=stdin,
                          capture_output=True, text=True, cwd=ROOT)


@pytest.fixture(scope="module")
def corpus_resolver(corpus, corpus_syms):
    return load(corpus_syms, os.path.join(corpus, "kallsyms"))


@pytest.mark.parametrize("capture", PERF_CAPTURES)
def test_real_perf_script_output_on_the_corpus(corpus, corpus_syms, corpus_resolver, capture):
    core = {}
    for address, _letter, name, module in _kallsyms_lines(os.path.join(corpus, "kallsyms")):
        if not module:
            core.setdefault(name, []).append(address)
    truth = _truth(corpus)
    text = open(os.path.join(DATA, capture)).read()
    expected_lines, frames, in_modules = [], 0, 0

    def move(m):
        name, _, offset = m["symbol"].partition("+")
        (start,) = core[name]
        return f"{start + int(offset or '0', 16):16x} {m['symbol']} ([kernel.kallsyms])"

    moved = FRAME.sub(move, text)
    for line in moved.splitlines(True):
        m = FRAME.search(line)
        if m:
            frames += 1
            name = m["symbol"].partition("+")[0]
            module = truth[core[name][0], name]
            if module != "vmlinux":
                in_modules += 1
                line = line.replace("([kernel.kallsyms])", f"([{module}])")
        expected_lines.append(line)
    assert frames > 80 and in_modules > 40
    assert _annotate(corpus_resolver, moved) == "".join(expected_lines)
    cli = _run(["annotate", "--syms", corpus_syms, "--kallsyms",
                os.path.join(corpus, "kallsyms")], moved)
    assert (cli.returncode, cli.stderr, cli.stdout) == (0, "", "".join(expected_lines))


def test_oops_traces_on_the_corpus(corpus, corpus_resolver):
    """Oops lines as the kernel prints them (size: the distance to the next
    kallsyms address), for random core and built-in text symbols, with and
    without the address; a name in several modules is told apart by the
    address, else by the size, else left alone."""
    lines = [(a, letter, name) for a, letter, name, module in
             _kallsyms_lines(os.path.join(corpus, "kallsyms")) if not module]
    addresses = sorted({a for a, _, _ in lines})
    elf_size = {}
    truth = _truth(corpus, elf_size)
    names = {}
    for a, letter, name in lines:
        names.setdefault(name, []).append(a)
    rng = random.Random(14)
    at_address = {}
    for a, _letter, _name in lines:
        at_address[a] = at_address.get(a, 0) + 1
    text_lines = [(a, name) for a, letter, name in lines   # no padding, no aliases
                  if letter in "tT" and elf_size.get((a, name), 0) > 0 and at_address[a] == 1
                  and not name.startswith("__pfx_")]
    checked = {"module": 0, "core": 0, "undecided": 0}
    for a, name in rng.sample(text_lines, 3000):
        gap = addresses[bisect.bisect_right(addresses, a)] - a
        offset = rng.randrange(elf_size[a, name])   # inside the symbol: it must be named
        module = truth[a, name]
        suffix = "" if module == "vmlinux" else f" [{module}]"
        with_address = f"[  1.0] [<{a + offset:016x}>] ? {name}+{offset:#x}/{gap:#x}\n"
        assert _annotate(corpus_resolver, with_address) == with_address[:-1] + suffix + "\n"
        bare = f" [<{a + offset:016x}>]\n"
        got = _annotate(corpus_resolver, bare)
        assert got.startswith(bare[:-1] + f" {name}+{offset:#x}/") and got.endswith(suffix + "\n")
        plain = f"  {name}+{offset:#x}/{gap:#x}\n"
        others = {truth.get((b, name), "?") for b in names[name]}
        same_size = [b for b in names[name]
                     if addresses[bisect.bisect_right(addresses, b)] - b == gap]
        got = _annotate(corpus_resolver, plain)
        if len(others) == 1 or len({truth.get((b, name)) for b in same_size}) == 1:
            assert got == plain[:-1] + suffix + "\n"
            checked["core" if module == "vmlinux" else "module"] += 1
        else:
            assert got == plain
            checked["undecided"] += 1
    assert checked["module"] > 500 and checked["core"] > 500


def test_fixture_frames_of_every_kind(fixture_syms):
    """The fixture's hard cases (fixtures/kbuild/README.md): init_once in
    ext4, isofs and core kernel, fuse loaded, a perf frame perf could not name."""
    r = load(fixture_syms, os.path.join(FIXTURE, "kallsyms"))
    text = ("perf 1 [000] 1.0: 1 cpu-clock: \n"
            "\tffffffffab600684 ext4_file_open+0x4 ([kernel.kallsyms])\n"
            "\tffffffffab600400 init_once+0x10 ([kernel.kallsyms])\n"
            "\tffffffffab600124 [unknown] ([kernel.kallsyms])\n"
            "\tffffffffc0a00010 fuse_dev_open+0x0 ([fuse])\n"
            "\t    7f0000001234 main+0x4 (/bin/true)\n"
            "RIP: 0010:ext4_file_open+0x4/0x10\n"
            " init_once+0x10/0x30\n"                       # ext4's by its kernel size
            " init_once+0x10/0x20\n"                       # core's and isofs' size
            " [<ffffffffab600404>] init_once+0x14/0x99\n"  # the address decides
            " fuse_dev_open+0x0/0x10 [fuse]\n")
    assert _annotate(r, text) == (
        "perf 1 [000] 1.0: 1 cpu-clock: \n"
        "\tffffffffab600684 ext4_file_open+0x4 ([ext4])\n"
        "\tffffffffab600400 init_once+0x10 ([ext4])\n"
        "\tffffffffab600124 init_once+0x4 ([kernel.kallsyms])\n"
        "\tffffffffc0a00010 fuse_dev_open+0x0 ([fuse])\n"
        "\t    7f0000001234 main+0x4 (/bin/true)\n"
        "RIP: 0010:ext4_file_open+0x4/0x10 [ext4]\n"
        " init_once+0x10/0x30 [ext4]\n"
        " init_once+0x10/0x20\n"
        " [<ffffffffab600404>] init_once+0x14/0x99 [ext4]\n"
        " fuse_dev_open+0x0/0x10 [fuse]\n")
    folded = ("swapper;ext4_file_open;init_once 5\n"
              "bash;main;ext4_file_open_[k];memcpy 3\n"
              "bash;fuse_dev_open;rest_init 2\n")
    assert _annotate(r, folded) == folded     # folded stacks only when asked
    assert _annotate(r, folded, folded=True) == (
        "swapper;ext4`ext4_file_open;init_once 5\n"
        "bash;main;ext4`ext4_file_open_[k];memcpy 3\n"
        "bash;fuse`fuse_dev_open;vmlinux`rest_init 2\n")


def _hidden_kallsyms() -> bool:
    with open("/proc/kallsyms") as f:
        return all(line.startswith("0000000000000000") for line, _ in zip(f, range(1000)))


def test_live_perf_on_this_host(tmp_path):
    """Real perf on the running kernel, annotated with this host's
    dtrace_syms if installed, else from kallsyms alone (one warning): every
    line but kernel frames is unchanged, and loaded modules' frames too."""
    if shutil.which("perf") is None:
        pytest.skip("perf is not installed (apt-get install linux-perf)")
    if not os.access("/proc/kallsyms", os.R_OK) or _hidden_kallsyms():
        pytest.skip("/proc/kallsyms hides its addresses from this user")
    data = str(tmp_path / "perf.data")
    record = subprocess.run(["perf", "record", "-q", "-a", "-g", "-e", "cpu-clock", "-o", data,
                             "--", "sleep", "0.3"], capture_output=True, text=True)
    if record.returncode:
        pytest.skip(f"perf record is not permitted here: {record.stderr.strip()[-200:]}")
    script = subprocess.run(["perf", "script", "-i", data], capture_output=True, text=True,
                            errors="surrogateescape").stdout
    assert "[kernel.kallsyms]" in script
    out = _run(["annotate"], script)
    assert out.returncode == 0, out.stderr
    assert len(out.stderr.splitlines()) <= 1
    before, after = script.splitlines(), out.stdout.splitlines()
    assert len(before) == len(after)
    degraded = "built-in modules unknown" in out.stderr
    any_frame = re.compile(r"(?P<address>[0-9a-f]+) (?P<symbol>\S+) \((?P<dso>\[[^\]]+\])\)$")
    changed = 0
    for old, new in zip(before, after):
        if "([kernel.kallsyms])" not in old or new == old:
            assert new == old
            continue
        changed += 1
        was, now = any_frame.search(old), any_frame.search(new)
        assert now["address"] == was["address"]
        assert was["symbol"] == "[unknown]" or now["symbol"] == was["symbol"]
        assert now["dso"] == "[kernel.kallsyms]" if degraded else now["dso"] != "[kernel.kallsyms]"
    assert changed <= len(before)


def test_hidden_kallsyms_passes_the_text_through(fixture_syms, tmp_path):
    """Issue 24.9: when kallsyms shows no addresses (kptr_restrict, a reader
    without CAP_SYSLOG), annotate is still a filter: its input comes out
    unchanged, with one warning saying why; --strict refuses instead."""
    import subprocess
    import sys

    from conftest import FIXTURE, ROOT
    hidden = tmp_path / "kallsyms"
    with open(os.path.join(FIXTURE, "kallsyms")) as f:
        hidden.write_text("".join("0" * 16 + line[16:] for line in f))
    text = "RIP: 0010:ext4_file_open+0x4/0x10\n[<ffffffffab600404>] whatever\n"
    args = [sys.executable, "-m", "kmodsyms", "annotate", "--syms", fixture_syms,
            "--kallsyms", str(hidden)]
    run = subprocess.run(args, input=text, capture_output=True, text=True, cwd=ROOT)
    assert (run.returncode, run.stdout) == (0, text), run.stderr
    assert len(run.stderr.splitlines()) == 1 and "warning" in run.stderr, run.stderr
    strict = subprocess.run(args + ["--strict"], input=text, capture_output=True, text=True, cwd=ROOT)
    assert strict.returncode == 2 and strict.stdout == "" and len(strict.stderr.splitlines()) == 1


def test_input_that_is_not_text_passes_through_named(fixture_syms, tmp_path):
    """Issue 24 item 7: a file that is not text (perf.data, a compressed
    trace), judged by the library's rule (kms_data_kind()), passes through
    byte for byte with one warning naming it and what it is; the text
    files beside it, stdin among them, are annotated; and any bytes on any
    line come out as they went in, whatever the locale."""
    import gzip
    frame = "\tffffffffab600684 ext4_file_open+0x4 ([kernel.kallsyms])\n"
    packed = tmp_path / "trace.gz"
    packed.write_bytes(gzip.compress(frame.encode()))
    odd = b"\xff\xfe not UTF-8\n"
    run = subprocess.run([sys.executable, "-m", "kmodsyms", "annotate", "--syms", fixture_syms,
                          "--kallsyms", os.path.join(FIXTURE, "kallsyms"), str(packed), "-"],
                         input=odd + frame.encode(), capture_output=True, cwd=ROOT,
                         env={**os.environ, "PYTHONIOENCODING": "utf-8:strict", "LC_ALL": "C.UTF-8"})
    assert run.returncode == 0, run.stderr
    assert run.stdout == packed.read_bytes() + odd + frame.replace("[kernel.kallsyms]", "[ext4]").encode()
    assert run.stderr.decode() == (f"kmodsyms: warning: {packed}: gzip data: decompress it first; "
                                   "it passes through unannotated\n")
