"""The command line: the typer app (:mod:`.app`), the output formats it
shares with the fast entry point (:mod:`.frontend`), and ``annotate``."""
