"""The commands that answer from a loaded kernel (``resolve``, ``lookup``,
``kallmodsyms``, ``modules``), shared by the typer CLI (:mod:`kmodsyms.cli.app`)
and the entry point (:mod:`kmodsyms.__main__`), which runs them without
importing typer: a ``kmodsyms resolve ADDR`` process costs the interpreter,
the extension and ``kms_load()``, little more.

One table of the options (:data:`OPTIONS`, :data:`COMMAND_OPTIONS`): typer
builds its parameters from it and :func:`parse_args` reads the same command
lines with it, so the two cannot disagree on an option.  One error wrapper
(:func:`guarded`): what a user can get wrong ends as one line on stderr and
exit status 2 on either path.  And the output: addresses parsed
(:func:`parse_address`), answers formatted (:data:`FORMATS`) and written a
line at a time (:func:`write_answers`), names parsed (:func:`parse_name`).

Nothing here may pull in numpy or typer.
"""

from __future__ import annotations

import os
import sys

from kmodsyms.errors import KmodsymsError, shown
from kmodsyms.kernelnames import kernel_spelling

PROG = "kmodsyms"


# ------------------------------------------------------------------ options
class Option:
    """One command-line option: its flags, whether it takes a value (and
    which values: ``choices``), its default and its help.  (A plain class:
    the commands run without typer, :func:`fast_main`, import no
    dataclasses.)"""

    def __init__(self, flags: tuple[str, ...], help: str, takes_value: bool = False,
                 choices: tuple[str, ...] = (), default=None):
        self.flags, self.help, self.takes_value = flags, help, takes_value
        self.choices = choices
        self.default = default if takes_value else False


FORMAT_NAMES = ("verbose", "dtrace", "kernel", "json")

OPTIONS = {
    "syms": Option(("--syms", "-s"), "dtrace_syms file (default: /lib/modules/$(uname -r)/"
                   "kernel/dtrace_syms; without it, kallsyms alone answers, with a warning, "
                   "and the symbols of built-in modules show their module as '?').",
                   takes_value=True),
    "kallsyms": Option(("--kallsyms",), "kallsyms file (default: /proc/kallsyms, checked "
                       "against the running kernel).", takes_value=True),
    "format": Option(("--format", "-f"), "verbose: 0xADDR mod`sym+0xoff (size, object); "
                     "dtrace: mod`sym+0xoff as DTrace's stack(); kernel: sym+0xoff/0xsize "
                     "[mod] as the kernel's %pS ('?' for a size kallsyms cannot tell); json: "
                     "one object per line.",
                     takes_value=True, choices=FORMAT_NAMES, default="verbose"),
    "json": Option(("--json",), "Same as --format json."),
    "strict": Option(("--strict",), "Refuse to answer without a usable dtrace_syms (missing, "
                     "or for another kernel) instead of answering from kallsyms alone."),
    "force": Option(("--force",), "Use dtrace_syms even if it looks built for another "
                    "kernel (with a warning on every run)."),
    "quiet": Option(("--quiet", "-q"), "Print no warning for answering from kallsyms "
                    "alone (without a usable dtrace_syms), for scripts."),
    "modules_dir": Option(("--modules-dir",), "Where loaded modules' .ko files are "
                          "(modules.dep, else searched), for their sizes (default with "
                          "/proc/kallsyms: /lib/modules/$(uname -r); with a kallsyms file: "
                          "none).", takes_value=True),
}

# The options of the commands run without typer, in --help order
# (tests/test_frontend.py holds the typer commands to them).
COMMAND_OPTIONS = {
    "resolve": ("syms", "kallsyms", "format", "json", "strict", "force", "quiet", "modules_dir"),
    "lookup": ("syms", "kallsyms", "format", "json", "strict", "force", "quiet", "modules_dir"),
    "kallmodsyms": ("syms", "kallsyms", "strict", "force", "quiet", "modules_dir"),
    "modules": ("syms", "kallsyms", "json", "strict", "force", "modules_dir"),
}
# Commands that take no arguments, only options.
NO_ARGUMENTS = ("kallmodsyms", "modules")


