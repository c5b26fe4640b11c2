"""Answer address -> ``mod`sym+off`` and ``mod`name`` -> address for one
kernel, from dtrace_syms and kallsyms.

Every object section is first placed in the kernel's address space
(:mod:`kmodsyms.build.layout`): from the link addresses that ``kmodsyms build``
recorded (then only the KASLR shift of each load segment is found here), or,
for a file without them, by searching kallsyms.  Each kallsyms line then has
its object, module(s) and size; a loaded module's lines take theirs from its
own .ko when it matches (:mod:`kmodsyms.loadable`), and :meth:`Resolver.refresh`
follows modules loaded and unloaded.

Answering an address: the innermost sized symbol holding it (greatest start;
ties: smaller size, FUNC/OBJECT over NOTYPE, GLOBAL over WEAK over LOCAL,
then name), else the nearest symbol below it, marked unsized, but never
across a module boundary, out of the placed section holding the address, or
past what the kernel says of the region (a module's core, a page for
pseudo-modules); per-cpu offsets and mapping symbols answer no address.
docs/resolver.md states the rules in full.

The index is an :class:`kmodsyms.answer.AnswerTable` of numpy arrays; the
records (:class:`Symbolization`) are made from it by the
:class:`kmodsyms.answer.Answerer` the resolver holds.  :func:`load` hands
the whole state (:meth:`Resolver.state`) to :mod:`kmodsyms.snapshot` to
save, and restores it from there (:meth:`Resolver.restore`), without
placing or indexing, while kallsyms and dtrace_syms stay the same.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .answer import Answerer, AnswerTable, Symbolization, check_address
from .errors import KmodsymsError, StaleError, degraded_warning, forced_warning
from .format.fileformat import CRC_FIELD
from .build.kallsyms import Kallsyms, read_text
from .kernelnames import kernel_spelling
from .live import LIVE_KALLSYMS, ModuleSources, check_live, default_syms_path, module_sources
from .loadable import ModuleStats, is_mapping_symbol, load_modules
from .build.layout import NO, place, saved_placement
from .snapshot import State, open_saved, save
from .format.spans import equal_spans, hash_spans
from .format.symsfile import SymsFile, read_syms

_U64 = np.uint64
_PADDING_PREFIXES = (b"__pfx_", b"__cfi_")
# How far a pseudo-module line ([bpf], [__builtin__ftrace]...) may answer:
# each is at most a page (a trampoline, a program, an instruction slot
# page); 4 KiB, the smallest page of x86_64 and arm64, so never too far.
PAGE_SIZE = 4096

__all__ = ["ModuleChanges", "Resolver", "Symbolization", "load"]


class Resolver:
    """Answers for one kernel: built from a :class:`SymsFile` and a
    :class:`Kallsyms` of the same kernel (see :func:`load`).  ``degraded``:
    why the file is one of no objects, answering from kallsyms alone
    (``stats`` then say ``builtin_modules_known=False``)."""

    def __init__(self, syms: SymsFile, ks: Kallsyms, check_anchors: bool = True,
                 sources: ModuleSources | None = None, degraded: str = ""):
        self.syms = syms
        self.ks = ks
        self.sources = sources or ModuleSources()
        self.degraded = degraded
        self._ko_cache: dict = {}     # files found, .ko read, matches (kept by refresh())
        self._check_anchors = check_anchors
        self._proc_modules_text = _read_optional(self.sources.proc_modules)
        self._names = None            # the name index, made on first use (_name_index)
        placed = place(syms, ks, check_anchors)
        self._placed(placed, placed.core_lines, placed.line_entry, placed.line_section,
                     placed.ambiguous)
        self._load_modules()

    def _placed(self, placed, core_lines, line_entry, line_section, ambiguous) -> None:
        self.placement = placed
        self.stats = placed.stats
        if self.degraded:
            self.stats.builtin_modules_known = False
            self.stats.degraded = self.degraded
        self.core_lines = core_lines
        self.line_entry, self.line_section, self.ambiguous = line_entry, line_section, ambiguous

    def _load_modules(self) -> None:
        """Match the loaded modules with their .ko files, then index."""
        self.loaded = load_modules(self.ks, self.sources, self._ko_cache)
        self.module_stats = self.loaded.stats
        self.module_warnings = self.loaded.warnings
        self.ko_files = self.loaded.files
        self._build_index()

    @classmethod
    def restore(cls, syms: SymsFile, state: State,
                sources: ModuleSources | None = None) -> "Resolver":
        """The resolver a snapshot holds (``state``, checked to match
        ``syms`` and its kallsyms): its arrays are views of the mapped
        snapshot, nothing is placed or indexed again."""
        table = state.table
        self = cls.__new__(cls)
        self.syms = syms
        self.sources = sources or ModuleSources()
        self.degraded = "" if state.stats["builtin_modules_known"] else state.stats["degraded"]
        self._ko_cache, self._check_anchors = {}, True
        self._proc_modules_text = _read_optional(self.sources.proc_modules)
        self._names = None
        self.ks = ks = Kallsyms.from_columns(
            table.text, state.kallsyms_source, table.loaded_module_names, table.line_address,
            table.line_type, table.line_module, table.name_start, table.name_end, state.by_address)
        placed = saved_placement(state.stats, state.vmlinux_extent_start, state.vmlinux_extent_end,
                                 state.vmlinux_extent_section)
        self._placed(placed, np.flatnonzero(ks.module == 0), state.line_entry, state.line_section,
                     state.ambiguous)
        self.by_address, self.sorted_address = state.by_address, state.sorted_address
        self.module_stats = [ModuleStats(*row) for row in state.module_stats]
        self.module_warnings, self.ko_files = state.module_warnings, state.ko_files
        self.answers = Answerer(table)
        return self

    def state(self) -> State:
        """Everything a snapshot of this resolver holds, handed to
        :mod:`kmodsyms.snapshot` (which alone knows its bytes)."""
        syms, placed = self.syms, self.placement
        return State(
            table=self.answers.table, by_address=self.by_address,
            sorted_address=self.sorted_address, line_entry=self.line_entry,
            line_section=self.line_section, vmlinux_extent_start=placed.extent_start,
            vmlinux_extent_end=placed.extent_end, vmlinux_extent_section=placed.extent_section,
            ambiguous=self.ambiguous, stats=dict(self.stats.__dict__),
            module_stats=[tuple(st.__dict__.values()) for st in self.module_stats],
            module_warnings=self.module_warnings, ko_files=self.ko_files,
            source=syms.source, kernel_release=syms.meta_kernel_release,
            build_id=syms.meta_build_id, kallsyms_source=self.ks.source,
            syms_id=(len(syms.data), bytes(syms.data[CRC_FIELD]))
            if self.builtin_modules_known else None)

    # The answer table's columns that callers read off the resolver.
    line_address = property(lambda self: self.answers.table.line_address)
    line_size = property(lambda self: self.answers.table.line_size)
    line_object = property(lambda self: self.answers.table.line_object)
    iv_start = property(lambda self: self.answers.table.iv_start)
    iv_end = property(lambda self: self.answers.table.iv_end)

    @property
    def builtin_modules_known(self) -> bool:
        """False when answering from kallsyms alone (``stats.degraded`` says why)."""
        return self.stats.builtin_modules_known

    def _build_index(self) -> None:
        """The answer table (:class:`AnswerTable`): every line's size,
        object and binding, the sized intervals sorted for innermost-first
        search, and the lines sorted by address for the unsized fallback."""
        ks, syms = self.ks, self.syms
        n = len(ks)
        sym = syms.symbols
        size = np.full(n, NO, dtype=np.int64)
        has_entry = self.line_entry >= 0
        size[has_entry] = sym["size"][self.line_entry[has_entry]].astype(np.int64)
        by_address = ks.by_address()
        self.by_address = by_address
        self.sorted_address = ks.address[by_address]
        # Padding symbols: size is the distance to the function they prefix,
        # the next distinct address above.
        pad = np.flatnonzero(~has_entry & (self.line_section >= 0))
        if len(pad):
            pad = pad[_names_start_with(ks, pad, _PADDING_PREFIXES)]
            nxt = np.searchsorted(self.sorted_address, ks.address[pad], side="right")
            ok = nxt < n
            pad, nxt = pad[ok], nxt[ok]
            # ... if a symbol there is the function it prefixes (a hidden or
            # missing function line must not stretch its padding over it).
            prefixes = np.zeros(len(pad), dtype=bool)
            for k in range(4):   # the few aliases at one address
                todo = np.flatnonzero(~prefixes)
                at = np.minimum(nxt[todo] + k, n - 1)
                todo = todo[self.sorted_address[at] == self.sorted_address[nxt[todo]]]
                at = np.minimum(nxt[todo] + k, n - 1)
                prefixes[todo] = _names_equal(ks, pad[todo], 6, by_address[at])
            pad, nxt = pad[prefixes], nxt[prefixes]
            size[pad] = (self.sorted_address[nxt] - ks.address[pad]).astype(np.int64)
        # Loadable lines: from their module's own .ko (kmodsyms.loadable).
        lm = self.loaded
        from_ko = lm.line_ko >= 0
        size[from_ko] = lm.line_size[from_ko]
        n_objects, n_sections = len(syms.objects), len(syms.sections)
        line_object = np.full(n, NO, dtype=np.int32)
        placed = self.line_section >= 0
        line_object[placed] = syms.sections["object"][self.line_section[placed]]
        line_object[from_ko] = n_objects + lm.line_ko[from_ko]
        # ELF binding: the symbol's own, else read off the type letter.
        letters = ks.type
        binding = np.where((letters >= 65) & (letters <= 90), 1, 0).astype(np.uint8)
        binding[np.isin(letters, np.frombuffer(b"wWvV", dtype=np.uint8))] = 2
        binding[has_entry] = sym["binding"][self.line_entry[has_entry]]
        binding[from_ko] = lm.line_binding[from_ko]
        # Lines that may answer an address: not the per-cpu offsets printed
        # as 'A' (offsets, not addresses), not the mapping symbols of module
        # lines (the kernel's find_kallsyms_symbol() skips them too).
        answerable = letters != ord("A")
        first = np.frombuffer(ks.text, dtype=np.uint8)[ks.name_start]
        maybe = np.flatnonzero((ks.module != 0) & np.isin(first, np.frombuffer(b"$.L", np.uint8)))
        answerable[maybe] = [not is_mapping_symbol(name) for name in ks.names_bytes(maybe)]
        # Address regions (see _regions): placed sections, vmlinux's and
        # the .ko's, and per-line groups outside them.
        in_ko = lm.line_section >= 0
        section = np.where(in_ko, n_sections + lm.line_section, self.line_section)
        extent_start, extent_end, extent_section = self._extents(n_sections, answerable)
        line_region, region_end = self._regions(section, answerable)
        keep = answerable[by_address]
        sized = np.flatnonzero((size > 0) & answerable)
        start = ks.address[sized]
        end = start + size[sized].astype(_U64)
        types = np.zeros(len(sized), dtype=np.int64)
        binds = np.zeros(len(sized), dtype=np.int64)
        e = self.line_entry[sized]
        he = e >= 0
        t = sym["type"][e[he]]
        b = sym["binding"][e[he]]
        types[he] = np.where(t == 0, 0, 1)
        binds[he] = np.select([b == 1, b == 2], [2, 1], 0)
        letters = ks.type[sized[~he]]
        binds[~he] = np.where((letters >= 65) & (letters <= 90), 2, 0)
        ko = lm.line_ko[sized] >= 0
        types[ko] = lm.line_typed[sized[ko]]
        binds[ko] = np.select([lm.line_binding[sized[ko]] == 1, lm.line_binding[sized[ko]] == 2],
                              [2, 1], 0)
        # Preferred last among equal starts: smaller size, typed, stronger
        # binding, then the alphabetically first name.  Lines are nearly in
        # address order already, so sort by start alone and settle the few
        # equal starts (aliases, nested labels) by hand.
        order = np.argsort(start, kind="stable")
        sorted_start = start[order]
        tied = np.flatnonzero(sorted_start[1:] == sorted_start[:-1])
        if len(tied):
            runs = np.split(tied, np.flatnonzero(np.diff(tied) != 1) + 1)
            length = (end - start).tolist()
            types, binds = types.tolist(), binds.tolist()
            for run in runs:
                span = slice(int(run[0]), int(run[-1]) + 2)
                members = order[span].tolist()
                members.sort(key=lambda i: ks.name_bytes(int(sized[i])), reverse=True)
                members.sort(key=lambda i: (-length[i], types[i], binds[i]))
                order[span] = members
        iv_start, iv_end = start[order], end[order]
        n_ko = len(lm.ko_paths)
        self.answers = Answerer(AnswerTable(
            text=ks.text, name_start=ks.name_start, name_end=ks.name_end,
            line_address=ks.address, line_type=ks.type, line_module=ks.module, line_size=size,
            line_object=line_object, line_binding=binding, line_region=line_region,
            answer_address=self.sorted_address[keep], answer_line=by_address[keep],
            iv_start=iv_start, iv_end=iv_end, iv_line=sized[order].astype(np.int32),
            iv_parent=_containers(iv_start, iv_end), region_end=region_end,
            core_ranges=_core_ranges(ks, answerable), extent_start=extent_start,
            extent_end=extent_end, extent_section=extent_section,
            section_object=np.concatenate((syms.sections["object"].astype(np.int64),
                                           n_objects + lm.section_ko.astype(np.int64))),
            object_paths=_ObjectPaths(syms, lm.ko_paths),
            object_modset=np.concatenate((syms.objects["modset"].astype(np.int64),
                                          len(syms.modsets) + np.arange(n_ko))),
            modsets=[syms.modset_names(i) for i in range(len(syms.modsets))]
            + [[name] for name in lm.ko_modules],
            first_ko_object=n_objects, loaded_module_names=ks.module_names,
            builtin_module_names=syms.module_names, candidates=self._candidates(),
            name_index=self._name_index,
            builtin_modules_known=self.stats.builtin_modules_known))

    def _extents(self, n_sections: int, answerable: np.ndarray) -> tuple:
        """Placed sections as address extents, sorted (start, end,
        section): vmlinux's (those inside the core kernel's addresses:
        per-cpu sections placed at their offsets, x86_64's at 0, hold no
        address) and the matched .ko files' (numbered from ``n_sections``
        on)."""
        ks, lm, placed = self.ks, self.loaded, self.placement
        core = ks.address[(ks.module == 0) & answerable]
        lowest = core.min() if len(core) else _U64(0)
        real = placed.extent_start >= lowest
        starts = np.concatenate((placed.extent_start[real], lm.extent_start))
        order = np.argsort(starts, kind="stable")
        return (starts[order],
                np.concatenate((placed.extent_end[real], lm.extent_end))[order],
                np.concatenate((placed.extent_section[real].astype(np.int64),
                                n_sections + lm.extent_section))[order])

    def _candidates(self) -> dict[int, list[list[str]]]:
        """The module lists of each ambiguous line's candidates."""
        syms = self.syms
        return {line: [syms.modset_names(int(syms.symbols["modset"][e])) or ["vmlinux"]
                       for e in entries]
                for line, entries in self.ambiguous.items()}

    def _regions(self, section: np.ndarray, answerable: np.ndarray) -> tuple:
        """Region of every line, so that the unsized fallback never crosses
        one: the placed section holding it (``section``), else a group
        ``-1 - g`` whose last address is ``region_end[g]``, bounded by what
        the kernel says of that part of memory.  Returns (line_region,
        region_end):

        * g = 0, the core kernel: up to its highest symbol, and within
          the table's ``core_ranges`` (:func:`_core_ranges`: the kernel's
          ``is_ksym_addr()``);
        * g = 2m, loadable module m: up to just before the next line of
          anything above its highest line, and, when /proc/modules or sysfs
          gives its core (address, size), within that core (without it,
          the highest module reaches at most a page past its last line);
          g = 2m + 1: its lines outside that core (6.4+ allocates text,
          data and rodata apart), bounded by the next line only;
        * one group per pseudo-module line (``[bpf]``, ``[__builtin__*]``:
          a trampoline, a program, an instruction page, nothing behind them
          says more): up to the next line, at most one page;
        * g = 1: lines that answer no address (per-cpu offsets, mapping
          symbols).
        """
        ks, n = self.ks, len(self.ks)
        names = ks.module_names
        group = 2 * ks.module.astype(np.int64)
        for m, name in enumerate(names):
            core = self.loaded.cores.get(name) if m else None
            if core:
                mine = ks.module == m
                outside = (ks.address < _U64(core[0])) | (ks.address >= _U64(core[0] + core[1]))
                group[mine & outside] = 2 * m + 1
        pseudo = np.flatnonzero(np.isin(ks.module, ks.pseudo_module_ids()))
        group[pseudo] = 2 * len(names) + np.arange(len(pseudo))
        group[~answerable] = 1
        line_region = np.where(section >= 0, section, -1 - group)
        highest = np.zeros(2 * len(names) + len(pseudo), dtype=_U64)
        np.maximum.at(highest, group, ks.address)
        above = np.searchsorted(self.sorted_address, highest, side="right")
        next_line = np.where(above < n, self.sorted_address[np.minimum(above, n - 1)] - _U64(1),
                             _U64(0xFFFFFFFFFFFFFFFF))
        region_end = highest.copy()             # g = 0 (core), g = 1 (no address)
        region_end[2:] = next_line[2:]
        for m, name in enumerate(names):
            core = self.loaded.cores.get(name) if m else None
            if core:
                region_end[2 * m] = min(int(region_end[2 * m]), core[0] + core[1] - 1)
            elif m and above[2 * m] >= n:
                # The highest module, its end unknown (a saved kallsyms
                # without /proc/modules): at most a page, as pseudo-modules.
                region_end[2 * m] = min(int(region_end[2 * m]), int(highest[2 * m]) + PAGE_SIZE - 1)
        page_end = ks.address[pseudo] + _U64(PAGE_SIZE - 1)
        first = 2 * len(names)
        region_end[first:] = np.minimum(region_end[first:], page_end)
        return line_region, region_end

    def extent_of(self, addresses) -> np.ndarray:
        """The placed section (vmlinux's or a .ko's) holding each address, or -1."""
        t = self.answers.table
        addresses = np.asarray(addresses, dtype=_U64)
        if not len(t.extent_start):
            return np.full(addresses.shape, NO, dtype=np.int64)
        i = np.searchsorted(t.extent_start, addresses, side="right") - 1
        ok = i >= 0
        ok[ok] = addresses[ok] < t.extent_end[i[ok]]
        return np.where(ok, t.extent_section[np.maximum(i, 0)], NO)

    # ---------------------------------------------------------------- answers
    def resolve_many(self, addresses) -> tuple[np.ndarray, np.ndarray]:
        """Vectorised core of :meth:`resolve`: for each address, the kallsyms
        line that answers it (-1: none) and whether it is a sized hit."""
        t = self.answers.table
        q = np.asarray(addresses, dtype=_U64)
        j = np.searchsorted(t.iv_start, q, side="right") - 1
        out = np.full(len(q), NO, dtype=np.int64)
        live = j >= 0
        jj = j.copy()
        # Walk out through containers to the innermost interval still
        # holding q (each step goes to an earlier interval, so it ends).
        while len(t.iv_end):
            miss = live & (t.iv_end[np.maximum(jj, 0)] <= q)
            if not miss.any():
                break
            jj[miss] = t.iv_parent[jj[miss]]
            live &= jj >= 0
        sized = live.copy()
        out[sized] = t.iv_line[jj[sized]]
        # Unsized fallback: nearest line at or below, same region as the address.
        rest = np.flatnonzero(~sized)
        if len(rest):
            k = np.searchsorted(t.answer_address, q[rest], side="right") - 1
            ok = k >= 0
            cand = np.where(ok, t.answer_line[np.maximum(k, 0)], NO)
            region_of_q = self.extent_of(q[rest])
            cand_region = t.line_region[np.maximum(cand, 0)]
            # Inside a placed section: the candidate must be in it.  Outside
            # any: the candidate must be outside every placed section too.
            ok &= np.where(region_of_q >= 0, cand_region == region_of_q,
                           (cand_region < 0) & (q[rest] <= t.region_end[np.maximum(-1 - cand_region, 0)]))
            # The core kernel's lines answer only inside its ranges (is_ksym_addr()).
            core = ok & (cand_region == -1)
            if core.any():
                ok[core] = _in_ranges(t.core_ranges, q[rest][core])
            out[rest[ok]] = cand[ok]
        return out, sized

    def resolve(self, address: int) -> Symbolization:
        """Answer one address (see :class:`Symbolization`)."""
        address = check_address(address)
        line, sized = self.resolve_many(np.array([address], dtype=_U64))
        return self.answers.record(address, int(line[0]), bool(sized[0]))

    def record(self, address: int, line: int, sized: bool) -> Symbolization:
        """The record of ``address`` answered by kallsyms ``line`` (-1:
        none), ``sized`` if the line's symbol holds it (see
        :meth:`resolve_many`)."""
        return self.answers.record(address, line, sized)

    def lookup(self, name: str, module: str | None = None, offset: int = 0) -> list[Symbolization]:
        """Every symbol called ``name`` (in ``module`` if given: a built-in
        module, a loadable module, or ``vmlinux`` for core kernel), as the
        records of the address ``offset`` bytes into it."""
        return self.answers.lookup(name, module, offset)

    def modules(self) -> list[str]:
        """Every module name: ``vmlinux``, the built-in modules, the loaded ones."""
        return self.answers.modules()

    def line_modsets(self) -> np.ndarray:
        """Module set of every kallsyms line: an index into the dtrace_syms
        module sets (0, the empty set, is core kernel, also for lines from no
        object), -1 for a loadable or pseudo-module line (see ``ks.module``),
        -2 where the candidates' modules differ (ambiguous)."""
        objects = self.line_object
        modsets = np.zeros(len(self.ks), dtype=np.int64)
        has = (objects >= 0) & (objects < len(self.syms.objects))
        modsets[has] = self.syms.objects["modset"][objects[has]]
        modsets[self.ks.module != 0] = -1
        for line, entries in self.ambiguous.items():
            sets = {int(self.syms.symbols["modset"][e]) for e in entries}
            modsets[line] = sets.pop() if len(sets) == 1 else -2
        return modsets

    # ------------------------------------------------------------ live changes
    def refresh(self) -> "ModuleChanges":
        """Follow modules loaded or unloaded since this resolver was made.

        ``/proc/modules`` (``sources.proc_modules``; tiny) is compared with
        what was read last, ignoring use counts: unchanged, nothing else is
        read.  Otherwise kallsyms is read again; when its core lines are the
        same (they come first, and only a reboot changes them) the
        placement of vmlinux is kept and only the modules are matched and
        indexed again (.ko files already read are not read again).  Without
        ``proc_modules`` the kallsyms text itself is compared.  Returns what
        changed (false when nothing did).  Needs kallsyms read from a path
        (``load()``'s), as it reads that path again."""
        modules_text = _read_optional(self.sources.proc_modules)
        if self.sources.proc_modules is not None:
            if _module_list(modules_text) == _module_list(self._proc_modules_text):
                return ModuleChanges()
            text = read_text(self.ks.source)
        else:
            text = read_text(self.ks.source)
            if text == self.ks.text:
                return ModuleChanges()
        old = self.ks
        ks = Kallsyms(text, old.source)
        self._proc_modules_text = modules_text
        changes = _module_changes(old, ks)
        ncore = len(self.core_lines)
        core_end = int(old.name_end[ncore - 1]) if ncore else 0
        same_core = (ncore and int((ks.module == 0).sum()) == ncore
                     and bool((ks.module[:ncore] == 0).all())
                     and bool((old.module[:ncore] == 0).all())
                     and ks.text[:core_end] == old.text[:core_end])
        self.ks = ks
        self._names = None     # the name index is of the old lines
        if same_core:
            rest = len(ks) - ncore
            pad = np.full(rest, NO, dtype=self.line_entry.dtype)
            self.line_entry = np.concatenate((self.line_entry[:ncore], pad))
            self.line_section = np.concatenate((self.line_section[:ncore],
                                                pad.astype(self.line_section.dtype)))
        else:
            placed = place(self.syms, ks, self._check_anchors)
            self._placed(placed, placed.core_lines, placed.line_entry, placed.line_section,
                         placed.ambiguous)
        self._load_modules()
        return changes

    # --------------------------------------------------------------- reverse
    def _name_index(self) -> tuple[np.ndarray, np.ndarray]:
        """The answer table's ``name_index``, made on first use: hashing
        every name costs a full load ~70 ms, and only lookups need it."""
        if self._names is None:
            ks = self.ks
            hashes = hash_spans(ks.text, ks.name_start, ks.name_end - ks.name_start)
            order = np.argsort(hashes, kind="stable")
            self._names = hashes[order], order.astype(np.int32)
        return self._names

    def symbols(self, module: str) -> list[Symbolization]:
        """Every kallsyms symbol of ``module`` (built-in, loaded, or
        ``vmlinux`` for core kernel), in address order."""
        module = kernel_spelling(module)
        ks = self.ks
        modsets = self.line_modsets()[self.by_address]
        loaded = ks.module[self.by_address]
        if module == "vmlinux":
            keep = (modsets == 0) & (loaded == 0)
        elif module in self.syms.module_names:
            m = self.syms.module_names.index(module)
            sets = [i for i, members in enumerate(self.syms.modset_modules) if m in members]
            keep = np.isin(modsets, sets) & (loaded == 0)
        elif module in ks.module_names[1:]:
            keep = loaded == ks.module_names.index(module)
        else:
            return []
        return [self.record(int(ks.address[line]), line, bool(self.line_size[line] > 0))
                for line in self.by_address[keep].tolist()]

    def kallmodsyms_lines(self):
        """Lines as UEK's /proc/kallmodsyms printed them:
        ``%016x %x %c %s`` then ``\\t[mod]`` (several: ``\\t[a] [b]``);
        core kernel symbols have no suffix."""
        ks = self.ks
        modsets = self.line_modsets()
        suffix = ["" if not mods else "\t" + " ".join(f"[{m}]" for m in mods)
                  for mods in (self.syms.modset_names(i) for i in range(len(self.syms.modsets)))]
        loadable = [""] + [f"\t[{m}]" for m in ks.module_names[1:]]
        sizes = np.maximum(self.line_size, 0).tolist()
        for line, (addr, letter, modset, mod) in enumerate(zip(
                ks.address.tolist(), ks.type.tolist(), modsets.tolist(), ks.module.tolist())):
            tail = loadable[mod] if mod else (suffix[modset] if modset >= 0 else "")
            yield f"{addr:016x} {sizes[line]:x} {chr(letter)} {ks.name(line)}{tail}"


