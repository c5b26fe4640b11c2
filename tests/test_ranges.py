"""modules.builtin.ranges from a dtrace_syms file (``kmodsyms ranges``,
src/kmodsyms/format/ranges.py), read as its two real readers read it:

* dtrace-utils, replayed here in Python from libdtrace/dt_module.c
  (dtrace-utils ``devel`` at 8a1264bf, the newest dt_module.c the search
  tool's snapshot of oracle/dtrace-utils holds: it has no 2.0.7 tag, and
  Debian's 2.0.7 source could not be fetched), over a kallsyms as
  ``dtrace_update()`` reads ``/proc/kallsyms`` when there is no
  ``/proc/kallmodsyms``; every built-in line is held to the linker maps
  (the corpora's ``truth.tsv``, the fixture's own maps and thick file),
  never to kmodsyms' own answers.  The kernel's own file is replayed too,
  for the counts docs/dtrace-utils.md gives;
* the kernel's ``scripts/verify_builtin_ranges.awk``, run with gawk as the
  kernel's build runs its generator, from Debian's linux-source tarball
  (skipped without it or gawk).

Also part 5 of issue 29 (R61): with a loaded module's ``.ko`` absent, no
line of it loses to kallmodsyms an address that dtrace on plain kallsyms
answers with it.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT

from kmodsyms.format import ranges as ranges_format
from kmodsyms.format.symsfile import read_syms

KMODSYMS = [sys.executable, "-m", "kmodsyms"]
DTRACE_C = "dtrace-utils devel 8a1264bf libdtrace/dt_module.c"


# ------------------------------------------------------------ dtrace's reading
class _Scan:
    """sscanf(3) over one line, as far as dt_kasstate_modname()'s formats
    use it: a directive of white space skips any (none too); %s and %x
    skip white space first, %x takes an optional 0x; %[set] takes one or
    more of the set and skips nothing; a literal must be the next byte."""

    def __init__(self, text: str):
        self.text, self.at = text, 0

    def space(self) -> None:
        while self.at < len(self.text) and self.text[self.at] in " \t\n\v\f\r":
            self.at += 1

    def string(self) -> bool:
        self.space()
        start = self.at
        while self.at < len(self.text) and self.text[self.at] not in " \t\n\v\f\r":
            self.at += 1
        return self.at > start

    def hex(self) -> int | None:
        self.space()
        if self.text[self.at:self.at + 2] in ("0x", "0X") and \
                self.text[self.at + 2:self.at + 3] in tuple("0123456789abcdefABCDEF"):
            self.at += 2
        start = self.at
        while self.at < len(self.text) and self.text[self.at] in "0123456789abcdefABCDEF":
            self.at += 1
        return int(self.text[start:self.at], 16) if self.at > start else None

    def literal(self, c: str) -> bool:
        if self.text[self.at:self.at + 1] == c:
            self.at += 1
            return True
        return False

    def charset(self, allowed: str) -> str | None:
        start = self.at
        while self.at < len(self.text) and self.text[self.at] in allowed:
            self.at += 1
        return self.text[start:self.at] if self.at > start else None


_NAME_SET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_"


def _scan_range(line: str):
    """dt_module.c:1163: sscanf(line, "%*s %lx-%lx %[A-Za-z0-9_ ]", ...) == 3"""
    s = _Scan(line)
    if not s.string():
        return None
    start = s.hex()
    if start is None or not s.literal("-"):
        return None
    end = s.hex()
    if end is None:
        return None
    s.space()
    name = s.charset(_NAME_SET + " ")
    return None if name is None else (start, end, name)


def _scan_anchor(line: str):
    """dt_module.c:1170: sscanf(line, "%*s %lx-%*x = %[A-Za-z0-9_]", ...) >= 2"""
    s = _Scan(line)
    if not s.string():
        return None
    off = s.hex()
    if off is None or not s.literal("-") or s.hex() is None:
        return None
    s.space()
    if not s.literal("="):
        return None
    s.space()
    name = s.charset(_NAME_SET)
    return None if name is None else (off, name)


class KasState:
    """dt_kasstate_t (dt_module.c:1082-1095), the fields the ranges use,
    with dt_kasstate_modname() (dt_module.c:1129-1181) as :meth:`modname`."""

    U64 = (1 << 64) - 1

    def __init__(self, ranges_text: str | None):
        # dt_kasstate_new() (1097-1127): zeroed; rfp the opened file or NULL
        self.lines = ranges_text.splitlines(keepends=True) if ranges_text is not None else None
        self.next = 0
        self.sect_base = self.sect_off = self.mod_saddr = self.mod_eaddr = 0
        self.sect_symb = ""
        self.mod_name = ""

    def modname(self, addr: int, name: str) -> str | None:
        if self.lines is None:                             # 1136-1137
            return None
        if self.sect_symb:                                 # 1146-1152
            if self.sect_symb != name:
                return None
            self.sect_base = (addr - self.sect_off) & self.U64
            self.sect_symb = ""
        while addr > self.mod_eaddr:                       # 1159
            if self.next >= len(self.lines):               # 1160-1161: getline() == -1
                break
            line = self.lines[self.next]
            self.next += 1
            got = _scan_range(line)
            if got:                                        # 1163-1168
                self.mod_saddr = (got[0] + self.sect_base) & self.U64
                self.mod_eaddr = (got[1] + self.sect_base) & self.U64
                self.mod_name = got[2]
            else:                                          # 1169-1174
                got = _scan_anchor(line)
                if got:
                    self.sect_off, self.sect_symb = got
                return None
        if self.mod_saddr <= addr < self.mod_eaddr:        # 1177-1178
            return self.mod_name
        return None


KERNEL_END, LOADABLE, INIT_SCRATCH = 1, 2, 4   # dt_module.c:1077-1079


def dtrace_modules(kallsyms_text: str, ranges_text: str | None) -> list[tuple | None]:
    """The module list dtrace_update() (1447-1478) files each kallsyms
    line under, in kallsyms order, reading ``ranges_text`` as
    modpath/modules.builtin.ranges (None: no such file); None for a line
    dt_modsym_update() (1319-1436) drops."""
    state = KasState(ranges_text)
    flag = 0
    out: list[tuple | None] = []
    for line in kallsyms_text.splitlines():
        if not line:                                       # 1325-1326
            continue
        head, _tab, tag = line.partition("\t")
        addr, letter, name = head.split(" ", 2)
        addr = int(addr, 16)
        mod = tag[1:-1] if tag else "vmlinux"              # 1329, 1344-1353: "[%s", ']' chopped
        if not tag and not flag & LOADABLE:                # 1354-1361
            s = state.modname(addr, name)
            if s is not None:
                mod = s
        if mod in ("bpf", "__builtin__kprobes") or letter in "aA":   # 1364-1380
            out.append(None)
            continue
        if name == "__init_scratch_begin":                 # 1385-1393
            flag |= INIT_SCRATCH
            out.append(None)
            continue
        if name == "__init_scratch_end":
            flag &= ~INIT_SCRATCH
            out.append(None)
            continue
        if flag & INIT_SCRATCH:
            out.append(None)
            continue
        if name in ("_end", "__brk_limit"):                # 1395-1399
            flag |= KERNEL_END
        elif flag & KERNEL_END:
            flag = LOADABLE
        if mod == "ctf":                                   # 1409-1410
            mod = "shared_ctf"
        out.append(tuple(mod.split()))                     # 1415-1416: strtok(sym.mod, " ")
    return out


def misattributed(kallsyms_text: str, ranges_text: str | None, truth: dict) -> tuple[list, int, int]:
    """The core lines with a linker-map answer (``truth``: (address, name)
    -> modules) that dtrace files under other modules: (those lines,
    how many were checked, how many dtrace dropped)."""
    got = dtrace_modules(kallsyms_text, ranges_text)
    lines = [ln for ln in kallsyms_text.splitlines() if ln]
    wrong, checked, dropped = [], 0, 0
    for line, mods in zip(lines, got):
        head, _tab, tag = line.partition("\t")
        if tag:
            continue
        addr, letter, name = head.split(" ", 2)
        want = truth.get((int(addr, 16), name))
        if want is None:
            continue
        if mods is None:
            dropped += 1
            continue
        checked += 1
        if list(mods) != list(want):
            wrong.append((addr, letter, name, tuple(want), mods))
    return wrong, checked, dropped


def test_replay_reads_the_kernels_own_example():
    """The reading on a file as the kernel's generator writes it: anchor
    first, the anchor line's taker answered by no module, a line at a
    range's end by none either, several modules split on spaces."""
    ranges = (".text 00000000-00000000 = _text\n"
              ".text 00000010-00000020 mod_a\n"
              ".text 00000020-00000030 mod_b mod_c\n")
    kallsyms = "\n".join(f"{0xffffffff81000000 + off:016x} t {name}" for off, name in (
        (0, "_stext"), (0, "_text"), (0x10, "a1"), (0x18, "a2"), (0x20, "b1"), (0x28, "b2"),
        (0x30, "after")))
    assert dtrace_modules(kallsyms, ranges) == [
        ("vmlinux",), ("vmlinux",), ("mod_a",), ("mod_a",), ("vmlinux",),
        ("mod_b", "mod_c"), ("vmlinux",)]
    # the same file with the anchor symbol the first line: dtrace never finds it
    assert dtrace_modules(kallsyms.replace("_stext", "zz"), ranges.replace("_text", "zz"))[2:] == \
        [("vmlinux",)] * 5


