"""The run time: libkmodsyms (`libkmodsyms/`), the one resolver, bound for
Python by the extension :mod:`kmodsyms.binding._kms` that ``pip install``
compiles from the library's own sources.

:func:`load` returns a :class:`Resolver`, which answers every question
through the library: addresses (:meth:`Resolver.resolve`, the columnar
:meth:`Resolver.resolve_many`), names (:meth:`Resolver.lookup`), a
module's symbols, the kallsyms lines with their modules, the loaded
modules and their ranges.  The records are the declared types of
:mod:`kmodsyms.binding.records`.  Nothing here places, attributes or
answers by itself; nothing here imports numpy.
"""

from __future__ import annotations

import os

from kmodsyms.binding import _kms
from kmodsyms.errors import ArgumentError, KmodsymsError, StaleError
from kmodsyms.kernelnames import kernel_spelling

# The records and array name the annotations alone: imported by type
# checkers (which take any TYPE_CHECKING as true), not at run time (the
# extension imports the records with its first record; typing's import
# would cost more than they do).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from array import array

    from kmodsyms.binding.records import Info, KernelSymbol, Line, ModuleRange, ModuleStats, Symbolization

LIVE_KALLSYMS = "/proc/kallsyms"

__all__ = ["Batch", "ModuleChanges", "Resolver", "Symbolization", "load"]


_RECORDS = ("Symbolization", "Line", "ModuleStats", "ModuleRange", "Info", "KernelSymbol",
            "Origin", "Binding", "ModuleStatus", "SizeKind")


def __getattr__(name: str):
    """The records of :mod:`kmodsyms.binding.records` (``Symbolization``,
    ...), imported when first asked for here, as the extension imports
    them with its first record."""
    if name not in _RECORDS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib
    return getattr(importlib.import_module("kmodsyms.binding.records"), name)


# The formats of Resolver.text() and lookup_text(): libkmodsyms' kms_format_sym()
# (kmodsyms.h, enum kms_format), what 'kmodsyms resolve --format' prints.
FORMATS = {"verbose": _kms.FORMAT_VERBOSE, "dtrace": _kms.FORMAT_DTRACE,
           "kernel": _kms.FORMAT_KERNEL, "json": _kms.FORMAT_JSON}


class Batch(tuple):
    """What :meth:`Resolver.resolve_many` answers, as two columns of the
    addresses' length: ``lines`` (``array('i')``) the kallsyms line
    answering each address (its index in kallsyms order, as
    :meth:`Resolver.line`; ``-1`` when none does) and ``sized``
    (``array('B')``) 1 where that line's symbol holds the address."""

    __slots__ = ()

    def __new__(cls, lines: array, sized: array):
        return super().__new__(cls, (lines, sized))

    lines = property(lambda self: self[0])
    sized = property(lambda self: self[1])


class ModuleChanges(tuple):
    """What :meth:`Resolver.refresh` found: modules ``loaded``,
    ``unloaded`` and ``reloaded`` (same name, other lines or addresses),
    pseudo-modules included, in kallsyms order.  False when nothing changed."""

    __slots__ = ()

    def __new__(cls, loaded: tuple = (), unloaded: tuple = (), reloaded: tuple = ()):
        return super().__new__(cls, (tuple(loaded), tuple(unloaded), tuple(reloaded)))

    loaded = property(lambda self: self[0])
    unloaded = property(lambda self: self[1])
    reloaded = property(lambda self: self[2])

    def __bool__(self) -> bool:
        return bool(self.loaded or self.unloaded or self.reloaded)

    def __repr__(self) -> str:
        return (f"ModuleChanges(loaded={self.loaded!r}, unloaded={self.unloaded!r}, "
                f"reloaded={self.reloaded!r})")


def check_address(address) -> int:
    """``address`` as an int, if it can be a 64-bit address; else the
    :class:`KmodsymsError` a user's bad input gets."""
    import operator
    try:
        value = operator.index(address)   # ints and numpy integers; no floats or strings
    except TypeError:
        raise KmodsymsError(f"bad address {address!r}: not an integer") from None
    if value < 0:
        raise KmodsymsError(f"bad address {value:#x}: negative")
    if value >= 1 << 64:
        raise KmodsymsError(f"bad address {value:#x}: more than 64 bits")
    return value


