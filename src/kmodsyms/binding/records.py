"""The declared types of what libkmodsyms answers, as the binding returns
them: records made in C (src/kmodsyms/binding/_kms_records.c fills these
tuples in place), and the enums of their origins and statuses.

NamedTuples of :mod:`collections` and enums (``typing.NamedTuple`` or
dataclasses would import more).  The extension imports this module when
it makes its first record and takes the types by name (``_kms_records.c``
``kmsp_records_ready``): a command that prints the library's text
(``kmodsyms resolve``) makes no record and imports none of it, nor
:mod:`enum` (a tenth of that process).
"""

from __future__ import annotations

from collections import namedtuple
from enum import Enum


class _Named(str, Enum):
    """An enum whose members are their names as strings: ``==`` a plain
    string, and written as one by ``str()``, f-strings and :mod:`json`."""

    __str__ = str.__str__
    __format__ = str.__format__


class Origin(_Named):
    """Where an answer's module comes from (``enum kms_origin``)."""

    CORE = "core"            # the core kernel: module "vmlinux"
    BUILTIN = "builtin"      # an object of one or more built-in modules
    LOADABLE = "loadable"    # a loaded module ([mod] in kallsyms)
    PSEUDO = "pseudo"        # [bpf], [__builtin__ftrace], ...


class Binding(_Named):
    """A symbol's ELF binding (STB_LOCAL, STB_GLOBAL, STB_WEAK)."""

    LOCAL = "local"
    GLOBAL = "global"
    WEAK = "weak"


class ModuleStatus(_Named):
    """How a loaded module's lines were answered (``enum kms_module_status``)."""

    MATCHED = "matched"          # its .ko is the loaded module: its lines have ELF sizes
    MISSING = "missing"          # no file found (or no modules directory): unsized
    REFUSED = "refused"          # the file is not the loaded module, or unreadable: unsized
    UNSUPPORTED = "unsupported"  # a file the library cannot read (reason says why): unsized
    DEFERRED = "deferred"        # found, not read yet (KMS_LOAD_DEFER_MODULES): unsized


class SizeKind(_Named):
    """How a size is known (``enum kms_size_kind``)."""

    UNKNOWN = "unknown"      # no ELF symbol, nothing bounds it
    EXACT = "exact"          # st_size in an ELF symbol table (vmlinux's objects, a .ko)
    ESTIMATED = "estimated"  # the gap to the next line of its module, bounded by its region


# The enum members in the C enums' order (index = the C value).
ORIGINS = (None, Origin.CORE, Origin.BUILTIN, Origin.LOADABLE, Origin.PSEUDO)
BINDINGS = (Binding.LOCAL, Binding.GLOBAL, Binding.WEAK)
STATUSES = (ModuleStatus.MATCHED, ModuleStatus.MISSING, ModuleStatus.REFUSED,
            ModuleStatus.UNSUPPORTED, ModuleStatus.DEFERRED)
SIZE_KINDS = (SizeKind.UNKNOWN, SizeKind.EXACT, SizeKind.ESTIMATED)


class Symbolization(namedtuple("Symbolization", (
        "address", "module", "modules", "origin", "symbol", "offset", "start", "size", "size_kind",
        "sized", "type", "binding", "object", "ambiguous", "candidates",
        "builtin_modules_known"))):
    """One answered address (``struct kms_sym``), modelled on perf's
    dlfilter address record.

    ``module`` is the first module (``vmlinux`` for core kernel, None when
    unknown); ``modules`` all of them in module-map order (None when
    unknown); ``origin`` an :class:`Origin` (None: no module);
    ``symbol`` the answering symbol (None: the address is in none, then
    ``offset``, ``start``, ``size``, ``size_kind`` and ``type`` are None
    too); ``offset`` the address less ``start``; ``size`` the symbol's size
    as ``size_kind`` (a :class:`SizeKind`) says it is known, exact (ELF) or
    estimated, None when unknown; ``sized`` whether ``[start, start+size)``
    holds the address, for an exact size only; ``type`` the
    kallsyms letter; ``binding`` a :class:`Binding` or None; ``object``
    the build-tree path of the object (for a loaded module, its .ko's path
    under the modules directory), None when the symbol comes from none;
    ``ambiguous`` when the object cannot be known, ``candidates`` then the
    module list of every candidate copy; ``builtin_modules_known`` False
    when answered from kallsyms alone (no usable dtrace_syms), where a
    built-in module's symbol has ``module`` None.
    """

    __slots__ = ()

    def __new__(cls, address: int, module=None, modules=None, origin=None, symbol=None,
                offset=None, start=None, size=None, size_kind=None, sized=False, type=None,
                binding=None, object=None, ambiguous=False, candidates=None,
                builtin_modules_known=True):
        return super().__new__(cls, address, module, modules, origin, symbol, offset, start,
                               size, size_kind, sized, type, binding, object, ambiguous,
                               [] if candidates is None else candidates, builtin_modules_known)

    def to_json(self) -> dict:
        """The record as ``kmodsyms resolve --json`` writes it: addresses
        in hex, ``candidates`` only when ambiguous, ``builtin_modules_known``
        only when false."""
        doc = self._asdict()
        doc["address"] = f"{self.address:#x}"
        doc["start"] = None if self.start is None else f"{self.start:#x}"
        if not self.ambiguous:
            del doc["candidates"]
        if self.builtin_modules_known:
            del doc["builtin_modules_known"]
        return doc

    def __str__(self) -> str:
        """DTrace's notation: ``0xADDR mod`sym+0xoff (0xSIZE bytes, object)``
        (``?`` for a module not known)."""
        head = f"{self.address:#x}"
        if self.symbol is None:
            where = f" {self.module}`?" if self.module else " ?"
            return head + where + (f" ({self.object})" if self.object else "")
        text = f"{head} {self.module or '?'}`{self.symbol}"
        if self.offset:
            text += f"+{self.offset:#x}"
        notes = [f"{self.size:#x} bytes" if self.sized else "unsized"]
        if self.object:
            notes.append(self.object)
        if self.ambiguous:
            notes.append("ambiguous: " + " | ".join(",".join(c) for c in self.candidates))
        return f"{text} ({', '.join(notes)})"


