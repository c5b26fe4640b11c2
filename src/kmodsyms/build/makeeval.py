"""Which module every object of vmlinux belongs to, from kbuild's own
Makefiles evaluated against a ``.config``: no configured or built tree needed.

kbuild decides an object's module in ``scripts/Makefile.lib``: an object
listed in a composite ``<mod>-y`` / ``<mod>-objs`` (``-m`` too for an
``obj-m`` composite) belongs to every such composite (``modname-multi``),
otherwise it is its own one-file module (``basetarget``), and the module's
file is ``$(obj)/<name>`` (``modfile``, passed as ``-DKBUILD_MODFILE``).

Here one GNU make process reads, in kbuild's order, the top-level ``Kbuild``
and every directory it descends into through ``obj-y`` (the directories
linked into vmlinux), each with kbuild's real ``scripts/Kbuild.include``,
``scripts/Makefile.compiler`` and ``scripts/Makefile.lib``, after the
``.config`` and ``arch/$(SRCARCH)/Makefile`` (for ``core-y``, ``drivers-y``
and ``libs-y``), as the top-level Makefile does.  Toolchain probes
(``try-run``) answer their fallback: since 4.18 the toolchain's capabilities
are Kconfig symbols (``CONFIG_AS_*``, ``CONFIG_CC_HAS_*``), already in the
``.config``.  Each directory's variables are dropped before the next, as
kbuild runs one make per directory.

The source may be a directory or a tarball (``/usr/src/linux-source-*.tar.xz``):
from a tarball only the Makefiles, ``Kbuild`` files and ``scripts/`` are
unpacked, into a temporary directory removed afterwards.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass

from ..errors import KmodsymsError
from .thick import ThickMap

# The top-level Makefile's ARCH -> SRCARCH (kbuild's ``SRCARCH := $(ARCH)`` and its exceptions).
_SRCARCH = {"i386": "x86", "x86_64": "x86", "sparc32": "sparc", "sparc64": "sparc",
            "parisc64": "parisc", "sh64": "sh", "um": "um"}
_FLAG_VARIABLES = tuple(f"KBUILD_{kind}{scope}" for kind in ("CFLAGS", "AFLAGS", "CPPFLAGS", "LDFLAGS",
                                                            "RUSTFLAGS")
                        for scope in ("", "_KERNEL", "_MODULE")) + (
    "CHECKFLAGS", "LDFLAGS_vmlinux", "NOSTDINC_FLAGS", "LINUXINCLUDE", "USERINCLUDE",
    "KBUILD_HOSTCFLAGS", "KBUILD_HOSTLDFLAGS", "CC_FLAGS_FTRACE", "CC_FLAGS_CFI")
# No tool is run: every toolchain question is already answered in the .config.
_NO_TOOLCHAIN = tuple(f"{tool}=false" for tool in ("CC", "LD", "AR", "NM", "OBJCOPY", "OBJDUMP",
                                                   "HOSTCC", "HOSTCXX", "RUSTC", "PAHOLE"))
_CONFIG_ARCH = re.compile(r"^# Linux/(\S+) ", re.M)

# The driver: kbuild's files, in the top-level Makefile's and Makefile.build's
# order, then one visit per directory, depth first (link order).  Each visit
# prints "D dir", then one "O obj modfile..." per built-in object, "S sub" per
# built-in subdirectory in place, and "L obj modfile..." per lib-y object.
_DRIVER = r"""
srctree := .
objtree := .
VPATH :=
KBUILD_EXTMOD :=
MAKECMDGOALS :=
include scripts/Kbuild.include
include scripts/Makefile.compiler
# The flag variables the top-level Makefile defines (simply expanded) before
# the arch Makefile appends to them.
$(foreach v,$(__km_flags),$(eval $v :=))
try-run = $(3)
cc-cross-prefix =
core-y :=
drivers-y :=
libs-y := lib/
include arch/$(SRCARCH)/Makefile
ARCH_CORE := $(core-y)
ARCH_LIB := $(filter %/, $(libs-y))
ARCH_DRIVERS := $(drivers-y) $(drivers-m)
need-builtin := 1
__km_keep := $(.VARIABLES) __km_keep

# kbuild's modname-multi and modfile (scripts/Makefile.lib), for the object $1
# (its path relative to $(obj)) rather than the rule's $*.o and $@.
__km_multi = $(sort $(foreach m,$(multi-obj-ym),$(if $(filter $1,$(call suffix-search,$m,.o,-objs -y -m)),$(m:.o=))))
__km_modfile = $(addprefix $(obj)/,$(or $(call __km_multi,$1),$(basename $(notdir $1))))
__km_line = $(info $1 $2 $(call __km_modfile,$(patsubst $(obj)/%,%,$2)))

