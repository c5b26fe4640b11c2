"""libkmodsyms 2.0's sizes, lists, spans and %pS, against independent truth.

* ``kms_resolve_kernel()``'s text (``Resolver.kernel_symbol()``: the kernel's
  own %pS, which ``--format kernel`` extends with a built-in module's name)
  against kernel/kallsyms.c's own rule (get_symbol_pos(), find_kallsyms_symbol(),
  __sprint_symbol()) applied by a few-line reader of the kallsyms text;
* estimated sizes in ``kallmodsyms`` against the same rule (the gap to the
  next line of the module), exact sizes against vmlinux's ELF symbol table
  (truth.tsv's ``elf_size``);
* ``kms_module_spans()`` / ``kms_module_ranges()``: every module gets
  ranges, every symbol of a module (truth.tsv, the linker maps) lies in
  them, no other module's symbol does, no per-cpu offset is in one;
* ``kms_module_lines()`` against truth.tsv's module column, and
  ``kms_builtin_modules()`` against modules.builtin.

On both corpora of ../shared/kernels (skipped when absent).
"""

from __future__ import annotations

import bisect
import os
import random

import pytest
from test_clib import json_lines, run_c
from test_ranges import MARKER  # R61's zero-size markers

from kmodsyms import load

TEXT = "tTwW"


def is_mapping_symbol(name: str) -> bool:
    """include/linux/module_symbol.h is_mapping_symbol()."""
    return name.startswith((".L", "L0", "$"))


def read_kallsyms(path: str):
    """[(address, letter, name, module or None)] in kallsyms order."""
    out = []
    with open(path, "rb") as f:
        for raw in f:
            line = raw.decode("utf-8", "surrogateescape").rstrip("\n")
            head, _, mod = line.partition("\t")
            addr, letter, name = head.split(" ", 2)
            out.append((int(addr, 16), letter, name, mod[1:-1] if mod else None))
    return out


class KernelRule:
    """%pS as kernel/kallsyms.c prints it, from the kallsyms text alone."""

    def __init__(self, lines):
        core = [(a, i) for i, (a, _l, _n, m) in enumerate(lines) if m is None]
        core.sort()                             # stable: kallsyms order at one address
        self.lines = lines
        self.core = core
        self.core_addr = [a for a, _ in core]
        first = {}
        for a, _l, n, m in lines:
            if m is None:
                first.setdefault(n, a)
        self.mark = first
        self.mods: dict[str, list] = {}
        for i, (a, _l, n, m) in enumerate(lines):
            if m is not None and n and not is_mapping_symbol(n):
                self.mods.setdefault(m, []).append((a, i))
        for m in self.mods.values():
            m.sort()

    def ksym(self, a: int) -> bool:
        """is_ksym_addr(): CONFIG_KALLSYMS_ALL when kallsyms lists _end."""
        k = self.mark
        if "_end" in k:
            return k["_stext"] <= a < k["_end"] or \
                ("__init_begin" in k and k["__init_begin"] <= a < k.get("__init_end", 0))
        return k["_stext"] <= a < k["_etext"] or k["_sinittext"] <= a < k["_einittext"]

    def core_text(self, a: int) -> str:
        """get_symbol_pos() and __sprint_symbol() without a module."""
        low = bisect.bisect_right(self.core_addr, a) - 1
        start = self.core_addr[low]
        low = bisect.bisect_left(self.core_addr, start)          # the first alias
        nxt = bisect.bisect_right(self.core_addr, start)
        if nxt < len(self.core_addr):
            end = self.core_addr[nxt]
        elif self.mark.get("_sinittext", 1) <= a < self.mark.get("_einittext", 0):
            end = self.mark["_einittext"]
        else:
            end = self.mark["_end" if "_end" in self.mark else "_etext"]
        name = self.lines[self.core[low][1]][2]
        return f"{name}+{a - start:#x}/{end - start:#x}"

    def module_text(self, mod: str, a: int):
        """find_kallsyms_symbol() where the next symbol bounds the size (the
        module memory's end is not in kallsyms): None when it does not."""
        syms = self.mods[mod]
        addrs = [x for x, _ in syms]
        k = bisect.bisect_right(addrs, a) - 1
        if k < 0:
            return None
        start = addrs[k]
        first = bisect.bisect_left(addrs, start)
        nxt = bisect.bisect_right(addrs, start)
        if nxt >= len(addrs):
            return None
        best, after = self.lines[syms[first][1]], self.lines[syms[nxt][1]]
        if best[1] not in TEXT or after[1] not in TEXT:
            return None          # the end may be its memory's, which kallsyms does not show
        return f"{best[2]}+{a - start:#x}/{addrs[nxt] - start:#x} [{mod}]"


