"""Loadable modules: each loaded module's own ``.ko``, so that its kallsyms
lines are answered as exactly as vmlinux's (ELF size, binding, type, and
the ``.ko`` as their object).

For every ``[mod]`` of kallsyms that is not a pseudo-module:

1. **The file** (:func:`find_module_files`): under the modules directory,
   through ``modules.dep`` when it has one, else by searching for
   ``MOD.ko``; file names are matched as the kernel spells module names
   (``-`` -> ``_``).  ``.ko``, ``.ko.xz``, ``.ko.zst`` and ``.ko.gz`` are
   read as installed; a signature appended after the ELF is cut off (the
   ELF ends where its section headers and contents end).
2. **The kernel's word** (:func:`read_live_module`), when readable:
   ``/sys/module/MOD/sections/NAME`` (each loaded section's address),
   ``srcversion``, ``notes/.note.gnu.build-id``, and the module's core from
   ``/proc/modules`` or ``/sys/module/MOD/coresize``.
3. **Placement and the match check** (:func:`match_module`): sections are
   placed from sysfs, else by names unique in both the module's kallsyms
   lines and the ``.ko`` (anchors), else by shape (the one base at which
   every symbol of the section lands on a line of its name).  The ``.ko``
   is refused for that module only, with one warning naming it, when the
   kernel's srcversion or build-id differs from the file's, when a line's
   name is not in the file, when anchors disagree, or when a symbol of a
   placed section is not where kallsyms shows it.  A refused or missing
   module keeps the bounded unsized answers of kallsyms alone.

Mapping symbols (``$a``, ``$d``, ``$t``, ``$x``, optionally ``.N``): module
kallsyms lines show them (kernel/module/kallsyms.c keeps every named core
symbol), but the kernel's own lookup, ``find_kallsyms_symbol()``, skips them
(``is_mapping_symbol()``), and so does the resolver: they never answer an
address.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

import numpy as np

from .build.elfdefs import STB_GLOBAL, STB_GNU_UNIQUE
from .build.elffile import ElfFile
from .build.elfimage import parse_notes
from .build.elfscan import scan_elf
from .errors import KmodsymsError
from .kernelnames import is_pseudo_module
from .live import ModuleSources, parse_proc_modules

KO_SUFFIXES = (".ko", ".ko.xz", ".ko.zst", ".ko.gz")
# include/linux/module_symbol.h is_mapping_symbol(): the names the kernel's
# module lookups skip (".L" and "L0" local labels, ARM mapping symbols).
_MAPPING_SYMBOL = re.compile(rb"(\.L|L0|\$[adtx](\.|\Z))")
# Where an install keeps modules that override the distribution's
# (depmod's default search order: updates first, then extra, then the rest).
_SEARCH_PRIORITY = ("updates", "extra")
_REMEDY = "reinstall it"

# Match outcomes (ModuleStats.status).
MATCHED, MISSING, REFUSED = "matched", "missing", "refused"


def is_mapping_symbol(name: bytes) -> bool:
    return _MAPPING_SYMBOL.match(name) is not None


def module_name(filename: str) -> str | None:
    """The module a file name is for (``nf-conntrack.ko.xz`` -> ``nf_conntrack``)."""
    for suffix in KO_SUFFIXES:
        if filename.endswith(suffix):
            return filename[:-len(suffix)].replace("-", "_")
    return None


def find_module_files(modules_dir: str, wanted=None) -> dict[str, str]:
    """Path (relative to ``modules_dir``) of each of the ``wanted`` modules
    (None: every module) that has a file there: from ``modules.dep`` when
    present, else by search."""
    wanted = None if wanted is None else set(wanted)
    found: dict[str, str] = {}
    dep = os.path.join(modules_dir, "modules.dep")
    try:
        with open(dep, "rb") as f:
            text = f.read().decode("utf-8", "surrogateescape")
    except FileNotFoundError:
        text = None
    except OSError as e:
        raise KmodsymsError(f"cannot read {dep}: {e.strerror}") from None
    if text is not None:
        for line in text.splitlines():
            path = line.partition(":")[0].strip()
            name = module_name(os.path.basename(path))
            if name and (wanted is None or name in wanted) and name not in found:
                found[name] = path
        return found
    ranked: dict[str, tuple] = {}
    for root, dirs, files in os.walk(modules_dir):
        dirs.sort()
        rel_root = os.path.relpath(root, modules_dir)
        top = rel_root.split(os.sep)[0]
        rank = _SEARCH_PRIORITY.index(top) if top in _SEARCH_PRIORITY else len(_SEARCH_PRIORITY)
        for filename in sorted(files):
            name = module_name(filename)
            if name and (wanted is None or name in wanted):
                path = os.path.normpath(os.path.join(rel_root, filename))
                if name not in ranked or rank < ranked[name][0]:
                    ranked[name] = (rank, path)
    return {name: path for name, (_rank, path) in ranked.items()}


def _module_files(modules_dir: str, wanted, cache: dict) -> dict[str, str]:
    """:func:`find_module_files`, remembered in ``cache`` for as long as
    modules.dep is unchanged (depmod rewrites it at every install); a
    directory without one is searched once per cache."""
    try:
        st = os.stat(os.path.join(modules_dir, "modules.dep"))
        dep = (st.st_size, st.st_mtime_ns)
    except OSError:
        dep = None
    key = ("files", os.path.abspath(modules_dir), dep)
    index = cache.get(key)
    if index is None:
        index = cache[key] = find_module_files(modules_dir, None)
    return {name: index[name] for name in wanted if name in index}


def read_ko_bytes(path: str) -> bytes:
    """The ELF of a module file as installed: decompressed by its suffix,
    and cut where the ELF ends (a module signature may follow it)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
        if path.endswith(".xz"):
            import lzma
            data = lzma.decompress(data)
        elif path.endswith(".gz"):
            import gzip
            data = gzip.decompress(data)
        elif path.endswith(".zst"):
            import zstandard
            data = zstandard.ZstdDecompressor().decompressobj().decompress(data)
    except OSError as e:
        raise KmodsymsError(f"cannot read module {path}: {e.strerror or e}") from None
    except Exception as e:   # lzma.LZMAError, gzip.BadGzipFile, zstandard.ZstdError, EOFError
        raise KmodsymsError(f"{path}: cannot decompress ({e}); reinstall the module") from None
    return data[:ElfFile(path, data, "module", _REMEDY).extent()]


