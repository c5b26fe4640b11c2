"""A kernel's source as the build reads it: a directory, or a tarball of
one (Debian's ``/usr/src/linux-source-X.Y.tar.xz``, Ubuntu's ``.tar.bz2``,
upstream's ``.tar.gz``/``.tar.xz``), of which only what the evaluation of
kbuild's Makefiles reads is unpacked: every ``Makefile*`` and ``Kbuild*``,
MIPS' ``Platform`` files and the files of ``scripts/`` itself (its
subdirectories are programs kbuild builds, not Makefiles it includes).

A tarball is decompressed by the system's own tool (``xz -T`` decodes the
blocks of Debian's multi-block tarballs in parallel) into ``tar``, fed by
this process so that it can say how far it got; Python's ``tarfile`` reads
it where those tools are absent.  What is unpacked goes into a directory of
the caller's, which the caller removes.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tarfile
import threading
from typing import Callable, NamedTuple, Optional

from kmodsyms.errors import KmodsymsError

# The members read: kbuild's files, anywhere in the tree, and scripts/.
_WANTED = re.compile(r"(^|/)(Makefile[^/]*|Kbuild[^/]*|Platform)$|^scripts/[^/]+$")
# Each file tar writes costs: the fewer, the faster (Kconfig files, which
# make never reads, were a third of what an earlier pattern wrote).  scripts/'s own files
# only: * matches no / in the patterns after --no-wildcards-match-slash, and
# --no-recursion keeps a directory they match (scripts/dtc) from bringing
# everything under it (500 files of 7.2's 4,000).
_TAR_PATTERNS = ("--no-recursion", "Makefile*", "Kbuild*", "Platform", "*/Makefile*", "*/Kbuild*",
                 "*/Platform", "--no-wildcards-match-slash", "*/scripts/*", "scripts/*")
_CHUNK = 1 << 20
# What a file's first bytes say it is, and the tool that decompresses it.
_MAGIC = ((b"\xfd7zXZ\x00", "xz", ("xz", "-dc")), (b"\x1f\x8b", "gzip", ("gzip", "-dc")),
          (b"BZh", "bzip2", ("bzip2", "-dc")), (b"\x28\xb5\x2f\xfd", "zstd", ("zstd", "-dc", "-q")))
_VERSION_LINE = re.compile(r"^(VERSION|PATCHLEVEL|SUBLEVEL|EXTRAVERSION)\s*=[ \t]*(\S*)", re.M)

Progress = Callable[[int, int], None]
# tar's messages are read: in English
_C_LOCALE = {**os.environ, "LC_ALL": "C"}


class KernelVersion(NamedTuple):
    """The version a top-level Makefile declares (``make kernelversion``)."""

    version: int
    patchlevel: int
    sublevel: int
    extraversion: str

    def __str__(self) -> str:
        return f"{self.version}.{self.patchlevel}.{self.sublevel}{self.extraversion}"


def makefile_version(tree: str) -> KernelVersion:
    """The version of the tree's top-level Makefile."""
    path = os.path.join(tree, "Makefile")
    try:
        with open(path, errors="replace") as f:
            head = f.read(4096)
    except OSError as e:
        raise KmodsymsError(f"cannot read {path}: {e.strerror}; give the top of a kernel "
                            "source tree (or its tarball)") from None
    fields = dict(_VERSION_LINE.findall(head))
    try:
        return KernelVersion(int(fields["VERSION"]), int(fields["PATCHLEVEL"]),
                             int(fields.get("SUBLEVEL") or 0), fields.get("EXTRAVERSION", ""))
    except (KeyError, ValueError):
        raise KmodsymsError(f"{path}: no VERSION and PATCHLEVEL lines; is it a kernel's "
                            "top-level Makefile?") from None


def release_version(release: str) -> Optional[tuple[int, int, int]]:
    """(version, patchlevel, sublevel) at the start of a kernel release
    (``7.2.13+deb14-cloud-amd64``); None if it starts with none."""
    found = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", release)
    if not found:
        return None
    return int(found.group(1)), int(found.group(2)), int(found.group(3) or 0)


def check_version(source: str, found: KernelVersion, release: str) -> list[str]:
    """Refuse a source of another VERSION.PATCHLEVEL than the kernel
    ``release``; a SUBLEVEL of its own is a warning (the build's self-check
    decides whether it matters).  The warnings."""
    kernel = release_version(release)
    if kernel is None:
        return []
    if (found.version, found.patchlevel) != kernel[:2]:
        raise KmodsymsError(f"{source}: the source of Linux {found}, not of the kernel's "
                            f"{release}; give the source of version {kernel[0]}.{kernel[1]} "
                            f"(Debian: linux-source-{kernel[0]}.{kernel[1]})")
    if found.sublevel != kernel[2]:
        return [f"{source} is Linux {found}, the kernel {release}: its Makefiles may differ "
                "(the build's self-check decides)"]
    return []


def _kind(path: str) -> tuple[str, tuple[str, ...]]:
    """What the file ``path`` is: a compressed tarball's compression and its
    decompressing command, ("tar", ()) for a plain tarball; refused in one
    line when it is none, naming what it is where that is known."""
    try:
        with open(path, "rb") as f:
            head = f.read(512)
    except OSError as e:
        raise KmodsymsError(f"cannot read {path}: {e.strerror}") from None
    for magic, name, command in _MAGIC:
        if head.startswith(magic):
            return name, command
    if head[257:262] == b"ustar":
        return "tar", ()
    if head.startswith(b"!<arch>\ndebian-binary"):
        raise KmodsymsError(f"{path}: a Debian package, not a source tarball: its tarball is "
                            "inside (dpkg-deb -x PACKAGE DIR, then give "
                            "DIR/usr/src/linux-source-X.Y.tar.xz)")
    if head.startswith(b"\xed\xab\xee\xdb"):
        raise KmodsymsError(f"{path}: an RPM package, not a source tree: unpack it "
                            "(rpm2cpio PACKAGE | cpio -id) and give the tree or its tarball")
    raise KmodsymsError(f"{path}: not a kernel source tarball (.tar, .tar.xz, .tar.gz, .tar.bz2, "
                        ".tar.zst) nor a directory")


