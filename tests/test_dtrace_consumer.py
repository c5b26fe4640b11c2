"""DTrace's module table built from kmodsyms: dt_module.c's rules replayed
(contrib/dtrace/kms-dt-module, docs/dtrace-utils.md) over the fixture and
both corpora of ../shared/kernels, from C (libkmodsyms' kms_foreach(), the
change the doc describes) and from Python (``kallmodsyms_lines()``, parsed
as dt_modsym_update() parses /proc/kallmodsyms), in three situations:
loaded modules' .ko plain, compressed (xz, zstd, gzip), and absent.

Held to independent truth: the kallsyms text itself (every line read,
none misread), the linker maps (the fixture's maps and thick file, the
corpora's truth.tsv) for the module of every built-in line and vmlinux's
ELF symbol table for its size, and each .ko's own symbol table
(``readelf -sW``) for the loaded modules' sizes; and dtrace on plain
kallsyms (the same program reading /proc/kallsyms as dtrace does without
kallmodsyms) as the baseline a kmodsyms-fed dtrace must not fall below.
"""

from __future__ import annotations

import bisect
import os
import shutil
import subprocess
from dataclasses import dataclass

import pytest
from conftest import FIXTURE_KASLR, ROOT
from test_loadable import CORPUS_MODULES, FUSE_CORE, distro_tree, is_mapping, module_lines, module_name, readelf_symbols, runtime_symbols
from test_resolver import vmlinux_symbols

from kmodsyms import load
from kmodsyms.scan.linkmap import vmlinux_object_map
from kmodsyms.scan.modmap.thick import read_thick

CSRC = os.path.join(ROOT, "libkmodsyms")
PSEUDO = ("bpf", "__builtin__ftrace", "__builtin__kprobes")
# dt_modsym_addsym()'s skip list: in the ranges, never in the symbol table
SKIP_PREFIXES = ("__crc_", "__ksymtab_", "__kcrctab_", "__kstrtab_", "__param_",
                 "__syscall_meta__", "__p_syscall_meta__", "__event_", "event_",
                 "ftrace_event_", "types__", "args__", "__tracepoint_", "__tpstrtab_",
                 "__initcall_", "__setup_", "__pci_fixup_")
SITUATIONS = ("plain", ".xz", ".zst", ".gz", "absent")
FIXTURE_MODULES = ("fs/fuse/fuse.ko",)

# init/version-timestamp.o is linked outside vmlinux.a (issue 21 part 1.3):
# its lines' sizes are vmlinux's own symbol table's (R56).
OUTSIDE_VMLINUX_A = frozenset({"linux_banner", "init_uts_ns"})

@pytest.fixture(scope="session")
def consumer(clib):
    """contrib/dtrace's kms-dt-module, built with the library (conftest's clib)."""
    return os.path.join(clib["plain"], "kms-dt-module")


# ------------------------------------------------------------------ truth
@dataclass(frozen=True)
class Truth:
    """Per kallsyms line (address, name): the modules the linker maps give
    a built-in line (["vmlinux"] for the core kernel) and the ELF size of
    every line that has one (vmlinux's, or its .ko's)."""
    modules: dict
    size: dict
    loaded: frozenset    # the loaded modules kallsyms shows
    builtin: frozenset   # the built-in modules that have kallsyms lines


def corpus_truth(tree: str) -> Truth:
    modules, size = {}, {}
    for line in open(os.path.join(tree, "truth.tsv")):
        if line.startswith("#"):
            continue
        addr, _type, name, _obj, mods, elf_size, flag = line.rstrip("\n").split("\t")
        key = (int(addr, 16), name)
        if flag == "ok":
            modules[key] = mods.split(",")
        size[key] = int(elf_size)
    return Truth(modules, size, *_loaded_and_builtin(tree, modules))