def _name(name: str) -> bytes:
    """A symbol or module name as kallsyms' bytes."""
    return name.encode("utf-8", "surrogateescape")


def _path(path: str | None) -> bytes | None:
    return None if path is None else os.fsencode(path)


class Resolver:
    """Answers for one kernel, from a loaded libkmodsyms handle (made by
    :func:`load`).  A resolver is read-only between :meth:`refresh` calls,
    and its queries may run from several threads at once (the library's
    handle is; the GIL is released while it resolves a batch)."""

    def __init__(self, options: dict, warn):
        self._options = options
        self._handle = _open(options)
        warning = self._loaded()
        if warning:
            warn(_cli_words(warning))

    def _loaded(self) -> str:
        """The load's warning ("" for none); every loaded module's in
        ``module_warnings``."""
        self._lines = self._sorted = self._module_stats = None
        warning, self.module_warnings = self._handle.warnings()
        return warning

    @property
    def module_stats(self) -> list[ModuleStats]:
        """How each loaded module was matched with its .ko file, kallsyms order."""
        if self._module_stats is None:
            self._module_stats = self._handle.modules()
        return self._module_stats

    # ------------------------------------------------------------ addresses
    def resolve(self, address: int) -> Symbolization:
        """Answer one address (docs/resolver.md section 4)."""
        return self._handle.resolve(check_address(address))

    def text(self, address: int, fmt: str = "verbose") -> str:
        """``address`` answered as ``kmodsyms resolve --format FMT`` prints
        it (:data:`FORMATS`: libkmodsyms' ``kms_format_sym()``)."""
        return self._handle.text(check_address(address), FORMATS[fmt])

    def resolve_many(self, addresses) -> Batch:
        """Answer many addresses at once, as columns (:class:`Batch`): any
        buffer of 8-byte unsigned integers (``array('Q')``, ``bytes``, a
        numpy ``uint64`` array), or an iterable of ints.  No Python object
        is made per address; :meth:`line` or :meth:`record` make one when
        asked."""
        from array import array  # here: its import brings collections, which resolve needs not
        if not isinstance(addresses, (bytes, bytearray, memoryview, array)) and \
                not hasattr(addresses, "__array_interface__"):
            addresses = array("Q", addresses)
        n = memoryview(addresses).nbytes // 8
        lines = array("i", bytes(4 * n))
        sized = array("B", bytes(n))
        self._handle.resolve_lines(addresses, lines, sized)
        return Batch(lines, sized)

    def record(self, address: int, line: int) -> Symbolization:
        """The record of ``address`` answered by kallsyms line ``line`` (a
        :meth:`resolve_many` column's entry; -1: none, the record of
        :meth:`resolve` then)."""
        if line < 0:
            return self.resolve(address)
        return self._handle.symbol(line, check_address(address))

    # ---------------------------------------------------------------- names
    def lookup(self, name: str, module: str | None = None, offset: int = 0) -> list[Symbolization]:
        """Every symbol called ``name`` (in ``module`` if given: a built-in
        module, a loaded module, or ``vmlinux`` for core kernel), as the
        record of the address ``offset`` bytes into it, in kallsyms order."""
        if not name:
            return []
        mod = None if module is None else _name(kernel_spelling(module))
        found = self._handle.lookup(_name(name), mod, offset)
        for rec in found:
            check_address(rec.start + offset)
        return found

    def lookup_text(self, name: str, module: str | None = None, offset: int = 0,
                    fmt: str = "verbose") -> list[str]:
        """:meth:`lookup`'s matches as ``kmodsyms lookup --format FMT``
        prints them (:meth:`text`)."""
        if not name:
            return []
        if offset:
            self.lookup(name, module, offset)  # raises for an address past 64 bits
        mod = None if module is None else _name(kernel_spelling(module))
        return self._handle.lookup(_name(name), mod, offset, FORMATS[fmt])

    def module_known(self, module: str) -> bool:
        """Whether ``module`` is vmlinux, a built-in module of the file, or
        a loaded or pseudo-module of kallsyms."""
        return self._handle.module_known(_name(kernel_spelling(module)))

    def modules(self) -> list[str]:
        """Every module name: ``vmlinux``, the file's built-in modules, the
        loaded and pseudo-modules (kallsyms order)."""
        from kmodsyms.binding.records import Origin
        loaded = {}
        for line in self.lines():
            if line.origin in (Origin.LOADABLE, Origin.PSEUDO):
                loaded.update(dict.fromkeys(line.modules))
        return ["vmlinux"] + self._handle.builtin_modules() + list(loaded)

    def symbols(self, module: str) -> list[Symbolization]:
        """Every kallsyms symbol of ``module`` (built-in, loaded, or
        ``vmlinux`` for core kernel), in address order, each as the record
        of its own address."""
        lines = [self.line(i) for i in self._handle.module_lines(_name(kernel_spelling(module)))]
        lines.sort(key=lambda ln: ln.address)
        return [self._handle.symbol(ln.index, ln.address) for ln in lines]

    def kernel_symbol(self, address: int) -> KernelSymbol:
        """``address`` as the kernel's ``%pS`` prints it (kernel/kallsyms.c)."""
        return self._handle.kernel_symbol(check_address(address))

    # ---------------------------------------------------------------- lines
    def lines(self) -> list[Line]:
        """Every kallsyms line with its attribution, in kallsyms order."""
        if self._lines is None:
            self._lines = self._handle.lines()
        return self._lines

    def sorted_addresses(self) -> list[int]:
        """Every kallsyms line's address, ascending (what the kernel's
        %pS measures a symbol's size by: the gap to the next address)."""
        if self._sorted is None:
            self._sorted = sorted(ln.address for ln in self.lines())
        return self._sorted

    def line(self, index: int) -> Line:
        return self._handle.line(index)

    def __len__(self) -> int:
        return self._handle.line_count()

    def kallmodsyms(self) -> bytes:
        """The text UEK's /proc/kallmodsyms printed: ``%016x %x %c %s``,
        then ``\\t[mod]`` (several: ``\\t[a] [b]``) unless core kernel."""
        return self._handle.kallmodsyms()

    def kallmodsyms_lines(self):
        """:meth:`kallmodsyms` a line at a time, as strings without newline."""
        return self.kallmodsyms().decode("utf-8", "surrogateescape").splitlines()

    def module_ranges(self, module: str) -> list[ModuleRange]:
        """The address ranges of ``module``, ascending (``kms_module_ranges``)."""
        return self._handle.module_ranges(_name(kernel_spelling(module)))

    # ------------------------------------------------------------ the load
    @property
    def info(self) -> Info:
        return self._handle.info()

    @property
    def builtin_modules_known(self) -> bool:
        """False when answering from kallsyms alone (``degraded`` says why)."""
        return self.info.builtin_modules_known

    @property
    def degraded(self) -> str:
        """Why the load answers from kallsyms alone, or ""."""
        return _cli_words(self.info.degraded)

    def refresh(self) -> ModuleChanges:
        """Follow modules loaded or unloaded since the load (libkmodsyms'
        ``kms_refresh()``): an unchanged ``/proc/modules`` (use counts
        aside) reads nothing more; otherwise the same sources are loaded
        again and the modules compared.  Returns what changed (false when
        nothing did).  On failure the resolver is unchanged."""
        if self._options.get("text") is not None:
            raise KmodsymsError("refresh() needs kallsyms read from a path (load(kallsyms=PATH))")
        try:
            changes = ModuleChanges(*self._handle.refresh())
        except _kms.Error as e:
            code, message = e.args
            raise (StaleError if code == _kms.E_STALE else KmodsymsError)(
                _cli_words(message)) from None
        if changes:
            self._loaded()
        return changes


