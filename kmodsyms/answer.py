"""The answer for one address or name (:class:`Symbolization`), and the one
way it is made (:class:`Answerer`) from a declared table of arrays
(:class:`AnswerTable`).

Data flows one way, as blazesym's sources -> symbolizer -> ``Sym``: the
resolver (:mod:`kmodsyms.resolver`: numpy arrays) or a snapshot
(:mod:`kmodsyms.snapshot`: memoryviews of its file) fills a table, the
:class:`Answerer` each of them holds makes the records from it, and the
output (:mod:`kmodsyms.cli.frontend`) writes them.  Plain Python (no numpy):
the quick ``resolve`` path answers through it too, so a snapshot and the
resolver give the same record by construction.
"""

from __future__ import annotations

import bisect
import operator

from .build.elfdefs import BINDING_NAMES
from .errors import KmodsymsError
from .kernelnames import is_pseudo_module, kernel_spelling
from .format.namehash import name_hash


def check_address(address) -> int:
    """``address`` as an int, if it can be a 64-bit address; else the
    :class:`KmodsymsError` a user's bad input gets (not numpy's
    OverflowError)."""
    try:
        value = operator.index(address)   # ints and numpy integers; no floats or strings
    except TypeError:
        raise KmodsymsError(f"bad address {address!r}: not an integer") from None
    if value < 0:
        raise KmodsymsError(f"bad address {value:#x}: negative")
    if value >= 1 << 64:
        raise KmodsymsError(f"bad address {value:#x}: more than 64 bits")
    return value


class Symbolization:
    """One answered address, modelled on perf's dlfilter address record
    (made by an :class:`Answerer` only; the caller reads it).

    ``module`` is the first module (``vmlinux`` for core kernel);
    ``modules`` all of them in thick-file order; ``origin`` is ``builtin``,
    ``core``, ``loadable`` or ``pseudo``; ``size`` is None when unknown and
    ``sized`` says whether ``[start, start+size)`` holds the address;
    ``object`` is the build-tree path of the object, or for a loadable
    module the path of its .ko relative to the modules directory; None
    when the symbol comes from no object (or no .ko was found or matched).  ``candidates`` lists the possible module lists
    when the object could not be placed uniquely (``ambiguous``).
    An address in no symbol has ``symbol`` None.  ``builtin_modules_known``
    is False when answered from kallsyms alone (no usable dtrace_syms):
    then a built-in module's symbol shows as ``vmlinux``.

    (A plain class rather than a dataclass: importing dataclasses costs
    ``kmodsyms resolve`` ~7 ms, a tenth of its run from a snapshot.)
    """

    FIELDS = ("address", "module", "modules", "origin", "symbol", "offset", "start", "size",
              "sized", "type", "binding", "object", "ambiguous", "candidates",
              "builtin_modules_known")

    def __init__(self, address: int, module: str | None = None,
                 modules: list[str] | None = None, origin: str | None = None,
                 symbol: str | None = None, offset: int | None = None,
                 start: int | None = None, size: int | None = None, sized: bool = False,
                 type: str | None = None, binding: str | None = None,
                 object: str | None = None, ambiguous: bool = False,
                 candidates: list[list[str]] | None = None,
                 builtin_modules_known: bool = True):
        self.address, self.module, self.modules, self.origin = address, module, modules, origin
        self.symbol, self.offset, self.start, self.size = symbol, offset, start, size
        self.sized, self.type, self.binding, self.object = sized, type, binding, object
        self.ambiguous, self.candidates = ambiguous, candidates if candidates is not None else []
        self.builtin_modules_known = builtin_modules_known

    def __eq__(self, other) -> bool:
        return isinstance(other, Symbolization) and self.__dict__ == other.__dict__

    def __repr__(self) -> str:
        return "Symbolization(" + ", ".join(f"{f}={getattr(self, f)!r}" for f in self.FIELDS) + ")"

    def to_json(self) -> dict:
        doc = dict(self.__dict__)
        doc["address"] = f"{self.address:#x}"
        doc["start"] = None if self.start is None else f"{self.start:#x}"
        if not self.ambiguous:
            del doc["candidates"]
        if self.builtin_modules_known:   # said only when not: answered without dtrace_syms
            del doc["builtin_modules_known"]
        return doc

    def __str__(self) -> str:
        """DTrace's notation: ``0xADDR mod`sym+0xoff (0xSIZE bytes, object)``."""
        head = f"{self.address:#x}"
        if self.symbol is None:
            where = f" {self.module}`?" if self.module else " ?"
            return head + where + (f" ({self.object})" if self.object else "")
        text = f"{head} {self.module or '?'}`{self.symbol}"
        if self.offset:
            text += f"+{self.offset:#x}"
        notes = []
        if self.sized:
            notes.append(f"{self.size:#x} bytes")
        else:
            notes.append("unsized")
        if self.object:
            notes.append(self.object)
        if self.ambiguous:
            notes.append("ambiguous: " + " | ".join(",".join(c) for c in self.candidates))
        return f"{text} ({', '.join(notes)})"


