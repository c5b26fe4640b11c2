"""The ``kmodsyms`` command line (typer).

Every command turns bad input into one line on stderr and exit status 2
(see :mod:`kmodsyms.errors`); nothing here prints a traceback for input a
user can get wrong.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Annotated, List, Optional

import typer

from kmodsyms import __version__
from kmodsyms.cli.frontend import (
    COMMANDS,
    OPTIONS,
    byte_exact_stdout,
    guarded,
    load_resolver,
    parse_address,
    run_command,
    warn,
)
from kmodsyms.errors import ArgumentError, KmodsymsError, shown
from kmodsyms.kernelnames import kernel_spelling

app = typer.Typer(
    no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
    # Plain help text: rich markup would take '[mod]' for a style tag and eat it.
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]})


def _version(value: bool) -> None:
    if value:
        typer.echo(f"kmodsyms {__version__}")
        raise typer.Exit(0)


@app.callback()
def _main(version: bool = typer.Option(False, "--version", is_eager=True, callback=_version,
                                       help="Print the version and exit.")):
    """Which built-in kernel module every kernel symbol belongs to: build a
    dtrace_syms file from a kernel build tree, then resolve addresses and
    names against /proc/kallsyms in DTrace's mod`sym+off notation."""

def _die(message: str, status: int = 2) -> None:
    typer.echo(f"kmodsyms: error: {message}", err=True)
    raise typer.Exit(status)


class _Progress:
    """A progress bar on a terminal, nothing otherwise."""

    def __init__(self, total: int, label: str):
        self.bar = None
        if sys.stderr.isatty() and total:
            from rich.progress import Progress
            self.bar = Progress(transient=True)
            self.task = self.bar.add_task(label, total=total)

    def __enter__(self):
        if self.bar:
            self.bar.start()
        return self

    def advance(self, n: int) -> None:
        if self.bar:
            self.bar.advance(self.task, n)

    def __exit__(self, *exc):
        if self.bar:
            self.bar.stop()


class _Phases:
    """One progress bar per phase of a long build on a terminal (phases
    run side by side: the source unpacked while the DWARF is read);
    nothing otherwise."""

    def __init__(self, quiet: bool):
        self.bar = None
        self.tasks: dict[str, int] = {}
        if sys.stderr.isatty() and not quiet:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn
            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(),
                                console=Console(stderr=True), transient=True)

    def __enter__(self):
        if self.bar:
            self.bar.start()
        return self

    def __call__(self, phase: str, done: int, total: int) -> None:
        """``total`` 0: a phase whose length is not known (a bar that pulses)."""
        if not self.bar:
            return
        task = self.tasks.get(phase)
        if task is None:
            task = self.tasks[phase] = self.bar.add_task(phase, total=total or None)
        self.bar.update(task, completed=done, total=total or None)

    def __exit__(self, *exc):
        if self.bar:
            self.bar.stop()


def _jobs(jobs: Optional[int]) -> int:
    if jobs is not None and jobs < 1:
        _die(f"-j {jobs}: give a number of processes of 1 or more (default: the CPU count)")
    return jobs or 0


