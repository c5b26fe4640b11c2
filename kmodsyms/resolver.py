"""Answer address -> ``mod`sym+off`` and ``mod`name`` -> address for one
kernel, from dtrace_syms and kallsyms.

Every object section is first placed in the kernel's address space
(:mod:`kmodsyms.placement`): from the link addresses that ``kmodsyms build``
recorded (then only the KASLR shift of each load segment is found here), or,
for a file without them, by searching kallsyms.  Each kallsyms line then has
its object, module(s) and size.

Answering an address: the innermost sized symbol holding it (greatest start;
ties: smaller size, FUNC/OBJECT over NOTYPE, GLOBAL over WEAK over LOCAL,
then name), else the nearest symbol below it, marked unsized, but never
across a module boundary or out of the placed section holding the address.
docs/resolver.md states the rules in full.

:func:`load` saves what it built as a snapshot (:mod:`kmodsyms.snapshot`)
and restores it, without placing or indexing, while kallsyms and
dtrace_syms stay the same.
"""

from __future__ import annotations

import os

import numpy as np

from .answer import Answers, Symbolization, check_address
from .errors import KmodsymsError, StaleError
from .frontend import degraded_warning, forced_warning
from .kallsyms import Kallsyms, read_text
from .live import LIVE_KALLSYMS, check_live, default_syms_path
from .placement import NO, place, saved_placement
from .spans import equal_spans, hash_spans
from .fileformat import CRC_FIELD
from .symsfile import SymsFile, read_syms
from .thick import kernel_spelling

_U64 = np.uint64
_PADDING_PREFIXES = (b"__pfx_", b"__cfi_")

__all__ = ["Resolver", "Symbolization", "load"]