class AnswerTable:
    """What the records of one kernel are made of, declared once for the
    resolver (numpy arrays) and a snapshot (memoryviews of its file): any
    sequence indexable by position serves.  (A plain class, as
    :class:`Symbolization`: the quick path imports no dataclasses.)

    Per kallsyms line, in kallsyms order: ``line_address``, ``line_type``
    (ASCII letter), ``line_module`` (0 core kernel, else an index into
    ``loaded_module_names``), ``line_size`` (-1: unknown), ``line_object``
    (-1: none), ``line_binding`` (ELF binding), ``line_region`` (the placed
    section holding it, else ``-1 - g`` for region group ``g``) and its
    name, ``text[name_start:name_end]``.

    ``answer_address``/``answer_line``: the lines that may answer an
    address, in address order.  ``iv_start``/``iv_end``/``iv_line``: the
    sized intervals ``[start, end)``, by start (preferred last among equal
    starts), and ``iv_parent`` the nearest earlier one holding each (-1).
    ``region_end``: the last address of each region group;
    ``core_ranges``: where core kernel lines answer, ``[start, last, ...]``.
    ``extent_start``/``extent_end``/``extent_section``: the placed sections
    (vmlinux's, then the matched .ko files'), by address;
    ``section_object``: the object of each section.

    Objects: vmlinux's, then from ``first_ko_object`` on the matched .ko
    files; ``object_paths`` their paths and ``object_modset`` an index into
    ``modsets``, the module name lists (``[]``: core kernel).
    ``candidates``: an ambiguous line's candidates' module lists.
    ``name_index()``: every line's :func:`name_hash`, sorted, and the lines
    in that order (a function: a full load computes it only when a name is
    first looked up).  ``builtin_modules_known``: False when made from
    kallsyms alone (built-in modules then show as ``vmlinux``).
    """

    def __init__(self, *, text: bytes, name_start, name_end, line_address, line_type,
                 line_module, line_size, line_object, line_binding, line_region,
                 answer_address, answer_line, iv_start, iv_end, iv_line, iv_parent, region_end,
                 core_ranges, extent_start, extent_end, extent_section, section_object,
                 object_paths, object_modset, modsets: list[list[str]], first_ko_object: int,
                 loaded_module_names: list[str], builtin_module_names: list[str],
                 candidates: dict[int, list[list[str]]], name_index,
                 builtin_modules_known: bool):
        self.text, self.name_start, self.name_end = text, name_start, name_end
        self.line_address, self.line_type, self.line_module = line_address, line_type, line_module
        self.line_size, self.line_object = line_size, line_object
        self.line_binding, self.line_region = line_binding, line_region
        self.answer_address, self.answer_line = answer_address, answer_line
        self.iv_start, self.iv_end, self.iv_line, self.iv_parent = iv_start, iv_end, iv_line, iv_parent
        self.region_end, self.core_ranges = region_end, core_ranges
        self.extent_start, self.extent_end = extent_start, extent_end
        self.extent_section, self.section_object = extent_section, section_object
        self.object_paths, self.object_modset, self.modsets = object_paths, object_modset, modsets
        self.first_ko_object = first_ko_object
        self.loaded_module_names = loaded_module_names
        self.builtin_module_names = builtin_module_names
        self.candidates = candidates
        self.name_index = name_index
        self.builtin_modules_known = builtin_modules_known