# ------------------------------------------------------------ truth
def corpus_truth(tree: str) -> dict:
    """(address, name) -> modules of every ``ok`` row of truth.tsv."""
    out = {}
    for line in open(os.path.join(tree, "truth.tsv")):
        if line.startswith("#"):
            continue
        addr, _type, name, _obj, mods, _size, flag = line.rstrip("\n").split("\t")
        if flag == "ok":
            out[int(addr, 16), name] = tuple(mods.split(","))
    return out


def map_truth(tree: str, listing: str, shift: int) -> dict:
    """(address, name) -> modules of every core line of ``listing`` (a
    kallsyms, or System.map at link addresses), from the tree's linker maps
    and thick file: the object whose bytes are there, its modules."""
    from kmodsyms.scan.linkmap import vmlinux_object_map
    from kmodsyms.scan.modmap.thick import read_thick
    objects = vmlinux_object_map(*(os.path.join(tree, n) for n in ("vmlinux.map", "vmlinux.o.map",
                                                                    "vmlinux")))
    thick = read_thick(os.path.join(tree, "modules_thick.builtin"))
    owners = thick.object_modules()
    out = {}
    for line in open(listing):
        fields = line.split()
        if len(fields) != 3 or fields[1] in "aA" or int(fields[0], 16) < 1 << 63:
            continue      # per-cpu offsets (System.map's x86_64 per-cpu lines)
        addr = int(fields[0], 16)
        obj = objects.object_at(addr - shift)
        out[addr, fields[2]] = tuple(thick.modules[m] for m in owners.get(obj, ())) or ("vmlinux",)
    return out