def parse_args(command: str, args: list[str]) -> dict | None:
    """``command``'s arguments as its typer command takes them: a dict of
    every option of :data:`COMMAND_OPTIONS` plus ``arguments``, or None for
    whatever it does not read as typer would (help, unknown or malformed
    options, no arguments), which the typer command then handles."""
    wanted = COMMAND_OPTIONS[command]
    by_flag = {flag: name for name in wanted for flag in OPTIONS[name].flags}
    options = {name: OPTIONS[name].default for name in wanted}
    arguments = []
    i = 0
    only_arguments = False
    while i < len(args):
        arg = args[i]
        i += 1
        if only_arguments or arg == "-" or not arg.startswith("-"):
            arguments.append(arg)
            continue
        if arg == "--":
            only_arguments = True
            continue
        flag, eq, value = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        name = by_flag.get(flag)
        if name is None:
            return None
        option = OPTIONS[name]
        if not option.takes_value:
            if eq:
                return None
            options[name] = True
            continue
        if not eq:
            if i >= len(args):
                return None
            value = args[i]
            i += 1
        if option.choices and value not in option.choices:
            return None
        options[name] = value
    if bool(arguments) == (command in NO_ARGUMENTS):
        return None
    options["arguments"] = arguments
    return options


def output_format(options: dict) -> str:
    return "json" if options.get("json") else options.get("format", "verbose")


# ------------------------------------------------------------------- errors
def warn(message: str) -> None:
    print(f"{PROG}: warning: {message}", file=sys.stderr)


class Terminated(BaseException):
    """SIGTERM, raised where the process is, so that what it started is
    stopped and its temporary files removed, as Ctrl-C's KeyboardInterrupt
    does."""


def _terminated(_signum, _frame):
    raise Terminated()


def guarded(run) -> int:
    """Call ``run()`` (returning an exit status) and turn what a user can
    cause into one line on stderr: a :class:`KmodsymsError` exits 2, a
    closed pipe 1 (as ``head`` expects), Ctrl-C 130, SIGTERM 143 (each
    after the cleanup of what was under way)."""
    import signal
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        status = run()
        sys.stdout.flush()
        return status
    except Terminated:
        return 128 + signal.SIGTERM
    except KmodsymsError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # Python flushes stdout again at exit: point it at /dev/null first.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except KeyboardInterrupt:
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)


def byte_exact_stdout() -> None:
    """Names are bytes (kallsyms, ELF symbol tables) decoded with
    surrogateescape: write them back as the same bytes in any locale,
    instead of dying with UnicodeEncodeError under a strict UTF-8 one."""
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(errors="surrogateescape")


# ---------------------------------------------------------------- addresses
def _hex(text: str) -> int:
    """Hex digits, ``0x`` optional; ValueError for anything else (int()
    alone would also take signs, underscores and spaces)."""
    t = text.lower()
    t = t[2:] if t.startswith("0x") else t
    if not t or t.strip("0123456789abcdef"):
        raise ValueError(text)
    return int(t, 16)


def parse_address(text: str) -> int:
    """A kernel address as a user writes it: hex, ``0x`` optional.  The
    error quotes the text's bytes (:func:`kmodsyms.errors.shown`)."""
    t = text.strip()
    try:
        value = _hex(t[1:] if t.startswith("-") else t)
    except ValueError:
        raise KmodsymsError(f"bad address '{shown(t)}': give it in hex, "
                            "e.g. 0xffffffff81000000") from None
    if t.startswith("-"):
        raise KmodsymsError(f"bad address '{shown(t)}': negative")
    if value >= 1 << 64:
        raise KmodsymsError(f"bad address '{shown(t)}': more than 64 bits")
    return value


def parse_name(spec: str) -> tuple[str | None, str, int]:
    """``[MOD`]NAME[+OFF]`` (OFF in hex, ``0x`` optional, as DTrace prints
    it) -> (module or None, name, offset)."""
    module, tick, rest = spec.rpartition("`")
    name, plus, offset_text = rest.partition("+")
    offset = 0
    if plus:
        try:
            offset = _hex(offset_text)
        except ValueError:
            raise KmodsymsError(f"bad name '{shown(spec)}': the offset after '+' must be hex, "
                                "e.g. ext4`ext4_file_open+0x1c") from None
    if not name or (tick and not module):
        raise KmodsymsError(f"bad name '{shown(spec)}': give [MOD`]NAME[+0xOFF], "
                            "e.g. ext4`ext4_file_open+0x1c")
    return (kernel_spelling(module) if tick else None), name, offset


# ------------------------------------------------------------------ formats
def shown_module(rec) -> str | None:
    """The module a text format names: None (printed ``?``) where it is
    not known: an ambiguous symbol's candidates in different modules, or
    answered from kallsyms alone (no dtrace_syms), where a symbol outside
    loaded and pseudo-modules may be core kernel or any built-in module."""
    if not rec.builtin_modules_known and rec.origin not in ("loadable", "pseudo"):
        return None
    return rec.module


