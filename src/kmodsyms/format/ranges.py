"""The kernel's ``modules.builtin.ranges`` (CONFIG_BUILTIN_MODULE_RANGES):
written from a dtrace_syms file's own link layout, and read back.

The format is the one ``scripts/generate_builtin_ranges.awk`` writes, one
record a line::

    .text 00000000-00000000 = _text        an anchor: the base of what follows
    .text 0000b720-0000bfd9 rapl           [base+0xb720, base+0xbfd9) is rapl's
    .text 000ff100-000ff1c0 libphy fwnode_mdio   an object shared by two modules

Offsets are 8 hex digits or more, ranges half open.  An anchor line
``SECT OFF-OFF = SYM`` says the symbol SYM (a kallsyms name) lies OFF
bytes past the base of the ranges after it, so a reader finds the base in
the running kernel (KASLR) from SYM's line.  Both of the file's real
readers, dtrace-utils (``libdtrace/dt_module.c``, ``dt_kasstate_modname()``)
and the kernel's own ``scripts/verify_builtin_ranges.awk``, walk the file
forward beside kallsyms (or System.map), in address order, with one
running base that each anchor line resets; neither reads the first
column.  docs/dtrace-utils.md says how the kernel's file and this one
fare under dtrace's reading.

**Writing** (:func:`plan` and :func:`format_ranges`, ``kmodsyms ranges``).
Every placed, allocated, nonempty object section of the file, in address
order, at or above the lowest segment holding code (x86_64's per-cpu
sections at 0 hold offsets, which kallsyms prints as ``A`` lines and
dtrace drops).  A **run** is a maximal sequence of them whose objects have
one module set, not empty: the kernel's one line per run of a module's
objects; a section of another set, the core kernel's included, ends it.
The file is shaped for dtrace's reading, which differs from the kernel
verifier's in two ways (dt_module.c of dtrace-utils ``devel`` 8a1264bf,
``dt_kasstate_modname()``, lines 1129-1181):

* a line at a range's **end** is in no range, and does not move the
  reader on (line 1159, ``while (addr > state->mod_eaddr)``, then line
  1177, ``addr < state->mod_eaddr``): the first line of a run that begins
  where the one before it ends would be the core kernel's.  So such a run
  is written a byte short, unless a symbol of its own begins on that byte:
  no end can then serve both lines (:attr:`Plan.conflicts`).
* the line that makes the reader take an anchor line is answered by no
  module, nor is any line after it up to the anchor's own name (line
  1173 returns at once; lines 1146-1148 wait for the name): a file whose
  sections each have an anchor loses a line wherever a section's first
  module line follows the last one of the section before it, and all the
  rest of the file where the anchor's name never comes (a text-only
  kallsyms lists no data symbol).  So there is **one anchor**, before the
  first run: the image moves as one piece under KASLR (docs/resolver.md
  R36; x86_64's per-cpu segment, left out above, does not move).  It is
  the latest symbol at or before the first run's start, in its segment, of
  a name that is unique in the file and that dtrace can read whole
  (``%[A-Za-z0-9_]``, line 1170), with another symbol before it (the line
  that takes the anchor line), and the only one at the run's start if it
  is there; a function, with a function before it, if there is one (both
  then in every kallsyms, text-only ones too).

Every line is named by the section the anchor lies in (both real readers
skip the first column; one that takes a base by section name reads this
file as they do), and the offsets are from the anchor (``SECT
00000000-00000000 = SYM``).

The rule is here, not in libkmodsyms: the file is made at build time
from the dtrace_syms file alone, at link addresses, with no kallsyms to
load against (the library places a file only against one), and its runs
are the kernel's (any module set's sections in address order, broken by
any other's), not ``kms_module_ranges()``'s per-module extents (R50).

**Reading** (:func:`parse`, :func:`resolve`): the lines as records, and
their ranges at absolute addresses as both real readers place them (one
running base; a range whose end is not above its start covers nothing).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from kmodsyms.errors import KmodsymsError, shown
from kmodsyms.format.fileformat import NO_ADDRESS

# ELF sh_flags (the sections table keeps the low 32 bits) and st_type
_SHF_ALLOC, _SHF_EXECINSTR = 0x2, 0x4
_STT_FUNC = 2
# What dt_kasstate_modname() reads of an anchor's name: sscanf's %[A-Za-z0-9_]
ANCHOR_NAME = re.compile(r"[A-Za-z0-9_]+\Z")


@dataclass(frozen=True)
class Run:
    """A run of one module set's object sections, at link addresses:
    ``[start, end)`` as written (``end`` a byte short of ``true_end`` where
    the next run begins at ``true_end``)."""

    start: int
    end: int
    true_end: int
    modules: tuple[str, ...]


@dataclass
class Group:
    """Runs after their anchor line."""

    section: str           # the section the anchor lies in: every line's first column
    anchor: str            # its name
    anchor_address: int    # its link address: the base of the group's offsets
    runs: list[Run] = field(default_factory=list)


@dataclass
class Plan:
    """What ``kmodsyms ranges`` writes, and what it could not shape for
    dtrace's reading."""

    groups: list[Group]
    # runs whose last byte is a symbol of theirs where the next run begins
    # on the byte after: that run's first line dtrace files under vmlinux
    conflicts: list[Run] = field(default_factory=list)

    @property
    def runs(self) -> list[Run]:
        return [r for g in self.groups for r in g.runs]

    def summary(self) -> dict:
        return {"sections": len(self.groups), "ranges": len(self.runs),
                "modules": len({m for r in self.runs for m in r.modules}),
                "shortened": sum(r.end != r.true_end for r in self.runs),
                "conflicts": len(self.conflicts)}