def write_ranges(syms: str, out: str) -> subprocess.CompletedProcess:
    proc = subprocess.run(KMODSYMS + ["ranges", "--syms", syms, "-o", out], capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr
    return proc


def text(path: str) -> str:
    with open(path, encoding="utf-8", errors="surrogateescape") as f:
        return f.read()


# ------------------------------------------------------------ the fixture
def test_fixture_ranges_read_by_dtrace_as_the_linker_maps(fixture_tree, fixture_syms, tmp_path):
    """Every core line of the fixture's kallsyms and of its text-only
    kallsyms is filed by dtrace's reading under the linker maps' modules."""
    from conftest import FIXTURE_KASLR
    out = str(tmp_path / "modules.builtin.ranges")
    write_ranges(fixture_syms, out)
    for name in ("kallsyms", "kallsyms.text-only"):
        kallsyms = os.path.join(fixture_tree, name)
        truth = map_truth(fixture_tree, kallsyms, FIXTURE_KASLR)
        wrong, checked, _dropped = misattributed(text(kallsyms), text(out), truth)
        assert wrong == [] and checked > 100, (name, wrong[:5])
        assert any(m != ("vmlinux",) for m in truth.values())
        # without the file, dtrace files every built-in module's line under vmlinux
        assert misattributed(text(kallsyms), None, truth)[0]


def test_fixture_ranges_file(fixture_syms, tmp_path):
    """The kernel's record syntax, one anchor first, ranges ascending and
    disjoint, read back at the file's link addresses; stdout equals -o's
    file; --json holds the same ranges."""
    out = str(tmp_path / "r")
    proc = write_ranges(fixture_syms, out)
    assert proc.stdout.startswith(f"{out}: 40 ranges of 7 built-in modules after the anchor ")
    body = text(out)
    stdout = subprocess.run(KMODSYMS + ["ranges", "--syms", fixture_syms], capture_output=True,
                            text=True, check=True).stdout
    assert stdout == body
    lines = body.splitlines()
    assert re.fullmatch(r"\.text 00000000-00000000 = [A-Za-z0-9_]+", lines[0])
    assert all(re.fullmatch(r"\.text [0-9a-f]{8}-[0-9a-f]{8}( [a-z0-9_]+)+", ln) for ln in lines[1:])
    assert "libphy fwnode_mdio" in body     # the object the two modules share
    records = ranges_format.parse(body)
    syms = read_syms(fixture_syms)
    plan = ranges_format.plan(syms)
    (group,) = plan.groups
    placed = ranges_format.resolve(records, lambda name: group.anchor_address
                                   if name == group.anchor else None)
    assert [(r.start, r.end, r.modules) for r in placed] == \
        [(r.start, r.end, r.modules) for r in group.runs]
    assert all(a.end <= b.start for a, b in zip(placed, placed[1:]))
    doc = json.loads(subprocess.run(KMODSYMS + ["ranges", "--syms", fixture_syms, "--json"],
                                    capture_output=True, text=True, check=True).stdout)
    assert [(int(r["start"], 16), int(r["end"], 16), tuple(r["modules"]))
            for r in doc["anchors"][0]["ranges"]] == [(r.start, r.end, r.modules) for r in placed]
    assert doc["ranges"] == 40 and doc["conflicts"] == []


def test_fixture_ranges_errors(fixture_tree, fixture_syms, tmp_path):
    """One line and exit status 2: no such file, a kallsyms given as
    --syms, a file built without its link layout, an output directory that
    is not there (and nothing written)."""
    nolayout = str(tmp_path / "nolayout")
    subprocess.run(KMODSYMS + ["build", "--kbuild", fixture_tree, "--no-layout", "-o", nolayout],
                   capture_output=True, check=True)
    for args, words in ((["--syms", str(tmp_path / "none")], "cannot read"),
                        (["--syms", os.path.join(fixture_tree, "kallsyms")], "is a kallsyms text"),
                        (["--syms", nolayout], "has no link layout"),
                        (["--syms", fixture_syms, "-o", str(tmp_path / "no" / "r")], "cannot write")):
        proc = subprocess.run(KMODSYMS + ["ranges"] + args, capture_output=True, text=True)
        assert proc.returncode == 2 and proc.stdout == "", args
        assert proc.stderr.count("\n") == 1 and words in proc.stderr, proc.stderr
    assert not os.path.exists(tmp_path / "no")


def test_reader_refuses_malformed_lines():
    from kmodsyms.errors import KmodsymsError
    for bad in (".text 0000-zz mod\n", ".text 00000000 mod\n", ".text 0-0 = a b\n", "x\n"):
        with pytest.raises(KmodsymsError, match="modules.builtin.ranges:1"):
            ranges_format.parse(bad)
    with pytest.raises(KmodsymsError, match="before any anchor"):
        ranges_format.resolve(ranges_format.parse(".text 0-10 m\n"), lambda n: 0)
    with pytest.raises(KmodsymsError, match="not a symbol"):
        ranges_format.resolve(ranges_format.parse(".text 0-0 = a\n"), lambda n: None)


# ------------------------------------------------------------ the corpora
def _doc_counts(doc: str, marker: str) -> dict:
    """The rows of the table after ``<!-- marker -->`` in a doc: corpus ->
    its numbers, in order (commas taken out)."""
    body = open(os.path.join(ROOT, doc), encoding="utf-8").read()
    table = body.split(f"<!-- {marker} -->", 1)[1].split("\n\n", 1)[0]
    rows = {}
    for row in table.splitlines()[3:]:
        cells = [c.strip() for c in row.strip("|").split("|")]
        rows[cells[0]] = [int(n.replace(",", "")) for c in cells[1:]
                          for n in re.findall(r"[\d,]+\d|\d", c)]
    return rows


def corpus_arch(tree: str) -> str:
    return "arm64" if "arm64" in os.path.basename(tree) else "x86_64"


@pytest.fixture(scope="session")
def corpus_ranges(any_corpus, any_corpus_syms, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("ranges") / "modules.builtin.ranges")
    write_ranges(any_corpus_syms, out)
    return out


@pytest.mark.corpus
def test_corpora_read_by_dtrace(any_corpus, any_corpus_syms, corpus_ranges):
    """dtrace's reading of our file and of the kernel's own over each
    corpus's kallsyms and its text-only kallsyms, held to truth.tsv: with
    ours every built-in line is in its module but where no file can make
    it so (a range ending a byte before the next module's symbol: each
    such run's next line), and the counts are docs/dtrace-utils.md's."""
    from kallsyms_variants import text_only
    tree = any_corpus
    truth = corpus_truth(tree)
    full = text(os.path.join(tree, "kallsyms"))
    texts = {"full": full,
             "text-only": text_only(os.path.join(tree, "System.map"),
                                    full.encode("utf-8", "surrogateescape")).decode(
                                        "utf-8", "surrogateescape")}
    ours, kernels = text(corpus_ranges), text(os.path.join(tree, "modules.builtin.ranges"))
    plan = ranges_format.plan(read_syms(any_corpus_syms))
    anchor = plan.groups[0]
    shift = next(int(ln.split()[0], 16) for ln in full.splitlines()
                 if ln.split()[2:] == [anchor.anchor]) - anchor.anchor_address
    # the first line of each run after a conflict: the one line dtrace misses
    unavoidable = {r.true_end + shift for r in plan.conflicts}
    counts = []
    for kind, listing in texts.items():
        wrong, checked, dropped = misattributed(listing, ours, truth)
        assert {int(w[0], 16) for w in wrong} <= unavoidable, (kind, wrong[:5])
        theirs, checked2, _ = misattributed(listing, kernels, truth)
        none, _, _ = misattributed(listing, None, truth)
        assert checked2 == checked and len(wrong) < len(theirs) < len(none)
        counts += [checked, len(none), len(theirs), len(wrong)]
        if kind == "full":
            counts.append(dropped)
    assert len(plan.conflicts) == len([w for w in misattributed(full, ours, truth)[0]])
    documented = _doc_counts("docs/dtrace-utils.md", "checked: tests/test_ranges.py replay")
    assert documented[corpus_arch(tree)] == counts
    readme = _doc_counts("README.md", "checked: tests/test_ranges.py readme")
    assert readme[corpus_arch(tree)] == [counts[i] for i in (0, 2, 3, 5, 7, 8)]


# ------------------------------------------------------------ the kernel's verifier
@pytest.fixture(scope="session")
def ranges_verifier() -> str:
    """scripts/verify_builtin_ranges.awk of Debian's linux-source tarball,
    taken out once into the corpus cache; skips without the tarball or gawk."""
    from kernel_build import source_tarball

    from bench.corpus import _corpus_cache_dir
    if not shutil.which("gawk"):
        pytest.skip("gawk is not installed (the kernel runs its ranges scripts with it)")
    tarball = source_tarball()
    st = os.stat(tarball)
    root = os.path.join(_corpus_cache_dir(), "ranges-scripts", f"{st.st_size}-{int(st.st_mtime)}")
    found = glob.glob(os.path.join(root, "*", "scripts", "verify_builtin_ranges.awk"))
    if not found:
        os.makedirs(root, exist_ok=True)
        subprocess.run(["tar", "xJf", tarball, "-C", root, "--wildcards", "*/scripts/*builtin_ranges*"],
                       check=True)
        found = glob.glob(os.path.join(root, "*", "scripts", "verify_builtin_ranges.awk"))
    return found[0]


def _overlay(tree: str, dest: str) -> str:
    """``tree`` seen through links, with a one-line .cmd file for each
    object of vmlinux.map that has none: the corpora keep the .cmd files of
    vmlinux.a's objects only, and the verifier stops at an object it cannot
    read one of (init/version-timestamp.o, linked beside vmlinux.a, of no
    module: docs/resolver.md R57)."""
    missing = set()
    for line in open(os.path.join(tree, "vmlinux.map"), errors="surrogateescape"):
        f = line.split()
        if line.startswith(" ") and len(f) == 4 and "/" in f[3]:
            d, b = os.path.split(f[3])
            if not os.path.exists(os.path.join(tree, d, f".{b}.cmd")):
                missing.add(f[3])
    os.makedirs(dest)
    for entry in os.listdir(tree):
        os.symlink(os.path.join(tree, entry), os.path.join(dest, entry))
    for obj in sorted(missing):
        parts = obj.split("/")
        here, there = dest, tree
        for part in parts[:-1]:
            here, there = os.path.join(here, part), os.path.join(there, part)
            if os.path.islink(here):
                os.unlink(here)
                os.mkdir(here)
                for entry in os.listdir(there):
                    os.symlink(os.path.join(there, entry), os.path.join(here, entry))
        with open(os.path.join(here, f".{parts[-1]}.cmd"), "w") as f:
            f.write("# no compiler command: linked beside vmlinux.a, of no module\n")
    return dest


def run_verifier(verifier: str, tree: str, ranges: str, tmp_path) -> dict:
    """verify_builtin_ranges.awk RANGES System.map modules.builtin
    vmlinux.map vmlinux.o.map, in the tree: its counts."""
    where = _overlay(tree, str(tmp_path / "tree"))
    proc = subprocess.run(["gawk", "-f", verifier, ranges, "System.map", "modules.builtin",
                           "vmlinux.map", "vmlinux.o.map"], cwd=where, capture_output=True, text=True)
    counts = {k: int(v) for k, v in re.findall(r"^\s*(Correct matches|Module matches|Mismatches|"
                                               r"Missing):\s+(\d+)", proc.stdout, re.M)}
    return {"status": proc.returncode, **counts, "stderr": proc.stderr}


def test_fixture_kernel_verifier_accepts(ranges_verifier, fixture_tree, fixture_syms, tmp_path):
    out = str(tmp_path / "modules.builtin.ranges")
    write_ranges(fixture_syms, out)
    got = run_verifier(ranges_verifier, fixture_tree, out, tmp_path)
    assert got["status"] == 0 and got["Mismatches"] == got["Missing"] == 0, got
    assert got["Module matches"] > 20


@pytest.mark.corpus
def test_corpora_kernel_verifier_accepts(ranges_verifier, any_corpus, corpus_ranges, tmp_path):
    """The kernel's verifier accepts our file as it accepts the kernel's
    own, over the same symbols (the figures of docs/dtrace-utils.md)."""
    ours = run_verifier(ranges_verifier, any_corpus, corpus_ranges, tmp_path / "ours")
    theirs = run_verifier(ranges_verifier, any_corpus, os.path.join(any_corpus, "modules.builtin.ranges"),
                          tmp_path / "theirs")
    assert ours["status"] == theirs["status"] == 0, (ours, theirs)
    assert ours["Mismatches"] == ours["Missing"] == theirs["Mismatches"] == theirs["Missing"] == 0
    assert ours["Correct matches"] == theirs["Correct matches"]
    assert ours["Module matches"] == theirs["Module matches"]
    documented = _doc_counts("docs/dtrace-utils.md", "checked: tests/test_ranges.py verifier")
    assert documented[corpus_arch(any_corpus)] == [ours["Correct matches"], ours["Module matches"],
                                                    0, 0]


# ------------------------------------------------------------ from debug info
def test_ranges_from_debug_info(tmp_path_factory):
    """A dtrace_syms built from a debug vmlinux (``kmodsyms build
    --debuginfo``) gives ranges that dtrace's reading of the tree's
    System.map (a kallsyms at link addresses) files as the linker maps do."""
    from conftest import FIXTURE
    from test_debuginfo import inputs, tree_map  # tests/test_debuginfo.py's recipe

    from kmodsyms.scan.debuginfo.debuginfo import build_from_debuginfo
    absent = [t for t in ("gcc", "ld", "ar", "nm", "objcopy") if shutil.which(t) is None]
    if absent:
        pytest.skip(f"the fixture's toolchain is absent: {', '.join(absent)}")
    tree = str(tmp_path_factory.mktemp("debug") / "kbuild")
    shutil.copytree(FIXTURE, tree, symlinks=True)
    subprocess.run(["bash", os.path.join(tree, "build.sh")], check=True, capture_output=True,
                   env={**os.environ, "EXTRA_CFLAGS": "-g", "EXTRA_AFLAGS": "-g"})
    syms = os.path.join(tree, "dtrace_syms.debuginfo")
    build_from_debuginfo(inputs(tree), syms, None, kbuild_map=tree_map(tree),
                         kbuild_map_source="the tree's .cmd files", jobs=1)
    out = os.path.join(tree, "modules.builtin.ranges.ours")
    write_ranges(syms, out)
    listing = os.path.join(tree, "System.map")
    truth = map_truth(tree, listing, 0)
    wrong, checked, _ = misattributed(text(listing), text(out), truth)
    assert wrong == [] and checked > 100
    assert sum(m != ("vmlinux",) for m in truth.values()) > 20


# ------------------------------------------------------------ part 5: no .ko
# R61's zero-size markers: they have no bytes to lose
MARKER = re.compile(r"__start_|__stop_|__key(\.|$)")


def lost_to_kallmodsyms(consumer, tree: str, syms: str, source: str, tmp, proc_modules=None) -> list:
    """The loaded modules' lines (but mapping symbols, which no kernel
    lookup answers, dtrace's skip list, which its tables leave out, and
    zero-size markers) whose first byte dtrace on plain kallsyms answers
    with them and dtrace on kallmodsyms (their .ko absent) answers with
    neither them nor an alias."""
    from test_dtrace_consumer import PSEUDO, SKIP_PREFIXES, build_table, kallsyms_lines, replay
    from test_loadable import is_mapping
    kallsyms = os.path.join(tree, "kallsyms")
    plain = build_table(consumer, ["--plain-kallsyms", kallsyms])
    ours = replay(consumer, source, syms, kallsyms, None, tmp, proc_modules)
    lines = [(a, n, tag) for a, letter, n, tag in kallsyms_lines(kallsyms)
             if tag and tag not in PSEUDO and letter not in "aA" and not is_mapping(n)
             and not n.startswith(SKIP_PREFIXES) and not MARKER.match(n)]
    probes = sorted({a for a, _n, _t in lines})
    before, after = plain.lookup(probes), ours.lookup(probes)
    def keeps(a, n, tag):
        """it answers, or an alias does: a symbol of its module at its
        address that is no zero-size marker"""
        got = after[a]
        return got is not None and got[0] == tag and got[2] == a and \
            (got[1] == n or not MARKER.match(got[1]))
    return [(hex(a), n, tag, after[a]) for a, n, tag in lines
            if before[a] and before[a][:3] == (tag, n, a) and not keeps(a, n, tag)]


@pytest.mark.parametrize("source", ["c", "python"])
@pytest.mark.parametrize("core", [False, True], ids=["kallsyms-alone", "proc-modules"])
def test_fixture_absent_ko_loses_no_address(clib, fixture_tree, fixture_syms, tmp_path, source, core):
    from test_loadable import FUSE_CORE
    proc_modules = None
    if core:
        proc_modules = str(tmp_path / "modules")
        with open(proc_modules, "w") as f:
            f.write(FUSE_CORE)
    prog = os.path.join(clib["plain"], "kms-dt-module")
    assert lost_to_kallmodsyms(prog, fixture_tree, fixture_syms, source, tmp_path, proc_modules) == []


@pytest.mark.corpus
@pytest.mark.parametrize("source", ["c", "python"])
def test_corpora_absent_ko_loses_no_address(clib, any_corpus, any_corpus_syms, tmp_path, source):
    """Issue 29 part 5: the loaded modules without their .ko (x86_64 xfs,
    fuse, isofs; arm64 fat, vfat, fuse), no /proc/modules to bound their
    last lines."""
    prog = os.path.join(clib["plain"], "kms-dt-module")
    assert lost_to_kallmodsyms(prog, any_corpus, any_corpus_syms, source, tmp_path) == []

