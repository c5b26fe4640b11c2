"""A Debian kernel as its packages ship it, unpacked into one root: the
``-dbg`` package (the debug vmlinux and its System.map), the package with
the config and ``/lib/modules/REL`` (Debian 14's ``linux-base-REL``, before
it the image package), and the ``linux-source-X.Y`` of the same version:
what ``kmodsyms build --debuginfo --root ROOT`` reads.  The newest kernel
of a suite's flavour whose source is in the suite is taken, so that the
tests follow Debian's updates.  Unpacked once into the corpus cache.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass

import pytest
from debian_archive import Suite, unpack

# What is left out of each package: the debug modules (GBs in the full
# flavours), documentation and the build-id links.
_EXCLUDED = ("./usr/share/*", "*/.build-id/*")


@dataclass(frozen=True)
class DebianKernel:
    suite: str
    flavour: str
    release: str          # 7.2.13+deb14-cloud-amd64
    version: str          # the packages' version, 7.2.13-1
    root: str             # the packages unpacked
    source: str           # the linux-source tarball, under root

    @property
    def vmlinux(self) -> str:
        return os.path.join(self.root, "usr/lib/debug/boot", f"vmlinux-{self.release}")


def _newer(a: str, b: str) -> bool:
    return subprocess.run(["dpkg", "--compare-versions", a, "gt", b]).returncode == 0


def debian_kernel(suite: str, flavour: str = "cloud-amd64", arch: str = "amd64",
                  bootable: bool = False) -> DebianKernel:
    """The newest kernel of SUITE's FLAVOUR, unpacked; with BOOTABLE, its
    vmlinuz and .ko files too (Debian 14's linux-binary-REL and
    linux-modules-REL; before, the image package has them)."""
    archive = Suite(suite).update()
    qualify = (lambda name: f"{name}:{arch}") if arch != "amd64" else (lambda name: name)
    names = archive.search(rf"^linux-image-[0-9][^ ]*-{re.escape(flavour)}-dbg$")
    if not names:
        pytest.skip(f"Debian {suite} has no linux-image-*-{flavour}-dbg")
    releases = [n[len("linux-image-"):-len("-dbg")] for n in names]
    sources = {f"linux-source-{'.'.join(r.split('.')[:2])}" for r in releases}
    source_versions = dict(zip(sorted(sources), archive.versions(*sorted(sources))))
    best = None
    for release, version in zip(releases, archive.versions(*map(qualify, names))):
        source = f"linux-source-{'.'.join(release.split('.')[:2])}"
        if version and version == source_versions.get(source) and (best is None or _newer(version, best[1])):
            best = (release, version, source)
    if best is None:
        pytest.skip(f"Debian {suite} has no {flavour} kernel whose linux-source is of its version")
    release, version, source = best
    kernel = _unpacked(archive, suite, flavour, release, version, source, qualify)
    if bootable:
        _add_boot_files(archive, kernel, qualify)
    return kernel


def _unpacked(archive: Suite, suite: str, flavour: str, release: str, version: str, source: str,
              qualify) -> DebianKernel:
    from bench.corpus import _corpus_cache_dir
    root = os.path.join(_corpus_cache_dir(), "debian", suite, release)
    tarball = os.path.join(root, "usr/src", f"{source}.tar.xz")
    stamp = os.path.join(root, ".complete")
    if not os.path.exists(stamp):
        # Debian 14 moved the config and /lib/modules into linux-base-REL.
        base = next((p for p in (f"linux-base-{release}", f"linux-image-{release}-unsigned",
                                 f"linux-image-{release}")
                     if archive.versions(qualify(p))[0] == version), None)
        if base is None:
            pytest.skip(f"Debian {suite} has no image or base package of {release}")
        dbg, files, src = archive.download(qualify(f"linux-image-{release}-dbg"), qualify(base), source)
        unpack(dbg, root, exclude=_EXCLUDED + ("*/kernel/*",))
        unpack(files, root, exclude=_EXCLUDED)
        unpack(src, root, "./usr/src/*")
        with open(stamp, "w"):
            pass
    return DebianKernel(suite, flavour, release, version, root, tarball)


def _add_boot_files(archive: Suite, kernel: DebianKernel, qualify) -> None:
    stamp = os.path.join(kernel.root, ".bootable")
    if os.path.exists(stamp):
        return
    split = [f"linux-binary-{kernel.release}", f"linux-modules-{kernel.release}"]
    if all(v == kernel.version for v in archive.versions(*map(qualify, split))):
        for deb in archive.download(*map(qualify, split)):
            unpack(deb, kernel.root, exclude=_EXCLUDED)
    with open(stamp, "w"):
        pass
