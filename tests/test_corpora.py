"""Every corpus of ../shared/kernels (x86_64 and arm64), with the default
build: each built-in kallsyms line gets the object and module(s) the linker
maps give it (truth.tsv, `ok` rows), with the full kallsyms and with the
text-only one a CONFIG_KALLSYMS_ALL=n kernel would show; files of other
kernels and damaged kallsyms are refused, each blaming the right file."""

import os

import pytest
from kallsyms_variants import text_only

from kmodsyms import load
from kmodsyms.errors import KmodsymsError, StaleError


def truth_rows(tree):
    rows = {}
    for line in open(os.path.join(tree, "truth.tsv")):
        if not line.startswith("#"):
            addr, _t, name, obj, mods, elf_size, flag = line.rstrip("\n").split("\t")
            rows[(int(addr, 16), name)] = (obj, mods, int(elf_size), flag)
    return rows


def built_in_lines(resolver):
    """The kallsyms lines of vmlinux (not of a loaded or pseudo-module)."""
    return [line for line in resolver.lines() if line.origin not in ("loadable", "pseudo")]


def ambiguity(resolver, line):
    """The candidates of an ambiguous line (None when it is not): only a
    line of no object can be, and its record says."""
    if line.object is not None:
        return None
    rec = resolver.record(line.address, line.index)
    return rec.candidates if rec.ambiguous else None


def count_lines(resolver):
    """(ambiguous, core kernel of no object) among vmlinux's lines."""
    ambiguous = core_unknown = 0
    for line in built_in_lines(resolver):
        if ambiguity(resolver, line) is not None:
            ambiguous += 1
        elif line.object is None and line.origin == "core":
            core_unknown += 1
    return ambiguous, core_unknown


def wrong_rows(resolver, tree):
    """(checked, wrong): the truth rows flagged ok among the resolver's core
    lines, and those whose object, modules or known size differ."""
    truth = truth_rows(tree)
    checked, wrong = 0, []
    for line in built_in_lines(resolver):
        row = truth.get((line.address, line.name))
        if row is None or row[3] != "ok":
            continue
        checked += 1
        ours_obj = line.object or "-"
        candidates = ambiguity(resolver, line)
        if candidates is not None and len({tuple(c) for c in candidates}) > 1:
            ours_mods = "ambiguous"
        else:
            ours_mods = ",".join(line.modules) or "vmlinux"
        if (ours_obj, ours_mods) != row[:2] or (line.size_kind == "exact" and line.size != row[2]):
            wrong.append((line.name, hex(line.address), ours_obj, ours_mods, row))
    return checked, wrong


def test_every_ok_row(any_corpus, any_corpus_syms):
    r = load(syms=any_corpus_syms, kallsyms=os.path.join(any_corpus, "kallsyms"))
    checked, wrong = wrong_rows(r, any_corpus)
    assert checked == sum(1 for row in truth_rows(any_corpus).values() if row[3] == "ok")
    assert wrong == []
    assert count_lines(r)[0] == 0


def _text_only(tree):
    return text_only(os.path.join(tree, "System.map"), open(os.path.join(tree, "kallsyms"), "rb").read())


def test_text_only_kallsyms(any_corpus, any_corpus_syms):
    """CONFIG_KALLSYMS_ALL=n: the data anchors are absent, not misplaced;
    every line there is gets the linker's answer."""
    text = _text_only(any_corpus)
    full = open(os.path.join(any_corpus, "kallsyms"), "rb").read()
    assert 0.3 * len(full) < len(text) < 0.9 * len(full)
    r = load(syms=any_corpus_syms, kallsyms_text=text, kallsyms_name="kallsyms.text-only")
    checked, wrong = wrong_rows(r, any_corpus)
    assert checked > 25_000 and wrong == []