class Answerer:
    """Makes the records of one :class:`AnswerTable` (plain Python, one
    address at a time).  The resolver and a snapshot each hold one."""

    def __init__(self, table: AnswerTable):
        self.table = table

    # ------------------------------------------------------------ addresses
    def find(self, q: int) -> tuple[int, bool]:
        """The line answering address ``q`` (-1: none) and whether it is a
        sized hit, by the rules of docs/resolver.md section 4 (the resolver's
        vectorised ``resolve_many`` follows the same)."""
        t = self.table
        j = bisect.bisect_right(t.iv_start, q) - 1
        while j >= 0 and t.iv_end[j] <= q:
            j = t.iv_parent[j]
        if j >= 0:
            return int(t.iv_line[j]), True
        k = bisect.bisect_right(t.answer_address, q) - 1
        if k < 0:
            return -1, False
        line = int(t.answer_line[k])
        region, section = t.line_region[line], self.section_at(q)
        if section >= 0:
            ok = region == section
        else:
            ok = region < 0 and q <= t.region_end[-1 - region]
        if ok and region == -1:     # the core kernel: only inside its ranges
            i = bisect.bisect_right(t.core_ranges[0::2], q) - 1
            ok = i >= 0 and q <= t.core_ranges[2 * i + 1]
        return (line if ok else -1), False

    def section_at(self, q: int) -> int:
        """The placed section (vmlinux's or a .ko's) holding ``q``, or -1."""
        t = self.table
        i = bisect.bisect_right(t.extent_start, q) - 1
        return int(t.extent_section[i]) if i >= 0 and q < t.extent_end[i] else -1

    def record(self, address: int, line: int, sized: bool) -> Symbolization:
        """The answer for ``address`` answered by kallsyms ``line`` (-1:
        none), ``sized`` if the line's symbol holds the address."""
        t = self.table
        known = t.builtin_modules_known
        if line < 0:
            section = self.section_at(address)
            obj = int(t.section_object[section]) if section >= 0 else -1
            if obj < 0:
                return Symbolization(address, builtin_modules_known=known)
            return Symbolization(address, *self._object_modules(obj), object=t.object_paths[obj],
                                 builtin_modules_known=known)
        start = int(t.line_address[line])
        size = int(t.line_size[line])
        of_line = dict(symbol=self.line_name(line), offset=address - start, start=start,
                       size=size if size >= 0 else None, sized=sized,
                       type=chr(t.line_type[line]),
                       binding=BINDING_NAMES.get(int(t.line_binding[line])),
                       builtin_modules_known=known)
        obj = int(t.line_object[line])
        mod = int(t.line_module[line])
        if mod:
            name = t.loaded_module_names[mod]
            return Symbolization(address, name, [name],
                                 "pseudo" if is_pseudo_module(name) else "loadable",
                                 object=t.object_paths[obj] if obj >= 0 else None, **of_line)
        candidates = t.candidates.get(line)
        if candidates is not None:
            candidates = [list(c) for c in candidates]
            if all(c == candidates[0] for c in candidates):
                # The same module(s): only the object is unknown.
                first = list(candidates[0])
                return Symbolization(address, first[0], first,
                                     "core" if first == ["vmlinux"] else "builtin",
                                     ambiguous=True, candidates=candidates, **of_line)
            return Symbolization(address, ambiguous=True, candidates=candidates, **of_line)
        if obj >= 0:
            return Symbolization(address, *self._object_modules(obj), object=t.object_paths[obj],
                                 **of_line)
        return Symbolization(address, "vmlinux", ["vmlinux"], "core", **of_line)

    def _object_modules(self, obj: int) -> tuple[str, list[str], str]:
        """(module, modules, origin) of the answers in object ``obj``."""
        t = self.table
        mods = list(t.modsets[t.object_modset[obj]])
        if obj >= t.first_ko_object:
            origin = "loadable"
        else:
            origin = "builtin" if mods else "core"
        modules = mods or ["vmlinux"]
        return modules[0], modules, origin

    # ---------------------------------------------------------------- names
    def line_name(self, line: int) -> str:
        t = self.table
        return t.text[t.name_start[line]:t.name_end[line]].decode("utf-8", "surrogateescape")

    def modules(self) -> list[str]:
        """Every module name: ``vmlinux``, the built-in modules, the loaded ones."""
        t = self.table
        return ["vmlinux"] + list(t.builtin_module_names) + list(t.loaded_module_names[1:])

    def lines_named(self, name: str) -> list[int]:
        """The kallsyms lines of symbol ``name``, in kallsyms order: found by
        bisection in the name-hash order, confirmed by name."""
        hashes, lines = self.table.name_index()
        h = name_hash(name.encode("utf-8", "surrogateescape"))
        i = bisect.bisect_left(hashes, h)
        found = []
        while i < len(hashes) and hashes[i] == h:
            if self.line_name(int(lines[i])) == name:
                found.append(int(lines[i]))
            i += 1
        return found

    def lookup(self, name: str, module: str | None = None, offset: int = 0) -> list[Symbolization]:
        """Every symbol called ``name`` (in ``module`` if given: a built-in
        module, a loadable module, or ``vmlinux`` for core kernel), as the
        records of the address ``offset`` bytes into it (``address`` is
        that address, ``start`` the symbol's)."""
        if module is not None:
            module = kernel_spelling(module)
        t = self.table
        results = []
        for line in self.lines_named(name):
            start = int(t.line_address[line])
            address = check_address(start + offset)
            rec = self.record(address, line, offset < int(t.line_size[line]))
            if module is None or (rec.modules and module in rec.modules) or \
                    (rec.ambiguous and any(module in c for c in rec.candidates)):
                results.append(rec)
        return results