@dataclass
class KoFile:
    """The symbols and sections of one ``.ko`` (kept as :mod:`kmodsyms.build.elfscan`
    keeps them), its srcversion and build-id."""

    path: str                        # relative to the modules directory
    sym_names: list[bytes]
    sym_value: np.ndarray            # uint64, offset in its section
    sym_size: np.ndarray             # uint64
    sym_info: np.ndarray             # uint8, bind << 4 | type
    sym_section: np.ndarray          # int64, index into sec_name
    sec_name: list[str]
    sec_size: np.ndarray             # uint64
    srcversion: str | None
    build_id: str


def read_ko(modules_dir: str, path: str) -> KoFile:
    full = os.path.join(modules_dir, path)
    elf = ElfFile(full, read_ko_bytes(full), "module", _REMEDY)
    scan = scan_elf(elf)
    srcversion = None
    for item in _section_named(elf, ".modinfo").split(b"\0"):
        if item.startswith(b"srcversion="):
            srcversion = item[len(b"srcversion="):].decode("ascii", "replace")
    build_id = parse_notes(_section_named(elf, ".note.gnu.build-id"), elf.layout.byteorder)
    return KoFile(path, scan.sym_name, np.array(scan.sym_value, dtype=np.uint64),
                  np.array(scan.sym_size, dtype=np.uint64),
                  np.frombuffer(scan.sym_info, dtype=np.uint8),
                  np.array(scan.sym_section, dtype=np.int64), list(scan.sec_name),
                  np.array(scan.sec_size, dtype=np.uint64), srcversion, build_id)


def _section_named(elf: ElfFile, name: str) -> bytes:
    """The contents of the section called ``name`` (b"" if none)."""
    index = elf.section_index(name)
    return b"" if index is None else elf.section_data(index)


# ------------------------------------------------------------ kernel's word
@dataclass
class LiveModule:
    """What the running kernel says of one loaded module (None: not readable)."""

    sections: dict[str, int] = field(default_factory=dict)
    srcversion: str | None = None
    build_id: str | None = None
    has_sysfs: bool = False          # /sys/module/MOD exists: a missing srcversion file means none
    core: tuple[int, int] | None = None   # (address, size) of its core allocation


