"""The answer for one address or name, and how it is put together from a
resolver's per-line arrays.  Plain Python (no numpy): both the numpy
:class:`kmodsyms.resolver.Resolver` and the saved
:class:`kmodsyms.snapshot.Snapshot` answer through :class:`Answers`, so the
two give the same record by construction."""

from __future__ import annotations

import bisect
import operator

from .errors import KmodsymsError
from .namehash import name_hash
from .thick import kernel_spelling

BINDING_NAMES = {0: "local", 1: "global", 2: "weak"}   # ELF STB_*


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


def is_pseudo_module(name: str) -> bool:
    """True for the kernel's pseudo-modules: ``bpf``, ``__builtin__ftrace``..."""
    return name == "bpf" or name.startswith("__builtin__")


class Symbolization:
    """One answered address, modelled on perf's dlfilter address record.

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


class Answers:
    """Builds :class:`Symbolization` records.  The class using it provides,
    indexable by kallsyms line: ``line_address``, ``line_type`` (ASCII
    letter), ``line_module`` (0 core, else index into
    ``loaded_module_names``), ``line_size`` (-1 unknown), ``line_object``
    (-1 none; from ``first_ko_object`` on, a loaded module's .ko) and
    ``line_binding`` (ELF binding); and the methods below that raise
    NotImplementedError."""

    loaded_module_names: list[str]
    builtin_module_names: list[str]
    builtin_modules_known = True
    first_ko_object: int

    def _name_index(self):
        """(hashes, lines): every line's :func:`name_hash`, sorted, and the
        lines in that order (lines of one hash in kallsyms order)."""
        raise NotImplementedError

    def _line_name(self, line: int) -> str:
        raise NotImplementedError

    def _candidates(self, line: int) -> list[list[str]] | None:
        """Module lists of an ambiguous line's candidates, else None."""
        raise NotImplementedError

    def _object_at(self, address: int) -> int:
        """Object whose placed section holds ``address``, or -1."""
        raise NotImplementedError

    def _object_path(self, obj: int) -> str:
        raise NotImplementedError

    def _object_modules(self, obj: int) -> list[str]:
        raise NotImplementedError

    def record(self, address: int, line: int, sized: bool) -> Symbolization:
        """The answer for ``address`` answered by kallsyms ``line`` (-1:
        none), ``sized`` if the line's symbol holds the address."""
        if line < 0:
            result = Symbolization(address, builtin_modules_known=self.builtin_modules_known)
            obj = self._object_at(address)
            if obj >= 0:
                self._fill_object(result, obj)
            return result
        start = int(self.line_address[line])
        size = int(self.line_size[line])
        result = Symbolization(address, symbol=self._line_name(line), offset=address - start,
                               start=start, size=size if size >= 0 else None,
                               sized=sized, type=chr(self.line_type[line]),
                               binding=BINDING_NAMES.get(int(self.line_binding[line])),
                               builtin_modules_known=self.builtin_modules_known)
        mod = int(self.line_module[line])
        candidates = None if mod else self._candidates(line)
        if mod:
            name = self.loaded_module_names[mod]
            result.module, result.modules = name, [name]
            result.origin = "pseudo" if is_pseudo_module(name) else "loadable"
            obj = int(self.line_object[line])
            if obj >= 0:
                result.object = self._object_path(obj)
        elif candidates is not None:
            result.ambiguous = True
            result.candidates = candidates
            if all(c == candidates[0] for c in candidates):   # same module(s): only the object is unknown
                result.modules = candidates[0]
                result.module = candidates[0][0]
                result.origin = "core" if candidates[0] == ["vmlinux"] else "builtin"
        else:
            obj = int(self.line_object[line])
            if obj >= 0:
                self._fill_object(result, obj)
            else:
                result.module, result.modules, result.origin = "vmlinux", ["vmlinux"], "core"
        return result

    def _fill_object(self, result: Symbolization, obj: int) -> None:
        mods = self._object_modules(obj)
        result.object = self._object_path(obj)
        result.modules = mods or ["vmlinux"]
        result.module = result.modules[0]
        if obj >= self.first_ko_object:
            result.origin = "loadable"
        else:
            result.origin = "builtin" if mods else "core"

    # ---------------------------------------------------------------- names
    def modules(self) -> list[str]:
        """Every module name: ``vmlinux``, the built-in modules, the loaded ones."""
        return ["vmlinux"] + self.builtin_module_names + self.loaded_module_names[1:]

    def lines_named(self, name: str) -> list[int]:
        """The kallsyms lines of symbol ``name``, in kallsyms order: found by
        bisection in the name-hash order, confirmed by name."""
        hashes, lines = self._name_index()
        h = name_hash(name.encode("utf-8", "surrogateescape"))
        i = bisect.bisect_left(hashes, h)
        found = []
        while i < len(hashes) and hashes[i] == h:
            if self._line_name(int(lines[i])) == name:
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
        results = []
        for line in self.lines_named(name):
            start = int(self.line_address[line])
            address = check_address(start + offset)
            rec = self.record(address, line, offset < int(self.line_size[line]))
            if module is None or (rec.modules and module in rec.modules) or \
                    (rec.ambiguous and any(module in c for c in rec.candidates)):
                results.append(rec)
        return results