def fixture_truth(tree: str) -> Truth:
    """The fixture's linker maps and thick file (as tests/test_resolver.py)."""
    objects = vmlinux_object_map(os.path.join(tree, "vmlinux.map"),
                                 os.path.join(tree, "vmlinux.o.map"),
                                 os.path.join(tree, "vmlinux"))
    thick = read_thick(os.path.join(tree, "modules_thick.builtin"))
    owners = thick.object_modules()
    modules, size = {}, {}
    for name, addr, elf_size, *_rest, percpu in vmlinux_symbols(tree):
        size[addr, name] = elf_size
        if not percpu:
            obj = objects.object_at(addr - FIXTURE_KASLR)
            modules[addr, name] = [thick.modules[m] for m in owners.get(obj, ())] or ["vmlinux"]
    return Truth(modules, size, *_loaded_and_builtin(tree, modules))


def _loaded_and_builtin(tree, modules):
    loaded = set()
    for line in open(os.path.join(tree, "kallsyms")):
        _head, _tab, tag = line.rstrip("\n").partition("\t")
        if tag and tag[1:-1] not in PSEUDO:
            loaded.add(tag[1:-1])
    builtin = {m for mods in modules.values() for m in mods} - {"vmlinux"}
    return frozenset(loaded), frozenset(builtin)


def loaded_sizes(tree: str, rels) -> dict:
    """(address, name) -> ELF size of every loaded module line, from the
    .ko's own symbol table (readelf -sW) placed where kallsyms shows it."""
    out = {}
    for rel in rels:
        module = module_name(os.path.basename(rel))
        for name, addr, size, _typed, _bind in runtime_symbols(
                readelf_symbols(os.path.join(tree, rel)),
                module_lines(os.path.join(tree, "kallsyms"), module)):
            out[addr, name] = size
    return out


def kallsyms_lines(path: str) -> list[tuple[int, str, str, str | None]]:
    """(address, type, name, [module] or None) of every line, read plainly."""
    out = []
    for line in open(path, encoding="utf-8", errors="surrogateescape"):
        head, _tab, tag = line.rstrip("\n").partition("\t")
        addr, letter, name = head.split(" ", 2)
        out.append((int(addr, 16), letter, name, tag[1:-1] if tag else None))
    return out


# ------------------------------------------------------------------ the replay
@dataclass(frozen=True)
class Line:
    address: int
    size: int
    type: str
    name: str
    modules: tuple
    verdict: str


@dataclass
class Table:
    """What kms-dt-module built: every line's verdict, each module's ranges."""
    prog: str
    args: list
    lines: list
    modules: dict        # name -> (symbols, text ranges, data ranges)
    stderr: str

    def lookup(self, addresses) -> dict:
        """dtrace_lookup_by_addr() of each: address -> (module, symbol, start) or None."""
        stdin = "".join(f"{a:x}\n" for a in addresses).encode()
        out = subprocess.run([self.prog] + self.args + ["lookup"], input=stdin,
                             capture_output=True, check=True).stdout.decode("utf-8", "surrogateescape")
        got = {}
        for row in out.splitlines():
            f = row.split("\t")
            got[int(f[0], 16)] = (f[1], f[2], int(f[3], 16), int(f[4], 16)) if len(f) > 3 else None
        return got


def _ranges(field: str) -> list:
    spans = field.split("=", 1)[1]
    return [tuple(int(x, 16) for x in s.split("-")) for s in spans.split(",")] if spans else []


def build_table(prog: str, args: list) -> Table:
    proc = subprocess.run([prog] + args + ["lines"], capture_output=True)
    assert proc.returncode == 0, proc.stderr
    lines = []
    for row in proc.stdout.decode("utf-8", "surrogateescape").splitlines():
        f = row.split("\t")
        if f[5] == "rejected":
            lines.append(Line(0, 0, "", "\t".join(f[6:]), (), "rejected"))
            continue
        lines.append(Line(int(f[0], 16), int(f[1], 16), f[2], f[3],
                          tuple(f[4].split(",")) if f[4] != "-" else (), f[5]))
    mods = subprocess.run([prog] + args + ["modules"], capture_output=True, check=True)
    modules = {}
    for row in mods.stdout.decode().splitlines():
        name, count, text, data = row.split("\t")
        modules[name] = (int(count), _ranges(text), _ranges(data))
    return Table(prog, args, lines, modules, proc.stderr.decode())