# ------------------------------------------------------------------ writing
def _extents(syms):
    """(start, end, modset, section index) of every placed, allocated,
    nonempty object section at or above the lowest segment holding code,
    in address order."""
    sec = syms.sections
    placed = (sec["address"] != NO_ADDRESS) & (sec["size"] > 0) & ((sec["flags"] & _SHF_ALLOC) != 0)
    idx = np.flatnonzero(placed)
    start = sec["address"][idx].astype(np.uint64)
    code = (sec["flags"][idx] & _SHF_EXECINSTR) != 0
    low = min((int(s) for s, e in syms.segments.tolist()
               if (code & (start >= s) & (start < e)).any()), default=0)
    keep = start >= np.uint64(low)
    idx, start = idx[keep], start[keep]
    order = np.lexsort((idx, start))
    idx, start = idx[order], start[order]
    end = start + sec["size"][idx]
    modset = syms.objects["modset"][sec["object"][idx]]
    return start.tolist(), end.tolist(), modset.tolist(), idx.tolist()


def _runs(syms) -> list[Run]:
    runs: list[Run] = []
    current = None     # [start, end, modset]
    for s, e, m, _i in zip(*_extents(syms)):
        if current and m == current[2]:
            current[1] = max(current[1], e)
            continue
        if current and current[2]:
            runs.append(Run(current[0], current[1], current[1], tuple(syms.modset_names(current[2]))))
        current = [s, e, m]
    if current and current[2]:
        runs.append(Run(current[0], current[1], current[1], tuple(syms.modset_names(current[2]))))
    return runs


