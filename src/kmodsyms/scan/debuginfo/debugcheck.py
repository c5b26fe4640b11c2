"""Every input of a build from debug info held to the debug vmlinux before
any work, so that files of another kernel are refused, in one line naming
the file at fault and what to give instead, rather than built into a wrong
dtrace_syms:

* System.map: the symbol list ``nm`` gave of this vmlinux (scripts/mksysmap),
  so every line's name at its address is in the vmlinux's own symbol table,
  and every symbol mksysmap keeps is a line; Debian's placeholder
  (``The real System.map is in the ...-dbg package``) is named as such;
* the config: its header's version is the one the kernel's banner gives,
  its architecture the vmlinux's, its ``CONFIG_CC_VERSION_TEXT`` the
  compiler the banner names, its ``CONFIG_LOCALVERSION`` in the release;
* the modules directory: of the same release (its ``.ko`` files' vermagic,
  a build tree's ``include/config/kernel.release``, else its name), and its
  ``modules.builtin`` what kbuild derives from its
  ``modules.builtin.modinfo``.

The source's version is checked by :func:`.kernelsource.check_version`, the
module map against the kernel's own names by :func:`.debuginfo.self_check`.
"""

from __future__ import annotations

import gzip
import lzma
import os
import re

import numpy as np

from kmodsyms.errors import KmodsymsError
from kmodsyms.scan.debuginfo.debugimage import DebugVmlinux
from kmodsyms.scan.sysmap import Kallsyms, never_listed

EXAMPLES = 3


def debug_system_map(vm: DebugVmlinux) -> str:
    """Where a distribution keeps the System.map of this debug vmlinux:
    beside it (Debian 13 on: /usr/lib/debug/lib/modules/REL/), else ""."""
    beside = os.path.join(os.path.dirname(os.path.realpath(vm.path)), "System.map")
    return beside if os.path.isfile(beside) else ""


def check_system_map(path: str, sysmap: Kallsyms, vm: DebugVmlinux, names: list[bytes] | None = None) -> None:
    """``names``: the lines' names, when the caller has them."""
    names = sysmap.names_bytes(slice(None)) if names is None else names
    instead = debug_system_map(vm)
    advice = f"give {instead}" if instead else \
        "give the System.map of the kernel's -dbg package (beside its debug vmlinux)"
    if all(b" " in name for name in names):
        shown = sysmap.text.decode("utf-8", "replace").strip().splitlines()[0][:100]
        raise KmodsymsError(f"{path}: a placeholder, not a System.map ({shown!r}); {advice}")
    # (name, address) pairs compared as one number each: the name's hash and the address
    ours = _keys(vm.names, vm.symbols["value"])
    theirs = _keys(names, sysmap.address)
    stray = np.flatnonzero(~np.isin(theirs, ours)).tolist()
    if stray:
        first = ", ".join(f"{names[k].decode('utf-8', 'replace')} at {int(sysmap.address[k]):#x}"
                          for k in stray[:EXAMPLES])
        raise KmodsymsError(f"{path}: {len(stray)} of its {len(names)} symbols are not at that "
                            f"address in {vm.path} ({first}): it is another kernel's System.map; "
                            f"{advice}")
    kept = _mksysmap_kept(vm)
    unlisted = kept[~np.isin(_keys(vm.names, np.zeros(len(vm.names), np.uint64))[kept],
                             _keys(names, np.zeros(len(names), np.uint64)))]
    missing = list(dict.fromkeys(vm.names[k] for k in unlisted.tolist() if not never_listed(vm.names[k])))
    if missing:
        first = ", ".join(n.decode("utf-8", "replace") for n in missing[:EXAMPLES])
        raise KmodsymsError(f"{path}: lacks {len(missing)} symbols of {vm.path}'s symbol table "
                            f"that scripts/mksysmap keeps ({first}): not this kernel's System.map; "
                            f"{advice}")


def _keys(names: list[bytes], addresses: np.ndarray) -> np.ndarray:
    """One 64-bit number per (name, address)."""
    hashes = np.fromiter(map(hash, names), dtype=np.int64, count=len(names)).view(np.uint64)
    return hashes ^ (addresses.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15))


def _mksysmap_kept(vm: DebugVmlinux) -> np.ndarray:
    """The indices of the symbol table's entries that scripts/mksysmap
    keeps by their type: not of nm's types a, N, U, w (local absolute,
    debugging, undefined), nor a file or section symbol, and named (its
    deleted names are left to the caller)."""
    from kmodsyms.scan.elf.elfdefs import SHF_ALLOC, SHN_ABS, SHN_LORESERVE, SHN_UNDEF, STB_LOCAL, STT_FILE, STT_SECTION
    sym = vm.symbols
    kind, bind, shndx = sym["info"] & 0xF, sym["info"] >> 4, sym["shndx"].astype(np.int64)
    allocated = np.array([bool(f & SHF_ALLOC) for f in vm.section_flags] + [False])
    in_section = (shndx > SHN_UNDEF) & (shndx < SHN_LORESERVE)
    kept = (in_section & allocated[np.where(in_section, np.minimum(shndx, len(allocated) - 1), -1)]) \
        | ((shndx == SHN_ABS) & (bind != STB_LOCAL))
    kept &= (kind != STT_FILE) & (kind != STT_SECTION) & (sym["name"] != 0)
    return np.flatnonzero(kept)


def config_version(config: str) -> str:
    from kmodsyms.scan.modmap.makeeval import config_header
    return config_header(config)[1]


