"""The commands that answer from a loaded kernel (``resolve``, ``lookup``,
``kallmodsyms``, ``modules``), shared by the typer CLI (:mod:`kmodsyms.cli.app`)
and the entry point (:mod:`kmodsyms.__main__`), which runs them without
importing typer: a ``kmodsyms resolve ADDR`` process costs the interpreter,
the extension and ``kms_load()``, little more.

One declaration of these commands (:data:`COMMANDS`, their options in
:data:`OPTIONS`): typer builds the commands from it and :func:`parse_args`
reads the same command lines with it, so the two cannot disagree on an
option.  One error wrapper
(:func:`guarded`): what a user can get wrong ends as one line on stderr and
exit status 2 on either path.  And the output: addresses parsed
(:func:`parse_address`), answers written a line at a time as libkmodsyms
formats them (:func:`write_answers`), names parsed (:func:`parse_name`).

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
                     "[mod] as the kernel's %pS, naming a built-in module as it names a loaded "
                     "one ('?' for a size kallsyms cannot tell); json: one object per line.",
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

class Argument:
    """A command's arguments: its parameter's name and its help; one or
    more are required."""

    def __init__(self, name: str, help: str):
        self.name, self.help = name, help


class Command:
    """One command that answers from a loaded kernel, declared once: its
    help, its arguments (None: it takes none) and its options, names of
    :data:`OPTIONS` in --help order (``help_of``: an option's help where
    this command's differs).  The typer CLI builds the command from it
    (:mod:`kmodsyms.cli.app`) and :func:`parse_args` reads it."""

    def __init__(self, help: str, options: tuple[str, ...], argument: Argument | None = None,
                 help_of: dict[str, str] | None = None):
        self.help, self.options, self.argument = help, options, argument
        self.help_of = help_of or {}


_ANSWER_OPTIONS = ("syms", "kallsyms", "format", "json", "strict", "force", "quiet", "modules_dir")

COMMANDS = {
    "resolve": Command(
        "Name the module, innermost symbol and offset of kernel addresses\n"
        "(DTrace's mod`sym+0xoff).", _ANSWER_OPTIONS,
        Argument("addresses", "Addresses in hex (0x optional); '-' reads one per line from "
                 "stdin and writes one line per line read, in its place: a bad line's error "
                 "(exit status 1), a blank line's empty one; stdin that is not text "
                 "(compressed, ELF, binary) is an error naming it (exit status 2).")),
    "lookup": Command(
        "Find the address of MOD`NAME (every match of a bare NAME, with its module).\n"
        "Exit status 1 when a name has no match or its module is unknown.", _ANSWER_OPTIONS,
        Argument("names", "[MOD`]NAME[+0xOFF]: MOD is a built-in module, a loaded module or "
                 "vmlinux; with +OFF the address OFF bytes into NAME.")),
    "kallmodsyms": Command(
        "Print what UEK's /proc/kallmodsyms printed ('%016x %x %c %s' then\n"
        "'\\t[mod]'), for consumers that parse it.",
        ("syms", "kallsyms", "strict", "force", "quiet", "modules_dir")),
    "modules": Command(
        "List the loaded modules: the .ko file each was matched with, and how\n"
        "many of its kallsyms lines got their ELF size from it ('no loaded\n"
        "modules' on stderr when kallsyms shows none).",
        ("syms", "kallsyms", "json", "strict", "force", "modules_dir"),
        help_of={"json": "One JSON object per module."}),
}


def parse_args(command: str, args: list[str]) -> dict | None:
    """``command``'s arguments read with its declaration (:data:`COMMANDS`)
    in the one grammar click's parser also reads them with (``--flag``,
    ``--flag VALUE``, ``--flag=VALUE``, ``-f VALUE``, ``--``): a dict of each
    of its options plus ``arguments``, or None for anything else (help, an
    unknown, abbreviated, bundled or malformed option, a missing argument),
    which the typer command then reads, and reports as a usage error."""
    declared = COMMANDS[command]
    by_flag = {flag: name for name in declared.options for flag in OPTIONS[name].flags}
    options = {name: OPTIONS[name].default for name in declared.options}
    arguments = []
    words = iter(args)
    for arg in words:
        if arg == "--":
            arguments.extend(words)
            break
        if arg == "-" or not arg.startswith("-"):
            arguments.append(arg)
            continue
        flag, eq, value = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        option = OPTIONS.get(by_flag.get(flag, ""))
        if option is None or (eq and not option.takes_value):
            return None
        if option.takes_value and not eq:
            value = next(words, None)
        if option.takes_value and (value is None or (option.choices and value not in option.choices)):
            return None
        options[by_flag[flag]] = value if option.takes_value else True
    if bool(arguments) != (declared.argument is not None):
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


def guarded(run, terminable: bool = False) -> int:
    """Call ``run()`` (returning an exit status) and turn what a user can
    cause into one line on stderr: a :class:`KmodsymsError` exits 2, a
    closed pipe 1 (as ``head`` expects), Ctrl-C 130 (each after the cleanup
    of what was under way).  ``terminable``: SIGTERM too, 143, for the
    commands that start processes or write temporary files; the others
    (resolve, lookup, kallmodsyms, modules: nothing to clean up) keep its
    default, and do not import :mod:`signal`, whose enums cost a tenth of
    a ``kmodsyms resolve``."""
    if not terminable:
        return _reported(run)
    import signal
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        return _reported(run)
    except Terminated:
        return 128 + signal.SIGTERM
    finally:
        signal.signal(signal.SIGTERM, previous)


def _reported(run) -> int:
    try:
        status = run()
        sys.stdout.flush()
        return status
    except KmodsymsError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # Python flushes stdout again at exit: point it at /dev/null first.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except KeyboardInterrupt:
        return 130


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
# Every answer is formatted by libkmodsyms (kms_format_sym(), kms_format_line()
# through Resolver.text(), lookup_text() and kallmodsyms()): kmodsyms-c
# prints the same bytes.


def _bad_line(fmt: str, text: str, number: int, error: str) -> None:
    """A bad line of ``resolve -``'s stdin, in its place: ``{"input",
    "error"}`` in JSON, else the error (and ``LINE N: ...`` on stderr)."""
    if fmt == "json":
        from kmodsyms.binding import json_string
        sys.stdout.write(f'{{"input": {json_string(text)}, "error": {json_string(error)}}}\n')
        return
    sys.stdout.write(f"? {error}\n")
    sys.stdout.flush()
    print(f"LINE {number}: {error}", file=sys.stderr)


def write_answers(answer, addresses: list[str], fmt: str) -> int:
    """``kmodsyms resolve``'s output: each of ``addresses`` (``-``: one per
    line of stdin, flushed line by line) answered by ``answer(address) ->
    str`` as one line on stdout in format ``fmt``.  Every line of
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
    return 1 if write_answers(lambda address: answers.text(address, fmt), arguments, fmt) else 0


