"""A Debian kernel release booted as Debian ships it, under QEMU, with
Debian unstable's dtrace in its initramfs: for tests/test_dtrace_live.py.

The guest is the release's own ``vmlinuz`` and ``/lib/modules/REL`` tree
(from its image and modules packages; ``modules.dep`` written here by
depmod, kmod's or busybox's, as the package's postinst has kmod's write it), busybox
from ``busybox-static`` (this machine's, as tests/live_boot.py takes it),
and sid's ``dtrace`` with every package it depends on, unpacked as a
system with nothing installed would get them (dtrace 2.0.7 needs libc
2.38 or later, so the guest's userspace is unstable's whatever the
kernel's suite).  Packages come through tests/debian_archive.py.

``/init`` (tests/live/debian-init.sh) mounts what dtrace reads, runs the
caller's script as root with ``$OUT`` to write into, and sends ``$OUT`` back
as live_boot does: a gzipped tar, base64 between two markers on the serial
console, then reboots (QEMU runs with -no-reboot, so it exits).  QEMU is
started by live_boot.boot(), with its timeouts and its KVM-then-TCG rule.

The unpacked packages and the big part of the initramfs (one newc cpio) are
kept under the corpus cache, ``debian-guest/``; each boot appends a small
cpio of its own files (the kernel unpacks concatenated archives in order).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from dataclasses import dataclass

import debian_archive
import pytest
from debian_kernels import DebianKernel, debian_kernel
from live_boot import MACHINES, boot, busybox

HERE = os.path.dirname(os.path.abspath(__file__))
INIT = os.path.join(HERE, "live", "debian-init.sh")
# The userspace's suite: the first with a dtrace whose libc need is met.
USERSPACE_SUITE = "sid"
MEMORY = "2G"       # the initramfs (~70 MB, twice while unpacked) and dtrace's BTF-made CTF
# Merged /usr, as Debian's base-files lays it out: sid's packages ship only
# /usr, and dtrace's PT_INTERP is /lib64/ld-linux-x86-64.so.2.
USR_LINKS = {"bin": "usr/bin", "sbin": "usr/sbin", "lib": "usr/lib", "lib64": "usr/lib64"}
GUEST_DIRS = ("dev", "proc", "sys", "tmp", "run", "mnt", "etc", "usr/bin", "usr/sbin", "usr/lib",
              "usr/lib64")


def release(suite: str) -> DebianKernel:
    """SUITE's newest cloud-amd64 kernel, bootable (tests/debian_kernels.py)."""
    return debian_kernel(suite, "cloud-amd64", bootable=True)


def cache_dir(*parts: str) -> str:
    from bench.corpus import _corpus_cache_dir
    return os.path.join(_corpus_cache_dir(), "debian-guest", *parts)


def cached(path: str, make) -> str:
    """PATH, made by ``make(tmp)`` into PATH.tmp and renamed when complete,
    so that an interrupted run leaves nothing that looks done."""
    if os.path.exists(path):
        return path
    tmp = path + ".tmp"
    if os.path.isdir(tmp):
        shutil.rmtree(tmp)
    elif os.path.exists(tmp):
        os.unlink(tmp)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    make(tmp)
    os.rename(tmp, path)
    return path


# ------------------------------------------------------------------ kernel
def modules_dir(kernel: DebianKernel) -> str:
    """/lib/modules/REL of the kernel's packages, with modules.dep: the
    package leaves it to its postinst (kmod's depmod); busybox's writes the
    same text, and busybox's modprobe reads it."""
    path = next(p for p in (os.path.join(kernel.root, d, "modules", kernel.release) for d in ("usr/lib", "lib"))
                if os.path.isdir(os.path.join(p, "kernel")))
    if not os.path.exists(os.path.join(path, "modules.dep")):
        tool = shutil.which("depmod") or shutil.which("busybox")
        args = [tool] if tool.endswith("depmod") else [tool, "depmod"]
        base = os.path.dirname(os.path.dirname(os.path.dirname(path)))   # ROOT or ROOT/usr
        subprocess.run([*args, "-b", base, kernel.release], check=True, capture_output=True)
    return path


def vmlinuz(kernel: DebianKernel) -> str:
    """The boot image: /boot/vmlinuz-REL (6.12) or /usr/lib/modules/REL/vmlinuz (7.2)."""
    for path in (os.path.join(kernel.root, "boot", f"vmlinuz-{kernel.release}"),
                 os.path.join(modules_dir(kernel), "vmlinuz")):
        if os.path.isfile(path):
            return path
    raise AssertionError(f"{kernel.release}'s packages hold no vmlinuz")


# ----------------------------------------------------------------- dtrace
def dtrace_root() -> str:
    """sid's dtrace and its dependency closure, unpacked into one root."""
    suite = debian_archive.Suite(USERSPACE_SUITE).update()
    debs = suite.download_with_dependencies("dtrace")
    key = "+".join(sorted(os.path.basename(d)[:-4] for d in debs if "dtrace" in os.path.basename(d)))

    def make(root: str) -> None:
        for deb in debs:
            debian_archive.unpack(deb, root)
    return cached(cache_dir("userspace", key), make)


