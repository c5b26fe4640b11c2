"""Install a dtrace_syms file as MOD_PATH/lib/modules/RELEASE/kernel/dtrace_syms,
and the kernel's modules.builtin.ranges made from it beside the kernel's
modules (what ``kmodsyms install`` and ``make dtrace_syms_install`` do).

The file is validated before anything is written, must belong to the target
release, and lands atomically (temp file in the destination directory,
fsync, rename) with mode 0644; missing directories are created 0755.
Nothing is ever written through a symbolic link below MOD_PATH.

MOD_PATH/lib/modules/RELEASE/modules.builtin.ranges (``kmodsyms ranges``'
text) is where dtrace-utils reads it when there is no /proc/kallmodsyms.
A kernel built with CONFIG_BUILTIN_MODULE_RANGES installs its own there,
which is kept unless ``force``.  Ours is told from the kernel's by a record
beside it, RANGES_NAME.kmodsyms: sha256sum's line for the bytes we wrote
(a comment in the file itself would cost dtrace's reader a line:
dt_kasstate_modname() answers no module for the kallsyms line that reads
a line it cannot parse).  The record is beside the file, not in kernel/,
which a kernel's ``make modules_install`` removes whole.  A file whose
bytes are not the record's, rewritten since by anyone, is not ours.
contrib/debian/postrm.d/kmodsyms removes both by the same rule.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from typing import Optional

from kmodsyms.errors import KmodsymsError
from kmodsyms.format.symsfile import read_syms, write_atomic

SYMS_NAME = "dtrace_syms"
RANGES_NAME = "modules.builtin.ranges"
RECORD_NAME = RANGES_NAME + ".kmodsyms"


@dataclass(frozen=True)
class Installed:
    """What :func:`install` did."""

    syms: str                      # the dtrace_syms installed
    ranges: Optional[str]          # the modules.builtin.ranges written, or None
    note: str = ""                 # why it was not written, or that --force replaced the kernel's


def _tree_release(kbuild: str) -> str:
    from kmodsyms.scan.writer import kernel_release
    release = kernel_release(kbuild)
    if not release:
        path = os.path.join(kbuild, "include", "config", "kernel.release")
        raise KmodsymsError(f"{path} is missing or empty; give the kernel release with "
                            "--release (or build the kernel first)")
    return release


def _check_release(release: str) -> None:
    # RELEASE becomes one path component: refuse anything that would climb
    # out of lib/modules or name a subdirectory.
    if not release or release in (".", "..") or "/" in release or "\0" in release:
        raise KmodsymsError(f"bad kernel release {release!r}: it must be one path component "
                            "such as 6.12.0-1.el9.x86_64")


def _build_default(kbuild: str, output: str) -> None:
    """Build DIR/dtrace_syms exactly as ``kmodsyms build --kbuild DIR`` does."""
    from kmodsyms.scan.modmap.choose import choose_module_map
    from kmodsyms.scan.writer import build
    thick_map, thick_source = choose_module_map(kbuild)
    build(kbuild, thick_map, thick_source, output)


def _is_merged_usr_lib(root: str, link: str) -> bool:
    """True when ``root/lib`` is the merged-/usr link to ``root/usr/lib``
    (as on Oracle Linux, Fedora, Debian...): the target stays inside
    MOD_PATH, so following it does not leave the install tree."""
    try:
        target = os.readlink(link)
    except OSError:
        return False
    usr_lib = os.path.normpath(os.path.join(root, "usr", "lib"))
    if os.path.normpath(target) not in ("usr/lib", usr_lib):
        return False
    try:
        return stat.S_ISDIR(os.lstat(usr_lib).st_mode) and \
            not stat.S_ISLNK(os.lstat(os.path.join(root, "usr")).st_mode)
    except OSError:
        return False


def _make_install_dir(root: str, release: str) -> str:
    """Create (0755) ROOT/lib/modules/RELEASE/kernel and return the real
    directory to write in (ROOT/usr/lib/... through a merged-/usr link), refusing a
    symbolic link at any component below ROOT.

    ROOT (MOD_PATH) itself is the caller's choice and may be anything.  The
    components below it are checked one by one with lstat() as they are
    walked or created: a link there could send a root-run 'make
    dtrace_syms_install' into any directory of the system (e.g. a link
    planted in a staging tree), so it is refused even when it points at a
    harmless place.  The one exception is ROOT/lib -> usr/lib, the merged-/usr
    layout of most current distributions (and so of '/' when MOD_PATH is
    empty), whose target stays inside ROOT.
    """
    if not os.path.isdir(root):
        try:
            os.makedirs(root, 0o755)        # as 'make modules_install' does
        except OSError as e:
            raise KmodsymsError(f"cannot create directory {root}: {e.strerror}") from None
    path = root
    for i, part in enumerate(("lib", "modules", release, "kernel")):
        path = os.path.join(path, part)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            try:
                os.mkdir(path, 0o755)
                os.chmod(path, 0o755)       # mkdir's mode is filtered by the umask
            except FileExistsError:
                pass                        # created meanwhile: checked just below
            except OSError as e:
                raise KmodsymsError(f"cannot create directory {path}: {e.strerror}") from None
            try:
                st = os.lstat(path)
            except OSError as e:
                raise KmodsymsError(f"cannot create directory {path}: {e.strerror}") from None
        except OSError as e:
            raise KmodsymsError(f"cannot examine {path}: {e.strerror}") from None
        if stat.S_ISLNK(st.st_mode):
            if i == 0 and _is_merged_usr_lib(root, path):
                path = os.path.join(root, "usr", "lib")
                continue
            raise KmodsymsError(f"{path} is a symbolic link (to {os.readlink(path)}); refusing "
                                "to install through it: replace it with a directory, or choose "
                                "another install path")
        if not stat.S_ISDIR(st.st_mode):
            raise KmodsymsError(f"{path} exists and is not a directory")
    return path


def _inputs(kbuild: Optional[str], syms: Optional[str], release: Optional[str]):
    """The file to install and the release (None: the file's own), from
    the options; a tree is needed only for what is not given."""
    if kbuild is not None and not os.path.isdir(kbuild):
        raise KmodsymsError(f"{kbuild}: not a directory (give the kernel build tree with --kbuild)")
    if syms is None and kbuild is None:
        raise KmodsymsError("nothing to install: give the dtrace_syms file with --syms (or the kernel "
                            "build tree it is in with --kbuild)")
    if release is None and kbuild is not None:
        release = _tree_release(kbuild)
    if release is not None:
        _check_release(release)
    if syms is None:
        syms = os.path.join(kbuild, SYMS_NAME)
        if not os.path.exists(syms):
            _build_default(kbuild, syms)
    return syms, release


def _target_release(image, syms: str, release: Optional[str]) -> str:
    """The release to install for: the one given, which must be the file's,
    else the file's."""
    built_for = image.meta_kernel_release
    if release is None:
        if not built_for:
            raise KmodsymsError(f"{syms} records no kernel release: give it with --release")
        _check_release(built_for)
        return built_for
    if built_for and built_for != release:
        raise KmodsymsError(f"{syms} was built for kernel release {built_for}, not {release}; "
                            "rebuild it from the right tree or give the matching --release")
    return release


def _ranges_text(image) -> tuple[Optional[bytes], str]:
    """The file's modules.builtin.ranges (``kmodsyms ranges``), or None and
    why it cannot be made."""
    from kmodsyms.format.ranges import format_ranges, plan
    try:
        return format_ranges(plan(image)).encode(), ""
    except KmodsymsError as e:
        return None, str(e)


def _refuse_link(path: str, shown: str) -> None:
    # As for dtrace_syms (install()): a link here is someone's set-up, not ours.
    if os.path.islink(path):
        raise KmodsymsError(f"{shown} is a symbolic link (to {os.readlink(path)}); refusing "
                            "to replace it: remove it first")


def _recorded(record: str) -> str:
    """The sha256 the record beside our file holds ("" without one)."""
    try:
        with open(record) as f:
            return f.read(64)
    except (OSError, UnicodeDecodeError):
        return ""


def _ranges_plan(directory: str, shown: str, force: bool) -> tuple[bool, str]:
    """Whether to write DIRECTORY/modules.builtin.ranges, and what to say:
    yes where there is none or ours; the kernel's own (any other) only with
    ``force``."""
    path = os.path.join(directory, RANGES_NAME)
    _refuse_link(path, shown)
    _refuse_link(os.path.join(directory, RECORD_NAME), shown + ".kmodsyms")
    try:
        with open(path, "rb") as f:
            old = f.read()
    except FileNotFoundError:
        return True, ""
    except OSError as e:
        raise KmodsymsError(f"cannot read {shown}: {e.strerror}") from None
    if hashlib.sha256(old).hexdigest() == _recorded(os.path.join(directory, RECORD_NAME)):
        return True, ""
    if force:
        return True, f"replaced {shown}, the kernel's own (not written by kmodsyms install), as --force asks"
    return False, (f"kept {shown}: the kernel's own (kmodsyms install did not write it, or it changed "
                   "since), which dtrace reads instead of ours; --force replaces it")


def install(kbuild: Optional[str] = None, syms: Optional[str] = None, mod_path: str = "",
            release: Optional[str] = None, force: bool = False) -> Installed:
    """Install ``syms`` (default: KBUILD/dtrace_syms, built first if absent)
    as MOD_PATH/lib/modules/RELEASE/kernel/dtrace_syms, and its
    modules.builtin.ranges beside the kernel's modules unless the kernel
    has its own there (replaced only with ``force``).

    ``release`` defaults to KBUILD/include/config/kernel.release, without
    KBUILD to the one the file records.  Raises KmodsymsError on bad
    input; a failure writes no file but whole ones.
    """
    syms, release = _inputs(kbuild, syms, release)
    # Validate first, then install the very bytes that were validated.
    image = read_syms(syms)
    release = _target_release(image, syms, release)
    ranges, why_not = _ranges_text(image)
    root = mod_path or "/"
    base = os.path.join(root, "lib", "modules", release)
    dest = os.path.join(base, "kernel", SYMS_NAME)
    kernel_dir = _make_install_dir(root, release)
    real_dest = os.path.join(kernel_dir, SYMS_NAME)
    # os.replace() over a symlink would replace the link itself, not write
    # through it, so this is not needed for safety today.  Refuse anyway: a
    # link here means someone set the tree up differently from what we
    # expect (e.g. pointing dtrace_syms at a shared copy), and silently
    # turning their link into a file would hide that; keeping the rule
    # "no symlinks below MOD_PATH" simple also keeps it checkable.
    _refuse_link(real_dest, dest)
    shown = os.path.join(base, RANGES_NAME)
    release_dir = os.path.dirname(kernel_dir)
    if ranges is None:
        write, note = False, f"did not write {shown}: {why_not}"
    else:
        write, note = _ranges_plan(release_dir, shown, force)
    write_atomic(real_dest, image.data, mode=0o644)
    if not write:
        return Installed(dest, None, note)
    write_atomic(os.path.join(release_dir, RANGES_NAME), ranges, mode=0o644)
    write_atomic(os.path.join(release_dir, RECORD_NAME),
                 f"{hashlib.sha256(ranges).hexdigest()}  {RANGES_NAME}\n".encode(), mode=0o644)
    return Installed(dest, shown, note)
