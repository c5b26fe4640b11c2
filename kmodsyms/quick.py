"""The quick path into ``kmodsyms resolve`` and ``kmodsyms lookup``: answer
from a snapshot (:mod:`kmodsyms.snapshot`) in plain Python, without
importing numpy, typer or the resolver; whatever it declines, the typer
CLI (:mod:`kmodsyms.cli.app`) runs instead.  Both read one table of options
and write through one output (:mod:`kmodsyms.cli.frontend`).

Plain Python: nothing here may pull in numpy or typer.
"""

from __future__ import annotations

import os

from .errors import KmodsymsError, StaleError, degraded_warning, forced_warning
from .cli.frontend import (byte_exact_stdout, check_addresses, guarded, output_format, parse_args,
                       parse_name, run_lookup, run_resolve, warn)
from .live import LIVE_KALLSYMS, check_live, default_syms_path, module_sources
from .snapshot import Snapshot, open_saved, snapshot_path

RUNNERS = {"resolve": run_resolve, "lookup": run_lookup}


class _Declined(Exception):
    """The quick path hands over to the typer CLI."""


def quick_run(command: str, args: list[str]) -> int | None:
    """Run ``kmodsyms COMMAND ARGS`` (``resolve`` or ``lookup``) from a
    snapshot: the exit status, or None when this path does not answer
    (arguments it does not read, no matching snapshot, a stale file), and
    the full CLI must run instead, which also words any error."""
    options = parse_args(command, args)
    if options is None or options["no_cache"]:
        return None
    arguments = options["arguments"]
    try:
        if command == "resolve":
            check_addresses(arguments)
        else:
            for spec in arguments:
                parse_name(spec)
    except KmodsymsError:
        return None
    syms_path = options["syms"] or default_syms_path()
    kallsyms_path = options["kallsyms"] or LIVE_KALLSYMS
    sources = module_sources(kallsyms_path == LIVE_KALLSYMS, options["modules_dir"])
    saved = open_saved(syms_path, kallsyms_path, sources=sources)
    if saved is None:
        return None
    snapshot = Snapshot(saved)
    state = snapshot.state
    if not snapshot.builtin_modules_known:
        # Made from kallsyms alone, the default file missing: as the full
        # CLI, answer so with its warning, unless told not to.
        if options["strict"] or options["syms"]:
            return None
        warn(degraded_warning(state.kallsyms_source, state.stats["degraded"]))
    elif kallsyms_path == LIVE_KALLSYMS:
        try:
            check_live(state.source, state.kernel_release, state.build_id)
        except StaleError as e:
            if not options["force"]:
                return None
            warn(forced_warning(e))
    for warning in snapshot.module_warnings:
        warn(warning)
    byte_exact_stdout()

    def run() -> int:
        try:
            return RUNNERS[command](snapshot, arguments, output_format(options))
        except (IndexError, KeyError, TypeError, OverflowError) as e:
            # A damaged snapshot (its arrays are trusted, not checked): drop
            # it; before any answer the full CLI takes over (and saves a new one).
            try:
                os.unlink(snapshot_path(syms_path, kallsyms_path))
            except (OSError, TypeError):
                pass
            if not snapshot.answered:
                raise _Declined from None
            raise KmodsymsError(f"damaged snapshot ({type(e).__name__}), now removed; "
                                "run the command again") from None

    try:
        return guarded(run)
    except _Declined:
        return None
