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

import glob
import os
import re
import shutil
import stat
import subprocess
from dataclasses import dataclass

import pytest

import debian_archive
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


@dataclass(frozen=True)
class Release:
    """A Debian kernel release and where its packages are."""

    name: str                   # uname -r
    suite: str                  # the suite that ships it
    packages: tuple[str, ...]   # its image and modules packages
    source: str                 # the linux-source-X.Y package of its version

    @property
    def debug_package(self) -> str:
        return f"linux-image-{self.name}-dbg"


TRIXIE_6_12 = Release("6.12.118+deb13-cloud-amd64", "trixie",
                      ("linux-image-6.12.118+deb13-cloud-amd64-unsigned",), "linux-source-6.12")
# 7.2 splits the image: vmlinuz in linux-binary, the .ko.xz in linux-modules,
# System.map, config and modules.builtin* in linux-base.
SID_7_2 = Release("7.2.13+deb14-cloud-amd64", "sid",
                  tuple(f"linux-{p}-7.2.13+deb14-cloud-amd64" for p in ("binary", "modules", "base")),
                  "linux-source-7.2")


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


def package_version(deb: str) -> str:
    return subprocess.run(["dpkg-deb", "-f", deb, "Version"], capture_output=True, text=True,
                          check=True).stdout.strip()


def kernel_debs(release: Release) -> list[str]:
    return debian_archive.Suite(release.suite).update().download(*release.packages)


# ------------------------------------------------------------------ kernel
def kernel_root(release: Release) -> str:
    """The release's packages unpacked into one root, /lib a link to
    /usr/lib (as merged /usr has it) and modules.dep written."""
    def make(root: str) -> None:
        for deb in kernel_debs(release):
            debian_archive.unpack(deb, root)
        os.symlink("usr/lib", os.path.join(root, "lib"))
        depmod(root, release.name)
    return cached(cache_dir(release.name, "kernel"), make)


def depmod(root: str, name: str) -> None:
    """modules.dep and its siblings for ROOT/lib/modules/NAME: the package
    leaves them to its postinst (kmod's depmod); busybox's writes the same
    text, and busybox's modprobe reads it."""
    tool = shutil.which("depmod") or shutil.which("busybox")
    args = [tool] if tool.endswith("depmod") else [tool, "depmod"]
    subprocess.run([*args, "-b", root, name], check=True, capture_output=True)
    assert os.path.exists(os.path.join(root, "lib", "modules", name, "modules.dep"))


def modules_dir(release: Release) -> str:
    return os.path.join(kernel_root(release), "usr", "lib", "modules", release.name)


def vmlinuz(release: Release) -> str:
    """The boot image: /boot/vmlinuz-REL (6.12) or /usr/lib/modules/REL/vmlinuz (7.2)."""
    root = kernel_root(release)
    for path in (os.path.join(root, "boot", f"vmlinuz-{release.name}"),
                 os.path.join(modules_dir(release), "vmlinuz")):
        if os.path.isfile(path):
            return path
    raise AssertionError(f"no vmlinuz in {', '.join(release.packages)}")


def config(release: Release) -> str:
    for path in (os.path.join(kernel_root(release), "boot", f"config-{release.name}"),
                 os.path.join(modules_dir(release), "config")):
        if os.path.isfile(path):
            return path
    raise AssertionError(f"no config in {', '.join(release.packages)}")


# ------------------------------------------------------------- debug info
def debug_root(release: Release) -> str:
    """vmlinux and System.map of the release's -dbg package (its 1.5 GB of
    modules' debug files are left packed)."""
    def make(root: str) -> None:
        (deb,) = debian_archive.Suite(release.suite).update().download(release.debug_package)
        debian_archive.unpack(deb, root, *debug_members(deb))
    return cached(cache_dir(release.name, "debug"), make)


