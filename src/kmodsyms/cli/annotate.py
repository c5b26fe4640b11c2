"""``kmodsyms annotate``: a filter that writes text back with its kernel
frames module-qualified.

It knows three kinds of line, and leaves every other line, and every other
part of a line, byte for byte as it was:

* ``perf script`` frames, ``ADDR SYM+OFF (DSO)``: a ``[kernel.kallsyms]``
  (or ``[kernel.vmlinux]``) DSO becomes the built-in module, ``[ext4]``, as
  perf names a loaded module; ``SYM+OFF`` stays (``[unknown]`` is named).
* kernel oops / dmesg stack traces: ``sym+0x1c/0x32e`` without a module
  gets `` [ext4]`` as the kernel prints a loaded module's frame; a bare
  ``[<ffffffff81234567>]`` gets `` sym+0x1c/0x32e [mod]`` after it.
* folded stacks (``a;b;c N``, flame graphs' input), only with
  ``folded=True``: every kernel frame gets a ``mod``` prefix.

Addresses are answered by the resolver (the kallsyms of the boot that
printed them must be the one loaded); names, which do not move with KASLR,
by name: a name in several modules is told apart by the address when the
line has one and it answers that name, else by the printed size, else it
is left as it was.  Core kernel frames keep ``[kernel.kallsyms]`` and get
no ``[mod]`` (the kernel prints none), but ``vmlinux``` when folded.
Without dtrace_syms a core line's module is not known (core kernel or any
built-in module): such a frame is left as it was, claiming no module.
"""

from __future__ import annotations

import bisect
import re

from kmodsyms.binding.records import Origin, SizeKind

KERNEL_DSOS = ("[kernel.kallsyms]", "[kernel.vmlinux]")

# perf script: "%16lx SYM (DSO)" (callchain lines start with a tab, the
# one-line form has the fields before it); SYM may be "sym", "sym+0xoff"
# or "[unknown]".
_PERF_FRAME = re.compile(r"(?P<address>\b[0-9a-f]{1,16}) (?P<symbol>\S+) "
                         r"\((?P<dso>\[kernel\.(?:kallsyms|vmlinux)\])\)")
# Kernel %pS / %pB: "sym+0xoff/0xsize", then " [mod]" or " [mod buildid]" for a module.
_KERNEL_FRAME = re.compile(r"(?<![\w.$])(?P<symbol>[A-Za-z_.$][\w.$]*)\+0x(?P<offset>[0-9a-f]+)"
                           r"/0x(?P<size>[0-9a-f]+)(?P<module> \[[^\]\s]+(?: [0-9a-f]+)?\])?")
_BRACKET_ADDRESS = re.compile(r"\[<(?P<address>[0-9a-f]{8,16})>\]")
_FOLDED = re.compile(r"^(?P<stack>.*;.*|[^\s;]+) (?P<count>\d+)(?P<end>\r?\n?)$")
_KERNEL_MARK = "_[k]"   # stackcollapse-perf.pl --kernel: a kernel frame


def shown_module(rec) -> str | None:
    """The module a frame may be given: None where it is not known (an
    ambiguous symbol's candidates in different modules; answered from
    kallsyms alone, a symbol outside loaded and pseudo-modules, which may
    be core kernel or any built-in module), as the text formats print '?'
    (kmodsyms.h, enum kms_format)."""
    if not rec.builtin_modules_known and rec.origin not in (Origin.LOADABLE, Origin.PSEUDO):
        return None
    return rec.module


