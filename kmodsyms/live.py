"""The running kernel: where its files are, its build-id, and the check that
a dtrace_syms file was built for it.  Plain Python (no numpy), as the quick
``resolve`` path (:mod:`kmodsyms.snapshot`) uses it too."""

from __future__ import annotations

import os

from .errors import StaleError

LIVE_KALLSYMS = "/proc/kallsyms"


def default_syms_path() -> str:
    return f"/lib/modules/{os.uname().release}/kernel/dtrace_syms"


def running_build_id() -> str:
    """The running kernel's build-id from /sys/kernel/notes, or ""."""
    from .elfimage import parse_notes
    try:
        with open("/sys/kernel/notes", "rb") as f:
            return parse_notes(f.read())
    except OSError:
        return ""


def check_live(source: str, kernel_release: str, build_id: str) -> None:
    """Refuse a dtrace_syms (read from ``source``, built for
    ``kernel_release`` and vmlinux ``build_id``) that is for another kernel
    than the running one."""
    release = os.uname().release
    if kernel_release and kernel_release != release:
        raise StaleError(f"{source} is for kernel {kernel_release}, but "
                         f"{release} is running; use the file of the running kernel "
                         "or pass --force")
    live_id = running_build_id()
    if build_id and live_id and build_id != live_id:
        raise StaleError(f"{source} is for vmlinux build-id {build_id}, but the "
                         f"running kernel's is {live_id}; rebuild it or pass --force")