def modules_dir_for(tree: str, rels, situation: str, tmp) -> str | None:
    if situation == "absent":
        return None
    if situation == "plain":
        return tree
    # one tree per directory (arm64's fat and vfat share fs/fat), then one modules.dep
    moddir, dep = None, []
    for rel in rels:
        moddir = distro_tree(tmp, {os.path.dirname(rel): os.path.join(tree, rel)}, situation,
                             signed=False)
        dep += open(os.path.join(moddir, "modules.dep")).readlines()
    with open(os.path.join(moddir, "modules.dep"), "w") as f:
        f.writelines(dep)
    return moddir


def replay(consumer, source: str, syms: str, kallsyms: str, moddir: str | None, tmp,
           proc_modules: str | None = None) -> Table:
    """C: kms-dt-module over libkmodsyms; Python: over kallmodsyms_lines()."""
    if source == "c":
        args = ["--syms", syms, "--kallsyms", kallsyms] + \
            (["--modules-dir", moddir] if moddir else []) + \
            (["--proc-modules", proc_modules] if proc_modules else [])
        return build_table(consumer, args)
    r = load(syms, kallsyms, modules_dir=moddir, proc_modules=proc_modules)
    text = os.path.join(str(tmp), "kallmodsyms")
    with open(text, "w", encoding="utf-8", errors="surrogateescape") as f:
        f.writelines(t + "\n" for t in r.kallmodsyms_lines())
    return build_table(consumer, ["--kallmodsyms", text])


# ------------------------------------------------------------------ the checks
def check_lines_read(table: Table, kallsyms: str, truth: Truth, source: str) -> None:
    """No line rejected or misread: every kallsyms line in order, with its
    address, type and name, its module (kallsyms' tag; the linker maps'
    for a built-in line: all of them from C, the first from the text)."""
    assert [ln for ln in table.lines if ln.verdict == "rejected"] == []
    plain = kallsyms_lines(kallsyms)
    assert len(table.lines) == len(plain)
    wrong = []
    for got, (addr, letter, name, tag) in zip(table.lines, plain):
        want = [tag] if tag else truth.modules.get((addr, name))
        if want is not None and source == "python":
            want = want[:1]
        if (got.address, got.type, got.name) != (addr, letter, name) or \
                (want is not None and list(got.modules) != want):
            wrong.append((got, addr, letter, name, want))
    assert wrong == [], wrong[:5]


def check_every_module_has_ranges(table: Table, truth: Truth) -> None:
    for module in truth.builtin | truth.loaded:
        _count, text, data = table.modules.get(module, (0, [], []))
        assert text or data, f"module {module} got no range"


def exact_lines(table: Table, sizes: dict) -> list[Line]:
    """The lines dtrace keeps in a symbol table (not dropped, not in the
    skip list) that have an ELF size, with the size they were given."""
    out = []
    for ln in table.lines:
        elf = sizes.get((ln.address, ln.name), 0)
        if ln.verdict == "added" and elf:
            out.append(ln)
    return out


def check_first_and_last_bytes(table: Table, sizes: dict) -> int:
    """Every exactly sized line: its size is the ELF size, and its first and
    last byte name it and its module -- or a symbol inside it (the innermost
    one, as dt_symtab's ranges answer: an alias, or a symbol nested in it)."""
    lines = exact_lines(table, sizes)
    assert [ln for ln in lines if ln.size != sizes[ln.address, ln.name]] == []
    probes = {a for ln in lines for a in (ln.address, ln.address + ln.size - 1)}
    got = table.lookup(sorted(probes))
    bad = []
    for ln in lines:
        for a in (ln.address, ln.address + ln.size - 1):
            ans = got[a]
            inside = ans is not None and ln.address <= ans[2] and \
                ans[2] + ans[3] <= ln.address + ln.size
            if not (inside and ans[0] in ln.modules):
                bad.append((hex(a), ln, ans))
    assert bad == [], (len(bad), bad[:5])
    return len(lines)