def pS(syms, kallsyms, addrs) -> list[str]:
    r = load(syms, kallsyms)
    return [r.kernel_symbol(a).text for a in addrs]


def test_pS_is_the_kernels(any_corpus, any_corpus_syms):
    kallsyms = os.path.join(any_corpus, "kallsyms")
    lines = read_kallsyms(kallsyms)
    rule = KernelRule(lines)
    rng = random.Random(20261201)
    lo, hi = rule.mark["_stext"], rule.mark["_end"]
    core = [a for a, _l, _n, m in lines if m is None and rule.ksym(a)]
    probes = sorted(set(rng.sample(core, 3000) + [a + 1 for a in rng.sample(core, 3000)] +
                        [rng.randrange(lo, hi) for _ in range(5000)] + [lo, hi - 1]))
    got = pS(any_corpus_syms, kallsyms, probes)
    bad = [(hex(a), g, rule.core_text(a)) for a, g in zip(probes, got) if g != rule.core_text(a)]
    assert bad == [], bad[:10]
    # loaded modules, inside their text
    mod_probes, want = [], []
    for mod, syms in rule.mods.items():
        if mod.startswith("__builtin__") or mod == "bpf":
            continue
        for a, _i in rng.sample(syms, min(400, len(syms))):
            for q in (a, a + 3):
                text = rule.module_text(mod, q)
                if text:
                    mod_probes.append(q)
                    want.append(text)
    assert len(mod_probes) > 500
    got = pS(any_corpus_syms, kallsyms, mod_probes)
    bad = [(hex(a), g, w) for a, g, w in zip(mod_probes, got, want) if g != w]
    assert bad == [], bad[:10]
    # below the kernel and between the modules: the bare address, as %pS prints it
    assert pS(any_corpus_syms, kallsyms, [0x10, hi]) == ["0x10", f"{hi:#x}"]


def test_kallmodsyms_sizes_exact_or_estimated(clib, any_corpus, any_corpus_syms):
    """Core lines: vmlinux's ELF size where the file gives it (truth.tsv),
    else the gap to the next core address; a loaded module's lines without
    their .ko: the gap to the next line of the module (mapping symbols
    excluded, and given none), its last line 1 byte, a zero-size marker
    nothing where another line shares its address or nothing is above it
    (R61)."""
    kallsyms = os.path.join(any_corpus, "kallsyms")
    lines = read_kallsyms(kallsyms)
    rule = KernelRule(lines)
    base = ["--syms", any_corpus_syms, "--kallsyms", kallsyms]
    km = run_c(clib, ["kallmodsyms"] + base).stdout.decode("utf-8", "surrogateescape").splitlines()
    exact = [rec["size"] for rec in json_lines(run_c(clib, ["lines"] + base).stdout)]
    assert len(km) == len(lines) == len(exact)
    truth = {}
    for row in open(os.path.join(any_corpus, "truth.tsv")):
        if not row.startswith("#"):
            addr, _letter, name, _obj, _mods, size, flag = row.rstrip("\n").split("\t")
            truth[(int(addr, 16), name)] = int(size)
    estimated = checked = 0
    for i, ((a, letter, name, mod), text) in enumerate(zip(lines, km)):
        size = int(text.split(" ", 2)[1], 16)
        if mod is None and letter != "A" and (a, name) in truth:
            if exact[i] == truth[(a, name)] and size == exact[i]:
                checked += 1
                continue
            # no ELF size known here: the estimate, the gap to the next core address
            k = bisect.bisect_right(rule.core_addr, a)
            want = rule.core_addr[k] - a if k < len(rule.core_addr) else 0
            assert (exact[i], size) == (0, want), (text, truth[(a, name)])
            estimated += 1
        elif mod is not None and not mod.startswith("__builtin__") and mod != "bpf":
            want = 0
            if not is_mapping_symbol(name):
                addrs = [x for x, _ in rule.mods[mod]]
                k = bisect.bisect_right(addrs, a)
                want = addrs[k] - a if k < len(addrs) else 1
                # R61: a zero-size marker gives way to a line at its address that
                # is none, and gets nothing where nothing is above it
                if MARKER.match(name) and (k == len(addrs) or any(
                        not MARKER.match(lines[j][2])
                        for _x, j in rule.mods[mod][bisect.bisect_left(addrs, a):k])):
                    want = 0
            assert size == want, text
            estimated += want > 0
    assert checked > 40_000 and estimated > 1_000