class Annotator:
    """Rewrites lines against one resolver (answers cached per address and
    per name: a trace repeats its frames)."""

    def __init__(self, resolver, folded: bool = False):
        self.resolver = resolver
        self.folded = folded
        self._addresses: dict[int, object] = {}
        self._names: dict[str, list] = {}

    # ------------------------------------------------------------- answers
    def _resolve(self, address: int):
        rec = self._addresses.get(address)
        if rec is None:
            rec = self._addresses[address] = self.resolver.resolve(address)
        return rec

    def _named(self, name: str) -> list:
        recs = self._names.get(name)
        if recs is None:
            recs = self._names[name] = [rec for rec in self.resolver.lookup(name)
                                        if rec.origin in (Origin.CORE, Origin.BUILTIN)]
        return recs

    def _module_of(self, name: str, address: int | None = None, size: int | None = None):
        """The module of core-kernel symbol ``name``: from ``address`` when
        it answers that name, else the one its matches agree on, else the
        one match of printed ``size``; None when unknown or undecided, as
        without dtrace_syms, where a core line's module is not known
        (:func:`shown_module`, the text formats' rule)."""
        if address is not None:
            rec = self._resolve(address)
            if rec.symbol == name and shown_module(rec) is not None:
                return shown_module(rec)
        modules = {shown_module(rec) for rec in self._named(name)}
        if len(modules) == 1 and None not in modules:
            return modules.pop()
        if size is not None:
            sized = {shown_module(rec) for rec in self._named(name) if size in self._sizes(rec)}
            if len(sized) == 1 and None not in sized:
                return sized.pop()
        return None

    def _sizes(self, rec) -> tuple:
        """The sizes an oops may print for ``rec``'s symbol: the kernel's
        (the distance to the next kallsyms address) and the exact ELF size."""
        addresses = self.resolver.sorted_addresses()
        above = bisect.bisect_right(addresses, rec.start)
        gap = int(addresses[above]) - rec.start if above < len(addresses) else None
        return gap, rec.size if rec.size_kind == SizeKind.EXACT else None

    # --------------------------------------------------------------- lines
    def line(self, text: str) -> str:
        if self.folded:
            m = _FOLDED.match(text)
            if m:
                return self._folded(m)
        if "[kernel." in text:
            text = _PERF_FRAME.sub(self._perf_frame, text)
        if "+0x" in text or "[<" in text:
            text = self._oops(text)
        return text

    def _perf_frame(self, m: re.Match) -> str:
        address = int(m["address"], 16)
        symbol = m["symbol"]
        name = symbol.partition("+")[0]
        rec = self._resolve(address)
        if symbol == "[unknown]":
            if rec.symbol is None:
                return m[0]
            symbol = f"{rec.symbol}+{rec.offset:#x}"
            module = shown_module(rec)
        else:
            module = self._module_of(name, address)
        if module is None or module == "vmlinux":
            dso = m["dso"]
        else:
            dso = f"[{module}]"
        return f"{m['address']} {symbol} ({dso})"

    def _oops(self, text: str) -> str:
        # The address on the line, if any, tells same-named symbols apart.
        bracket = _BRACKET_ADDRESS.search(text)
        address = int(bracket["address"], 16) if bracket else None

        def frame(m: re.Match) -> str:
            if m["module"]:
                return m[0]
            module = self._module_of(m["symbol"], address, int(m["size"], 16))
            return m[0] if module in (None, "vmlinux") else f"{m[0]} [{module}]"

        annotated = _KERNEL_FRAME.sub(frame, text)
        if annotated == text and bracket and not _KERNEL_FRAME.search(text, bracket.end()):
            if self._resolve(address).symbol is not None:
                frame = self.resolver.text(address, "kernel")
                annotated = f"{text[:bracket.end()]} {frame}{text[bracket.end():]}"
        return annotated

    def _folded(self, m: re.Match) -> str:
        frames = m["stack"].split(";")
        marked = any(f.endswith(_KERNEL_MARK) for f in frames)
        out = []
        for f in frames:
            name = f[:-len(_KERNEL_MARK)] if f.endswith(_KERNEL_MARK) else f
            module = None
            if "`" not in name and (f.endswith(_KERNEL_MARK) or not marked):
                module = self._frame_module(name)
            out.append(f"{module}`{f}" if module else f)
        return f"{';'.join(out)} {m['count']}{m['end']}"

    def _frame_module(self, name: str) -> str | None:
        """A folded frame's module: a core-kernel name's, or the loaded
        module whose symbol it is (only when no core symbol has the name)."""
        module = self._module_of(name)
        if module is not None or self._named(name):
            return module
        loaded = {rec.module for rec in self.resolver.lookup(name)}
        return loaded.pop() if len(loaded) == 1 else None


def annotate(resolver, lines, write, folded: bool = False) -> None:
    """Write each of ``lines`` (str, newlines kept) annotated."""
    annotator = Annotator(resolver, folded)
    for text in lines:
        write(annotator.line(text))