def loaded_resolved(table: Table, plain_lines) -> int:
    """How many loaded-module lines' addresses dtrace answers with their own
    module and symbol (or an alias at the same address): of the lines that
    can answer -- not the skip list's (in no table) and not the mapping
    symbols and local labels (.LC0, $x), which the kernel's own module
    lookups skip (is_mapping_symbol()) and kmodsyms never sizes, and not a
    module's highest address, whose end only its core (/proc/modules, which
    the corpora lack) bounds: dtrace's 1 byte there is a guess."""
    wanted = [(a, n, tag) for a, letter, n, tag in plain_lines
              if tag and tag not in PSEUDO and letter not in "aA" and not is_mapping(n)
              and not n.startswith(SKIP_PREFIXES)]
    highest = {}
    for a, _n, tag in wanted:
        highest[tag] = max(highest.get(tag, 0), a)
    wanted = [(a, n, tag) for a, n, tag in wanted if a != highest[tag]]
    got = table.lookup(sorted({a for a, _n, _t in wanted}))
    return sum(1 for a, _n, tag in wanted if got[a] is not None and got[a][0] == tag
               and got[a][2] == a)


def run_situation(consumer, tree, syms, truth, rels, situation, source, tmp, proc_modules=None):
    kallsyms = os.path.join(tree, "kallsyms")
    moddir = modules_dir_for(tree, rels, situation, tmp)
    table = replay(consumer, source, syms, kallsyms, moddir, tmp, proc_modules)
    check_lines_read(table, kallsyms, truth, source)
    sizes = dict(truth.size)
    if situation != "absent":
        sizes.update(loaded_sizes(tree, rels))
    n = check_first_and_last_bytes(table, sizes)
    assert n > 0
    check_every_module_has_ranges(table, truth)
    if situation == "absent":
        baseline = build_table(consumer, ["--plain-kallsyms", kallsyms])
        plain = kallsyms_lines(kallsyms)
        assert loaded_resolved(table, plain) >= loaded_resolved(baseline, plain) > 0
    return table


CASES = [pytest.param(s, src, id=f"{src}-{s.lstrip('.')}")
         for s in SITUATIONS for src in ("c", "python")]


# ------------------------------------------------------------------ the fixture
@pytest.mark.parametrize("situation,source", CASES)
def test_fixture_replay(consumer, fixture_tree, fixture_syms, tmp_path, situation, source):
    """With fuse's core in /proc/modules, as on every host (it bounds the
    module's last line when its .ko is absent)."""
    proc_modules = tmp_path / "modules"
    proc_modules.write_text(FUSE_CORE)
    run_situation(consumer, fixture_tree, fixture_syms, fixture_truth(fixture_tree),
                  FIXTURE_MODULES, situation, source, tmp_path, str(proc_modules))


@pytest.mark.corpus
@pytest.mark.parametrize("source", ["c", "python"])
def test_corpus_version_timestamp_symbols_sized(consumer, corpus, corpus_syms, tmp_path, source):
    """linux_banner and init_uts_ns get vmlinux's ELF size (about 165 and 432)."""
    truth = corpus_truth(corpus)
    table = replay(consumer, source, corpus_syms, os.path.join(corpus, "kallsyms"), None, tmp_path)
    got = {ln.name: (ln.size, truth.size[ln.address, ln.name]) for ln in table.lines
           if ln.name in OUTSIDE_VMLINUX_A}
    assert set(got) == OUTSIDE_VMLINUX_A and all(size == elf > 0 for size, elf in got.values())