def spans(clib, syms, kallsyms, kind, modules):
    got: dict[str, list] = {m: [] for m in modules}
    for rec in json_lines(run_c(clib, [kind, "--syms", syms, "--kallsyms", kallsyms, "--"]
                                + modules).stdout):
        got[rec["module"]].append((int(rec["start"], 16), int(rec["end"], 16), rec["text"]))
    return got


@pytest.mark.parametrize("kind", ["spans", "ranges"])
def test_every_module_has_ranges_holding_its_symbols_only(clib, any_corpus, any_corpus_syms,
                                                         kind):
    """The linker maps (truth.tsv) against kms_module_spans() /
    kms_module_ranges(): every sized symbol of a module lies in one of its
    ranges (text symbols in text ones for spans), no sized symbol of no
    module of it overlaps one, no range starts at a per-cpu offset (below
    the kernel), and a loaded module without its .ko has one text range."""
    kallsyms = os.path.join(any_corpus, "kallsyms")
    lines = read_kallsyms(kallsyms)
    rows = []
    for row in open(os.path.join(any_corpus, "truth.tsv")):
        if not row.startswith("#"):
            addr, letter, _name, obj, mods, size, flag = row.rstrip("\n").split("\t")
            if flag == "ok" and obj != "-" and int(size) > 0 and letter not in "Aa":
                rows.append((int(addr, 16), int(size), letter, set(mods.split(","))))
    builtin = sorted({m for *_x, mods in rows for m in mods} - {"vmlinux"})[:40]
    loaded = sorted({m for *_x, m in lines if m and not m.startswith("__builtin__") and m != "bpf"})
    got = spans(clib, any_corpus_syms, kallsyms, kind, builtin + loaded)
    lowest = min(a for a, *_x in rows)
    for m in builtin:
        rs = sorted(got[m])
        assert rs and rs[0][0] >= lowest, (m, rs[:3])
        starts = [r[0] for r in rs]
        for addr, size, letter, mods in rows:
            k = bisect.bisect_right(starts, addr + size - 1) - 1
            overlaps = k >= 0 and rs[k][1] > addr
            if m in mods:
                inside = k >= 0 and rs[k][0] <= addr and addr + size <= rs[k][1]
                assert inside and (kind == "ranges" or rs[k][2] == (letter in TEXT)), \
                    (m, hex(addr), size, letter)
            else:
                assert not overlaps, (m, hex(addr), size, mods)
    for m in loaded:
        assert [r[2] for r in got[m]].count(True) == 1, (m, got[m])
        text = [r for r in got[m] if r[2]][0]
        for a, letter, name, mod in lines:
            if mod == m and letter in "tT" and not is_mapping_symbol(name):
                assert text[0] <= a < text[1], (m, hex(a), name)