@dataclass
class _Lines:
    """The kallsyms lines the file knows where they are (its placed
    symbols and vmlinux_symbols), at link addresses, ascending."""

    address: np.ndarray
    name: list[str]
    modset: np.ndarray       # -1 for vmlinux_symbols (core lines)
    func: np.ndarray         # a function in code
    section: list[str]
    unique: np.ndarray       # its name is the file's only one

    @classmethod
    def of(cls, syms) -> "_Lines":
        sec = syms.sections
        sym = syms.symbols
        placed = sec["address"][sym["section"]] != NO_ADDRESS
        at = np.flatnonzero(placed)
        addr = sec["address"][sym["section"][at]] + sym["value"][at]
        func = (sym["type"][at] == _STT_FUNC) & ((sec["flags"][sym["section"][at]] & _SHF_EXECINSTR) != 0)
        vs = syms.vmlinux_symbols
        names = [syms.string(int(o)) for o in sym["name"][at].tolist()] + \
            [syms.string(int(o)) for o in vs["name"].tolist()]
        every = [syms.string(int(o)) for o in sym["name"].tolist()] + names[len(at):]
        counts: dict[str, int] = {}
        for n in every:
            counts[n] = counts.get(n, 0) + 1
        address = np.concatenate([addr.astype(np.uint64), vs["address"].astype(np.uint64)])
        modset = np.concatenate([sym["modset"][at].astype(np.int64), np.full(len(vs), -1)])
        # a vmlinux_symbols entry (objtool's __pfx_ padding, mostly) is in
        # the placed section holding its address, if one does
        held = np.flatnonzero(sec["address"] != NO_ADDRESS)
        held = held[np.argsort(sec["address"][held], kind="stable")]
        k = np.searchsorted(sec["address"][held], vs["address"], side="right") - 1
        k = np.where((k >= 0) & (vs["address"] < sec["address"][held[np.maximum(k, 0)]] +
                                 sec["size"][held[np.maximum(k, 0)]]), held[np.maximum(k, 0)], -1)
        func = np.concatenate([func, (k >= 0) & ((sec["flags"][k] & _SHF_EXECINSTR) != 0)])
        section = [syms.section_name(int(s)) for s in sym["section"][at].tolist()] + \
            [syms.section_name(int(j)) if j >= 0 else "" for j in k.tolist()]
        order = np.argsort(address, kind="stable")
        return cls(address[order], [names[i] for i in order.tolist()], modset[order], func[order],
                   [section[i] for i in order.tolist()],
                   np.array([counts[names[i]] == 1 for i in order.tolist()], dtype=bool))

    def between(self, lo: int, hi: int) -> range:
        """Indices of the lines at addresses in ``[lo, hi)``."""
        a = np.searchsorted(self.address, np.uint64(lo), side="left")
        b = np.searchsorted(self.address, np.uint64(hi), side="left")
        return range(int(a), int(b))


def _anchor(lines: _Lines, seg_start: int, first: int, functions: bool):
    """The anchor for ranges whose first starts at ``first``: the index in
    ``lines`` of the latest symbol in ``[seg_start, first]`` of a unique name
    that dtrace can read, after another line (which dtrace's reading of the
    anchor line costs its module), and the only one at ``first`` if it is
    there; with ``functions``, a function with a function before it (both
    then in every kallsyms, text-only ones too).  None if there is none."""
    seen = lines.between(seg_start, first + 1)
    lowest = None
    for i in seen:
        if not functions or lines.func[i]:
            lowest = int(lines.address[i])
            break
    at_first = len(lines.between(first, first + 1))
    for i in reversed(seen):
        a = int(lines.address[i])
        if lowest is None or a <= lowest:
            return None
        if (lines.func[i] or not functions) and lines.unique[i] and \
                ANCHOR_NAME.match(lines.name[i]) and (a < first or at_first == 1):
            return i
    return None


def plan(syms) -> Plan:
    """The ranges of a dtrace_syms file with a link layout, placed by one
    anchor and shaped for dtrace's reading (module docstring)."""
    if not syms.has_layout:
        raise KmodsymsError(f"{syms.source} has no link layout (built with --no-layout, or from a "
                            "tree without vmlinux and System.map): rebuild it with 'kmodsyms build'")
    runs = _runs(syms)
    lines = _Lines.of(syms)
    out = Plan([])
    # A run that ends where the next begins: a byte short, unless a symbol
    # of its own modules starts on that byte.
    shaped = []
    for k, r in enumerate(runs):
        nxt = runs[k + 1] if k + 1 < len(runs) else None
        if nxt is not None and nxt.start == r.true_end:
            last = lines.between(r.true_end - 1, r.true_end)
            if any(lines.modset[i] >= 0 and syms.modset_names(int(lines.modset[i])) == list(r.modules)
                   for i in last):
                out.conflicts.append(r)
            else:
                r = Run(r.start, r.true_end - 1, r.true_end, r.modules)
        shaped.append(r)
    if not shaped:
        return out
    first = shaped[0].start
    seg_start = max((s for s, e in syms.segments.tolist() if s <= first < e), default=first)
    i = _anchor(lines, seg_start, first, True)
    if i is None:
        i = _anchor(lines, seg_start, first, False)
    if i is None:
        raise KmodsymsError(f"{syms.source}: no symbol at or before the first built-in module's "
                            f"code ({first:#x}) can anchor the ranges for dtrace's reading")
    out.groups.append(Group(lines.section[i] or ".text", lines.name[i], int(lines.address[i]), shaped))
    return out