@pytest.mark.parametrize("suffix", [".xz", ".zst", ".gz"])
def test_fixture_compressed_sizes_c_as_python(consumer, fixture_tree, fixture_syms, tmp_path,
                                              suffix):
    """The lines of a compressed .ko: the same sizes from C as from Python
    (the .ko's ELF sizes: tests/test_clib.py holds them to readelf)."""
    kallsyms = os.path.join(fixture_tree, "kallsyms")
    moddir = modules_dir_for(fixture_tree, FIXTURE_MODULES, suffix, tmp_path)
    got = {src: [(ln.address, ln.size, ln.type, ln.name) for ln in
                 replay(consumer, src, fixture_syms, kallsyms, moddir, tmp_path).lines
                 if ln.modules == ("fuse",)]
           for src in ("c", "python")}
    assert len(got["c"]) == 22
    assert got["c"] == got["python"]


def test_fixture_multi_module_line_in_both_modules(consumer, fixture_tree, fixture_syms):
    """A line of libphy and fwnode_mdio's shared object is in both modules'
    tables (dt_modsym_update()'s loop over the line's modules), and a
    lookup by either name finds it."""
    table = replay(consumer, "c", fixture_syms, os.path.join(fixture_tree, "kallsyms"), None, None)
    shared = [ln for ln in table.lines if ln.modules == ("libphy", "fwnode_mdio")]
    assert shared
    stdin = "".join(f"{m}`{ln.name}\n" for ln in shared for m in ln.modules).encode()
    out = subprocess.run([consumer] + table.args + ["name"], input=stdin, capture_output=True,
                         check=True).stdout.decode().splitlines()
    assert out == [f"{m}`{ln.name}\t{ln.address:x}\t{ln.size:x}"
                   for ln in shared for m in ln.modules]


def test_no_dtrace_syms_reads_kallsyms_as_dtrace(consumer, fixture_tree, tmp_path):
    """No dtrace_syms installed (the normal case): one warning line, then
    the table dtrace builds from plain kallsyms."""
    kallsyms = os.path.join(fixture_tree, "kallsyms")
    missing = str(tmp_path / "dtrace_syms")
    table = build_table(consumer, ["--syms", missing, "--kallsyms", kallsyms])
    assert table.stderr.count("\n") == 1 and missing in table.stderr
    assert table.lines == build_table(consumer, ["--plain-kallsyms", kallsyms]).lines
    assert {m for m in table.modules} == {"vmlinux", "fuse", "__builtin__ftrace"}


def test_modpath_as_dtraces(consumer, fixture_tree, fixture_syms, tmp_path):
    """--modpath DIR as dtrace's -x modpath: DIR/kernel/dtrace_syms, and the
    loaded modules' .ko under DIR (installed compressed, as a distribution
    does), held to the linker maps and the .ko's own table; before a
    dtrace_syms is installed there, one warning naming where it was looked
    for, and dtrace's table from plain kallsyms."""
    kallsyms = os.path.join(fixture_tree, "kallsyms")
    modpath = modules_dir_for(fixture_tree, FIXTURE_MODULES, ".xz", tmp_path)
    args = ["--modpath", modpath, "--kallsyms", kallsyms]
    missing = build_table(consumer, args)
    installed = os.path.join(modpath, "kernel", "dtrace_syms")
    assert missing.stderr.count("\n") == 1 and installed in missing.stderr
    assert missing.lines == build_table(consumer, ["--plain-kallsyms", kallsyms]).lines
    shutil.copy(fixture_syms, installed)
    table = build_table(consumer, args)
    assert table.stderr == ""
    truth = fixture_truth(fixture_tree)
    check_lines_read(table, kallsyms, truth, "c")
    ko = loaded_sizes(fixture_tree, FIXTURE_MODULES)
    assert {(ln.address, ln.name): ln.size for ln in table.lines if ln.modules == ("fuse",)} == ko
    assert check_first_and_last_bytes(table, {**truth.size, **ko}) > 0
    check_every_module_has_ranges(table, truth)


