#!/usr/bin/env python3
"""Regenerate the examples of README.md, docs/getting-started.md and
docs/format.md from the fixture (fixtures/kbuild), so they cannot drift.

    python docs/gen_examples.py            # rewrite the docs in place
    python docs/gen_examples.py --check    # exit 1 with a diff when a doc is stale
    ... [--corpus DIR]                     # the unpacked corpus, if not ../shared/kernels'

tests/test_docs.py runs the check.  Three kinds of example are regenerated:

* **Shell transcripts**: a fenced block whose first line starts with ``$ ``.
  Each ``$`` line runs in bash, in a scratch directory where ``fixtures/``
  is the repository's and ``kmodsyms`` is this tree's, and its output
  (stdout and stderr together, as a terminal shows them) replaces the lines
  up to the next ``$`` line.  ``$?`` is the previous command's status.
* **Python sessions**: a fenced block whose first line starts with ``>>> ``,
  run statement by statement (``...`` continues one) like the interactive
  interpreter, in the same directory.
* **Generated regions**: the lines between ``<!-- gen:NAME -->`` and
  ``<!-- /gen:NAME -->`` are what ``NAME(dump)`` below renders from the
  fixture's dtrace_syms, decoded with ``struct`` exactly as docs/format.md
  specifies (not with kmodsyms' own reader).  The region ``corpus`` holds
  examples run on the real kernel corpus (``linux-6.12-defconfig`` in the
  scratch directory): regenerated when ../shared/kernels has it, else left
  as they are.

Each doc runs in a fresh scratch directory, in order, after its PRELUDE.
Durations such as ``0.09s`` are masked when deciding whether a doc changed,
so a rerun leaves them alone.
"""

from __future__ import annotations

import contextlib
import difflib
import io
import json
import os
import re
import struct
import subprocess
import sys
import tempfile
import traceback
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.corpus import CORPUS_NAME  # noqa: E402

FIXTURE = os.path.join(ROOT, "fixtures", "kbuild")
SYMS = "dtrace_syms"
BUILD = f"kmodsyms build --kbuild fixtures/kbuild -o {SYMS}"
# Each doc, with what runs before its first example (README's set-up command
# builds the file its API example loads).
DOCS = {
    "README.md": [BUILD],
    "docs/getting-started.md": [],
    "docs/format.md": [],
}
DURATION = re.compile(r"\b\d+(\.\d+)?s\b")
GEN = re.compile(r"^<!-- gen:(\w+) -->$")
# Examples run on the real corpus: regenerated when it is present, else left.
CORPUS_REGION = "corpus"
FENCE = re.compile(r"^```")


# -- running examples ------------------------------------------------------------