define __km_visit
obj := $1
src := $1
obj-y :=
obj-m :=
lib-y :=
lib-m :=
subdir-y :=
subdir-m :=
include $$(kbuild-file)
include scripts/Makefile.lib
$$(info D $1)
$$(foreach o,$$(real-obj-y),$$(if $$(filter %/built-in.a,$$o),$$(info S $$(o:/built-in.a=)),$$(call __km_line,O,$$o)))
$$(foreach o,$$(lib-y),$$(call __km_line,L,$$o))
__km_sub_$1 := $$(patsubst %/built-in.a,%,$$(filter %/built-in.a,$$(real-obj-y)))
$$(foreach v,$$(filter-out $$(__km_keep) __km_%,$$(.VARIABLES)),$$(eval undefine $$v))
$$(foreach d,$$(__km_sub_$1),$$(eval $$(call __km_visit,$$d)))
endef

$(eval $(call __km_visit,.))
__km_done: ;
"""


@dataclass(frozen=True)
class KbuildObject:
    """One object kbuild links into vmlinux, and the module file(s)
    (``fs/ext4/ext4``) kbuild would compile it with (KBUILD_MODFILE)."""

    path: str                  # fs/ext4/balloc.o
    modfiles: tuple[str, ...]


@dataclass(frozen=True)
class KbuildEval:
    """What kbuild's Makefiles say for one configuration."""

    objects: tuple[KbuildObject, ...]   # link order: built-in objects, then lib-y ones
    directories: int
    srcarch: str

    def modfiles(self) -> dict[str, tuple[str, ...]]:
        return {o.path: o.modfiles for o in self.objects}


def config_srcarch(config: str) -> str:
    """SRCARCH named in a ``.config``'s header (``# Linux/x86 6.12.117 Kernel Configuration``)."""
    try:
        with open(config, errors="replace") as f:
            head = f.read(4096)
    except OSError as e:
        raise KmodsymsError(f"cannot read {config}: {e.strerror}") from None
    found = _CONFIG_ARCH.search(head)
    if not found:
        raise KmodsymsError(f"{config}: no '# Linux/ARCH' header line; "
                            "is it a kernel .config? (or give --arch)")
    arch = found.group(1)
    return _SRCARCH.get(arch, arch)


def evaluate(source: str, config: str, arch: str = "") -> KbuildEval:
    """Evaluate the Makefiles of ``source`` (a directory or a tarball of
    one) against ``config``.  Raises KmodsymsError when they cannot be read
    or make fails."""
    return start(source, config, arch).result()


class PendingEval:
    """A make run :func:`start` began: :meth:`result` waits for it, so a
    caller can do other work meanwhile."""

    def __init__(self, tree: str, srcarch: str, scratch: tempfile.TemporaryDirectory):
        self.tree, self.srcarch, self.scratch = tree, srcarch, scratch
        self.driver = os.path.join(scratch.name, "driver.mk")
        self.stdout = open(os.path.join(scratch.name, "stdout"), "w+", errors="replace")
        self.stderr = open(os.path.join(scratch.name, "stderr"), "w+", errors="replace")

    def run(self, config: str) -> "PendingEval":
        with open(self.driver, "w", errors="surrogateescape") as f:
            f.write(auto_conf(config) + _DRIVER)
        self.proc = subprocess.Popen(
            ["make", "-s", "-r", "-R", "--no-print-directory", "-C", self.tree, "-f", self.driver,
             f"SRCARCH={self.srcarch}", f"ARCH={self.srcarch}",
             f"__km_flags={' '.join(_FLAG_VARIABLES)}", *_NO_TOOLCHAIN, "__km_done"],
            stdin=subprocess.DEVNULL, stdout=self.stdout, stderr=self.stderr,
            env={**os.environ, "LC_ALL": "C"})
        return self

    def result(self) -> KbuildEval:
        try:
            status = self.proc.wait()
            self.stdout.seek(0)
            self.stderr.seek(0)
            out, err = self.stdout.read(), self.stderr.read()
        finally:
            self.stdout.close()
            self.stderr.close()
            self.scratch.cleanup()
        if status != 0:
            errors = [line for line in err.splitlines() if "***" in line or "Error" in line]
            raise KmodsymsError(f"{self.tree}: make could not evaluate kbuild's Makefiles: "
                                f"{(errors or err.splitlines() or ['(no message)'])[0].strip()}")
        return _parse(out, self.srcarch)


def start(source: str, config: str, arch: str = "") -> PendingEval:
    """Begin :func:`evaluate` (a tarball is unpacked first, here): make
    runs while the caller goes on."""
    if shutil.which("make") is None:
        raise KmodsymsError("GNU make is not installed; install it (apt-get install make)")
    srcarch = _SRCARCH.get(arch, arch) if arch else config_srcarch(config)
    if not os.path.exists(source):
        raise KmodsymsError(f"{source}: no such kernel source directory or tarball")
    scratch = tempfile.TemporaryDirectory(prefix="kmodsyms-make-")
    try:
        tree = source if os.path.isdir(source) else unpack_makefiles(source, scratch.name)
        for need in ("Kbuild", "scripts/Makefile.lib", f"arch/{srcarch}/Makefile"):
            if not os.path.exists(os.path.join(tree, need)):
                raise KmodsymsError(f"{tree if tree == source else source}: no {need}; give the top "
                                    "of a kernel source tree (or its tarball) of the same version "
                                    "as the kernel")
        return PendingEval(tree, srcarch, scratch).run(config)
    except BaseException:
        scratch.cleanup()
        raise