# ------------------------------------------------------------------ the corpora
def _corpus_case(consumer, tree, syms, tmp_path, situation, source):
    arch = "arm64" if "arm64" in tree else "x86_64"
    run_situation(consumer, tree, syms, corpus_truth(tree), CORPUS_MODULES[arch], situation,
                  source, tmp_path)


@pytest.mark.corpus
@pytest.mark.parametrize("situation,source", [c for c in CASES if c.values[0] in
                                              ("plain", ".xz", "absent")])
def test_corpus_replay(consumer, corpus, corpus_syms, tmp_path, situation, source):
    """The x86_64 corpus (xfs, fuse, isofs loaded) in the default run."""
    _corpus_case(consumer, corpus, corpus_syms, tmp_path, situation, source)


@pytest.mark.slow
@pytest.mark.corpus
@pytest.mark.parametrize("situation,source", CASES)
def test_corpora_replay(consumer, any_corpus, any_corpus_syms, tmp_path, situation, source):
    """Both corpora (arm64: fuse, fat, vfat, loaded below the kernel image),
    every situation."""
    _corpus_case(consumer, any_corpus, any_corpus_syms, tmp_path, situation, source)


def _union(ranges) -> list:
    """Intervals merged where they touch or overlap."""
    out = []
    for start, end in sorted(ranges):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return out


def own_lines(table: Table) -> dict:
    """(module, text) -> [start, end) of each sized line dtrace took."""
    out = {}
    for ln in table.lines:
        if ln.verdict != "dropped" and ln.size:
            for m in ln.modules:
                out.setdefault((m, ln.type in "tTwW"), []).append((ln.address,
                                                                   ln.address + ln.size))
    return out


def check_spans_as_dtrace_builds_them(consumer, tree, syms, truth, moddir=None):
    """kms_module_spans() (kms-dt-module spans) against the lines dtrace builds
    its ranges from, text and data apart: every sized line of a module (as
    dtrace's table took it) lies in one of the module's spans, and no sized
    line of another module does.  (dtrace's own ranges differ where its
    rule is an accident of its state: a range shrinks when a line inside
    the last one ends earlier -- virtio_gpu's aliases __key.0 .. seqno.0 --,
    a new range starts at each line where two modules' lines alternate, and
    a run goes on over other modules' size-0 lines, such as their
    __initcall entries.)  Returns the modules checked and the library's
    empty spans (left out here)."""
    kallsyms = os.path.join(tree, "kallsyms")
    source = ["--syms", syms, "--kallsyms", kallsyms] + (["--modules-dir", moddir] if moddir else [])
    table = build_table(consumer, source)
    modules = sorted(truth.builtin | truth.loaded | {"vmlinux"})
    out = subprocess.run([consumer] + source + ["spans"], input="".join(
        m + "\n" for m in modules).encode(), capture_output=True, check=True).stdout.decode()
    spans, empty = {}, []
    for row in out.splitlines():
        module, _count, text, data = row.split("\t")
        for kind, field in ((True, text), (False, data)):
            for start, end in _ranges(field):
                if start == end:
                    empty.append((module, kind, hex(start)))
                else:
                    spans.setdefault((module, kind), []).append((start, end))
    sized = sorted((ln.address, ln.address + ln.size, ln.modules) for ln in table.lines
                   if ln.verdict != "dropped" and ln.size)
    starts = [s[0] for s in sized]
    own = own_lines(table)
    for module in modules:
        for kind in (True, False):
            lib = _union(spans.get((module, kind), []))
            lib_starts = [a for a, _b in lib]
            for a, e in own.get((module, kind), []):
                k = bisect.bisect_right(lib_starts, a) - 1
                assert k >= 0 and e <= lib[k][1], (module, kind, hex(a), hex(e))
            for a, b in lib:
                inside = sized[bisect.bisect_left(starts, a):bisect.bisect_left(starts, b)]
                foreign = [x for x in inside if x[1] <= b and module not in x[2]]
                assert foreign == [], (module, kind, hex(a), hex(b), foreign[:3])
    return len(modules), empty