class Scratch:
    """A scratch directory where the docs' commands run."""

    def __init__(self, path: str, corpus: str | None):
        self.path = path
        os.symlink(os.path.join(ROOT, "fixtures"), os.path.join(path, "fixtures"))
        bindir = os.path.join(path, ".bin")
        os.mkdir(bindir)
        shim = os.path.join(bindir, "kmodsyms")
        with open(shim, "w") as f:
            f.write(f'#!/bin/sh\nexec "{sys.executable}" -m kmodsyms "$@"\n')
        os.chmod(shim, 0o755)
        self.env = {**os.environ, "PATH": bindir + os.pathsep + os.environ["PATH"],
                    "PYTHONPATH": ROOT, "XDG_CACHE_HOME": os.path.join(path, ".cache"),
                    "COLUMNS": "80", "NO_COLOR": "1", "TERM": "dumb", "LC_ALL": "C.UTF-8"}
        self.status = 0
        self.namespace: dict = {}
        self.corpus = corpus is not None
        if corpus:
            os.symlink(os.path.abspath(corpus), os.path.join(path, CORPUS_NAME))

    def dump(self) -> "Dump":
        """The fixture's dtrace_syms, built (once) beside the examples' own
        files, so that a doc's regions need not follow its transcripts."""
        path = os.path.join(self.path, ".regions", SYMS)
        if not os.path.exists(path):
            os.makedirs(os.path.dirname(path))
            subprocess.run([sys.executable, "-m", "kmodsyms", "build", "--kbuild", FIXTURE, "-o", path],
                           env=self.env, check=True, stdout=subprocess.DEVNULL)
        with open(path, "rb") as f:
            return Dump(f.read())

    def shell(self, command: str) -> list[str]:
        proc = subprocess.run(["bash", "-c", f"(exit {self.status}); {command}"], cwd=self.path,
                              env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
        self.status = proc.returncode
        return proc.stdout.splitlines()

    def python(self, statement: str) -> list[str]:
        out = io.StringIO()
        saved = os.getcwd(), dict(os.environ)
        os.chdir(self.path)
        os.environ.update(self.env)
        try:
            with contextlib.redirect_stdout(out):
                exec(compile(statement, "<doc>", "single"), self.namespace)
        except Exception:
            out.write(traceback.format_exc(limit=0))
        finally:
            os.chdir(saved[0])
            os.environ.clear()
            os.environ.update(saved[1])
        return out.getvalue().splitlines()


def transcript(lines: list[str], scratch: Scratch) -> list[str]:
    """A '$ ' block with each command's output regenerated."""
    out = []
    for line in lines:
        if line.startswith("$ "):
            out.append(line)
            out += scratch.shell(line[2:])
    return out


def session(lines: list[str], scratch: Scratch) -> list[str]:
    """A '>>> ' block with each statement's output regenerated."""
    statements: list[list[str]] = []
    for line in lines:
        if line.startswith(">>> "):
            statements.append([line])
        elif line.startswith("... ") or line == "...":
            statements[-1].append(line)
    out = []
    for statement in statements:
        out += statement
        out += scratch.python("\n".join(s[4:] for s in statement) + "\n")
    return out


# -- generated regions: the fixture's dtrace_syms, decoded by the spec -----------

TABLES = ("strings", "modules", "modset_members", "modsets", "objects", "section_names",
          "sections", "symbols", "segments", "anchors", "vmlinux_symbols", "symbols_by_offset")
ENTRY = {"modules": 4, "modset_members": 4, "modsets": 8, "objects": 16,
         "section_names": 4, "sections": 40, "symbols": 40, "segments": 16, "anchors": 8,
         "vmlinux_symbols": 24, "symbols_by_offset": 4}
DIRECTORY_END = 56 + 8 * len(TABLES)   # then reserved bytes, to the header's 160
HEADER_STRINGS = ("kernel_release", "build_id", "tool_version", "object_source",
                  "thick_source", "placement")
STT = {0: "NOTYPE", 1: "OBJECT", 2: "FUNC", 6: "TLS", 10: "GNU_IFUNC"}
STB = {0: "LOCAL", 1: "GLOBAL", 2: "WEAK", 10: "GNU_UNIQUE"}
PLACEMENT = {0: "unplaced", 1: "by anchors", 2: "by elimination", 3: "by link order"}


class Dump:
    """The fixture's dtrace_syms, decoded with struct as docs/format.md says."""

    def __init__(self, data: bytes):
        self.data = data
        self.magic, self.version, self.crc, self.file_size, self.header_size, self.flags = \
            struct.unpack_from("<8sIIQII", data, 0)
        self.header_strings = dict(zip(HEADER_STRINGS, struct.unpack_from("<6I", data, 32)))
        pairs = struct.unpack_from(f"<{2 * len(TABLES)}I", data, 56)
        self.table = {t: (pairs[2 * i], pairs[2 * i + 1]) for i, t in enumerate(TABLES)}
        assert zlib.crc32(data[16:]) == self.crc and self.file_size == len(data)

    def at(self, table: str, index: int) -> int:
        return self.table[table][0] + index * ENTRY[table]

    def count(self, table: str) -> int:
        return self.table[table][1]

    def u32(self, offset: int) -> int:
        return struct.unpack_from("<I", self.data, offset)[0]

    def string(self, offset: int) -> str:
        start = self.table["strings"][0] + offset
        return self.data[start:self.data.index(b"\0", start)].decode()

    def header_string(self, name: str) -> str:
        return self.string(self.header_strings[name])

    def hexbytes(self, offset: int, size: int) -> str:
        return self.data[offset:offset + size].hex()

    def symbol(self, i: int) -> dict:
        keys = ("name", "modset", "object", "section", "value", "size", "type", "binding")
        return dict(zip(keys, struct.unpack_from("<IIIIQQBB", self.data, self.at("symbols", i))))

    def section(self, i: int) -> dict:
        keys = ("object", "name", "flags", "align", "size", "address", "placement")
        return dict(zip(keys, struct.unpack_from("<IIIIQQI", self.data, self.at("sections", i))))

    def section_name(self, i: int) -> str:
        return self.string(self.u32(self.at("section_names", self.section(i)["name"])))

    def object_path(self, i: int) -> str:
        return self.string(self.u32(self.at("objects", i)))

    def modset(self, i: int) -> tuple[int, int]:
        return struct.unpack_from("<II", self.data, self.at("modsets", i))

    def modset_names(self, i: int) -> list[str]:
        first, count = self.modset(i)
        return [self.string(self.u32(self.at("modules", self.u32(self.at("modset_members", k)))))
                for k in range(first, first + count)]

    def symbol_name(self, i: int) -> str:
        return self.string(self.symbol(i)["name"])

    def find(self, name: str, modules: list[str]) -> int:
        (i,) = [i for i in range(self.count("symbols"))
                if self.symbol_name(i) == name and self.modset_names(self.symbol(i)["modset"]) == modules]
        return i

    def entries(self, name: str) -> list[int]:
        return [i for i in range(self.count("symbols")) if self.symbol_name(i) == name]

    def segment(self, g: int) -> tuple[int, int]:
        return struct.unpack_from("<QQ", self.data, self.at("segments", g))

    def anchor(self, k: int) -> tuple[int, int]:
        return struct.unpack_from("<II", self.data, self.at("anchors", k))

    def link(self, i: int) -> int:
        s = self.symbol(i)
        return self.section(s["section"])["address"] + s["value"]


def xxd(dump: Dump, offset: int, size: int) -> str:
    """The lines 'xxd -s OFFSET -l SIZE' prints."""
    out = subprocess.run(["xxd", "-s", str(offset), "-l", str(size), "-"], input=dump.data,
                         stdout=subprocess.PIPE, check=True).stdout.decode()
    return out.rstrip("\n")


def summary(d: Dump) -> str:
    anchors = d.count("anchors")
    return (f"The fixture tree has `vmlinux` and `System.map`, so the file has a layout\n"
            f"({d.count('segments')} segments, {anchors} anchors); it has "
            f"{d.count('objects')} objects, {d.count('symbols')} symbols and "
            f"{d.count('modules')} built-in\nmodules, in {d.file_size:,} bytes.")


def placement_json(d: Dump) -> str:
    return "```json\n" + d.header_string("placement") + "\n```"


def header_table(d: Dump) -> str:
    rows = ["| offset | bytes | field | value |", "|-------:|-------|-------|-------|",
            f"| 0x00 | `{d.hexbytes(0, 8)}` | magic | `{d.magic.decode()}` |",
            f"| 0x08 | `{d.hexbytes(8, 4)}` | version | {d.version} |",
            f"| 0x0c | `{d.hexbytes(12, 4)}` | crc32 | {d.crc:#010x} |",
            f"| 0x10 | `{d.hexbytes(16, 8)}` | file_size | {d.file_size:#x} = {d.file_size} |",
            f"| 0x18 | `{d.hexbytes(24, 4)}` | header_size | {d.header_size} |",
            f"| 0x1c | `{d.hexbytes(28, 4)}` | flags | {d.flags} |"]
    for k, name in enumerate(HEADER_STRINGS):
        off = 32 + 4 * k
        value = d.header_string(name)
        if name == "placement":
            value = (f"`{value[:value.index(',')]}, ...}}` ({len(value.encode())} bytes, shown "
                     "under [The link layout](#the-link-layout))")
        else:
            value = f"`{value}`"
        rows.append(f"| {off:#04x} | `{d.hexbytes(off, 4)}` | {name} | "
                    f"string {d.header_strings[name]}: {value} |")
    for t, name in enumerate(TABLES):
        off = 56 + 8 * t
        start, count = d.table[name]
        unit = "bytes" if name == "strings" else "entries"
        rows.append(f"| {off:#04x} | `{d.hexbytes(off, 4)} {d.hexbytes(off + 4, 4)}` | {name} | "
                    f"offset {start} ({start:#x}), {count} {unit} |")
    rows.append(f"| {DIRECTORY_END:#04x} | {160 - DIRECTORY_END} × `00` | reserved | "
                f"bytes {DIRECTORY_END}..159 |")
    return "\n".join(rows)


def tables_prose(d: Dump) -> str:
    strings_at, strings_size = d.table["strings"]
    first = d.string(1)
    end = strings_at + strings_size
    pad = d.table["modules"][0] - end
    sets = ", ".join("`(" + ", ".join(d.modset_names(i)) + ")`" for i in range(d.count("modsets")))
    last_at, last = d.table[TABLES[-1]]
    return (f"The string table starts with its NUL at {strings_at:#x}: "
            f"`{d.data[strings_at:strings_at + len(first) + 2].hex(' ')}` is \"\" at\n"
            f"offset 0, then `{first}` at offset 1.  The strings table ends at\n"
            f"{strings_at} + {strings_size} = {end}; {pad} bytes of padding bring the modules "
            f"table to {d.table['modules'][0]}.\nThe module sets are {sets}.  The\n"
            f"{TABLES[-1]} table ends the file: {last_at} + {last} × {ENTRY[TABLES[-1]]} = "
            f"{last_at + last * ENTRY[TABLES[-1]]}.")


def _modset_chain(d: Dump, modset: int) -> str:
    first, count = d.modset(modset)
    members = [d.u32(d.at("modset_members", k)) for k in range(first, first + count)]
    return (f"{modset} → modsets[{modset}] at {d.at('modsets', modset):#x} = "
            f"`{d.hexbytes(d.at('modsets', modset), 4)} {d.hexbytes(d.at('modsets', modset) + 4, 4)}`"
            f": first {first}, count {count} → modset_members[{first}"
            f"{f'..{first + count - 1}' if count > 1 else ''}] at {d.at('modset_members', first):#x}"
            f" → modules {', '.join(map(str, members))}: "
            + ", ".join(f"`{n}`" for n in d.modset_names(modset)))


def _symbol_rows(d: Dump, i: int) -> list[str]:
    s = d.symbol(i)
    at = d.at("symbols", i)
    obj_at = d.at("objects", s["object"])
    return [
        "| offset | bytes | field | value |", "|-------:|-------|-------|-------|",
        f"| +0  | `{d.hexbytes(at, 4)}` | name | string {s['name']} "
        f"(file offset {d.table['strings'][0]} + {s['name']} = "
        f"{d.table['strings'][0] + s['name']:#x}): `{d.string(s['name'])}` |",
        f"| +4  | `{d.hexbytes(at + 4, 4)}` | modset | {_modset_chain(d, s['modset'])} |",
        f"| +8  | `{d.hexbytes(at + 8, 4)}` | object | {s['object']} → objects[{s['object']}] at "
        f"{obj_at:#x}: path string {d.u32(obj_at)} `{d.object_path(s['object'])}`, "
        f"modset {d.u32(obj_at + 4)}, flags {d.u32(obj_at + 8)} |",
        f"| +12 | `{d.hexbytes(at + 12, 4)}` | section | {s['section']} → "
        f"sections[{s['section']}] at {d.at('sections', s['section']):#x} (below) |",
        f"| +16 | `{d.hexbytes(at + 16, 8)}` | value | {s['value']:#x}: {s['value']} bytes into "
        f"that object's `{d.section_name(s['section'])}` |",
        f"| +24 | `{d.hexbytes(at + 24, 8)}` | size | {s['size']} |",
        f"| +32 | `{d.hexbytes(at + 32, 1)}` | type | {s['type']} = STT_{STT[s['type']]} |",
        f"| +33 | `{d.hexbytes(at + 33, 1)}` | binding | {s['binding']} = STB_{STB[s['binding']]} |",
        f"| +34 | `{d.hexbytes(at + 34, 2)} {d.hexbytes(at + 36, 4)}` | reserved | |"]


def _section_prose(d: Dump, k: int) -> str:
    sec = d.section(k)
    return (f"object {sec['object']}, name {sec['name']} (section_names[{sec['name']}] → "
            f"`{d.section_name(k)}`), flags {sec['flags']:#x}, align {sec['align']}, size "
            f"{sec['size']}, address {sec['address']:#x}, placement {sec['placement']} "
            f"({PLACEMENT[sec['placement']]})")


def init_once_entry(d: Dump) -> str:
    i = d.find("init_once", ["ext4"])
    s = d.symbol(i)
    runs = d.entries("init_once")
    owners = [", ".join(d.modset_names(d.symbol(j)["modset"])) or "core kernel" for j in runs]
    paths = [d.object_path(d.symbol(j)["object"]) for j in runs]
    sec_at = d.at("sections", s["section"])
    return "\n".join([
        f"`init_once` has {len(runs)} entries, {runs[0]}-{runs[-1]}, in sort order: "
        + ", ".join(f"{o} (`{p}`)" for o, p in zip(owners, paths))
        + f".  Entry {i} is at {d.table['symbols'][0]} + {i} × 40 = {d.at('symbols', i):#x}:",
        "", "```", xxd(d, d.at("symbols", i), 40), "```", "", *_symbol_rows(d, i), "",
        f"sections[{s['section']}], at {d.table['sections'][0]} + {s['section']} × 40 = {sec_at:#x}:",
        "", "```", xxd(d, sec_at, 40), "```", "",
        _section_prose(d, s["section"]) + ".  So `init_once` of ext4 is linked at",
        f"{d.section(s['section'])['address']:#x} + {s['value']:#x} = **{d.link(i):#x}** "
        f"(System.map: `{d.link(i):016x} t init_once`)."])


def mdio_entry(d: Dump) -> str:
    i = d.find("mdio_bus_read", ["libphy", "fwnode_mdio"])
    s = d.symbol(i)
    sec = d.section(s["section"])
    return "\n".join([
        f"Entry {i}, at {d.table['symbols'][0]} + {i} × 40 = {d.at('symbols', i):#x}:",
        "", "```", xxd(d, d.at("symbols", i), 40), "```", "",
        f"* name {s['name']:#x} = {s['name']} → `{d.string(s['name'])}`;",
        f"* modset {_modset_chain(d, s['modset'])};",
        f"* object {s['object']} → `{d.object_path(s['object'])}` (objects[{s['object']}] at "
        f"{d.at('objects', s['object']):#x}, modset {d.u32(d.at('objects', s['object']) + 4)});",
        f"* section {s['section']} ({s['section']:#x}) → sections[{s['section']}] at "
        f"{d.at('sections', s['section']):#x}: object {sec['object']}, `{d.section_name(s['section'])}`,"
        f" size {sec['size']}, address {sec['address']:#x}, placement {sec['placement']};",
        f"* value {s['value']}, size {s['size']}, type {s['type']} ({STT[s['type']]}), binding "
        f"{s['binding']} ({STB[s['binding']]}): link address {d.link(i):#x}.",
        "", f"`libkmodsyms`'s `kmodsyms-c lookup --syms {SYMS} --kallsyms fixtures/kbuild/kallsyms "
        "mdio_bus_read`",
        f"prints its kallsyms line with `\"modules\": {json.dumps(d.modset_names(s['modset']))}`, "
        f"`\"object\": \"{d.object_path(s['object'])}\"` and `\"size\": {s['size']}`."])


def segments_and_anchors(d: Dump) -> str:
    seg_at, nseg = d.table["segments"]
    anc_at, nanc = d.table["anchors"]
    rows = ["| segment | start | end | anchors | first anchor |", "|--:|---|---|--:|---|"]
    anchors = [d.anchor(k) for k in range(nanc)]
    for g in range(nseg):
        start, end = d.segment(g)
        mine = [a for a, seg in anchors if seg == g]
        first = (f"symbol {mine[0]} `{d.symbol_name(mine[0])}`, link {d.link(mine[0]):#x}"
                 if mine else "none")
        percpu = " (per-cpu)" if start == 0 else ""
        rows.append(f"| {g} | {start:#x}{percpu} | {end:#x} | {len(mine)} | {first} |")
    sym0, seg0 = anchors[0]
    s = d.symbol(sym0)
    return "\n".join([
        "```", f"$ xxd -s {seg_at} -l {nseg * 16} {SYMS}", xxd(d, seg_at, nseg * 16),
        f"$ xxd -s {anc_at} -l 16 {SYMS}", xxd(d, anc_at, 16), "```", "", *rows, "",
        f"Anchor 0 is `{d.hexbytes(anc_at, 4)} {d.hexbytes(anc_at + 4, 4)}`: symbol {sym0} "
        f"({sym0:#x}), segment {seg0}.  Symbol {sym0},",
        f"at {d.table['symbols'][0]} + {sym0} × 40 = {d.at('symbols', sym0):#x}, is "
        f"`{d.symbol_name(sym0)}` (`{d.object_path(s['object'])}`, section {s['section']},",
        f"value {s['value']:#x}, size {s['size']}, {STT[s['type']]}, {STB[s['binding']]}); "
        f"sections[{s['section']}], at {d.at('sections', s['section']):#x}, has address",
        f"{d.section(s['section'])['address']:#x} — giving the shift computed in",
        "[Placing symbols with the layout](#placing-symbols-with-the-layout)."])


def _kallsyms(name: str) -> str:
    """The fixture kallsyms' first core line of NAME."""
    with open(os.path.join(FIXTURE, "kallsyms")) as f:
        for line in f:
            fields = line.split()
            if len(fields) == 3 and fields[2] == name:
                return line.rstrip("\n")
    raise KeyError(name)


def placement_example(d: Dump) -> str:
    sym0, seg0 = d.anchor(0)
    s = d.symbol(sym0)
    name = d.symbol_name(sym0)
    link = d.link(sym0)
    addr = int(_kallsyms(name).split()[0], 16)
    shift = (addr - link) % (1 << 64)
    percpu = [g for g in range(d.count("segments")) if d.segment(g)[0] == 0]
    lines = [
        f"Example, the fixture (segment {seg0}'s first anchor is `{name}`, symbol {sym0},",
        f"in section {s['section']} of `{d.object_path(s['object'])}`; see the worked example below):",
        "", "```",
        f"link     = sections[{s['section']}].address + {s['value']:#x} = "
        f"{d.section(s['section'])['address']:#x} + {s['value']:#x} = {link:#x}",
        f"kallsyms: {_kallsyms(name)}",
        f"shift[{seg0}] = {addr:#x} - {link:#x} = {shift:#x}", "```", ""]
    if percpu:
        g = percpu[0]
        (a,) = [a for a, seg in (d.anchor(k) for k in range(d.count("anchors"))) if seg == g][:1]
        aname = d.symbol_name(a)
        line = _kallsyms(aname)
        lines.append(f"The fixture's per-cpu segment {g}, `[0, {d.segment(g)[1]:#x})`, has anchor "
                     f"`{aname}` at\nlink address {d.link(a)} and kallsyms `{line}`: shift "
                     f"{(int(line.split()[0], 16) - d.link(a)) % (1 << 64)}.  So")
    i = d.find("init_once", ["ext4"])
    t = d.symbol(i)
    lines.append(f"`init_once` of ext4 (section {t['section']}, address "
                 f"{d.section(t['section'])['address']:#x}, value {t['value']:#x})\nis at "
                 f"`{d.link(i):#x} + {shift:#x} = {(d.link(i) + shift) % (1 << 64):#x}`, as\n"
                 "`kmodsyms lookup 'ext4`init_once'` prints.")
    return "\n".join(lines)


# Fixtures that skip when a large input is absent, and what they need.
SKIPPING_FIXTURES = {
    "corpus": "the real kernel corpus `../shared/kernels/linux-6.12-defconfig.tar.xz`",
    "any_corpus": "either corpus of `../shared/kernels/` (x86_64 `linux-6.12-defconfig`, "
                  "arm64 `linux-6.12-arm64`), each run for both and skipped for a missing one",
    "kernel_tree": "Debian's kernel source, `/usr/src/linux-source-*.tar.xz` "
                   "(`apt-get install linux-source-6.12`; these are also `-m slow`)",
    "ranges_verifier": "Debian's kernel source, for its `scripts/verify_builtin_ranges.awk`, or "
                       "`gawk`, which runs it (not `-m slow`)",
    "any_kernel": "the same source, each run for x86_64 and for s390, which also needs "
                  "`gcc-s390x-linux-gnu` (`-m slow`)",
    "live": "the same source, QEMU (`qemu-system-x86`) and a static busybox (`busybox-static`), "
            "each run for x86_64 with and without `CONFIG_KALLSYMS_ALL`, and for arm64, which needs "
            "`qemu-system-arm`, `gcc-aarch64-linux-gnu`, `libc6-dev-arm64-cross` and "
            "`busybox-static:arm64`'s .deb (`apt-get download` it into `/var/cache/apt/archives` "
            "or `$KMODSYMS_LIVE_DEBS`) (`-m live`)",
    "unstable_and_13": "Debian's archive (the one this machine's apt configuration names, with the "
                       "suite swapped: several hundred MB into `/var/cache/apt/archives`) and `dpkg-deb` "
                       "(`-m slow`)",
    "built": "the same, each run for Debian unstable's and Debian 13's newest cloud-amd64 kernel "
             "(`KMODSYMS_DEBIAN_KERNELS=all`: every flavour and release) (`-m slow`)",
    "booted": "the same archive, QEMU (`qemu-system-x86`), and Debian's own 6.12.118+deb13 and "
              "7.2.13+deb14 cloud-amd64 kernels with sid's `dtrace` (about 1.3 GB of packages, "
              "downloaded by the test) (`-m live`)",
}


def _tests_needing(fixture: str) -> dict[str, list[str]]:
    """Test file -> the tests that take FIXTURE, directly or through other
    fixtures (read from the test sources with ast)."""
    import ast
    parsed = {}
    for name in sorted(os.listdir(os.path.join(ROOT, "tests"))):
        if name.endswith(".py"):
            with open(os.path.join(ROOT, "tests", name), encoding="utf-8") as f:
                parsed[name] = [node for node in ast.walk(ast.parse(f.read()))
                                if isinstance(node, ast.FunctionDef)]
    params = {fn.name: {a.arg for a in fn.args.args} for fns in parsed.values() for fn in fns
              if not fn.name.startswith("test_")}
    needing = {fixture}
    while True:
        more = {name for name, args in params.items() if args & needing} - needing
        if not more:
            break
        needing |= more
    found = {}
    for name, fns in parsed.items():
        tests = [fn.name for fn in fns if fn.name.startswith("test_")
                 and {a.arg for a in fn.args.args} & needing]
        if tests:
            found[f"tests/{name}"] = tests
    return found


def skipping_tests(_dump: Dump) -> str:
    lines = []
    for fixture, what in SKIPPING_FIXTURES.items():
        lines.append(f"Without {what}:")
        lines.append("")
        for path, tests in _tests_needing(fixture).items():
            lines.append(f"* `{path}`: " + ", ".join(f"`{t}`" for t in tests))
        lines.append("")
    return "\n".join(lines).rstrip("\n")


REGIONS = {f.__name__: f for f in (summary, placement_json, header_table, tables_prose,
                                   init_once_entry, mdio_entry, segments_and_anchors,
                                   placement_example, skipping_tests)}


# -- the docs ----------------------------------------------------------------------

def regenerate(text: str, scratch: Scratch) -> str:
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        gen = GEN.match(line)
        if gen and gen.group(1) == CORPUS_REGION:
            end = lines.index(f"<!-- /gen:{CORPUS_REGION} -->", i)
            inner = "\n".join(lines[i + 1:end])
            if scratch.corpus:
                inner = regenerate(inner, scratch)
            else:
                print(f"the corpus is absent: the {CORPUS_REGION} examples are not checked",
                      file=sys.stderr)
            out += [line, inner, lines[end]]
            i = end + 1
            continue
        if gen:
            end = lines.index(f"<!-- /gen:{gen.group(1)} -->", i)
            rendered = REGIONS[gen.group(1)](scratch.dump())
            out += [line, *rendered.split("\n"), lines[end]]
            i = end + 1
            continue
        if FENCE.match(line):
            end = next(j for j in range(i + 1, len(lines)) if FENCE.match(lines[j]))
            body = lines[i + 1:end]
            if body and body[0].startswith("$ "):
                body = transcript(body, scratch)
            elif body and body[0].startswith(">>> "):
                body = session(body, scratch)
            out += [line, *body, lines[end]]
            i = end + 1
            continue
        out.append(line)
        i += 1
    return "\n".join(out)


def real_corpus(argv: list[str]) -> str | None:
    """The unpacked corpus: --corpus DIR, else ../shared/kernels' tarball
    unpacked once by bench/corpus.py, else None."""
    if "--corpus" in argv:
        return argv[argv.index("--corpus") + 1]
    from bench.corpus import cached_corpus
    return cached_corpus(log=lambda *_: None)


def generate(doc: str, corpus: str | None) -> str:
    """DOC (a path below the repository root) with its examples regenerated;
    durations keep their old text when nothing else changed."""
    with open(os.path.join(ROOT, doc), encoding="utf-8") as f:
        old = f.read()
    with tempfile.TemporaryDirectory(prefix="kmodsyms-docs-") as tmp:
        scratch = Scratch(tmp, corpus)
        for command in DOCS[doc]:
            scratch.shell(command)
        new = regenerate(old, scratch)
    if DURATION.sub("N.NNs", new) == DURATION.sub("N.NNs", old):
        return old
    return new


def main(argv: list[str]) -> int:
    check = "--check" in argv
    corpus = real_corpus(argv)
    stale = []
    for doc in DOCS:
        with open(os.path.join(ROOT, doc), encoding="utf-8") as f:
            old = f.read()
        new = generate(doc, corpus)
        if new == old:
            continue
        stale.append(doc)
        if check:
            sys.stdout.writelines(difflib.unified_diff(
                old.splitlines(True), new.splitlines(True), f"a/{doc}", f"b/{doc}"))
        else:
            with open(os.path.join(ROOT, doc), "w", encoding="utf-8") as f:
                f.write(new)
            print(f"regenerated {doc}", file=sys.stderr)
    if check and stale:
        print(f"stale: {', '.join(stale)}; run 'python docs/gen_examples.py'", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