def read_live_module(sysfs_root: str | None, name: str,
                     cores: dict[str, tuple[int, int]]) -> LiveModule:
    live = LiveModule(core=cores.get(name))
    if sysfs_root is None:
        return live
    base = os.path.join(sysfs_root, "module", name)
    live.has_sysfs = os.path.isdir(base)
    if not live.has_sysfs:
        return live
    live.srcversion = _read_text(os.path.join(base, "srcversion"))
    try:
        with open(os.path.join(base, "notes", ".note.gnu.build-id"), "rb") as f:
            live.build_id = parse_notes(f.read()) or None
    except OSError:
        pass
    sections = os.path.join(base, "sections")
    try:
        names = os.listdir(sections)
    except OSError:
        names = []
    for section in names:
        value = _read_text(os.path.join(sections, section))
        try:
            address = int(value, 16) if value else 0
        except ValueError:
            continue
        if address:                  # 0: hidden from this user
            live.sections[section] = address
    if live.core is None:
        coresize = _read_text(os.path.join(base, "coresize"))
        text = live.sections.get(".text")
        if coresize and coresize.isdigit() and text:
            live.core = (text, int(coresize))
    return live


def _read_text(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read().decode("ascii", "replace").strip()
    except OSError:
        return None


# --------------------------------------------------------------- matching
@dataclass
class ModuleMatch:
    """One module's .ko matched against its kallsyms lines: ``line_symbol``
    (the .ko symbol each line is, -1) and ``section_base`` per placed
    section; or the reason it was refused."""

    line_symbol: np.ndarray
    section_base: dict[int, int]
    refused: str | None = None


def match_module(ko: KoFile, names: list[bytes], addresses: list[int],
                 live: LiveModule) -> ModuleMatch:
    """Match a module's kallsyms lines (``names``, ``addresses``) with
    ``ko``.  Never guesses: a file that cannot be shown to be the loaded
    one is refused (see the module docstring)."""
    n = len(names)
    none = np.full(n, -1, dtype=np.int64)

    def refuse(why: str) -> ModuleMatch:
        return ModuleMatch(none, {}, why)

    if live.has_sysfs and live.srcversion != ko.srcversion and (live.srcversion or ko.srcversion):
        return refuse(f"srcversion {ko.srcversion or '(none)'}, the loaded module's is "
                      f"{live.srcversion or '(none)'}")
    if live.build_id and ko.build_id and live.build_id != ko.build_id:
        return refuse(f"build-id {ko.build_id}, the loaded module's is {live.build_id}")
    by_name: dict[bytes, list[int]] = {}
    for s, name in enumerate(ko.sym_names):
        by_name.setdefault(name, []).append(s)
    lines_of: dict[bytes, list[int]] = {}
    for i, name in enumerate(names):
        if not is_mapping_symbol(name):
            lines_of.setdefault(name, []).append(i)
    absent = [name for name in lines_of if name not in by_name]
    if absent:
        return refuse(f"{len(absent)} of the module's kallsyms names are not in the file "
                      f"(e.g. {absent[0].decode('utf-8', 'replace')})")
    value = ko.sym_value.tolist()
    section = ko.sym_section.tolist()
    base: dict[int, int] = {}
    mask = (1 << 64) - 1
    # The kernel's own word: each section's load address.
    sec_count: dict[str, int] = {}
    for name in ko.sec_name:
        sec_count[name] = sec_count.get(name, 0) + 1
    for k, name in enumerate(ko.sec_name):
        if sec_count[name] == 1 and name in live.sections:
            base[k] = live.sections[name]
    # Anchors: names once in the file and once among the lines.
    votes: dict[int, dict[int, int]] = {}
    for name, lines in lines_of.items():
        syms = by_name[name]
        if len(syms) == 1 and len(lines) == 1:
            s = syms[0]
            b = (addresses[lines[0]] - value[s]) & mask
            votes.setdefault(section[s], {}).setdefault(b, 0)
            votes[section[s]][b] += 1
    for sec, tally in votes.items():
        if sec not in base:
            base[sec] = max(tally, key=lambda b: (tally[b], b))
        wrong = sum(count for b, count in tally.items() if b != base[sec])
        if wrong:
            return refuse(f"{wrong} of its unique symbols in {ko.sec_name[sec]} are not where "
                          "kallsyms shows them")
    # Shape: a section without anchors is placed where all of its symbols
    # that kallsyms names land on lines of their names, if exactly one
    # base does that.
    at = set(zip(names, addresses))
    members: dict[int, list[int]] = {}
    for s, sec in enumerate(section):
        if sec not in base and ko.sym_names[s] in lines_of:
            members.setdefault(sec, []).append(s)
    for sec, syms in members.items():
        pivot = min(syms, key=lambda s: len(lines_of[ko.sym_names[s]]))
        fits = [b for b in ((addresses[i] - value[pivot]) & mask for i in lines_of[ko.sym_names[pivot]])
                if all((ko.sym_names[s], (b + value[s]) & mask) in at for s in syms)]
        if len(set(fits)) == 1:
            base[sec] = fits[0]
    # Every line of a name the file has in a placed section is one of
    # those symbols; every symbol of a section that kallsyms shows is a line.
    line_symbol = none.copy()
    shown = {section[s] for name in lines_of for s in by_name[name]
             if section[s] in base and (name, (base[section[s]] + value[s]) & mask) in at}
    for name, lines in lines_of.items():
        syms = [s for s in by_name[name] if section[s] in base]
        where = {(base[section[s]] + value[s]) & mask: s for s in reversed(syms)}
        for i in lines:
            s = where.get(addresses[i])
            if s is not None:
                line_symbol[i] = s
            elif syms:
                return refuse(f"its {name.decode('utf-8', 'replace')} is not at "
                              f"{addresses[i]:#x}, where kallsyms shows it")
    for s, sec in enumerate(section):
        if sec in shown and (ko.sym_names[s], (base[sec] + value[s]) & mask) not in at:
            return refuse(f"its {ko.sym_names[s].decode('utf-8', 'replace')} "
                          f"({ko.sec_name[sec]}) is not in kallsyms")
    return ModuleMatch(line_symbol, {sec: base[sec] for sec in shown})


def typed_and_binding(info: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """From ELF ``st_info``: whether each symbol is typed (FUNC, OBJECT...,
    not NOTYPE) and its binding (STB_GNU_UNIQUE counted as GLOBAL)."""
    binding = (info >> 4).astype(np.uint8)
    binding[binding == STB_GNU_UNIQUE] = STB_GLOBAL
    return (info & 0xF) != 0, binding


# ------------------------------------------------------------ all modules
@dataclass
class ModuleStats:
    """How one loaded module was answered: ``status`` is ``matched`` (its
    ``file`` gave sizes to ``sized`` of its ``lines``), ``missing`` (no file
    found) or ``refused`` (``reason``: why the file is not the loaded one)."""

    name: str
    file: str | None
    status: str
    lines: int
    sized: int
    reason: str | None = None


@dataclass
class LoadedModules:
    """Per kallsyms line (the loadable ones; -1/False elsewhere): size,
    typed, binding from the matched .ko symbol, the .ko (index into
    ``ko_paths``/``ko_modules``) and the placed .ko section holding it
    (index into ``extent_*``'s ``section`` numbering); the placed sections'
    extents; each module's core (address, size) when the kernel says; the
    per-module outcome and warnings; the files used (path, size, mtime_ns).
    ``section_ko``: the .ko of each placed section."""

    line_size: np.ndarray
    line_typed: np.ndarray
    line_binding: np.ndarray
    line_ko: np.ndarray
    line_section: np.ndarray
    ko_paths: list[str]
    ko_modules: list[str]
    extent_start: np.ndarray
    extent_end: np.ndarray
    extent_section: np.ndarray
    section_ko: np.ndarray
    cores: dict[str, tuple[int, int]]
    stats: list[ModuleStats]
    warnings: list[str]
    files: list[tuple[str, int, int]]


def load_modules(ks, sources: ModuleSources, ko_cache: dict | None = None) -> LoadedModules:
    """Match every loaded module of ``ks`` (a :class:`kmodsyms.build.kallsyms.Kallsyms`)
    with its .ko under ``sources.modules_dir``.  ``ko_cache`` keeps across
    calls (:meth:`kmodsyms.resolver.Resolver.refresh`) the files found, the
    files read (by path, size and mtime) and each module's match."""
    n = len(ks)
    line_size = np.full(n, -1, dtype=np.int64)
    line_typed = np.zeros(n, dtype=bool)
    line_binding = np.zeros(n, dtype=np.uint8)
    line_ko = np.full(n, -1, dtype=np.int32)
    line_section = np.full(n, -1, dtype=np.int64)
    cores: dict[str, tuple[int, int]] = {}
    if sources.proc_modules:
        try:
            with open(sources.proc_modules, "rb") as f:
                cores = parse_proc_modules(f.read())
        except OSError:
            pass
    loaded = [(m, name) for m, name in enumerate(ks.module_names)
              if m and not is_pseudo_module(name)]
    if ko_cache is None:
        ko_cache = {}
    found = (_module_files(sources.modules_dir, [name for _m, name in loaded], ko_cache)
             if sources.modules_dir and loaded else {})
    ko_paths, ko_modules, stats, warnings, files = [], [], [], [], []
    starts, ends, regions, section_ko = [], [], [], []
    by_module = np.argsort(ks.module, kind="stable")
    bounds = np.searchsorted(ks.module[by_module], np.arange(len(ks.module_names) + 1))
    for m, name in loaded:
        lines = by_module[bounds[m]:bounds[m + 1]]
        path = found.get(name)
        live = read_live_module(sources.sysfs_root, name, cores)
        if live.core:
            cores[name] = live.core
        if path is None:
            stats.append(ModuleStats(name, None, MISSING, len(lines), 0))
            continue
        full = os.path.join(sources.modules_dir, path)
        try:
            st = os.stat(full)
            key = (full, st.st_size, st.st_mtime_ns)
            ko = ko_cache.get(key)
            if ko is None:
                ko = ko_cache[key] = read_ko(sources.modules_dir, path)
        except (OSError, KmodsymsError) as e:
            # One unreadable file costs its module's sizes, not the answers.
            why = f"cannot read {full}: {e.strerror}" if isinstance(e, OSError) else str(e)
            warnings.append(f"module {name}: {why}; its symbols stay unsized")
            stats.append(ModuleStats(name, path, REFUSED, len(lines), 0, why))
            continue
        files.append((path, st.st_size, st.st_mtime_ns))
        names, addresses = ks.names_bytes(lines), ks.address[lines]
        # The same file, lines and kernel's word match the same way (refresh()).
        memo = ("match", key, name, addresses.tobytes(), b"\0".join(names),
                tuple(sorted(live.sections.items())), live.srcversion, live.build_id,
                live.has_sysfs)
        match = ko_cache.get(memo)
        if match is None:
            match = ko_cache[memo] = match_module(ko, names, addresses.tolist(), live)
        if match.refused:
            warnings.append(f"module {name}: {os.path.join(sources.modules_dir, path)} is not the "
                            f"loaded module ({match.refused}); its symbols stay unsized")
            stats.append(ModuleStats(name, path, REFUSED, len(lines), 0, match.refused))
            continue
        k = len(ko_paths)
        ko_paths.append(path)
        ko_modules.append(name)
        hit = match.line_symbol >= 0
        syms = match.line_symbol[hit]
        at = lines[hit]
        typed, binding = typed_and_binding(ko.sym_info)
        line_size[at] = ko.sym_size[syms].astype(np.int64)
        line_typed[at] = typed[syms]
        line_binding[at] = binding[syms]
        line_ko[at] = k
        first = len(starts)
        placed = sorted(match.section_base)
        for sec in placed:
            starts.append(match.section_base[sec])
            ends.append(match.section_base[sec] + int(ko.sec_size[sec]))
            regions.append(len(regions))
            section_ko.append(k)
        region_of = dict(zip(placed, range(first, first + len(placed))))
        line_section[at] = [region_of.get(int(ko.sym_section[s]), -1) for s in syms.tolist()]
        stats.append(ModuleStats(name, path, MATCHED, len(lines),
                                 int((ko.sym_size[syms] > 0).sum())))
    order = np.argsort(np.array(starts, dtype=np.uint64), kind="stable")
    return LoadedModules(line_size, line_typed, line_binding, line_ko, line_section, ko_paths,
                         ko_modules, np.array(starts, dtype=np.uint64)[order],
                         np.array(ends, dtype=np.uint64)[order],
                         np.array(regions, dtype=np.int64)[order],
                         np.array(section_ko, dtype=np.int32), cores, stats, warnings, files)
