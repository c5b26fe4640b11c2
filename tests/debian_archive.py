"""Debian's own packages of any suite, for the tests that read a real
distribution kernel and run the real dtrace: the archive is the one this
machine's apt configuration names, with the suite swapped (no archive's
address is written in the tree).

apt's lists for each suite are kept apart from the machine's own, under the
corpus cache (``KMODSYMS_CORPUS_CACHE``); the ``.deb`` files go where apt
keeps downloads (``/var/cache/apt/archives``, else the corpus cache), so a
second run downloads nothing.  Nothing is installed: a package is unpacked
with ``dpkg-deb`` into a directory of the caller's.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import time

import pytest

APT_SOURCES = "/etc/apt/sources.list.d"
APT_LIST = "/etc/apt/sources.list"
APT_ARCHIVES = "/var/cache/apt/archives"
LISTS_MAX_AGE = 24 * 3600   # apt's lists are refreshed once a day
# The suites without -updates and -security suites of their own.
ROLLING = ("sid", "unstable", "experimental")


def host_codename() -> str:
    """This machine's Debian codename (os-release's VERSION_CODENAME)."""
    try:
        with open("/etc/os-release") as f:
            found = re.search(r"^VERSION_CODENAME=\"?([a-z]+)", f.read(), re.M)
    except OSError:
        found = None
    return found.group(1) if found else ""


def _stanzas() -> list[dict[str, str]]:
    """The machine's apt sources as deb822 fields, the one-line
    ``sources.list`` format read into the same fields."""
    out = []
    for path in sorted(glob.glob(os.path.join(APT_SOURCES, "*.sources"))):
        with open(path) as f:
            for block in re.split(r"\n\s*\n", f.read()):
                fields = dict(re.findall(r"^([A-Za-z-]+):[ \t]*(.*)$", block, re.M))
                if fields.get("URIs") and fields.get("Suites"):
                    out.append(fields)
    for path in [APT_LIST] + sorted(glob.glob(os.path.join(APT_SOURCES, "*.list"))):
        try:
            with open(path) as f:
                lines = f.read().splitlines()
        except OSError:
            continue
        for line in lines:
            words = re.sub(r"\[[^]]*\]", " ", line.split("#", 1)[0]).split()
            if len(words) >= 4 and words[0] == "deb":
                out.append({"Types": "deb", "URIs": words[1], "Suites": words[2],
                            "Components": " ".join(words[3:])})
    return out


def sources_for(suite: str) -> str:
    """deb822 sources for ``suite``: each of the machine's Debian sources
    whose suites are the host's codename (or its ``-updates``,
    ``-security``), with that codename swapped for ``suite``.  A rolling
    suite has none of the others: only its own stanza is kept."""
    host = host_codename()
    if not host:
        pytest.skip("not a Debian host: /etc/os-release names no VERSION_CODENAME")
    blocks = []
    for fields in _stanzas():
        suites = []
        for name in fields["Suites"].split():
            base, dash, rest = name.partition("-")
            if base != host:
                continue
            if suite in ROLLING and dash:
                continue
            suites.append(suite + dash + rest)
        if not suites or "deb" not in fields.get("Types", "deb").split():
            continue
        block = ["Types: deb", f"URIs: {fields['URIs']}", f"Suites: {' '.join(suites)}",
                 f"Components: {fields.get('Components', 'main')}"]
        if fields.get("Signed-By"):
            block.append(f"Signed-By: {fields['Signed-By']}")
        blocks.append("\n".join(block))
    if not blocks:
        pytest.skip(f"no Debian source for {host} in this machine's apt configuration")
    return "\n\n".join(blocks) + "\n"


def _cache_root() -> str:
    from bench.corpus import _corpus_cache_dir
    return os.path.join(_corpus_cache_dir(), "apt")


def archives_dir() -> str:
    """Where the downloaded .deb files are kept: apt's own cache when it can
    be written, else the corpus cache."""
    if os.access(APT_ARCHIVES, os.W_OK):
        return APT_ARCHIVES
    path = os.path.join(_cache_root(), "archives")
    os.makedirs(path, exist_ok=True)
    return path


class Suite:
    """One suite of the machine's Debian archive, with apt lists of its own."""

    def __init__(self, suite: str, architectures: tuple[str, ...] = ("amd64", "arm64")):
        if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
            pytest.skip("apt-get and dpkg-deb are needed (a Debian host)")
        self.suite = suite
        self.root = os.path.join(_cache_root(), suite)
        self.architectures = architectures
        os.makedirs(os.path.join(self.root, "lists", "partial"), exist_ok=True)
        os.makedirs(os.path.join(self.root, "sources"), exist_ok=True)
        with open(os.path.join(self.root, "sources", f"{suite}.sources"), "w") as f:
            f.write(sources_for(suite))

    def _apt(self) -> list[str]:
        options = {"Dir::Etc::SourceList": "/dev/null",
                   "Dir::Etc::SourceParts": os.path.join(self.root, "sources"),
                   "Dir::State::Lists": os.path.join(self.root, "lists"),
                   # Nothing is installed: every dependency is wanted.
                   "Dir::State::status": "/dev/null",
                   "Dir::Cache::Archives": archives_dir(),
                   "Dir::Cache::pkgcache": "", "Dir::Cache::srcpkgcache": "",
                   "APT::Sandbox::User": "root",
                   "APT::Architectures::": None}
        args = []
        for key, value in options.items():
            if value is None:
                args += [f"-oAPT::Architectures::={a}" for a in self.architectures]
            else:
                args.append(f"-o{key}={value}")
        return args

    def _run(self, tool: str, *words: str) -> str:
        proc = subprocess.run([tool, *self._apt(), *words], capture_output=True, text=True,
                              env={**os.environ, "DEBIAN_FRONTEND": "noninteractive", "LC_ALL": "C"})
        if proc.returncode:
            pytest.skip(f"{tool} {' '.join(words[:3])} for {self.suite} failed: "
                        f"{(proc.stderr.strip().splitlines() or ['?'])[-1]}")
        return proc.stdout

    def update(self) -> "Suite":
        """apt's lists of the suite, refreshed when a day old."""
        stamp = os.path.join(self.root, "updated")
        if not os.path.exists(stamp) or time.time() - os.path.getmtime(stamp) > LISTS_MAX_AGE:
            self._run("apt-get", "update", "-qq")
            with open(stamp, "w"):
                pass
        return self

    def versions(self, *packages: str) -> list[str]:
        """The candidate version of each package ("" where the suite has none)."""
        out = self._run("apt-cache", "policy", *packages)
        found = dict(re.findall(r"^(\S+):\n  Installed: \S+\n  Candidate: (\S+)", out, re.M))
        return [found.get(p, found.get(p.partition(":")[0], "(none)")).replace("(none)", "")
                for p in packages]

    def search(self, pattern: str) -> list[str]:
        """The names of the suite's packages that match ``pattern`` (a regex)."""
        out = self._run("apt-cache", "search", "--names-only", pattern)
        return sorted(line.split(" - ", 1)[0] for line in out.splitlines() if line)

    def download(self, *packages: str) -> list[str]:
        """The .deb file of each package (``name`` or ``name:arch``),
        downloaded unless apt's cache has it."""
        wanted = list(zip(packages, self.versions(*packages)))
        missing = [p for p, v in wanted if not v]
        if missing:
            pytest.skip(f"Debian {self.suite} has no {', '.join(missing)}")
        paths = [self._deb_path(p, v) for p, v in wanted]
        fetch = [f"{p}={v}" for (p, v), path in zip(wanted, paths) if path is None]
        if fetch:
            self._run("apt-get", "install", "--download-only", "--no-install-recommends", "-y",
                      "-qq", "--reinstall", *fetch)
            paths = [self._deb_path(p, v) for p, v in wanted]
        lost = [p for (p, _v), path in zip(wanted, paths) if path is None]
        if lost:
            pytest.skip(f"apt downloaded no .deb for {', '.join(lost)}")
        return paths

    def download_with_dependencies(self, package: str) -> list[str]:
        """The .deb files of ``package`` and of everything it depends on, as
        apt would install them on a system with nothing installed (these
        lists have no status): apt's simulation names them, whether their
        .debs are cached or not."""
        out = self._run("apt-get", "install", "-s", "--no-install-recommends", "-y", "-qq", package)
        names = re.findall(r"^Inst (\S+) ", out, re.M)
        assert package in names, out[-2000:]
        return self.download(*names)

    def _deb_path(self, package: str, version: str) -> str | None:
        name, _, arch = package.partition(":")
        epochless = version.split(":", 1)[-1]
        for path in glob.glob(os.path.join(archives_dir(), f"{name}_*.deb")):
            base = os.path.basename(path)[:-4].split("_")
            if len(base) == 3 and base[0] == name and _unquote(base[1]).split(":", 1)[-1] == epochless \
                    and (not arch or base[2] in (arch, "all")):
                return path
        return None


def _unquote(version: str) -> str:
    return version.replace("%3a", ":")


def unpack(deb: str, dest: str, *members: str, exclude: tuple[str, ...] = ()) -> str:
    """Unpack ``deb`` into ``dest``: only ``members`` (paths in its data
    tarball, tar wildcards: ``./usr/lib/debug/boot/*``) when given, none of
    ``exclude`` (wildcards too); ``dest``."""
    os.makedirs(dest, exist_ok=True)
    if not members and not exclude:
        subprocess.run(["dpkg-deb", "-x", deb, dest], check=True)
        return dest
    data = subprocess.Popen(["dpkg-deb", "--fsys-tarfile", deb], stdout=subprocess.PIPE)
    tar = subprocess.run(["tar", "-x", "-C", dest, "--wildcards", *(f"--exclude={e}" for e in exclude),
                          *members], stdin=data.stdout, capture_output=True, text=True)
    data.stdout.close()
    if data.wait() or (tar.returncode and "Not found in archive" not in tar.stderr):
        raise RuntimeError(f"unpacking {deb} failed: {tar.stderr.strip()}")
    return dest
