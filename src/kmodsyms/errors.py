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