def auto_conf(config: str) -> str:
    """``config`` as kconfig writes it for make (include/config/auto.conf):
    only the set symbols, strings without their quotes and escapes."""
    try:
        with open(config, errors="surrogateescape") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise KmodsymsError(f"cannot read {config}: {e.strerror}") from None
    out = []
    for line in lines:
        name, eq, value = line.partition("=")
        if not eq or not name.startswith("CONFIG_") or value == "n":
            continue
        if value.startswith('"') and value.endswith('"') and len(value) >= 2:
            value = re.sub(r'\\(.)', r"\1", value[1:-1])
        out.append(f"{name}={value}\n")
    if not out:
        raise KmodsymsError(f"{config}: no CONFIG_ symbol set; is it a kernel .config?")
    return "".join(out)


def _parse(text: str, srcarch: str) -> KbuildEval:
    """Splice the per-directory listings into link order."""
    listing: dict[str, list[tuple[str, str]]] = {}
    libs: dict[str, list[KbuildObject]] = {}
    current: list[tuple[str, str]] = []
    current_libs: list[KbuildObject] = []
    modfiles: dict[str, tuple[str, ...]] = {}
    for line in text.splitlines():
        kind, _, rest = line.partition(" ")
        if kind == "D":
            current = listing.setdefault(rest, [])
            current_libs = libs.setdefault(rest, [])
        elif kind == "S":
            current.append(("S", rest))
        elif kind in ("O", "L"):
            words = rest.split()
            if not words:
                continue
            path = os.path.normpath(words[0])
            if kind == "O":
                current.append(("O", path))
                modfiles[path] = tuple(words[1:])
            else:
                current_libs.append(KbuildObject(path, tuple(words[1:])))
    if "." not in listing:
        raise KmodsymsError("make printed no listing of the top-level Kbuild file")
    ordered: list[KbuildObject] = []
    seen: set[str] = set()
    lib_order: list[KbuildObject] = []

    def walk(directory: str) -> None:
        lib_order.extend(libs.get(directory, ()))
        for kind, item in listing.get(directory, ()):
            if kind == "S":
                walk(item)
            elif item not in seen:   # kbuild links an object listed twice once
                seen.add(item)
                ordered.append(KbuildObject(item, modfiles[item]))

    walk(".")
    for lib in lib_order:
        if lib.path not in seen:
            seen.add(lib.path)
            ordered.append(lib)
    return KbuildEval(tuple(ordered), len(listing), srcarch)


def thick_from_eval(result: KbuildEval, builtin: list[str],
                    objects: list[str] | None = None) -> ThickMap:
    """The module map: each built-in module (``fs/ext4/ext4.o``, in
    ``modules.builtin`` order) and the objects whose modfile names it, in
    link order (``objects``, e.g. vmlinux.a's, else the Makefiles' own)."""
    wanted = set(builtin)
    table = result.modfiles()
    order = objects if objects is not None else [o.path for o in result.objects]
    members: dict[str, list[str]] = {m: [] for m in builtin}
    for obj in order:
        for modfile in table.get(obj, ()):
            module = modfile + ".o"
            if module in wanted and obj not in members[module]:
                members[module].append(obj)
    return ThickMap.from_members(builtin, members)


_WANTED = re.compile(r"(^|/)(Makefile[^/]*|Kbuild[^/]*|Kconfig[^/]*)$|^scripts/")


def unpack_makefiles(tarball: str, dest: str) -> str:
    """Unpack the Makefiles, Kbuild files and scripts/ of a kernel source
    tarball into ``dest``; the path of the tree's top."""
    try:
        archive = tarfile.open(tarball)
    except (OSError, tarfile.TarError) as e:
        raise KmodsymsError(f"{tarball}: not a readable kernel source tarball ({e})") from None
    top = None
    with archive:
        for member in archive:   # one pass: an .xz stream cannot seek back cheaply
            first, _, rest = member.name.partition("/")
            if top is None:
                top = first
            if not (member.isfile() and first == top and _WANTED.search(rest)):
                continue
            if hasattr(tarfile, "data_filter"):
                archive.extract(member, dest, filter="data")
            elif not os.path.isabs(member.name) and ".." not in member.name.split("/"):
                archive.extract(member, dest)   # a Python without extraction filters
    if top is None:
        raise KmodsymsError(f"{tarball}: empty tarball")
    return os.path.join(dest, top)
