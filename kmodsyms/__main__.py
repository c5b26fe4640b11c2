"""Console entry point (``kmodsyms``, ``python -m kmodsyms``).

``kmodsyms resolve`` is first offered to :func:`kmodsyms.snapshot.quick_resolve`,
which answers from a saved snapshot without importing typer or numpy (~0.15 s
of imports, where the whole answer then takes ~70 ms); everything else, and
any ``resolve`` it declines, runs the typer CLI in :mod:`kmodsyms.cli`.
"""

import sys


def main() -> None:
    args = sys.argv[1:]
    if args[:1] == ["resolve"]:
        from .snapshot import quick_resolve
        status = quick_resolve(args[1:])
        if status is not None:
            sys.exit(status)
    from .cli import main as cli_main
    cli_main()


if __name__ == "__main__":
    main()