def format_verbose(rec) -> str:
    """``0xADDR mod`sym+0xoff (0xSIZE bytes, object)``: the record's own
    text, with ``?`` for a module not known."""
    if rec.module is not None and shown_module(rec) is None:
        rec = rec._replace(module=None)
    return str(rec)


def format_dtrace(rec) -> str:
    """As DTrace's ``stack()`` prints a frame: ``mod`sym+0xoff`` (no
    ``+0x0``), ``mod`0xADDR`` in a module but no symbol, else ``0xADDR``.
    ``?`` stands for a module not known (:func:`shown_module`)."""
    module = shown_module(rec)
    if rec.symbol is None:
        return f"{module}`{rec.address:#x}" if module else f"{rec.address:#x}"
    text = f"{module or '?'}`{rec.symbol}"
    return text + f"+{rec.offset:#x}" if rec.offset else text


def format_kernel(rec, ksym) -> str:
    """As the kernel's ``%pS`` prints an address (``ksym``, the library's
    kms_resolve_kernel(): the symbol the kernel picks, its offset and the
    gap to the next kallsyms address as its size, docs/resolver.md
    R53-R55), then `` [mod]`` unless it is core kernel: a built-in module
    shows as it would were it loadable, its name from ``rec`` (the
    address's record); ``[?]`` when the module is not known.  An address in
    no symbol prints as ``0xADDR``, as the kernel does."""
    if ksym.symbol is None:
        return ksym.text
    text = ksym.text.partition(" [")[0]
    module = ksym.module or shown_module(rec)
    if module is None:
        return text + " [?]"
    return text if module == "vmlinux" else f"{text} [{module}]"


def format_json(rec) -> str:
    import json  # here: a resolve of one address does not need it
    return json.dumps(rec.to_json())


FORMATS = {"verbose": format_verbose, "dtrace": format_dtrace, "json": format_json}


def address_renderer(answers, fmt: str):
    """The function that answers one address as a line of format ``fmt``:
    ``kernel`` asks the library for %pS's symbol too, the others render
    the record."""
    if fmt == "kernel":
        return lambda address: format_kernel(answers.resolve(address),
                                             answers.kernel_symbol(address))
    render = FORMATS[fmt]
    return lambda address: render(answers.resolve(address))


def _bad_line(fmt: str, text: str, number: int, error: str) -> None:
    """A bad line of ``resolve -``'s stdin, in its place: ``{"input",
    "error"}`` in JSON, else the error (and ``LINE N: ...`` on stderr)."""
    if fmt == "json":
        import json
        sys.stdout.write(json.dumps({"input": text, "error": error}) + "\n")
        return
    sys.stdout.write(f"? {error}\n")
    sys.stdout.flush()
    print(f"LINE {number}: {error}", file=sys.stderr)


def write_answers(answer, addresses: list[str], fmt: str) -> int:
    """``kmodsyms resolve``'s output: each of ``addresses`` (``-``: one per
    line of stdin, flushed line by line) answered by ``resolve(address) ->
    Symbolization`` as one line on stdout in format ``fmt``.  Every line of
    stdin gets one line of output, so that ``paste`` pairs them: a blank one
    an empty line (JSON: ``{"input": ""}``), a bad one its error in its
    place (:func:`_bad_line`), which does not stop the rest.  Stdin is read
    as bytes (decoded as names are, whatever the locale); one whose first
    line is not text (:func:`kmodsyms.binding.not_text`: compressed, ELF,
    binary) is an error.  Returns how many were bad (the caller refuses bad
    arguments before loading anything)."""
    bad = 0
    for arg in addresses:
        if arg != "-":
            sys.stdout.write(answer(parse_address(arg)) + "\n")
            continue
        for number, raw in enumerate(sys.stdin.buffer, 1):
            if number == 1:
                from kmodsyms.binding import not_text
                what = not_text("<stdin>", raw, "addresses: give one hex address a line")
                if what:
                    raise KmodsymsError(what)
            text = raw.decode("utf-8", "surrogateescape").strip()
            if not text:
                sys.stdout.write('{"input": ""}\n' if fmt == "json" else "\n")
                continue
            try:
                address = parse_address(text)
            except KmodsymsError as e:
                bad += 1
                _bad_line(fmt, text, number, str(e))
                continue
            sys.stdout.write(answer(address) + "\n")
            sys.stdout.flush()
    return bad


def check_addresses(arguments: list[str]) -> None:
    """Refuse a bad address argument before anything is loaded."""
    for arg in arguments:
        if arg != "-":
            parse_address(arg)