@app.command()
def build(
    kbuild: Optional[str] = typer.Option(None, "--kbuild", "-k", help="Kernel build tree (objtree)."),
    thick: Optional[str] = typer.Option(
        None, "--thick", help="modules_thick.builtin to use (default: DIR/modules_thick.builtin, "
                              "then DIR/modules.builtin.objs, else derived from .cmd files)."),
    output: Optional[str] = typer.Option(None, "--output", "-o", help="Output file (default: "
                                         "DIR/dtrace_syms; from a tree, OUTPUT.cache too: see "
                                         "--no-cache)."),
    jobs: Optional[int] = typer.Option(None, "--jobs", "-j", show_default=False,
                                       help="Parallel processes (default: the CPU count)."),
    allow_missing: bool = typer.Option(False, "--allow-missing",
                                       help="Warn about (and record) missing objects instead of failing."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Neither read nor write OUTPUT.cache "
                                  "(each object's scan, kept beside the output so that a later "
                                  "build of the tree rescans only what changed): rescan every "
                                  "object."),
    no_layout: bool = typer.Option(False, "--no-layout",
                                   help="Do not record link addresses from vmlinux and System.map "
                                        "(a file without them cannot be loaded: for the "
                                        "layout search's tests)."),
    source: Optional[str] = typer.Option(
        None, "--source", help="Kernel source (directory or tarball): take the module map from its "
                               "kbuild Makefiles evaluated against the kernel's config (with --kbuild: "
                               "DIR/.config, for a tree without .cmd files; with --debuginfo, default: "
                               "/usr/src/linux-source-X.Y.tar.xz of the kernel's X.Y)."),
    debuginfo: bool = typer.Option(
        False, "--debuginfo", help="Build from a distribution's debug vmlinux (its -dbg/-debuginfo "
                                   "package) instead of a build tree: each input defaults to where "
                                   "the distribution keeps it (docs/distributions.md)."),
    vmlinux: Optional[str] = typer.Option(
        None, "--vmlinux", help="With --debuginfo: the debug vmlinux (default: the running kernel's, "
                                "or --release's, in /usr/lib/debug)."),
    release: Optional[str] = typer.Option(
        None, "--release", help="With no build tree: the kernel release whose distribution files to "
                                "read (default: the debug vmlinux's name, else the running kernel)."),
    root: Optional[str] = typer.Option(
        None, "--root", help="With --debuginfo: look for the distribution's files under this "
                             "directory instead of / (a package tree unpacked with dpkg-deb -x, a "
                             "mounted image)."),
    system_map: Optional[str] = typer.Option(None, "--system-map", help="With --debuginfo: System.map "
                                             "(default: the one beside the debug vmlinux, else "
                                             "/usr/lib/debug/boot or /boot/System.map-REL)."),
    config: Optional[str] = typer.Option(None, "--config", help="With --debuginfo: the kernel's config "
                                         "(default: /boot/config-REL, else /usr/lib/modules/REL/config)."),
    modules_dir: Optional[str] = typer.Option(None, "--modules-dir", help="With --debuginfo: "
                                              "/lib/modules/REL or /usr/lib/modules/REL (modules.builtin)."),
    guess_modules: bool = typer.Option(False, "--guess-modules", help="With --debuginfo and no --source: "
                                       "guess each object's module from modules.builtin.modinfo's file= "
                                       "entries (not exact; recorded as such)."),
    force: bool = typer.Option(False, "--force", help="With --debuginfo: write the file even when the "
                               "module map fails its self-check (recorded in the file; every load "
                               "warns)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars (shown on a terminal only)."),
    as_json: bool = typer.Option(False, "--json", help="With --debuginfo: print the summary as JSON."),
):
    """Scan a kernel build tree into one dtrace_syms file, or build one from
    a distribution's debug vmlinux (--debuginfo)."""
    from kmodsyms.scan.elf.archive import vmlinux_objects
    from kmodsyms.scan.modmap.choose import choose_module_map
    from kmodsyms.scan.writer import build as run_build
    jobs = _jobs(jobs)
    if debuginfo or vmlinux or release or root or system_map or config or modules_dir or guess_modules:
        if kbuild:
            _die("give --kbuild, or --debuginfo and its files, not both")
        if root and not os.path.isdir(root):
            _die(f"{root}: no such directory (--root: where the distribution's files are unpacked)")
        _build_debuginfo(vmlinux or "", release, root or "/", system_map, config, modules_dir, source,
                         guess_modules, output, jobs, as_json, force, quiet)
        return
    if force:
        _die("--force is for --debuginfo builds: a build tree's module map is kbuild's own")
    if not kbuild:
        _die("give the kernel build tree (--kbuild DIR), or build from a debug vmlinux (--debuginfo)")
    if not os.path.isdir(kbuild):
        _die(f"{kbuild}: not a directory (give the kernel build tree with --kbuild)")
    if source and thick:
        _die("give --thick or --source, not both")
    thick_map, thick_source = choose_module_map(kbuild, thick, source)
    output = output or os.path.join(kbuild, "dtrace_syms")
    # The bar's length costs a second read of vmlinux.a: only on a terminal.
    total = len(vmlinux_objects(kbuild)[0]) if sys.stderr.isatty() and not quiet else 0
    with _Progress(total, "scanning objects") as bar:
        result = run_build(kbuild, thick_map, thick_source, output, jobs=jobs,
                           allow_missing=allow_missing, progress=bar.advance,
                           use_cache=not no_cache, layout=not no_layout)
    for path in result.missing[:10]:
        typer.echo(f"kmodsyms: warning: missing object {path} (recorded in the header)", err=True)
    typer.echo(f"{result.output}: {result.objects} objects (from {result.object_source}), "
               f"{result.symbols} symbols, {result.modules} built-in modules "
               f"(module map: {result.thick_source}), {result.layout}, {result.seconds:.2f}s")