def test_fixture_spans_as_dtrace_builds_them(consumer, fixture_tree, fixture_syms):
    count, _empty = check_spans_as_dtrace_builds_them(consumer, fixture_tree,
                                                      fixture_syms, fixture_truth(fixture_tree),
                                                      fixture_tree)
    assert count == 9


@pytest.mark.corpus
def test_corpus_spans_as_dtrace_builds_them(consumer, corpus, corpus_syms):
    count, _empty = check_spans_as_dtrace_builds_them(consumer, corpus, corpus_syms,
                                                      corpus_truth(corpus), corpus)
    assert count > 340


@pytest.mark.corpus
def test_corpus_spans_never_empty(consumer, corpus, corpus_syms):
    _count, empty = check_spans_as_dtrace_builds_them(consumer, corpus, corpus_syms,
                                                      corpus_truth(corpus), corpus)
    assert empty == []


@pytest.mark.parametrize("command", ["lookup", "name", "spans"])
def test_usage_says_which_commands_read_stdin(consumer, command):
    """Issue 31 item 8: 'lookup ADDR' (an address where stdin is read)
    gets a usage line that says lookup, name and spans read stdin."""
    proc = subprocess.run([consumer, command, "0xffffffffab600400"], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL)
    assert (proc.returncode, proc.stdout) == (2, "") and len(proc.stderr.splitlines()) == 1
    assert "{lookup|name|spans} < LINES" in proc.stderr and "one a line on stdin" in proc.stderr


def test_doc_code_is_the_example():
    """docs/dtrace-utils.md's C is kms-dt-module.c's, verbatim."""
    import re
    doc = open(os.path.join(ROOT, "docs", "dtrace-utils.md"), encoding="utf-8").read()
    source = open(os.path.join(ROOT, "contrib", "dtrace", "kms-dt-module.c"),
                  encoding="utf-8").read()
    blocks = re.findall(r"^```c\n(.*?)^```", doc, re.S | re.M)
    assert len(blocks) == 2
    for block in blocks:
        assert block in source, block[:200]


def bench_row_names() -> set:
    """What the bench answers to: the names --only takes (bench/rows.py's
    ROWS) and the ids of the rows it writes, as bench/README.md's Rows
    table lists them (tests/test_bench.py holds rows' ids to what they emit)."""
    import re

    from bench.rows import ROWS
    text = open(os.path.join(ROOT, "bench", "README.md"), encoding="utf-8").read()
    table = re.search(r"^## Rows\n(.*?)(?=^## |\Z)", text, re.S | re.M).group(1)
    ids = {name for row in table.splitlines() if row.startswith("| `")
           for name in re.findall(r"`(\w+)`", row.split("|")[1])}
    return set(ROWS) | ids


def test_doc_claims_hold():
    """docs/dtrace-utils.md cites bench rows by name, each one the bench
    has (no row numbers), and says tests are expected to fail only while
    one of the tests it describes carries an xfail mark (issue 21)."""
    import re
    doc = open(os.path.join(ROOT, "docs", "dtrace-utils.md"), encoding="utf-8").read()
    cited = set(re.findall(r"--only (\w+)", doc))
    for group in re.findall(r"\b[Rr]ows?\s+((?:`\w+`(?:,\s*|\s+and\s+)?)+)", doc):
        cited |= set(re.findall(r"`(\w+)`", group))
    assert {"c_dtrace_update", "c_load_compressed_xz", "c_load_compressed_zst"} <= cited
    assert cited - bench_row_names() == set()
    assert re.findall(r"\b[Rr]ows? \d+", doc) == []
    marked = any("mark.xfail" in open(os.path.join(ROOT, "tests", name), encoding="utf-8").read()
                 for name in ("test_dtrace_consumer.py", "test_dlfilter.py"))
    claims = re.findall(r"xfail|expected to fail", doc, re.I)
    assert marked or claims == [], claims