def check_modules_dir(path: str | None) -> None:
    """Refuse a --modules-dir that is no directory before anything is
    loaded: the library would read no .ko from it, and say nothing."""
    if path is not None and not os.path.isdir(path):
        what = "not a directory" if os.path.exists(path) else "no such directory"
        raise KmodsymsError(f"{path}: {what} (--modules-dir: where the loaded modules' .ko "
                            "files are, /lib/modules/RELEASE)")


# ----------------------------------------------------------------- commands
def load_resolver(options: dict, quiet: bool = False):
    """The resolver a command's options ask for (:func:`kmodsyms.load`):
    answering from kallsyms alone, with one warning (none when ``quiet``),
    when the default dtrace_syms is not usable, unless ``--strict``."""
    from kmodsyms.binding import load
    resolver = load(syms=options["syms"], kallsyms=options["kallsyms"], force=options["force"],
                    fallback=not options["strict"] and options["syms"] is None,
                    warn=(lambda message: None) if quiet else warn,
                    modules_dir=options["modules_dir"])
    for warning in resolver.module_warnings:
        warn(warning)
    return resolver


def run_resolve(answers, arguments: list[str], fmt: str) -> int:
    """``kmodsyms resolve`` on a loaded resolver: exit status 1 when a line
    of stdin was bad, else 0."""
    return 1 if write_answers(address_renderer(answers, fmt), arguments, fmt) else 0


def run_lookup(answers, specs: list[str], fmt: str) -> int:
    """``kmodsyms lookup``: every match of each ``[MOD`]NAME[+OFF]``, one
    per line; exit status 1 when a name has no match or names a module
    that is not there."""
    render = FORMATS[fmt] if fmt != "kernel" else \
        (lambda rec: format_kernel(rec, answers.kernel_symbol(rec.address)))
    parsed = [parse_name(spec) for spec in specs]   # all checked before any answer
    missing = 0
    for spec, (module, name, offset) in zip(specs, parsed):
        if module is not None and not answers.module_known(module):
            missing += 1
            print(f"{PROG}: no module '{shown(module)}' (for {shown(spec)}): not vmlinux, a built-in "
                  f"module{'' if answers.builtin_modules_known else ' (unknown without dtrace_syms)'}"
                  " or a loaded module", file=sys.stderr)
            continue
        matches = answers.lookup(name, module, offset)
        if not matches:
            missing += 1
            print(f"{PROG}: no symbol {shown(spec)}", file=sys.stderr)
        for rec in matches:
            sys.stdout.write(render(rec) + "\n")
    return 1 if missing else 0


def run_kallmodsyms(answers) -> int:
    sys.stdout.flush()
    sys.stdout.buffer.write(answers.kallmodsyms())
    return 0


def run_modules(answers, as_json: bool, kallsyms: str | None) -> int:
    """``kmodsyms modules``: each loaded module, its file, status and sizes;
    none loaded is said on stderr (stdout stays the list: empty)."""
    if not answers.module_stats:
        print(f"{PROG}: no loaded modules (no '[MODULE]' line in {kallsyms or '/proc/kallsyms'})",
              file=sys.stderr)
    if as_json:
        import json
    for st in answers.module_stats:
        if as_json:
            sys.stdout.write(json.dumps(st.to_json()) + "\n")
        else:
            note = st.file or "-"
            if st.reason:
                note += f" (refused: {st.reason})"
            sys.stdout.write(f"{st.name}\t{st.status}\t{st.sized}/{st.lines} sized\t{note}\n")
    return 0


def run_command(command: str, options: dict) -> int:
    """Run one of :data:`COMMAND_OPTIONS`' commands with its parsed options:
    arguments checked before anything is loaded, then the load, then the
    answers."""
    arguments = options.get("arguments", [])
    if command == "resolve":
        check_addresses(arguments)
    elif command == "lookup":
        for spec in arguments:
            parse_name(spec)
    check_modules_dir(options["modules_dir"])
    # 'modules' needs no dtrace_syms: answering without one is not worth a warning.
    resolver = load_resolver(options, quiet=options.get("quiet") or command == "modules")
    if command == "resolve":
        return run_resolve(resolver, arguments, output_format(options))
    if command == "lookup":
        return run_lookup(resolver, arguments, output_format(options))
    if command == "kallmodsyms":
        return run_kallmodsyms(resolver)
    return run_modules(resolver, options["json"], options["kallsyms"])


def fast_main(command: str, args: list[str]) -> int | None:
    """``kmodsyms COMMAND ARGS`` without typer: the exit status, or None
    when the arguments are not ones :func:`parse_args` reads (help,
    unknown or malformed options), which the typer CLI then handles."""
    options = parse_args(command, args)
    if options is None:
        return None
    byte_exact_stdout()
    return guarded(lambda: run_command(command, options))