def debug_members(deb: str) -> list[str]:
    """The regular files named vmlinux* or System.map* in DEB (the others of
    those names are links to them)."""
    listing = subprocess.run(["dpkg-deb", "-c", deb], capture_output=True, text=True, check=True)
    return [line.split()[-1] for line in listing.stdout.splitlines()
            if line.startswith("-") and re.search(r"/(vmlinux|System\.map)[^/]*$", line)]


def debug_file(release: Release, name: str) -> str:
    """NAME (vmlinux or System.map) of the -dbg package, wherever it puts it."""
    found = [p for p in glob.glob(os.path.join(debug_root(release), "usr", "lib", "debug", "**", "*"),
                                  recursive=True)
             if os.path.isfile(p) and re.fullmatch(rf"{re.escape(name)}(-.*)?", os.path.basename(p))]
    assert len(found) == 1, f"{release.debug_package}: {name}: {found}"
    return found[0]


def source_tarball(release: Release) -> str:
    """linux-source-X.Y's tarball of the kernel's own version (the -dbg
    package's), from its .deb."""
    (deb,) = debian_archive.Suite(release.suite).update().download(release.source)
    (dbg,) = debian_archive.Suite(release.suite).download(release.debug_package)
    if package_version(deb) != package_version(dbg):
        pytest.skip(f"{release.suite}'s {release.source} is {package_version(deb)}, not the kernel's "
                    f"{package_version(dbg)}")

    def make(root: str) -> None:
        debian_archive.unpack(deb, root, "./usr/src/*.tar.*")
    root = cached(cache_dir("source", f"{release.source}_{package_version(deb)}"), make)
    (tarball,) = glob.glob(os.path.join(root, "usr", "src", f"{release.source}.tar.*"))
    return tarball


# ----------------------------------------------------------------- dtrace
def dependency_closure(suite: debian_archive.Suite, package: str) -> list[str]:
    """PACKAGE and everything it depends on, as apt would install them on
    a system with nothing installed (the suite's lists have no status):
    apt's simulation names them, whether their .debs are cached or not."""
    out = suite._run("apt-get", "install", "-s", "--no-install-recommends", "-y", "-qq", package)
    names = re.findall(r"^Inst (\S+) ", out, re.M)
    assert package in names, out[-2000:]
    return suite.download(*names)


def dtrace_root() -> str:
    """sid's dtrace and its dependency closure, unpacked into one root."""
    suite = debian_archive.Suite(USERSPACE_SUITE).update()
    debs = dependency_closure(suite, "dtrace")
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


def base_initramfs(release: Release) -> str:
    """The cached part of the guest: busybox, the dtrace root, the release's
    modules tree, merged /usr's links and /dev/console (which the kernel
    opens before /init runs)."""
    users, kernel = dtrace_root(), kernel_root(release)
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
        cpio.tree(kernel, os.path.join("usr", "lib", "modules"))
        cpio.close()
    return cached(cache_dir(release.name, key), make)


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


def ready(release: Release) -> None:
    """Skip at once, naming what to install, when QEMU or busybox is
    missing; download and unpack what the guest needs (once)."""
    machine = MACHINES["x86"]
    if shutil.which(machine.qemu) is None:
        pytest.skip(f"{machine.qemu} absent (apt-get install {machine.package})")
    base_initramfs(release)


def run_guest(release: Release, script: str, files: dict[str, str | bytes], work: str) -> GuestRun:
    """Boot RELEASE with SCRIPT as /test.sh (and FILES) and return what it
    wrote into $OUT."""
    ready(release)
    os.makedirs(work, exist_ok=True)
    own = run_initramfs(os.path.join(work, "run.cpio"), {**files, "/test.sh": script})
    initrd = os.path.join(work, "initramfs.cpio")
    with open(initrd, "wb") as out:
        for part in (base_initramfs(release), own):
            with open(part, "rb") as f:
                shutil.copyfileobj(f, out)
    accel, seconds, console = boot(MACHINES["x86"], "", initrd, work, image=vmlinuz(release),
                                   memory=MEMORY)
    return GuestRun(os.path.join(work, "out"), accel, seconds, console)