def test_module_lines_are_the_linker_maps(clib, any_corpus, any_corpus_syms):
    """kms_module_lines(): the lines truth.tsv puts in the module, those
    that are 'edge' in truth.tsv either way."""
    kallsyms = os.path.join(any_corpus, "kallsyms")
    want: dict[str, set] = {}
    edge = set()
    for row in open(os.path.join(any_corpus, "truth.tsv")):
        if not row.startswith("#"):
            addr, _letter, name, _obj, mods, _size, flag = row.rstrip("\n").split("\t")
            key = (int(addr, 16), name)
            if flag != "ok":
                edge.add(key)
            for m in mods.split(","):
                want.setdefault(m, set()).add(key)
    modules = sorted(want)[:30]
    got: dict[str, set] = {}
    for m in modules:
        out = json_lines(run_c(clib, ["symbols", "--syms", any_corpus_syms, "--kallsyms",
                                      kallsyms, m]).stdout)
        got[m] = {(int(rec["address"], 16), rec["name"]) for rec in out}
        assert all(rec["modules"] is None or m in rec["modules"] for rec in out) or m == "vmlinux"
    for m in modules:
        assert got[m] - edge == want[m] - edge, m


def check_builtin_modules(clib, tree: str, syms: str) -> int:
    """kms_builtin_modules() is modules.builtin, name for name (as the
    kernel spells them: '-' read as '_') and in its order (kbuild writes
    both it and the module map from modules.order)."""
    names = run_c(clib, ["builtin", "--syms", syms, "--kallsyms",
                         os.path.join(tree, "kallsyms")]).stdout.decode().split()
    want = [os.path.basename(line.strip())[:-len(".ko")].replace("-", "_")
            for line in open(os.path.join(tree, "modules.builtin")) if line.strip()]
    assert names == want
    return len(names)


def test_builtin_modules_are_modules_builtin_on_the_fixture(clib, fixture_tree, fixture_syms):
    assert check_builtin_modules(clib, fixture_tree, fixture_syms) == 7


def test_builtin_modules_are_modules_builtin(clib, any_corpus, any_corpus_syms):
    assert check_builtin_modules(clib, any_corpus, any_corpus_syms) > 50


def percpu_offsets(tree: str) -> set[int]:
    """The addresses of the core kallsyms lines below the kernel's start
    (kallsyms' _text), whatever their letter: per-cpu offsets, each inside
    vmlinux's own .data..percpu section (pyelftools), which links at 0 where
    the kernel's per-cpu symbols are offsets (x86_64; arm64 has none)."""
    from elftools.elf.elffile import ELFFile
    lines = read_kallsyms(os.path.join(tree, "kallsyms"))
    text = next(a for a, _l, n, m in lines if n == "_text" and m is None)
    low = {a for a, _l, _n, m in lines if m is None and a < text}
    with open(os.path.join(tree, "vmlinux"), "rb") as f:
        sec = ELFFile(f).get_section_by_name(".data..percpu")
        if low:
            assert sec is not None and all(
                sec["sh_addr"] <= a <= sec["sh_addr"] + sec["sh_size"] for a in low)
    return low


def check_spans_hold_no_percpu_offset(clib, tree: str, syms: str) -> int:
    """kms_module_spans() of vmlinux and of every module, built-in or
    loaded, holds no per-cpu offset."""
    kallsyms = os.path.join(tree, "kallsyms")
    builtin = run_c(clib, ["builtin", "--syms", syms, "--kallsyms",
                           kallsyms]).stdout.decode().split()
    loaded = sorted({m for *_x, m in read_kallsyms(kallsyms) if m})
    got = spans(clib, syms, kallsyms, "spans", ["vmlinux"] + builtin + loaded)
    offsets = sorted(percpu_offsets(tree))
    inside = [(m, hex(a), hex(s), hex(e)) for m, rs in got.items() for s, e, _t in rs
              for a in offsets[bisect.bisect_left(offsets, s):bisect.bisect_left(offsets, e)]]
    assert inside == [], inside[:5]
    assert got["vmlinux"]
    return len(offsets)


