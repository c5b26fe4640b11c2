"""The one exception type the tool raises for bad input.

Every failure a user can cause (a missing file, a corrupt dtrace_syms, a
malformed line) is a :class:`KmodsymsError` whose message is one line saying
what is wrong and what to do.  The CLI prints it and exits with status 2;
anything else escaping is a bug.
"""


class KmodsymsError(Exception):
    """Bad input or environment, with a one-line message fit for a user."""


class StaleError(KmodsymsError):
    """dtrace_syms does not belong to the kernel it is being used with.
    ``evidence`` says what showed it, for a caller that words the message
    for another file at fault (a stale System.map at build time)."""

    def __init__(self, message: str, evidence: str = ""):
        super().__init__(message)
        self.evidence = evidence


class ArgumentError(KmodsymsError):
    """An argument names what cannot be used (a modules directory that is
    no directory): refused however the caller copes with a failed load."""


def shown(text: str | bytes) -> str:
    """Input as a message echoes it, the same in every locale: its bytes
    (a str's as argv and names are decoded, with surrogateescape), printable
    ASCII as it is (a backslash doubled) and every other byte as ``\\xNN``,
    as the kernel's tools print a name they cannot show: ``\\xff\\xfe``,
    never Python's ``\\udcff``."""
    raw = text if isinstance(text, bytes) else text.encode("utf-8", "surrogateescape")
    return "".join("\\\\" if b == 92 else chr(b) if 32 <= b < 127 else f"\\x{b:02x}" for b in raw)
