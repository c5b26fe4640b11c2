"""Install a dtrace_syms file as MOD_PATH/lib/modules/RELEASE/kernel/dtrace_syms
(what ``kmodsyms install`` and ``make dtrace_syms_install`` do).

The file is validated before anything is written, must belong to the target
release, and lands atomically (temp file in the destination directory,
fsync, rename) with mode 0644; missing directories are created 0755.
Nothing is ever written through a symbolic link below MOD_PATH.
"""

from __future__ import annotations

import os
import stat
from typing import Optional

from kmodsyms.errors import KmodsymsError
from kmodsyms.format.symsfile import read_syms, write_atomic

SYMS_NAME = "dtrace_syms"


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


def install(kbuild: str, syms: Optional[str] = None, mod_path: str = "",
            release: Optional[str] = None) -> str:
    """Install ``syms`` (default: KBUILD/dtrace_syms, built first if absent)
    as MOD_PATH/lib/modules/RELEASE/kernel/dtrace_syms and return that path.

    ``release`` defaults to KBUILD/include/config/kernel.release.  Raises
    KmodsymsError on bad input; a failure writes nothing at the destination.
    """
    if not os.path.isdir(kbuild):
        raise KmodsymsError(f"{kbuild}: not a directory (give the kernel build tree with --kbuild)")
    if release is None:
        release = _tree_release(kbuild)
    _check_release(release)
    if syms is None:
        syms = os.path.join(kbuild, SYMS_NAME)
        if not os.path.exists(syms):
            _build_default(kbuild, syms)
    # Validate first, then install the very bytes that were validated.
    image = read_syms(syms)
    built_for = image.meta_kernel_release
    if built_for and built_for != release:
        raise KmodsymsError(f"{syms} was built for kernel release {built_for}, not {release}; "
                            "rebuild it from the right tree or give the matching --release")
    root = mod_path or "/"
    dest = os.path.join(root, "lib", "modules", release, "kernel", SYMS_NAME)
    real_dest = os.path.join(_make_install_dir(root, release), SYMS_NAME)
    # os.replace() over a symlink would replace the link itself, not write
    # through it, so this is not needed for safety today.  Refuse anyway: a
    # link here means someone set the tree up differently from what we
    # expect (e.g. pointing dtrace_syms at a shared copy), and silently
    # turning their link into a file would hide that; keeping the rule
    # "no symlinks below MOD_PATH" simple also keeps it checkable.
    if os.path.islink(real_dest):
        raise KmodsymsError(f"{dest} is a symbolic link (to {os.readlink(real_dest)}); refusing "
                            "to replace it: remove it first")
    write_atomic(real_dest, image.data, mode=0o644)
    return dest