def run_lookup(answers, specs: list[str], fmt: str) -> int:
    """``kmodsyms lookup``: every match of each ``[MOD`]NAME[+OFF]``, one
    per line; exit status 1 when a name has no match or names a module
    that is not there."""
    parsed = [parse_name(spec) for spec in specs]   # all checked before any answer
    missing = 0
    for spec, (module, name, offset) in zip(specs, parsed):
        if module is not None and not answers.module_known(module):
            missing += 1
            print(f"{PROG}: no module '{shown(module)}' (for {shown(spec)}): not vmlinux, a built-in "
                  f"module{'' if answers.builtin_modules_known else ' (unknown without dtrace_syms)'}"
                  " or a loaded module", file=sys.stderr)
            continue
        matches = answers.lookup_text(name, module, offset, fmt)
        if not matches:
            missing += 1
            print(f"{PROG}: no symbol {shown(spec)}", file=sys.stderr)
        for text in matches:
            sys.stdout.write(text + "\n")
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
    """Run one of :data:`COMMANDS` with its parsed options:
    arguments checked before anything is loaded, then the load, then the
    answers."""
    arguments = options.get("arguments", [])
    if command == "resolve":
        check_addresses(arguments)
    elif command == "lookup":
        for spec in arguments:
            parse_name(spec)
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