class _ObjectPaths:
    """The answer table's ``object_paths``: vmlinux's objects read off
    dtrace_syms only when an answer names one (all of them cost a full
    load ~6 ms), then the matched .ko files'."""

    def __init__(self, syms: SymsFile, ko_paths: list[str]):
        self.syms, self.ko_paths, self.first_ko = syms, ko_paths, len(syms.objects)

    def __len__(self) -> int:
        return self.first_ko + len(self.ko_paths)

    def __getitem__(self, obj: int) -> str:
        if obj >= self.first_ko:
            return self.ko_paths[obj - self.first_ko]
        return self.syms.object_path(obj)


@dataclass(frozen=True)
class ModuleChanges:
    """What :meth:`Resolver.refresh` found: modules ``loaded``, ``unloaded``
    and ``reloaded`` (same name, other lines or addresses), pseudo-modules
    included, in kallsyms order.  False when nothing changed."""

    loaded: tuple[str, ...] = ()
    unloaded: tuple[str, ...] = ()
    reloaded: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.loaded or self.unloaded or self.reloaded)


def _module_changes(old: Kallsyms, new: Kallsyms) -> ModuleChanges:
    def lines(ks: Kallsyms) -> dict[str, bytes]:
        out = {}
        for m, name in enumerate(ks.module_names[1:], 1):
            mine = np.flatnonzero(ks.module == m)
            out[name] = ks.address[mine].tobytes() + b"\0".join(ks.names_bytes(mine))
        return out
    before, after = lines(old), lines(new)
    return ModuleChanges(tuple(m for m in after if m not in before),
                         tuple(m for m in before if m not in after),
                         tuple(m for m in after if m in before and after[m] != before[m]))


