"""Console entry point (``kmodsyms``, ``python -m kmodsyms``).

The commands that answer from a loaded kernel (``resolve``, ``lookup``,
``kallmodsyms``, ``modules``) run through :func:`kmodsyms.cli.frontend.fast_main`
without importing typer (its import costs more than the whole answer);
everything else, and whatever that declines (``--help``, a malformed
option), runs the typer CLI in :mod:`kmodsyms.cli.app`.
"""

import sys


def main() -> None:
    args = sys.argv[1:]
    if args[:1] and args[0] in ("resolve", "lookup", "kallmodsyms", "modules"):
        from kmodsyms.cli.frontend import fast_main
        status = fast_main(args[0], args[1:])
        if status is not None:
            sys.exit(status)
    from kmodsyms.cli.app import main as cli_main
    cli_main()


if __name__ == "__main__":
    main()