def test_spans_hold_no_percpu_offset_on_the_fixture(clib, fixture_tree, fixture_syms):
    assert check_spans_hold_no_percpu_offset(clib, fixture_tree, fixture_syms) == 6


def test_spans_hold_no_percpu_offset(clib, any_corpus, any_corpus_syms):
    check_spans_hold_no_percpu_offset(clib, any_corpus, any_corpus_syms)


def elf_sizes(vmlinux: str) -> dict[tuple[str, int], set[int]]:
    """(name, link address) -> the sizes above 0 of vmlinux's own symbol
    table (pyelftools: independent of kmodsyms' ELF reader)."""
    from elftools.elf.elffile import ELFFile
    sizes: dict[tuple[str, int], set[int]] = {}
    with open(vmlinux, "rb") as f:
        for sym in ELFFile(f).get_section_by_name(".symtab").iter_symbols():
            if sym["st_size"] and sym["st_shndx"] != "SHN_UNDEF" and sym.name:
                sizes.setdefault((sym.name, sym["st_value"]), set()).add(sym["st_size"])
    return sizes


def check_vmlinux_sizes(clib, tree: str, syms: str) -> dict[str, int]:
    """R56, against vmlinux's ELF symbol table: every core kallsyms line
    (but per-cpu `A` lines, which do not move) whose name vmlinux's table
    has at its link address with one size above 0 gets exactly that size,
    exact; the link address is the line's less the KASLR shift, which
    kallsyms' `_stext` against vmlinux's tells.  Returns the checked
    lines' records, by name (the last of a name)."""
    kallsyms = os.path.join(tree, "kallsyms")
    lines = read_kallsyms(kallsyms)
    truth = elf_sizes(os.path.join(tree, "vmlinux"))
    from elftools.elf.elffile import ELFFile
    with open(os.path.join(tree, "vmlinux"), "rb") as f:
        link_stext = ELFFile(f).get_section_by_name(".symtab").get_symbol_by_name("_stext")[0]["st_value"]
    shift = next(a for a, _l, n, m in lines if n == "_stext" and m is None) - link_stext
    got = json_lines(run_c(clib, ["lines", "--syms", syms, "--kallsyms", kallsyms]).stdout)
    assert len(got) == len(lines)
    wrong, checked = [], {}
    for (a, letter, name, mod), rec in zip(lines, got):
        want = truth.get((name, a - shift))
        if mod is not None or letter in "aA" or want is None or len(want) != 1:
            continue
        checked[name] = rec
        if rec["size"] != next(iter(want)):
            wrong.append((name, hex(a), rec["size"], want))
    assert not wrong, f"{len(wrong)} of {len(checked)} lines: {wrong[:10]}"
    return checked


def test_vmlinux_sizes_on_the_fixture(clib):
    """The fixture's objtool `__pfx_` symbols are in vmlinux.o only (no
    object holds them), as in a real kernel."""
    fixture = os.path.join(os.path.dirname(__file__), "..", "fixtures", "kbuild")
    checked = check_vmlinux_sizes(clib, fixture, os.path.join(fixture, "dtrace_syms.expected"))
    padding = [rec for name, rec in checked.items() if name.startswith("__pfx_")]
    assert len(padding) > 50 and all(rec["size"] == 16 for rec in padding)


def test_vmlinux_sizes_on_the_corpora(clib, any_corpus, any_corpus_syms):
    """linux_banner and init_uts_ns, of init/version-timestamp.o (linked by
    scripts/link-vmlinux.sh, outside vmlinux.a), and every other line."""
    checked = check_vmlinux_sizes(clib, any_corpus, any_corpus_syms)
    for name in ("linux_banner", "init_uts_ns"):
        rec = checked[name]
        assert rec["size"] > 100 and rec["object"] is None and rec["modules"] is None \
            and rec["origin"] == "core", rec