class Line(namedtuple("Line", ("index", "address", "size", "type", "name", "modules", "origin",
                               "binding", "object", "size_kind"))):
    """One kallsyms line with its attribution (``struct kms_line``):
    ``index`` in kallsyms order; ``size`` as ``size_kind`` (a
    :class:`SizeKind`) says it is known, exact or estimated (None when
    unknown, as in :class:`Symbolization` and :class:`KernelSymbol`);
    ``modules`` its built-in module(s) or its loaded or pseudo-module (``[]`` for the core kernel, and for an
    ambiguous line whose candidates' modules differ); ``origin`` an
    :class:`Origin`; ``binding`` a :class:`Binding` or None; ``object``
    its object (or .ko) path, None when from none."""

    __slots__ = ()


class ModuleStats(namedtuple("ModuleStats", ("name", "file", "status", "lines", "sized",
                                             "reason", "warning"))):
    """One loaded module (``struct kms_module``): the ``file`` it was
    matched with (relative to the modules directory, None when none), its
    :class:`ModuleStatus`, its kallsyms ``lines`` and how many got an ELF
    size from the file; ``reason`` (refused, unsupported: why) and
    ``warning`` (the one line to show a user), else None."""

    __slots__ = ()

    def to_json(self) -> dict:
        """As ``kmodsyms modules --json`` writes it (no warning: stderr says it)."""
        doc = self._asdict()
        del doc["warning"]
        return doc


class ModuleRange(namedtuple("ModuleRange", ("start", "end", "text"))):
    """An address range ``[start, end)`` of a module; ``text`` True for code."""

    __slots__ = ()


class KernelSymbol(namedtuple("KernelSymbol", ("address", "text", "symbol", "offset", "size",
                                               "module", "exact"))):
    """An address as the kernel's ``%pS`` prints it (``struct kms_ksym``):
    ``text`` is ``name+0xoff/0xsize [module]`` (or ``0xaddress`` when no
    symbol answers, then ``symbol``, ``offset`` and ``size`` are None);
    ``size`` the kernel's (the gap to the next kallsyms address), None
    when no end above the address is known (then ``text`` says
    ``name+0xoff/? [module]``, docs/resolver.md R55);
    ``module`` a loaded or pseudo-module, None for the core kernel and its
    built-in modules (as the kernel prints them); ``exact`` False when the
    end is only bounded (a module's core, a pseudo-module's last line)."""

    __slots__ = ()


class Info(namedtuple("Info", ("kernel_release", "build_id", "lines", "core_lines", "segments",
                               "anchors", "anchors_verified", "builtin_modules_known",
                               "degraded", "warning", "guessed_modules"))):
    """About a load (``struct kms_info``): the file's kernel release and
    vmlinux build-id ("" when not recorded), the kallsyms lines kept (of
    them core kernel), the layout's load segments, and its anchors (how
    many were found at their link address plus shift);
    ``builtin_modules_known`` False when answered from kallsyms alone,
    ``degraded`` then why, ``warning`` the one line the load gives a user
    ("" for none: the degraded reason, or what ``force`` overrode);
    ``guessed_modules`` True when the file's module map is a guess
    (``kmodsyms build --guess-modules``), not kbuild's."""

    __slots__ = ()