def test_text_only_kallsyms_of_another_build_is_refused(any_corpus, any_corpus_syms):
    """The same text-only kernel rebuilt with one function grown: everything
    above it moves, so the anchors there are misplaced."""
    lines = _text_only(any_corpus).splitlines(keepends=True)
    core = [i for i, ln in enumerate(lines) if len(ln.split()) == 3]
    grown = core[len(core) // 4]
    moved = []
    for i, line in enumerate(lines):
        fields = line.split()
        if i > grown and len(fields) == 3 and not fields[2].startswith((b"__start_", b"__stop_")):
            line = b"%016x" % (int(fields[0], 16) + 0x40) + line[16:]
        moved.append(line)
    with pytest.raises(StaleError, match=r"dtrace_syms does not match kallsyms.rebuilt: .*different kernels"):
        load(syms=any_corpus_syms, kallsyms_text=b"".join(moved), kallsyms_name="kallsyms.rebuilt")


def test_truncated_kallsyms_blames_kallsyms(any_corpus, any_corpus_syms):
    for text in (open(os.path.join(any_corpus, "kallsyms"), "rb").read(), _text_only(any_corpus)):
        lines = text.splitlines(keepends=True)
        cut = b"".join(lines[:len(lines) * 2 // 3])
        with pytest.raises(KmodsymsError, match=r"^kallsyms.cut lacks .* truncated or filtered") as e:
            load(syms=any_corpus_syms, kallsyms_text=cut, kallsyms_name="kallsyms.cut")
        assert not isinstance(e.value, StaleError)


def test_other_kernels_file_is_refused(fixture_syms, any_corpus):
    with pytest.raises(StaleError, match="does not match"):
        load(syms=fixture_syms, kallsyms_text=_text_only(any_corpus), kallsyms_name="kallsyms")


def _unplace_sections_of(syms_path, name, out):
    """A copy of a dtrace_syms whose sections holding ``name`` are unplaced
    (as a build leaves sections it cannot place), its CRC recomputed."""
    import struct
    import zlib

    import numpy as np

    from kmodsyms.format.fileformat import NO_ADDRESS
    from kmodsyms.format.symsfile import SECTION_DTYPE, read_syms
    syms = read_syms(syms_path)
    entries = [e for e in range(len(syms.symbols))
               if syms.raw_string(int(syms.symbols["name"][e])) == name.encode()]
    data = bytearray(open(syms_path, "rb").read())
    table_at = syms.sections.__array_interface__["data"][0] - np.frombuffer(syms.data, np.uint8).__array_interface__["data"][0]
    for e in entries:
        at = table_at + int(syms.symbols["section"][e]) * SECTION_DTYPE.itemsize
        struct.pack_into("<Q", data, at + SECTION_DTYPE.fields["address"][1], NO_ADDRESS)
        struct.pack_into("<I", data, at + SECTION_DTYPE.fields["placement"][1], 0)
    struct.pack_into("<I", data, 12, zlib.crc32(bytes(data[16:])))
    open(out, "wb").write(bytes(data))
    return len(entries)


def test_unplaced_copies_are_ambiguous_not_core(fixture_tree, fixture_syms, tmp_path):
    """A line whose copies the file could not place is reported with its
    candidates, never silently as core kernel."""
    out = str(tmp_path / "dtrace_syms")
    assert _unplace_sections_of(fixture_syms, "init_once", out) == 3
    r = load(syms=out, kallsyms=os.path.join(fixture_tree, "kallsyms"))
    recs = [rec for rec in r.lookup("init_once") if rec.module != "fuse"]
    assert len(recs) == 3
    for rec in recs:
        assert rec.ambiguous and rec.object is None
        assert sorted(map(sorted, rec.candidates)) == [["ext4"], ["isofs"], ["vmlinux"]]
    # (the other symbols of those three sections are left undecided too)
    ambiguous, core_unknown = count_lines(r)
    assert ambiguous >= 3 and core_unknown < 30


def test_verify_reads_either_shape_of_linker_map(any_corpus, any_corpus_syms):
    """x86_64 links vmlinux from vmlinux.o (two maps to compose); arm64
    links it from vmlinux.a's objects (vmlinux.map names them itself)."""
    import json
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-m", "kmodsyms", "verify", "--kbuild", any_corpus,
                          "--syms", any_corpus_syms, "--json"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    maps = json.loads(out.stdout)["comparisons"]["linker_maps"]
    assert maps["counts"]["only_ours"] == 0 and maps["counts"]["only_theirs"] == 0
    assert maps["disagreements"] == 0 and maps["compared"] > 45_000


def _linked_bindings(vmlinux):
    """(name, link address) -> the ELF bindings vmlinux's own .symtab gives
    it: the final link's, which ld may change from the object's (a hidden
    symbol of arm64's -shared link becomes local)."""
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection
    found: dict = {}
    with open(vmlinux, "rb") as f:
        symtab = ELFFile(f).get_section_by_name(".symtab")
        assert isinstance(symtab, SymbolTableSection)
        for sym in symtab.iter_symbols():
            found.setdefault((sym.name, sym["st_value"]), set()).add(sym["st_info"]["bind"])
    return found


ELF_BINDING = {"STB_LOCAL": "local", "STB_GLOBAL": "global", "STB_WEAK": "weak"}


def test_every_line_takes_the_binding_of_the_linked_symbol(any_corpus, any_corpus_syms):
    """R59: a built-in line's binding is vmlinux's (the final link's), not
    its object's, for every line whose name and address vmlinux's .symtab
    holds once."""
    r = load(syms=any_corpus_syms, kallsyms=os.path.join(any_corpus, "kallsyms"))
    linked = _linked_bindings(os.path.join(any_corpus, "vmlinux"))
    (text,) = [line for line in r.lines() if line.name == "_text"]
    (text_bindings,) = [k for k in linked if k[0] == "_text"]
    shift = text.address - text_bindings[1]
    checked, wrong = 0, []
    for line in built_in_lines(r):
        bindings = linked.get((line.name, line.address - shift), set())
        if len(bindings) != 1 or line.binding is None:
            continue
        checked += 1
        (truth,) = bindings
        if line.binding != ELF_BINDING[truth]:
            wrong.append((line.name, line.type, line.binding, truth))
    assert checked > 40_000
    assert wrong == [], f"{len(wrong)} wrong, e.g. {wrong[:5]}"