_CORE_MARKERS = (b"_etext", b"_sinittext", b"_einittext", b"_end")


def _core_ranges(ks: Kallsyms, answerable: np.ndarray) -> np.ndarray:
    """Where the core kernel's lines may answer an address, as the kernel's
    ``is_ksym_addr()`` says, flattened ``[start, last, start, last...]``:
    with every symbol (CONFIG_KALLSYMS_ALL: ``_end`` is a line) from its
    lowest line to its highest, ``_end``; with a text-only kallsyms (no
    ``_end`` line, and no line above ``_etext`` outside
    ``_sinittext``..``_einittext``) only up to ``_etext`` and
    ``_sinittext``..``_einittext``."""
    core = np.flatnonzero((ks.module == 0) & answerable)
    if not len(core):
        return np.zeros(0, dtype=_U64)
    address = ks.address[core]
    lowest, highest = int(address.min()), int(address.max())
    length = ks.name_end[core] - ks.name_start[core]
    first = np.frombuffer(ks.text, dtype=np.uint8)[ks.name_start[core]]
    maybe = core[(first == ord("_")) & (length >= 4) & (length <= 10)]
    at = {name: int(ks.address[line]) for line, name in zip(maybe.tolist(), ks.names_bytes(maybe))
          if name in _CORE_MARKERS}
    etext = at.get(b"_etext")
    if etext is None or b"_end" in at:
        return np.array([lowest, highest], dtype=_U64)
    sinit, einit = at.get(b"_sinittext"), at.get(b"_einittext")
    beyond = address > _U64(etext)
    if sinit is not None and einit is not None:
        beyond &= (address < _U64(sinit)) | (address > _U64(einit))
    if beyond.any():
        return np.array([lowest, highest], dtype=_U64)
    ranges = [lowest, etext] + ([sinit, einit] if sinit is not None and einit is not None else [])
    return np.array(ranges, dtype=_U64)