def json_string(text: str) -> str:
    """``text`` (its bytes, as names are decoded) as a JSON string, by the
    library's one rule (``kms_format_json_string()``)."""
    return _kms.json_string(_name(text))


def not_text(name: str, head: bytes, wanted: str) -> str | None:
    """``NAME: what it is: what to do`` when ``head``, the first bytes of
    input ``name``, is not text by the library's rule (``kms_data_kind()``,
    which names a kallsyms file the same way): compressed data is to be
    decompressed first; an ELF file or other binary data is ``not
    {wanted}``.  None for text."""
    what, compressed = _kms.data_kind(head)
    if what is None:
        return None
    return f"{name}: {what}: decompress it first" if compressed else f"{name}: {what}, not {wanted}"


def _cli_words(text: str) -> str:
    """The library's text with its remedy in the words of Python and the
    CLI: the flag KMS_LOAD_FORCE is load(force=True), --force, and the
    option kms_load_opts.modules_dir is modules_dir=, --modules-dir."""
    return text.replace(_kms.FORCE_WORD, "--force").replace(_kms.MODULES_DIR_WORD, "--modules-dir")


def _open(options: dict):
    try:
        return _kms.Handle(**options)
    except _kms.Error as e:
        code, message = e.args
        if code == _kms.E_STALE:
            raise StaleError(_cli_words(message)) from None
        if code == _kms.E_ARG:
            raise ArgumentError(_cli_words(message)) from None
        raise KmodsymsError(_cli_words(message)) from None