def _release_under(root: str) -> str:
    """The one release whose debug vmlinux ``root`` holds."""
    import glob
    found = sorted({os.path.basename(p)[len("vmlinux-"):] for p in glob.glob(os.path.join(
        glob.escape(root), "usr/lib/debug/boot/vmlinux-*"))} | {os.path.basename(os.path.dirname(p)) for p in
        glob.glob(os.path.join(glob.escape(root), "usr/lib/debug/lib/modules/*/vmlinux"))})
    if len(found) > 1:
        _die(f"{root} holds the debug vmlinux of several releases ({', '.join(found)}): give --release")
    return found[0] if found else ""


def _build_debuginfo(vmlinux, release, root, system_map, config, modules_dir, source, guess_modules,
                     output, jobs, as_json, force, quiet) -> None:
    from kmodsyms.scan.debuginfo.debuginfo import build_from_debuginfo, default_inputs, default_source, release_of_vmlinux
    if source and guess_modules:
        _die("give --source or --guess-modules, not both")
    if config and guess_modules:
        # Not read when the modules are guessed, but a file named must be a config.
        from kmodsyms.scan.modmap.makeeval import config_header
        config_header(config)
    if not output:
        _die("give the output file (-o FILE) to build from debug info")
    release = release or (release_of_vmlinux(vmlinux) if vmlinux else "") or \
        (_release_under(root) if root != "/" else "")
    inputs = default_inputs(release, vmlinux, root)
    inputs.system_map = system_map or inputs.system_map
    inputs.config = config or inputs.config
    inputs.modules_dir = modules_dir or inputs.modules_dir
    if not source and not guess_modules:
        source = default_source(inputs.release, os.path.join(root, "usr/src"))
    with _Phases(quiet) as phases:
        r = build_from_debuginfo(inputs, output, source, guess_modules=guess_modules, jobs=jobs,
                                 force=force, progress=phases, warn=warn)
    if as_json:
        typer.echo(json.dumps(r.summary(), indent=2))
        return
    c = r.counts
    typer.echo(f"{r.output}: {r.symbols} symbols, {r.objects} objects (from debug info), "
               f"{r.modules} built-in modules (module map: {r.module_map}), link layout recorded, "
               f"{r.seconds:.2f}s")
    typer.echo(f"  of {c['symbols']} System.map symbols: {c['symbols'] - c['unattributed']} "
               f"attributed ({c['file run']} by file run, {c['code range']} by code range, "
               f"{c['variable']} by variable, {c['padding']} __pfx_, {c['static call']} __SCT__), "
               f"{c['beside vmlinux.a']} of them in objects the final link adds beside vmlinux.a; "
               f"{c['no object']} of units of no object, {c['unattributed']} unattributed "
               "(in no object: see --json)")
    if r.self_check:
        k = r.self_check
        typer.echo(f"  self-check: {k['initcalls_wrong']} of {k['initcalls_checked']} __initcall__kmod_ "
                   f"symbols and {k['params_wrong']} of {k['params_checked']} __param_ symbols of "
                   "modules.builtin.modinfo's parameters name another built-in module than their "
                   f"object's ({k['initcalls_outside'] + k['params_outside']} others name a module "
                   "that is not built in, as their object does)")


