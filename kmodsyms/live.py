"""The running kernel: where its files are (dtrace_syms, kallsyms, modules,
sysfs), its build-id, and the check that a dtrace_syms file was built for
it.  Plain Python (no numpy), as the quick ``resolve`` path
(:mod:`kmodsyms.quick`) uses it too."""

from __future__ import annotations

import os

from .errors import StaleError

LIVE_KALLSYMS = "/proc/kallsyms"
LIVE_SYSFS = "/sys"
LIVE_PROC_MODULES = "/proc/modules"


def default_syms_path() -> str:
    return f"/lib/modules/{os.uname().release}/kernel/dtrace_syms"


def default_modules_dir() -> str:
    return f"/lib/modules/{os.uname().release}"


def running_build_id() -> str:
    """The running kernel's build-id from /sys/kernel/notes, or ""."""
    from .build.elfimage import parse_notes
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


class ModuleSources:
    """Where the loaded modules' files and the kernel's word about them
    are: the modules directory (None: no .ko is read), the sysfs root
    (``/sys``) and ``/proc/modules`` (None: not consulted).  (A plain
    class: the quick ``resolve`` path imports neither dataclasses nor numpy.)"""

    def __init__(self, modules_dir: str | None = None, sysfs_root: str | None = None,
                 proc_modules: str | None = None):
        self.modules_dir, self.sysfs_root, self.proc_modules = modules_dir, sysfs_root, proc_modules


def module_sources(live: bool, modules_dir: str | None = None, sysfs_root: str | None = None,
                   proc_modules: str | None = None) -> ModuleSources:
    """Where to look: what is given; for the live kallsyms, the running
    kernel's modules directory, /sys and /proc/modules otherwise."""
    if live:
        return ModuleSources(modules_dir or default_modules_dir(), sysfs_root or LIVE_SYSFS,
                             proc_modules or LIVE_PROC_MODULES)
    return ModuleSources(modules_dir, sysfs_root, proc_modules)


def parse_proc_modules(text: bytes) -> dict[str, tuple[int, int]]:
    """``name -> (core address, core size)`` from /proc/modules
    (``name size refs deps state address``); modules shown at address 0
    (not root) are left out."""
    cores = {}
    for line in text.decode("utf-8", "replace").splitlines():
        fields = line.split()
        if len(fields) >= 6:
            try:
                size, address = int(fields[1]), int(fields[5], 16)
            except ValueError:
                continue
            if address and size:
                cores[fields[0]] = (address, size)
    return cores