# -------------------------------------------------------------- initramfs
class Cpio:
    """A newc archive (the format the kernel unpacks an initramfs from),
    written entry by entry, every entry root's: no device node, owner or
    mode needs privileges on the host."""

    def __init__(self, path: str):
        self.out = open(path, "wb")
        self.ino = 1
        self.made: set[str] = set()

    def _entry(self, name: str, mode: int, data: bytes = b"", rdev: tuple[int, int] = (0, 0)) -> None:
        fields = [self.ino, mode, 0, 0, 2 if stat.S_ISDIR(mode) else 1, 0, len(data), 0, 0,
                  rdev[0], rdev[1], len(name) + 1, 0]
        self.ino += 1
        head = b"070701" + b"".join(b"%08x" % f for f in fields) + name.encode() + b"\0"
        self.out.write(head + b"\0" * (-len(head) % 4) + data + b"\0" * (-len(data) % 4))

    def directory(self, name: str) -> None:
        parent = os.path.dirname(name)
        if parent and parent not in self.made:
            self.directory(parent)
        if name not in self.made:
            self.made.add(name)
            self._entry(name, stat.S_IFDIR | 0o755)

    def file(self, name: str, source: str | bytes, mode: int = 0o644) -> None:
        self.directory(os.path.dirname(name))
        data = source if isinstance(source, bytes) else open(source, "rb").read()
        self._entry(name, stat.S_IFREG | mode, data)

    def symlink(self, name: str, target: str) -> None:
        self.directory(os.path.dirname(name))
        self.made.add(name)
        self._entry(name, stat.S_IFLNK | 0o777, target.encode())

    def node(self, name: str, major: int, minor: int) -> None:
        self._entry(name, stat.S_IFCHR | 0o600, rdev=(major, minor))

    def tree(self, root: str, under: str = "") -> None:
        """Every directory, file and link below ROOT/UNDER, at the same paths."""
        for dirpath, dirs, files in os.walk(os.path.join(root, under)):
            inside = os.path.relpath(dirpath, root)
            for name in sorted(dirs) + sorted(files):
                path, entry = os.path.join(dirpath, name), os.path.normpath(os.path.join(inside, name))
                if entry in USR_LINKS:
                    continue
                if os.path.islink(path):
                    self.symlink(entry, os.readlink(path))
                elif os.path.isdir(path):
                    self.directory(entry)
                else:
                    self.file(entry, path, stat.S_IMODE(os.lstat(path).st_mode))

    def close(self) -> None:
        self._entry("TRAILER!!!", 0)
        self.out.close()


def base_initramfs(kernel: DebianKernel) -> str:
    """The cached part of the guest: busybox, the dtrace root, the kernel's
    modules tree, merged /usr's links and /dev/console (which the kernel
    opens before /init runs)."""
    users, modules = dtrace_root(), modules_dir(kernel)
    bb = busybox(MACHINES["x86"], cache_dir())
    key = f"{os.path.basename(users)}+busybox-{os.path.getsize(bb)}.cpio"

    def make(path: str) -> None:
        cpio = Cpio(path)
        for name in GUEST_DIRS:
            cpio.directory(name)
        for name, target in USR_LINKS.items():
            cpio.symlink(name, target)
        cpio.node("dev/console", 5, 1)
        cpio.file("usr/bin/busybox", bb, 0o755)
        cpio.tree(users)
        for top, _dirs, files in os.walk(modules):   # at usr/lib/modules/REL, whatever the package's layout
            for name in sorted(files):
                path = os.path.join(top, name)
                guest = os.path.join("usr/lib/modules", kernel.release, os.path.relpath(path, modules))
                if os.path.islink(path):
                    cpio.symlink(guest, os.readlink(path))
                else:
                    cpio.file(guest, path)
        cpio.close()
    return cached(cache_dir(kernel.release, key), make)


def run_initramfs(path: str, files: dict[str, str | bytes]) -> str:
    """The boot's own archive: /init and FILES (guest path -> host path or bytes)."""
    cpio = Cpio(path)
    cpio.file("init", INIT, 0o755)
    for name, source in sorted(files.items()):
        cpio.file(name.lstrip("/"), source, 0o755 if name.endswith(".sh") else 0o644)
    cpio.close()
    return path


# -------------------------------------------------------------------- boot
@dataclass(frozen=True)
class GuestRun:
    """One boot's record: the guest's $OUT unpacked, how it ran."""

    out: str
    accel: str
    seconds: float
    console: str

    def path(self, *parts: str) -> str:
        return os.path.join(self.out, *parts)

    def text(self, *parts: str) -> str:
        with open(self.path(*parts), encoding="utf-8", errors="surrogateescape") as f:
            return f.read()


def ready(kernel: DebianKernel) -> None:
    """Skip at once, naming what to install, when QEMU or busybox is
    missing; download and unpack what the guest needs (once)."""
    machine = MACHINES["x86"]
    if shutil.which(machine.qemu) is None:
        pytest.skip(f"{machine.qemu} absent (apt-get install {machine.package})")
    base_initramfs(kernel)


def run_guest(kernel: DebianKernel, script: str, files: dict[str, str | bytes], work: str) -> GuestRun:
    """Boot KERNEL with SCRIPT as /test.sh (and FILES) and return what it
    wrote into $OUT."""
    ready(kernel)
    os.makedirs(work, exist_ok=True)
    own = run_initramfs(os.path.join(work, "run.cpio"), {**files, "/test.sh": script})
    initrd = os.path.join(work, "initramfs.cpio")
    with open(initrd, "wb") as out:
        for part in (base_initramfs(kernel), own):
            with open(part, "rb") as f:
                shutil.copyfileobj(f, out)
    accel, seconds, console = boot(MACHINES["x86"], "", initrd, work, image=vmlinuz(kernel),
                                   memory=MEMORY)
    return GuestRun(os.path.join(work, "out"), accel, seconds, console)