def load(syms: str | None = None, kallsyms: str | None = None, force: bool = False,
         fallback: bool = False, warn=None, modules_dir: str | None = None,
         sysfs_root: str | None = None, proc_modules: str | None = None,
         kallsyms_text: bytes | None = None, kallsyms_name: str | None = None) -> Resolver:
    """Load dtrace_syms (default ``/lib/modules/$(uname -r)/kernel/dtrace_syms``)
    and kallsyms (default ``/proc/kallsyms``; or ``kallsyms_text``, named
    ``kallsyms_name`` in messages) through libkmodsyms, and return a ready
    :class:`Resolver`.

    With the live ``/proc/kallsyms``, the file's kernel release and build-id
    must be the running kernel's; for any kallsyms its anchors must sit at
    their link addresses plus their segment's shift.  Raises
    :class:`KmodsymsError` (:class:`StaleError` for another kernel's file)
    with a one-line message.  ``force`` uses a mismatched file anyway.
    ``fallback`` (only when ``syms`` is not given): if the default file is
    missing, unreadable, corrupt or another kernel's, answer from kallsyms
    alone, calling ``warn(message)`` (default: :func:`warnings.warn`) once.

    Loaded modules are matched with their .ko files under ``modules_dir``,
    helped by ``sysfs_root`` (``/sys``) and ``proc_modules``
    (``/proc/modules``); with the live kallsyms these default to the
    running kernel's, with a kallsyms file only what is given is read.  A
    ``modules_dir`` that is no directory raises :class:`ArgumentError`.

    Nothing is written or deleted anywhere: a load opens only what it reads.
    """
    warn = warn or _warn
    flags = (_kms.LOAD_FORCE if force else 0) | (_kms.LOAD_FALLBACK if fallback and syms is None
                                                 else 0)
    options = dict(syms=_path(syms), kallsyms=_path(kallsyms), modules_dir=_path(modules_dir),
                   sysfs_root=_path(sysfs_root), proc_modules=_path(proc_modules), flags=flags)
    if kallsyms_text is not None:
        options.update(kallsyms=None, text=kallsyms_text,
                       name=_path(kallsyms_name or "kallsyms"))
    return Resolver(options, warn)


def _warn(message: str) -> None:
    """:func:`warnings.warn`, pointing at the code that called :func:`load`
    (the first caller outside this package)."""
    import sys
    import warnings
    level, frame = 2, sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__", "").split(".")[0] == "kmodsyms":
        level, frame = level + 1, frame.f_back
    warnings.warn(message, stacklevel=level)
