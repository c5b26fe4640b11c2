"""Console entry point (``kmodsyms``, ``python -m kmodsyms``).

``kmodsyms resolve`` and ``kmodsyms lookup`` are first offered to
:func:`kmodsyms.quick.quick_run`, which answers from a saved snapshot
without importing typer or numpy (~0.15 s of imports, where the whole
answer then takes ~70 ms); everything else, and whatever it declines, runs
the typer CLI in :mod:`kmodsyms.cli.app`.
"""

import sys


def main() -> None:
    args = sys.argv[1:]
    if args[:1] in (["resolve"], ["lookup"]):
        from .quick import quick_run
        status = quick_run(args[0], args[1:])
        if status is not None:
            sys.exit(status)
    from .cli.app import main as cli_main
    cli_main()


if __name__ == "__main__":
    main()