def unpack_makefiles(tarball: str, dest: str, jobs: int = 0, progress: Optional[Progress] = None,
                     stop: Optional[threading.Event] = None) -> str:
    """Unpack what kbuild reads of ``tarball`` into ``dest``; the path of
    the tree's top (the tarball's one top directory, else ``dest``).
    ``stop``, once set (from another thread), ends the unpacking early."""
    stop = stop or threading.Event()
    kind, command = _kind(tarball)
    if kind == "xz" and jobs != 1:
        command += (f"-T{jobs}",)
    tools = ([command[0]] if command else []) + ["tar"]
    if all(shutil.which(t) for t in tools):
        _unpack_with_tools(tarball, dest, command, progress, stop)
    else:
        _unpack_with_tarfile(tarball, dest, progress, stop)
    if stop.is_set():
        raise KmodsymsError(f"{tarball}: unpacking stopped")
    entries = [e for e in os.listdir(dest) if not e.startswith(".")]
    if not entries:
        raise KmodsymsError(f"{tarball}: holds no Makefile: is it a kernel source tarball?")
    top = os.path.join(dest, entries[0])
    return top if len(entries) == 1 and os.path.isdir(top) else dest


def _unpack_with_tools(tarball: str, dest: str, command: tuple[str, ...],
                       progress: Optional[Progress], stop: threading.Event) -> None:
    """``decompressor | tar -x``, fed from here."""
    total = os.path.getsize(tarball)
    # -b 2048: 1 MiB reads of the pipe; -m: no time set on each file
    tar = ["tar", "-x", "-b", "2048", "-m", "-f", "-", "-C", dest, "--wildcards", "--no-same-owner",
           *_TAR_PATTERNS]
    children: list[subprocess.Popen] = []
    try:
        if command:
            decompress = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, env=_C_LOCALE)
            children.append(decompress)
            sink = decompress.stdin
            unpack = subprocess.Popen(tar, stdin=decompress.stdout, stderr=subprocess.PIPE, env=_C_LOCALE)
            decompress.stdout.close()
        else:
            unpack = subprocess.Popen(tar, stdin=subprocess.PIPE, stderr=subprocess.PIPE, env=_C_LOCALE)
            sink = unpack.stdin
        children.append(unpack)
        errors: dict[int, bytes] = {}
        readers = [threading.Thread(target=lambda p=p: errors.__setitem__(id(p), p.stderr.read()),
                                    daemon=True) for p in children]
        for r in readers:
            r.start()
        done = 0
        with open(tarball, "rb") as f:
            try:
                while not stop.is_set() and (chunk := f.read(_CHUNK)):
                    sink.write(chunk)
                    done += len(chunk)
                    if progress:
                        progress(done, total)
            except BrokenPipeError:
                pass     # the tool stopped reading: its status says why
        if stop.is_set():
            return      # the children are killed below
        try:
            sink.close()
        except BrokenPipeError:
            pass
        statuses = [p.wait() for p in children]
        for r in readers:
            r.join()
        for p, status in zip(children, statuses):
            message = errors.get(id(p), b"").decode(errors="replace").strip().splitlines()
            if status != 0 and not (p is unpack and _only_unmatched(message)):
                raise KmodsymsError(f"{tarball}: not a readable kernel source tarball "
                                    f"({p.args[0]}: {(message or ['exit status %d' % status])[0]})")
    finally:
        for p in children:
            if p.poll() is None:
                p.kill()
                p.wait()


def _only_unmatched(message: list[str]) -> bool:
    """tar's complaint that a pattern matched no member (a top-level
    ``Makefile*`` in a tarball with a top directory) and nothing else."""
    return bool(message) and all(line.endswith("Not found in archive")
                                 or "due to previous errors" in line for line in message)


def _unpack_with_tarfile(tarball: str, dest: str, progress: Optional[Progress],
                         stop: threading.Event) -> None:
    """Python's own reader, in one pass (a compressed stream cannot seek back cheaply)."""
    total = os.path.getsize(tarball)
    with open(tarball, "rb") as raw:
        try:
            archive = tarfile.open(fileobj=raw, mode="r|*")
        except (OSError, tarfile.TarError) as e:
            raise KmodsymsError(f"{tarball}: not a readable kernel source tarball ({e})") from None
        with archive:
            try:
                for member in archive:
                    if stop.is_set():
                        return
                    if progress:
                        progress(raw.tell(), total)
                    rest = member.name.partition("/")[2] if "/" in member.name else member.name
                    if not (member.isfile() and (_WANTED.search(rest) or _WANTED.search(member.name))):
                        continue
                    if hasattr(tarfile, "data_filter"):
                        archive.extract(member, dest, filter="data")
                    elif not os.path.isabs(member.name) and ".." not in member.name.split("/"):
                        archive.extract(member, dest)   # a Python without extraction filters
            except (OSError, EOFError, tarfile.TarError) as e:
                raise KmodsymsError(f"{tarball}: not a readable kernel source tarball "
                                    f"({type(e).__name__}: {e})") from None