def _in_ranges(ranges: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Whether each of ``q`` lies in one of the inclusive ``ranges``
    (flattened, sorted)."""
    i = np.searchsorted(ranges[0::2], q, side="right") - 1
    return (i >= 0) & (q <= ranges[1::2][np.maximum(i, 0)])


def _read_optional(path: str | None) -> bytes | None:
    """A small kernel file (/proc/modules), or None when absent or unreadable."""
    if path is None:
        return None
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def _module_list(text: bytes | None):
    """/proc/modules without its use counts and users (which change
    without any module coming or going): name, size, state, address."""
    if text is None:
        return None
    return [(f[0], f[1], f[4:5], f[5:6]) for f in (line.split() for line in text.splitlines()) if f]


def _names_start_with(ks: Kallsyms, lines: np.ndarray, prefixes: tuple[bytes, ...]) -> np.ndarray:
    """Whether each line's name starts with one of ``prefixes`` (vectorised)."""
    buf = np.frombuffer(ks.text, dtype=np.uint8)
    length = ks.name_end[lines] - ks.name_start[lines]
    hit = np.zeros(len(lines), dtype=bool)
    for prefix in prefixes:
        ok = length >= len(prefix)
        for k, byte in enumerate(prefix):
            ok &= buf[np.minimum(ks.name_start[lines] + k, len(buf) - 1)] == byte
        hit |= ok
    return hit


def _names_equal(ks: Kallsyms, lines: np.ndarray, skip: int, others: np.ndarray) -> np.ndarray:
    """Whether the name of each of ``lines`` without its first ``skip`` bytes
    equals the name of the matching line of ``others`` (vectorised)."""
    start = ks.name_start[lines] + skip
    other_start = ks.name_start[others]
    return equal_spans(ks.text, start, ks.text, other_start, ks.name_end[lines] - start,
                       ks.name_end[others] - other_start)


def _containers(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """For intervals sorted by start (preferred last among equal starts), the
    index of the nearest earlier interval containing each one, or -1.  Only
    runs of overlapping intervals need the stack walk."""
    n = len(start)
    parent = np.full(n, NO, dtype=np.int32)
    if n == 0:
        return parent
    reach = np.maximum.accumulate(end)
    nested = np.zeros(n, dtype=bool)
    nested[1:] = start[1:] < reach[:-1]
    for i in np.flatnonzero(nested).tolist():
        # Walk back through candidates: the previous interval, then its
        # containers, until one holds interval i.
        j = i - 1
        while j >= 0 and end[j] < end[i]:
            j = parent[j]
        parent[i] = j
    return parent


# ------------------------------------------------------------------- loading
def load(syms: str | SymsFile | None = None, kallsyms: str | Kallsyms | None = None,
         force: bool = False, cache: bool = True, fallback: bool = False,
         warn=None, modules_dir: str | None = None, sysfs_root: str | None = None,
         proc_modules: str | None = None) -> Resolver:
    """Load dtrace_syms (default ``/lib/modules/$(uname -r)/kernel/dtrace_syms``)
    and kallsyms (default ``/proc/kallsyms``) and place every object.

    With the live ``/proc/kallsyms``, the file's kernel release and build-id
    must be the running kernel's; with a kallsyms file given by path the
    anchor check guards instead.  Raises :class:`KmodsymsError` (or its
    :class:`StaleError`) with a one-line message on bad or mismatched input.
    ``force`` uses a mismatched file anyway, but never silently: each load
    calls ``warn(message)`` (default: :func:`warnings.warn`) saying why.

    ``fallback`` (only when ``syms`` is not given): if the default file is
    missing, unreadable, corrupt or for another kernel, answer from
    kallsyms alone, where built-in modules show as ``vmlinux``; ``warn`` is
    called once with why, and the resolver's ``stats`` say
    ``builtin_modules_known=False`` and the reason (``degraded``).

    Loaded modules are matched with their .ko files under ``modules_dir``
    (:mod:`kmodsyms.loadable`), helped by what the kernel says in
    ``sysfs_root`` (``/sys``) and ``proc_modules`` (``/proc/modules``).
    With the live kallsyms these default to the running kernel's
    (``/lib/modules/$(uname -r)``, ``/sys``, ``/proc/modules``); with a
    kallsyms file, only what is given is used (no .ko without
    ``modules_dir``).

    With ``cache`` (and both given as paths), the loaded resolver is saved
    as a snapshot (:mod:`kmodsyms.snapshot`, not under ``force``), and a
    later load of the very same files restores it instead of placing again.
    """
    request = _request(syms, kallsyms, force, cache, fallback, warn, modules_dir, sysfs_root,
                       proc_modules)
    # kallsyms is read once: to match a snapshot, and to load if none does.
    # Its faults are never the fallback's to hide, so it is read first.
    text = read_text(request.kallsyms_path) if request.kallsyms_path is not None else None
    try:
        restored = _restore(request, text) if request.snapshots else None
        if restored is not None:
            return restored
        if not isinstance(syms, SymsFile):
            syms = read_syms(request.syms_path)
        checked = not request.live or _check_live(syms.source, syms.meta_kernel_release,
                                                  syms.meta_build_id, force, request.warn)
    except KmodsymsError as e:
        if not request.may_fall_back:
            raise
        return _load_kallsyms_only(request, _kallsyms(kallsyms, text, request.kallsyms_path),
                                   str(e))
    return _load_full(request, syms, _kallsyms(kallsyms, text, request.kallsyms_path), checked)


@dataclass(frozen=True)
class _Request:
    """What one :func:`load` reads and may do, its defaults filled in."""

    syms_path: str | None         # None: a SymsFile was given
    kallsyms_path: str | None     # None: a Kallsyms was given
    live: bool                    # the running kernel's /proc/kallsyms
    sources: ModuleSources
    may_fall_back: bool           # to kallsyms alone (only for the default file)
    snapshots: bool               # restore and save (both given as paths, cache on)
    force: bool
    warn: Callable[[str], None]


def _request(syms, kallsyms, force: bool, cache: bool, fallback: bool, warn,
             modules_dir: str | None, sysfs_root: str | None,
             proc_modules: str | None) -> _Request:
    """:func:`load`'s defaults: the running kernel's files where none is given."""
    syms_path = None if isinstance(syms, SymsFile) else syms or default_syms_path()
    kallsyms_path = None if isinstance(kallsyms, Kallsyms) else kallsyms or LIVE_KALLSYMS
    live = kallsyms_path == LIVE_KALLSYMS
    return _Request(syms_path, kallsyms_path, live,
                    module_sources(live, modules_dir, sysfs_root, proc_modules),
                    may_fall_back=fallback and syms is None,   # a file the caller names must be used
                    snapshots=cache and syms_path is not None and kallsyms_path is not None,
                    force=force, warn=warn or _warn)


def _restore(request: _Request, text: bytes) -> Resolver | None:
    """The resolver a snapshot of these very inputs holds, or None."""
    saved = open_saved(request.syms_path, request.kallsyms_path, text, request.sources)
    if saved is None:
        return None
    state = saved.state(numpy=True)
    if not state.stats["builtin_modules_known"]:   # made from kallsyms alone, the file missing
        if not request.may_fall_back:
            return None
        request.warn(degraded_warning(state.kallsyms_source, state.stats["degraded"]))
        return Resolver.restore(_no_syms(), state, request.sources)
    if request.live:
        _check_live(state.source, state.kernel_release, state.build_id, request.force,
                    request.warn)
    syms = read_syms(request.syms_path, verify=False)
    # The file read must be the one the snapshot was checked against.
    if (len(syms.data), bytes(syms.data[CRC_FIELD])) != state.syms_id:
        return None
    return Resolver.restore(syms, state, request.sources)


def _load_full(request: _Request, syms: SymsFile, ks: Kallsyms, checked: bool) -> Resolver:
    """Place and index (what a snapshot saves doing), then save a checked
    load as a snapshot.  ``checked``: the file was not forced over another
    kernel's (then one warning, already given, is enough)."""
    if not checked:
        return Resolver(syms, ks, check_anchors=False, sources=request.sources)
    try:
        resolver = Resolver(syms, ks, check_anchors=True, sources=request.sources)
    except StaleError as e:
        if request.force:
            request.warn(forced_warning(e))
            return Resolver(syms, ks, check_anchors=False, sources=request.sources)
        if not request.may_fall_back:
            raise
        return _load_kallsyms_only(request, ks, str(e))
    if request.snapshots and not request.force:
        save(resolver, request.syms_path, request.kallsyms_path)
    return resolver


def _load_kallsyms_only(request: _Request, ks: Kallsyms, why: str) -> Resolver:
    """The degraded resolver: kallsyms alone (core symbols, loaded and
    pseudo-modules), every other symbol ``vmlinux``, unsized.  Saved as a
    snapshot when the file is missing, not stale: that answer holds until
    the file appears."""
    request.warn(degraded_warning(ks.source, why))
    resolver = Resolver(_no_syms(), ks, check_anchors=False, sources=request.sources,
                        degraded=why)
    if request.snapshots and not os.path.exists(request.syms_path):
        save(resolver, request.syms_path, request.kallsyms_path)
    return resolver


def _warn(message: str) -> None:
    """:func:`warnings.warn`, pointing at the code that called :func:`load`
    (the first caller outside this package), whichever step warns."""
    import sys
    import warnings
    level, frame = 2, sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__", "").split(".")[0] == "kmodsyms":
        level, frame = level + 1, frame.f_back
    warnings.warn(message, stacklevel=level)


def _kallsyms(kallsyms, text: bytes | None, path: str | None) -> Kallsyms:
    return kallsyms if isinstance(kallsyms, Kallsyms) else Kallsyms(text, path)


def _check_live(source: str, release: str, build_id: str, force: bool, warn) -> bool:
    """Whether the file is the running kernel's.  If not, raise, but under
    ``force`` warn instead (on every load)."""
    try:
        check_live(source, release, build_id)
        return True
    except StaleError as e:
        if not force:
            raise
        warn(forced_warning(e))
        return False


def _no_syms() -> SymsFile:
    """A dtrace_syms with no objects, no symbols and no modules."""
    from .format.symsfile import MODSET_DTYPE, TABLES, Meta, StringTable, encode
    tables = {name: np.zeros(0, dtype) for name, dtype in TABLES[1:]}
    tables["modsets"] = np.zeros(1, MODSET_DTYPE)   # module set 0: core kernel
    return SymsFile(encode(Meta(), StringTable(), tables), "(no dtrace_syms)")