@app.command()
def info(
    file: str = typer.Argument(..., help="A dtrace_syms file."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
):
    """Show a dtrace_syms file's header, counts and modules."""
    from kmodsyms.format.fileformat import FLAG_FORCED, FLAG_FROM_DEBUG_INFO, FLAG_GUESSED_MODULES, FORMAT_VERSION
    from kmodsyms.format.symsfile import read_syms
    syms = read_syms(file)
    counts = syms.module_symbol_counts()
    core = int((syms.symbols["modset"] == 0).sum())
    doc = {
        "format_version": FORMAT_VERSION,
        "kernel_release": syms.meta_kernel_release or None,
        "build_id": syms.meta_build_id or None,
        "tool_version": syms.meta_tool_version,
        "object_source": syms.meta_object_source,
        "module_map": syms.meta_thick_source,
        "objects": len(syms.objects),
        "sections": len(syms.sections),
        "symbols": len(syms.symbols),
        "core_symbols": core,
        "missing_objects": syms.missing_objects,
        "from_debug_info": bool(syms.flags & FLAG_FROM_DEBUG_INFO),
        "modules_guessed": bool(syms.flags & FLAG_GUESSED_MODULES),
        "forced": bool(syms.flags & FLAG_FORCED),
        "layout": ({"segments": len(syms.segments), "anchors": len(syms.anchors),
                    "placement": syms.placement_stats}
                   if syms.has_layout else None),
        "modules": [{"name": n, "symbols": c} for n, c in zip(syms.module_names, counts)],
    }
    if as_json:
        typer.echo(json.dumps(doc, indent=2))
        return
    width = max([len(m) for m in syms.module_names] + [6])
    typer.echo(f"file:            {file}\n"
               f"format version:  {doc['format_version']}\n"
               f"kernel release:  {doc['kernel_release'] or '(unknown)'}\n"
               f"build-id:        {doc['build_id'] or '(unknown)'}\n"
               f"written by:      {doc['tool_version']}\n"
               f"objects:         {doc['objects']} (from {doc['object_source']})\n"
               f"module map:      {doc['module_map']}\n"
               + ("FORCED:          written with --force past a failed check (above); its "
                  "answers may be wrong\n" if doc["forced"] else "")
               + f"symbols:         {doc['symbols']} ({core} core kernel)\n"
               f"built-in modules: {len(counts)}")
    layout = doc["layout"]
    debug = layout["placement"].get("debug_info") if layout else None
    if doc["from_debug_info"] and debug:
        check = debug.get("self_check") or {}
        typer.echo(f"built from:      debug info{' (modules GUESSED from modules.builtin.modinfo)' if doc['modules_guessed'] else ''}; "
                   f"of {debug['symbols']} System.map symbols, "
                   f"{debug['symbols'] - debug['unattributed'] - debug['no object']} in an object of "
                   f"vmlinux ({debug.get('beside vmlinux.a', 0)} of them beside vmlinux.a: "
                   f".vmlinux.export.o...), {debug['no object']} in units of no object, "
                   f"{debug['unattributed']} in no unit"
                   + (f"; self-check: {check['initcalls_wrong']} of {check['initcalls_checked']} "
                      f"__initcall__kmod_ and {check.get('params_wrong', 0)} of "
                      f"{check.get('params_checked', 0)} __param_ symbols in another module"
                      if check else ""))
        typer.echo(f"link layout:     from debug info: {len(syms.sections)} sections at their link "
                   f"addresses; {layout['segments']} segments")
    elif layout:
        p = layout["placement"]
        typer.echo(f"link layout:     {len(syms.sections) - p['sections_unplaced']} of "
                   f"{len(syms.sections)} sections placed against System.map "
                   f"({p['sections_by_anchor']} by anchors, {p['sections_by_elimination']} by "
                   f"elimination, {p['sections_by_neighbours']} by link order); "
                   f"{p['lines_ambiguous']} ambiguous symbols; {layout['segments']} segments")
    else:
        typer.echo("link layout:     none (placed by searching kallsyms at load time)")
    if doc["missing_objects"]:
        typer.echo(f"missing objects: {len(doc['missing_objects'])}: "
                   + " ".join(doc["missing_objects"][:5]))
    for name, count in zip(syms.module_names, counts):
        typer.echo(f"  {name:<{width}} {count:>7}")


@app.command()
def dump(
    file: str = typer.Argument(..., help="A dtrace_syms file."),
    module: Optional[str] = typer.Option(None, "--module", "-m", help="Only entries of this built-in module "
                                                                     "('vmlinux' for core kernel)."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object per line."),
):
    """Print the symbol entries of a dtrace_syms file, in file order."""
    import numpy as np

    from kmodsyms.format.symsfile import read_syms
    syms = read_syms(file)
    indices = range(len(syms.symbols))
    if module is not None:
        wanted = kernel_spelling(module)
        if wanted == "vmlinux":
            sets = [0]
        elif wanted in syms.module_names:
            m = syms.module_names.index(wanted)
            sets = [i for i, ms in enumerate(syms.modset_modules) if m in ms]
        else:
            _die(f"no built-in module '{shown(module)}' in {file} (see 'kmodsyms info {file}')")
        indices = np.flatnonzero(np.isin(syms.symbols["modset"], sets)).tolist()
    out = sys.stdout
    for i in indices:
        e = syms.entry(i)
        if as_json:
            out.write(json.dumps(e) + "\n")
        else:
            mods = ",".join(e["modules"]) or "vmlinux"
            out.write(f"{e['name']}\t{mods}\t{e['object']}\t{e['section']}+{e['value']:#x}\t"
                      f"{e['size']}\t{e['type']}\t{e['binding']}\n")


@app.command()
def thick(
    kbuild: str = typer.Option(..., "--kbuild", "-k", help="Kernel build tree (objtree)."),
    output: Optional[str] = typer.Option(None, "--output", "-o", help="Write here instead of stdout."),
):
    """Derive modules_thick.builtin from a kbuild tree's .cmd files (KBUILD_MODFILE)."""
    from kmodsyms.format.symsfile import write_atomic
    from kmodsyms.scan.modmap.kbuild import derive_thick
    text = derive_thick(kbuild).format()
    if output:
        write_atomic(output, text.encode())
    else:
        sys.stdout.write(text)


@app.command()
def ranges(
    syms: str = typer.Option(..., "--syms", "-s", help="A dtrace_syms file with its link layout "
                                                       "(built from a tree or with --debuginfo)."),
    output: Optional[str] = typer.Option(None, "--output", "-o", help="Write here (atomically) "
                                         "instead of stdout."),
    as_json: bool = typer.Option(False, "--json", help="The same ranges as one JSON object: the "
                                 "anchor, each range's link addresses and modules, and what "
                                 "dtrace's reading cannot be given."),
):
    """Write the kernel's modules.builtin.ranges from a dtrace_syms file's
    link layout, shaped so that dtrace-utils, reading it beside
    /proc/kallsyms, files every line of a built-in module under it (see
    docs/dtrace-utils.md)."""
    from kmodsyms.format.ranges import format_ranges, plan, to_json
    from kmodsyms.format.symsfile import read_syms, write_atomic
    p = plan(read_syms(syms))
    text = json.dumps(to_json(p), indent=2) + "\n" if as_json else format_ranges(p)
    if output:
        write_atomic(output, text.encode())
        s = p.summary()
        anchor = f" after the anchor {p.groups[0].anchor}" if p.groups else ""
        typer.echo(f"{output}: {s['ranges']} ranges of {s['modules']} built-in modules{anchor}; "
                   f"{s['shortened']} end a byte short of their objects, where the next begins; "
                   f"{s['conflicts']} cannot (their last byte is a symbol): the next one's first "
                   "line dtrace reads as vmlinux's")
    else:
        sys.stdout.write(text)


@app.command()
def install(
    syms: Optional[str] = typer.Option(None, "--syms", "-s", help="dtrace_syms to install (default: "
                                       "DIR/dtrace_syms of --kbuild, built if absent)."),
    release: Optional[str] = typer.Option(None, "--release", help="Kernel release; the file must be "
                                          "built for it (default: DIR/include/config/kernel.release "
                                          "of --kbuild, else the release the file records)."),
    mod_path: str = typer.Option("", "--mod-path", help="Prefix, as make's INSTALL_MOD_PATH (default: none)."),
    kbuild: Optional[str] = typer.Option(None, "--kbuild", "-k", help="Kernel build tree (objtree), "
                                         "for the defaults of --syms and --release."),
    force: bool = typer.Option(False, "--force", help="Replace a modules.builtin.ranges that "
                               "kmodsyms install did not write (the kernel's own)."),
):
    """Install dtrace_syms as MOD_PATH/lib/modules/RELEASE/kernel/dtrace_syms
    (what 'make dtrace_syms_install' does), and the modules.builtin.ranges
    that 'kmodsyms ranges' writes from it as
    MOD_PATH/lib/modules/RELEASE/modules.builtin.ranges, where dtrace-utils
    reads it, unless the kernel has its own there.  Prints each path
    written; a file kept, and why, is one line on stderr."""
    from kmodsyms.scan.install import install as run_install
    done = run_install(kbuild, syms=syms, mod_path=mod_path, release=release, force=force)
    typer.echo(done.syms)
    if done.ranges:
        typer.echo(done.ranges)
    if done.note:
        warn(done.note)


@app.command()
def verify(
    kbuild: str = typer.Option(..., "--kbuild", "-k", help="Kernel build tree with System.map, and "
                                                           "modules.builtin.ranges and/or vmlinux.map (+ vmlinux.o.map when "
                                                           "vmlinux is linked from vmlinux.o)."),
    syms: Optional[str] = typer.Option(None, "--syms", "-s", help="dtrace_syms to check (default: DIR/dtrace_syms)."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
):
    """Check our module attribution of every System.map symbol against
    upstream's modules.builtin.ranges and the linker maps.  Exit 1 on any
    disagreement with the linker maps."""
    from kmodsyms.scan.verify import verify as run_verify
    report = run_verify(kbuild, syms or os.path.join(kbuild, "dtrace_syms"))
    typer.echo(json.dumps(report.to_json(), indent=2) if as_json else report.format())
    raise typer.Exit(report.exit_status())


def _option(name: str, help: str | None = None):
    """The typer option of the shared table (kmodsyms.cli.frontend.OPTIONS),
    which kmodsyms.cli.frontend.parse_args reads too, for an Annotated
    parameter type (the parameter's default is the table's)."""
    option = OPTIONS[name]
    help = help or option.help
    if not option.choices:
        return typer.Option(*option.flags, help=help, show_default=False)

    def one_of_choices(value: str) -> str:
        if value not in option.choices:
            raise typer.BadParameter(f"'{shown(value)}' is not one of {', '.join(option.choices)}")
        return value

    return typer.Option(*option.flags, help=help, show_default=True,
                        metavar="[" + "|".join(option.choices) + "]", callback=one_of_choices)


def _option_type(name: str, help: str | None = None):
    """The Annotated parameter type of the shared option NAME."""
    option = OPTIONS[name]
    python_type = bool if not option.takes_value else str if option.default is not None \
        else Optional[str]
    return Annotated[python_type, _option(name, help)]


def _options(**given) -> dict:
    """A command's options as :func:`kmodsyms.cli.frontend.run_command` takes
    them (the same dict :func:`kmodsyms.cli.frontend.parse_args` makes)."""
    options = {name: OPTIONS[name].default for name in OPTIONS}
    options.update(given)
    return options


def _add_command(name: str) -> None:
    """The typer command of kmodsyms.cli.frontend.COMMANDS[name], the one
    declaration that kmodsyms.cli.frontend.parse_args reads too."""
    import inspect
    declared = COMMANDS[name]
    params = []
    if declared.argument:
        argument = declared.argument
        params.append(inspect.Parameter(argument.name, inspect.Parameter.KEYWORD_ONLY, annotation=Annotated[
            List[str], typer.Argument(help=argument.help, show_default=False)]))
    for option in declared.options:
        params.append(inspect.Parameter(option, inspect.Parameter.KEYWORD_ONLY,
                                        default=OPTIONS[option].default,
                                        annotation=_option_type(option, declared.help_of.get(option))))

    def command(**given):
        if declared.argument:
            given["arguments"] = given.pop(declared.argument.name)
        raise typer.Exit(run_command(name, _options(**given)))

    command.__signature__ = inspect.Signature(params)
    command.__doc__ = declared.help
    app.command(name)(command)


for _name in ("resolve", "lookup", "kallmodsyms"):
    _add_command(_name)


@app.command()
def annotate(
    files: Optional[List[str]] = typer.Argument(None, help="Text to annotate (default, or '-': "
                                                           "stdin)."),
    folded: bool = typer.Option(False, "--folded", help="Read folded stacks ('a;b;c N', as "
                                                        "flame graphs take them): prefix every "
                                                        "kernel frame with mod`."),
    syms: _option_type("syms") = None,
    kallsyms: _option_type("kallsyms") = None,
    strict: _option_type("strict") = False,
    force: _option_type("force") = False,
    quiet: _option_type("quiet") = False,
    modules_dir: _option_type("modules_dir") = None,
):
    """Copy text to stdout with its kernel frames module-qualified: 'perf
    script' frames of [kernel.kallsyms] name their built-in module ([ext4]);
    oops and dmesg traces get ' [mod]' after 'sym+0xoff/0xsize' and
    'sym+0xoff/0xsize [mod]' after a bare '[<address>]'; with --folded,
    folded stacks get 'mod`' before each kernel frame.  Everything else is
    left as it was.  What it cannot annotate passes through unchanged, with
    one warning: all of it when kallsyms cannot be read (its addresses
    hidden from this user, say; with --strict that is an error), and a file
    that is not text (compressed, ELF, binary)."""
    import shutil

    from kmodsyms.binding import not_text
    from kmodsyms.cli.annotate import annotate as run_annotate
    readers = []
    for path in files or ["-"]:
        try:
            readers.append(("<stdin>", sys.stdin.buffer) if path == "-" else (path, open(path, "rb")))
        except OSError as e:
            raise KmodsymsError(f"cannot read {path}: {e.strerror}") from None
    out = sys.stdout.buffer
    try:
        resolver = load_resolver(_options(syms=syms, kallsyms=kallsyms, strict=strict, force=force,
                                          modules_dir=modules_dir), quiet=quiet)
    except KmodsymsError as e:
        # A filter passes its input through when it cannot add to it (kallsyms
        # hidden from this user, say): one warning, the text unchanged.  A
        # mistyped argument is no such reason.
        if strict or isinstance(e, ArgumentError):
            raise
        warn(f"{e}; the text passes through unannotated")
        for _name, reader in readers:
            shutil.copyfileobj(reader, out)
        return

    def lines():
        """The lines of every input, but an input that is not text (judged
        by its first line, as the library judges a file by its start),
        copied through as it is."""
        for name, reader in readers:
            first = reader.readline()
            what = not_text(name, first, "text")
            if what:
                warn(f"{what}; it passes through unannotated")
                out.write(first)
                shutil.copyfileobj(reader, out)
                continue
            yield first.decode("utf-8", "surrogateescape")
            for raw in reader:
                yield raw.decode("utf-8", "surrogateescape")

    run_annotate(resolver, lines(), lambda text: out.write(text.encode("utf-8", "surrogateescape")),
                 folded=folded)


_add_command("modules")


def _refuse_negative_address(usage_error) -> None:
    """A negative address before '--' reads to click as short options
    ('-0x10': "No such option: -0"; '-ff...': -f's value): refuse it with
    the line it gets after '--' (parse_address) instead."""
    ctx = getattr(usage_error, "ctx", None)
    if ctx is None or ctx.command.name != "resolve":
        return
    valued = {flag for p in ctx.command.params if getattr(p, "is_flag", True) is False
              for flag in p.opts}
    args = iter(sys.argv[2:])
    for arg in args:
        if arg == "--":
            return
        if arg in valued:
            next(args, None)
        elif arg.startswith("-") and arg != "-":
            try:
                parse_address(arg[1:])
            except KmodsymsError:
                continue
            parse_address(arg)


def _run_app() -> int:
    """The typer app's exit status: usage errors print themselves (exit 2)."""
    try:
        status = app(standalone_mode=False)
    except typer.Exit as e:
        return e.exit_code
    except typer.Abort:
        print("kmodsyms: aborted", file=sys.stderr)
        return 130
    except Exception as e:
        # Click's usage errors (vendored by typer): they print themselves;
        # plain 'kmodsyms' is not one, it asks for the help.
        if type(e).__name__ == "NoArgsIsHelpError":
            typer.echo(e.ctx.get_help())
            return 0
        if callable(getattr(e, "show", None)) and hasattr(e, "exit_code"):
            _refuse_negative_address(e)
            e.show()
            return 2
        raise
    # Without standalone mode click returns typer.Exit's status instead of exiting.
    return status if isinstance(status, int) else 0


def main() -> None:
    """Console entry point: run the app through the error wrapper the
    commands run without typer use too (kmodsyms.cli.frontend.guarded)."""
    byte_exact_stdout()
    sys.exit(guarded(_run_app, terminable=True))


if __name__ == "__main__":
    main()