def check_config(path: str, vm: DebugVmlinux) -> str:
    """The kernel's version as the config's header gives it (``6.1.192``,
    where Debian's release says ``6.1.0-57-cloud-amd64``), once the config
    is found to be this kernel's."""
    from kmodsyms.scan.modmap.makeeval import config_header
    arch, version = config_header(path)
    release, banner = vm.release, vm.banner
    fault = f"{path}: the config of another kernel than {vm.path}"
    advice = "give the config of the same package as the debug vmlinux (/boot/config-RELEASE)"
    if vm.srcarch and _srcarch(arch) != vm.srcarch:
        raise KmodsymsError(f"{fault} (of {arch}, not {vm.srcarch}); {advice}")
    if not banner:
        return version
    if not re.search(rf"(?<![\w.]){re.escape(version)}(?![\d])", banner):
        raise KmodsymsError(f"{fault} (Linux {version}; the kernel's banner: {release}); {advice}")
    options = _string_options(path, ("CONFIG_CC_VERSION_TEXT", "CONFIG_LOCALVERSION"))
    compiler = options.get("CONFIG_CC_VERSION_TEXT")
    if compiler and f"Linux version {release} (" in banner and compiler not in banner:
        raise KmodsymsError(f"{fault} (compiled by {compiler!r}; the kernel's banner: "
                            f"{banner[banner.find('(', len('Linux version ')):][:120]!r}); {advice}")
    local = options.get("CONFIG_LOCALVERSION")
    if local and local not in release:
        raise KmodsymsError(f"{fault} (CONFIG_LOCALVERSION {local!r}, not in {release}); {advice}")
    return version


def _srcarch(arch: str) -> str:
    from kmodsyms.scan.modmap.makeeval import _SRCARCH
    return _SRCARCH.get(arch, arch)


def _string_options(path: str, wanted: tuple[str, ...]) -> dict[str, str]:
    found = {}
    with open(path, errors="surrogateescape") as f:
        for line in f:
            name, eq, value = line.rstrip("\n").partition("=")
            if eq and name in wanted and value.startswith('"') and value.endswith('"'):
                found[name] = re.sub(r'\\(.)', r"\1", value[1:-1])
    return found


def modules_dir_release(path: str) -> str:
    """The release a modules directory is of: a build tree's
    ``include/config/kernel.release``, else the vermagic of the first
    ``.ko`` (plain, ``.xz``, ``.gz``) under it, else its name when that
    reads as a release; "" when none tells."""
    try:
        with open(os.path.join(path, "include", "config", "kernel.release")) as f:
            return f.read().strip()
    except OSError:
        pass
    for top, dirs, files in os.walk(os.path.join(path, "kernel")):
        dirs.sort()
        for name in sorted(files):
            magic = _vermagic(os.path.join(top, name))
            if magic:
                return magic
    name = os.path.basename(os.path.normpath(path))
    return name if re.match(r"\d+\.\d+", name) else ""


def _vermagic(path: str) -> str:
    opener = {".ko": open, ".xz": lzma.open, ".gz": gzip.open}.get(os.path.splitext(path)[1])
    if opener is None or not (path.endswith(".ko") or ".ko." in path):
        return ""
    try:
        with opener(path, "rb") as f:
            data = f.read()
    except (OSError, lzma.LZMAError, EOFError):
        return ""
    at = data.find(b"\0vermagic=")
    if at < 0:
        return ""
    value = data[at + len(b"\0vermagic="):data.find(b"\0", at + 1)]
    return value.split(b" ", 1)[0].decode("utf-8", "surrogateescape")


def check_modules_dir(path: str, vm: DebugVmlinux) -> None:
    release = modules_dir_release(path)
    advice = f"give /lib/modules/{vm.release} of the same package" if vm.release else \
        "give the modules directory of the same package as the debug vmlinux"
    if release and vm.release and release != vm.release:
        raise KmodsymsError(f"{path}: the modules of {release}, not of {vm.path}'s {vm.release}; "
                            f"{advice}")
    listed = _read_lines(os.path.join(path, "modules.builtin"))
    try:
        with open(os.path.join(path, "modules.builtin.modinfo"), "rb") as f:
            modinfo = f.read()
    except OSError:
        return   # kernels before 5.2 have none: nothing to hold modules.builtin to
    derived = builtin_from_modinfo(modinfo)
    if listed != derived:
        extra = sorted(set(listed) ^ set(derived))[:EXAMPLES]
        raise KmodsymsError(f"{path}: modules.builtin ({len(listed)} modules) is not what kbuild "
                            f"derives from its modules.builtin.modinfo ({len(derived)}; e.g. "
                            f"{', '.join(extra) or 'another order'}): the two files are of different "
                            f"kernels; {advice}")


def builtin_from_modinfo(modinfo: bytes) -> list[str]:
    """kbuild's modules.builtin (scripts/Makefile.vmlinux_o, 6.1 to 6.12;
    Makefile.vmlinux since): each ``MOD.file=`` value of
    modules.builtin.modinfo, split at spaces, adjacent repeats once, as
    ``kernel/FILE.ko``."""
    out: list[str] = []
    for entry in modinfo.split(b"\0"):
        key, eq, value = entry.partition(b"=")
        if eq and re.fullmatch(rb"[A-Za-z0-9:_]*\.file", key):
            for word in value.split(b" "):
                line = "kernel/" + word.decode("utf-8", "surrogateescape") + ".ko"
                if not out or out[-1] != line:
                    out.append(line)
    return out


def _read_lines(path: str) -> list[str]:
    try:
        with open(path, errors="surrogateescape") as f:
            return [line for line in f.read().split("\n") if line]
    except OSError as e:
        raise KmodsymsError(f"cannot read {path}: {e.strerror}; give the kernel's modules "
                            "directory (/lib/modules/RELEASE, from its image package)") from None