def format_ranges(p: Plan) -> str:
    """The file's text, as generate_builtin_ranges.awk prints its records."""
    out = []
    for g in p.groups:
        out.append(f"{g.section} {0:08x}-{0:08x} = {g.anchor}\n")
        for r in g.runs:
            out.append(f"{g.section} {r.start - g.anchor_address:08x}-{r.end - g.anchor_address:08x} "
                       f"{' '.join(r.modules)}\n")
    return "".join(out)


def to_json(p: Plan) -> dict:
    """The plan as ``kmodsyms ranges --json`` prints it (link addresses)."""
    def run(r: Run) -> dict:
        return {"start": f"{r.start:#x}", "end": f"{r.end:#x}", "object_end": f"{r.true_end:#x}",
                "modules": list(r.modules)}
    return {**p.summary(),
            "anchors": [{"section": g.section, "symbol": g.anchor, "address": f"{g.anchor_address:#x}",
                         "ranges": [run(r) for r in g.runs]} for g in p.groups],
            "conflicts": [run(r) for r in p.conflicts]}


# ------------------------------------------------------------------ reading
@dataclass(frozen=True)
class Record:
    """One line: an anchor (``symbol`` set, ``modules`` empty) or a range."""

    line: int              # 1-based
    section: str
    start: int             # offset
    end: int
    modules: tuple[str, ...] = ()
    symbol: str = ""


@dataclass(frozen=True)
class Range:
    """A range placed at absolute addresses (the base its anchor gave)."""

    start: int
    end: int
    modules: tuple[str, ...]
    section: str
    line: int


def parse(text: str, source: str = "modules.builtin.ranges") -> list[Record]:
    """The records of a modules.builtin.ranges text, in file order."""
    out = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        f = raw.split()
        if not f:
            continue
        lo, dash, hi = f[1].partition("-") if len(f) > 1 else ("", "", "")
        try:
            start, end = int(lo, 16), int(hi, 16)
        except ValueError:
            start = end = -1
        if len(f) < 3 or not dash or start < 0 or (f[2] == "=" and len(f) != 4):
            raise KmodsymsError(f"{source}:{lineno}: expected 'SECTION START-END MODULE...' or "
                                f"'SECTION OFF-OFF = SYMBOL': '{shown(raw[:80])}'")
        if f[2] == "=":
            out.append(Record(lineno, f[0], start, end, symbol=f[3]))
        else:
            out.append(Record(lineno, f[0], start, end, tuple(f[2:])))
    return out


def resolve(records: list[Record], address_of) -> list[Range]:
    """The ranges at absolute addresses: each anchor's base is
    ``address_of(symbol) - offset`` (``address_of`` gives None for a name
    it does not have: an error); a range takes the base of the last anchor
    before it.  Ranges that cover nothing (end not above start) are left
    out."""
    base, out = None, []
    for r in records:
        if r.symbol:
            at = address_of(r.symbol)
            if at is None:
                raise KmodsymsError(f"line {r.line}: anchor {r.symbol} is not a symbol of this kernel")
            base = at - r.start
        elif base is None:
            raise KmodsymsError(f"line {r.line}: a range before any anchor line")
        elif r.end > r.start:
            out.append(Range(base + r.start, base + r.end, r.modules, r.section, r.line))
    return out