class Resolver(Answers):
    """Answers for one kernel: built from a :class:`SymsFile` and a
    :class:`Kallsyms` of the same kernel (see :func:`load`)."""

    def __init__(self, syms: SymsFile, ks: Kallsyms, check_anchors: bool = True):
        self.syms = syms
        self.ks = ks
        placed = place(syms, ks, check_anchors)
        self._placed(placed, placed.core_lines, placed.line_entry, placed.line_section,
                     placed.ambiguous)
        self._build_index()

    def _placed(self, placed, core_lines, line_entry, line_section, ambiguous) -> None:
        self.placement = placed
        self.stats = placed.stats
        self.extent_of = placed.extent_of
        self.core_lines = core_lines
        self.line_entry, self.line_section, self.ambiguous = line_entry, line_section, ambiguous

    @classmethod
    def restore(cls, syms: SymsFile, saved) -> "Resolver":
        """The resolver a :mod:`kmodsyms.snapshot` holds (``saved``, checked
        to match ``syms`` and its kallsyms): its arrays are views of the
        mapped snapshot, nothing is placed or indexed again."""
        doc, a = saved.doc, saved.numpy_arrays()
        self = cls.__new__(cls)
        self.syms = syms
        self.ks = ks = Kallsyms.from_columns(
            saved.kallsyms_text, doc["meta"]["kallsyms_source"], doc["loaded_module_names"],
            a["line_address"], a["line_type"], a["line_module"], a["name_start"], a["name_end"],
            a["by_address"])
        placed = saved_placement(doc["stats"], a["extent_start"], a["extent_end"], a["extent_section"])
        ambiguous = {line: entries for line, (entries, _names) in doc["ambiguous"].items()}
        self._placed(placed, np.flatnonzero(ks.module == 0), a["line_entry"], a["line_section"],
                     ambiguous)
        self.by_address, self.sorted_address = a["by_address"], a["sorted_address"]
        self.line_address, self.line_type, self.line_module = ks.address, ks.type, ks.module
        self.loaded_module_names = ks.module_names
        self.builtin_module_names = syms.module_names
        for name in ("line_size", "line_object", "line_binding", "line_region", "region_end",
                     "iv_start", "iv_end", "iv_line", "iv_parent", "name_hash", "name_order"):
            setattr(self, name, a[name])
        return self

    def _build_index(self) -> None:
        """Arrays for answering addresses: every line's size and module set,
        the sized intervals sorted for innermost-first search, and all lines
        sorted by address for the unsized fallback."""
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
        self.line_size = size
        # What answers need per line (kmodsyms.answer.Answers).
        self.line_address, self.line_type, self.line_module = ks.address, ks.type, ks.module
        self.loaded_module_names = ks.module_names
        self.builtin_module_names = syms.module_names
        self.line_object = np.full(n, NO, dtype=np.int32)
        placed = self.line_section >= 0
        self.line_object[placed] = syms.sections["object"][self.line_section[placed]]
        # ELF binding: the symbol's own, else read off the type letter.
        letters = ks.type
        binding = np.where((letters >= 65) & (letters <= 90), 1, 0).astype(np.uint8)
        binding[np.isin(letters, np.frombuffer(b"wWvV", dtype=np.uint8))] = 2
        binding[has_entry] = sym["binding"][self.line_entry[has_entry]]
        self.line_binding = binding
        # Region of every line: the placed section holding it, else a per-
        # module marker, so that the unsized fallback never crosses either.
        # Outside placed sections the region is the line's module, with the
        # per-cpu offsets ('A') apart from real addresses.  The core kernel's
        # ends at its highest symbol, as the kernel's is_ksym_addr() bounds
        # lookups; a module's (whose size kallsyms does not give) just
        # before the next symbol of anything else above it.
        loose = -1 - (2 * ks.module + (ks.type == ord("A")))
        self.line_region = np.where(self.line_section >= 0, self.line_section, loose)
        region_end = np.zeros(int(-loose.min()) + 1, dtype=_U64)
        np.maximum.at(region_end, -1 - loose, ks.address)
        for group in range(2, len(region_end)):     # groups 0, 1: core kernel
            above = np.searchsorted(self.sorted_address, region_end[group], side="right")
            region_end[group] = (self.sorted_address[above] - _U64(1) if above < n
                                 else _U64(0xFFFFFFFFFFFFFFFF))
        self.region_end = region_end
        sized = np.flatnonzero(size > 0)
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
        self.iv_line = sized[order].astype(np.int32)
        self.iv_start = start[order]
        self.iv_end = end[order]
        self.iv_parent = _containers(self.iv_start, self.iv_end)

    # ---------------------------------------------------------------- answers
    def resolve_many(self, addresses) -> tuple[np.ndarray, np.ndarray]:
        """Vectorised core of :meth:`resolve`: for each address, the kallsyms
        line that answers it (-1: none) and whether it is a sized hit."""
        q = np.asarray(addresses, dtype=_U64)
        j = np.searchsorted(self.iv_start, q, side="right") - 1
        out = np.full(len(q), NO, dtype=np.int64)
        live = j >= 0
        jj = j.copy()
        # Walk out through containers to the innermost interval still
        # holding q (each step goes to an earlier interval, so it ends).
        while len(self.iv_end):
            miss = live & (self.iv_end[np.maximum(jj, 0)] <= q)
            if not miss.any():
                break
            jj[miss] = self.iv_parent[jj[miss]]
            live &= jj >= 0
        sized = live.copy()
        out[sized] = self.iv_line[jj[sized]]
        # Unsized fallback: nearest line at or below, same region as the address.
        rest = np.flatnonzero(~sized)
        if len(rest):
            k = np.searchsorted(self.sorted_address, q[rest], side="right") - 1
            ok = k >= 0
            cand = np.where(ok, self.by_address[np.maximum(k, 0)], NO)
            region_of_q = self.extent_of(q[rest])
            cand_region = self.line_region[np.maximum(cand, 0)]
            # Inside a placed section: the candidate must be in it.  Outside
            # any: the candidate must be outside every placed section too.
            ok &= np.where(region_of_q >= 0, cand_region == region_of_q,
                           (cand_region < 0) & (q[rest] <= self.region_end[np.maximum(-1 - cand_region, 0)]))
            out[rest[ok]] = cand[ok]
        return out, sized

    def resolve(self, address: int) -> Symbolization:
        """Answer one address (see :class:`Symbolization`)."""
        address = check_address(address)
        line, sized = self.resolve_many(np.array([address], dtype=_U64))
        return self.record(address, int(line[0]), bool(sized[0]))

    # Answers' hooks (see kmodsyms.answer): record() is shared with Snapshot.
    def _line_name(self, line: int) -> str:
        return self.ks.name(line)

    def _candidates(self, line: int) -> list[list[str]] | None:
        entries = self.ambiguous.get(line)
        if entries is None:
            return None
        return [self.syms.modset_names(int(self.syms.symbols["modset"][e])) or ["vmlinux"]
                for e in entries]

    def _object_at(self, address: int) -> int:
        sec = int(self.extent_of(np.array([address], dtype=_U64))[0])
        return int(self.syms.sections["object"][sec]) if sec >= 0 else -1

    def _object_path(self, obj: int) -> str:
        return self.syms.object_path(obj)

    def _object_modules(self, obj: int) -> list[str]:
        return self.syms.modset_names(int(self.syms.objects["modset"][obj]))

    def line_modsets(self) -> np.ndarray:
        """Module set of every kallsyms line: an index into the dtrace_syms
        module sets (0, the empty set, is core kernel, also for lines from no
        object), -1 for a loadable or pseudo-module line (see ``ks.module``),
        -2 where the candidates' modules differ (ambiguous)."""
        objects = self.line_object
        modsets = np.zeros(len(self.ks), dtype=np.int64)
        has = objects >= 0
        modsets[has] = self.syms.objects["modset"][objects[has]]
        modsets[self.ks.module != 0] = -1
        for line, entries in self.ambiguous.items():
            sets = {int(self.syms.symbols["modset"][e]) for e in entries}
            modsets[line] = sets.pop() if len(sets) == 1 else -2
        return modsets

    # --------------------------------------------------------------- reverse
    def _name_index(self):
        if getattr(self, "name_hash", None) is None:
            ks = self.ks
            hashes = hash_spans(ks.text, ks.name_start, ks.name_end - ks.name_start)
            order = np.argsort(hashes, kind="stable")
            self.name_hash, self.name_order = hashes[order], order.astype(np.int32)
        return self.name_hash, self.name_order

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
         warn=None) -> Resolver:
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

    With ``cache`` (and both given as paths), the loaded resolver is saved
    as a snapshot (:mod:`kmodsyms.snapshot`, not under ``force``), and a
    later load of the very same files restores it instead of placing again.
    """
    warn = warn or _warn
    may_fall_back = fallback and syms is None   # a file the caller names must be used
    syms_path = None if isinstance(syms, SymsFile) else syms or default_syms_path()
    kallsyms_path = None if isinstance(kallsyms, Kallsyms) else kallsyms or LIVE_KALLSYMS
    live = kallsyms_path == LIVE_KALLSYMS
    snapshots = cache and syms_path is not None and kallsyms_path is not None
    # kallsyms is read once: to match a snapshot, and to load if none does.
    # Its faults are never the fallback's to hide, so it is read first.
    text = read_text(kallsyms_path) if kallsyms_path is not None else None
    try:
        if snapshots:
            restored = _restore(syms_path, kallsyms_path, text, live, force, warn, may_fall_back)
            if restored is not None:
                return restored
        if not isinstance(syms, SymsFile):
            syms = read_syms(syms_path)
        warned = live and not _check_live(syms.source, syms.meta_kernel_release,
                                          syms.meta_build_id, force, warn)
    except KmodsymsError as e:
        if not may_fall_back:
            raise
        resolver = _kallsyms_only(_kallsyms(kallsyms, text, kallsyms_path), str(e), warn)
        if snapshots and not os.path.exists(syms_path):
            # Missing, not stale: the answer holds until the file appears.
            from .snapshot import save
            save(resolver, syms_path, kallsyms_path)
        return resolver
    ks = _kallsyms(kallsyms, text, kallsyms_path)
    if warned:   # forced over another kernel's file: one warning is enough
        return Resolver(syms, ks, check_anchors=False)
    try:
        resolver = Resolver(syms, ks, check_anchors=True)
    except StaleError as e:
        if force:
            warn(forced_warning(e))
            return Resolver(syms, ks, check_anchors=False)
        if not may_fall_back:
            raise
        return _kallsyms_only(ks, str(e), warn)
    if snapshots and not force:
        from .snapshot import save
        save(resolver, syms_path, kallsyms_path)
    return resolver


def _warn(message: str) -> None:
    import warnings
    warnings.warn(message, stacklevel=3)


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


def _restore(syms_path: str, kallsyms_path: str, text: bytes, live: bool, force: bool,
             warn, may_fall_back: bool) -> Resolver | None:
    """The resolver a matching snapshot holds, or None."""
    from .snapshot import open_saved
    saved = open_saved(syms_path, kallsyms_path, text)
    if saved is None:
        return None
    meta, stats = saved.doc["meta"], saved.doc["stats"]
    if not stats["builtin_modules_known"]:   # made from kallsyms alone, the file missing
        if not may_fall_back:
            return None
        warn(degraded_warning(meta["kallsyms_source"], stats["degraded"]))
        return _degrade(Resolver.restore(_no_syms(), saved))
    if live:
        _check_live(meta["source"], meta["kernel_release"], meta["build_id"], force, warn)
    restored = read_syms(syms_path, verify=False)
    # The file read must be the one the snapshot was checked against.
    if (len(restored.data), bytes(restored.data[CRC_FIELD])) != saved.doc["key"]["syms_state"][:2]:
        return None
    return Resolver.restore(restored, saved)


def _kallsyms_only(ks: Kallsyms, why: str, warn) -> Resolver:
    """The degraded resolver: kallsyms alone (core symbols, loaded and
    pseudo-modules), every other symbol ``vmlinux``, unsized."""
    warn(degraded_warning(ks.source, why))
    resolver = Resolver(_no_syms(), ks, check_anchors=False)
    resolver.stats.builtin_modules_known = False
    resolver.stats.degraded = why
    return _degrade(resolver)


def _degrade(resolver: Resolver) -> Resolver:
    """Mark the records of a resolver of kallsyms alone (its stats say so)."""
    resolver.builtin_modules_known = False
    return resolver


def _no_syms() -> SymsFile:
    """A dtrace_syms with no objects, no symbols and no modules."""
    from .symsfile import TABLES, Meta, StringTable, encode
    tables = {name: np.zeros(0, dtype) for name, dtype in TABLES[1:]}
    tables["modsets"] = np.zeros(1, TABLES[3][1])   # module set 0: core kernel
    return SymsFile(encode(Meta(), StringTable(), tables), "(no dtrace_syms)")
