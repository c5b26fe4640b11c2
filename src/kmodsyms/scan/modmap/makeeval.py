"""Which module every object of vmlinux belongs to, from kbuild's own
Makefiles evaluated against a ``.config``: no configured or built tree needed.

kbuild decides an object's module in ``scripts/Makefile.lib``: an object
listed in a composite ``<mod>-y`` / ``<mod>-objs`` (``-m`` too for an
``obj-m`` composite) belongs to every such composite (``modname-multi``),
otherwise it is its own one-file module (``basetarget``), and the module's
file is ``$(obj)/<name>`` (``modfile``, passed as ``-DKBUILD_MODFILE``).

Here one GNU make process visits, in kbuild's order, the top-level
``Kbuild`` and every directory it descends into through ``obj-y`` (the
directories linked into vmlinux), each through the tree's own
``scripts/Makefile.build``, as kbuild runs it once per directory: whatever
file of a kernel version computes the object lists (``Makefile.lib`` to
6.x, ``Makefile.build`` since), kbuild's own code computes them here.
Before the first visit it reads the ``.config`` and, as the top-level
Makefile does, ``scripts/Kbuild.include``, ``scripts/Makefile.compiler`` and
``arch/$(SRCARCH)/Makefile`` (for ``core-y``, ``drivers-y`` and
``libs-y``).  Toolchain probes (``try-run``) answer their fallback: since
4.18 the toolchain's capabilities are Kconfig symbols (``CONFIG_AS_*``,
``CONFIG_CC_HAS_*``), already in the ``.config``.  Each directory's
variables are dropped before the next, as kbuild runs one make per
directory.  make runs in a scratch object tree, as in an ``O=`` build, so
nothing is written into the source.

The link order is ``vmlinux.a``'s: the directories' objects depth first,
then the objects of ``scripts/head-object-list.txt`` moved to the front, as
kbuild's ``ar mPi`` does (6.1 and later), then the ``lib-y`` objects.

The source may be a directory or a tarball (:mod:`.kernelsource`).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass, field
from typing import Callable, Optional

from kmodsyms.errors import KmodsymsError
from kmodsyms.scan.modmap.kernelsource import KernelVersion, check_version, makefile_version, unpack_makefiles
from kmodsyms.scan.modmap.thick import ThickMap

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
_CONFIG_HEADER = re.compile(r"^# Linux/(\S+) (\S+) Kernel Configuration", re.M)

# The driver: kbuild's files, in the top-level Makefile's order, then one
# visit per directory through Makefile.build, depth first (link order).
# A directory listed twice (kernel/trace/ under several options) is
# visited once, as kbuild descends into each once.  $2 of a visit is its
# depth, as many words as levels.  Each visit prints "D dir", then one "O obj modfile..." per built-in
# object, "S sub" per built-in subdirectory in place, and "L obj
# modfile..." per lib-y object.  Overridden (kept through every include):
# the toolchain probes, and the directories Makefile.build would create
# (in the scratch tree: one shell per directory, for nothing).
_DRIVER = r"""
objtree := .
srcroot := $(srctree)
VPATH := $(srctree)
KBUILD_EXTMOD :=
MAKECMDGOALS :=
include $(srctree)/scripts/Kbuild.include
include $(srctree)/scripts/Makefile.compiler
override try-run = $(3)
override cc-cross-prefix =
override obj-dirs :=
# The flag variables the top-level Makefile defines (simply expanded) before
# the arch Makefile appends to them.
$(foreach v,$(__km_flags),$(eval $v :=))
core-y :=
drivers-y :=
libs-y := lib/
include $(srctree)/arch/$(SRCARCH)/Makefile
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
include $$(srctree)/scripts/Makefile.build
$$(info D $1)
$$(foreach o,$$(real-obj-y),$$(if $$(filter %/built-in.a,$$o),$$(info S $$(o:/built-in.a=)),$$(call __km_line,O,$$o)))
$$(foreach o,$$(lib-y),$$(call __km_line,L,$$o))
__km_sub_$1 := $$(patsubst %/built-in.a,%,$$(filter %/built-in.a,$$(real-obj-y)))
$$(foreach v,$$(filter-out $$(__km_keep) __km_%,$$(.VARIABLES)),$$(eval undefine $$v))
$$(foreach d,$$(__km_sub_$1),$$(if $$(__km_seen_$$d),,$$(eval __km_seen_$$d := 1)$$(if $$(call __km_mine,$2),$$(eval $$(call __km_visit,$$d,$2 x)))))
endef

# Shared among several make processes: the directories two levels down
# (drivers/net, fs/ext4) are dealt in turn, each process visiting those of
# its share (__km_share of the __km_ring 0 1 ... N-1, given on the command
# line, so that it rotates by override) and every directory
# above them; each sees the same directories in the same order.
__km_mine = $(if $(__km_ring),$(if $(filter 1,$(words $1)),$(__km_turn),1),1)
__km_turn = $(eval override __km_ring := $(wordlist 2,$(words $(__km_ring)),$(__km_ring)) $(firstword $(__km_ring)))$(filter $(__km_share),$(lastword $(__km_ring)))

$(eval $(call __km_visit,.,))
# No makefile read is remade: no implicit rule search for each.
$(sort $(MAKEFILE_LIST)): ;
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

    objects: tuple[KbuildObject, ...]   # link order: vmlinux.a's objects, then lib-y ones
    directories: int
    srcarch: str
    version: Optional[KernelVersion] = None     # the source's, from its top-level Makefile
    warnings: tuple[str, ...] = field(default=(), compare=False)
    forced: tuple[str, ...] = field(default=(), compare=False)   # what strict=False let pass

    def modfiles(self) -> dict[str, tuple[str, ...]]:
        return {o.path: o.modfiles for o in self.objects}


def config_srcarch(config: str) -> str:
    """SRCARCH named in a ``.config``'s header (``# Linux/x86 6.12.117 Kernel Configuration``)."""
    arch = config_header(config)[0]
    return _SRCARCH.get(arch, arch)


def config_header(config: str) -> tuple[str, str]:
    """The ARCH and the version a ``.config``'s header names
    (``# Linux/x86 6.12.117 Kernel Configuration``)."""
    try:
        with open(config, errors="replace") as f:
            head = f.read(4096)
    except OSError as e:
        raise KmodsymsError(f"cannot read {config}: {e.strerror}") from None
    found = _CONFIG_HEADER.search(head)
    if not found:
        raise KmodsymsError(f"{config}: no '# Linux/ARCH VERSION Kernel Configuration' header "
                            "line; is it a kernel .config?")
    return found.group(1), found.group(2)


def evaluate(source: str, config: str, arch: str = "") -> KbuildEval:
    """Evaluate the Makefiles of ``source`` (a directory or a tarball of
    one) against ``config``.  Raises KmodsymsError when they cannot be read
    or make fails."""
    return start(source, config, arch).result()


# Room the scratch tree must find on a memory filesystem: a 7.2 source's
# ~3,400 Makefiles (28 MB) and make's object trees, with margin.
_SCRATCH_ROOM = 256 << 20
_MOUNTINFO_ESCAPE = re.compile(r"\\([0-7]{3})")    # the kernel's octal escape of a space or tab


def scratch_root() -> str:
    """Where the evaluation's scratch tree goes: $TMPDIR when the user set
    it; else the temporary directory when it is a memory filesystem (as
    /tmp is on Debian 13 and later); else /dev/shm when it is one with
    room; else the temporary directory.  Why: a tarball's unpacking creates
    ~3,400 files and looks up ~15,000 directories, and a disk filesystem's
    metadata writes stall the ``xz | tar`` pipeline behind them (7.2's
    tarball: 8.0 s on ext4 against 4.8 s on tmpfs, 2 cores)."""
    default = tempfile.gettempdir()
    if os.environ.get("TMPDIR") or filesystem_type(default) == "tmpfs":
        return default
    shm = "/dev/shm"
    try:
        free = os.statvfs(shm)
        roomy = free.f_bavail * free.f_frsize >= _SCRATCH_ROOM
    except OSError:
        return default
    return shm if roomy and filesystem_type(shm) == "tmpfs" and os.access(shm, os.W_OK | os.X_OK) else default


def filesystem_type(path: str) -> str:
    """The type of the filesystem mounted over ``path`` (/proc/self/mountinfo), or ""."""
    path, best, kind = os.path.realpath(path), "", ""
    try:
        with open("/proc/self/mountinfo", errors="surrogateescape") as f:
            for line in f:
                fields, _, tail = line.partition(" - ")
                point = _MOUNTINFO_ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), fields.split()[4])
                inside = path == point or path.startswith(point.rstrip("/") + "/")
                if inside and len(point) >= len(best):
                    best, kind = point, tail.split()[0]
    except (OSError, IndexError):
        return ""
    return kind


class PendingEval:
    """The evaluation :func:`start` began, in a thread of its own: a
    tarball is unpacked, then make runs, while the caller goes on;
    :meth:`result` waits for it."""

    def __init__(self, source: str, config: str, srcarch: str, release: str, jobs: int,
                 progress: Optional[Callable[[str, int, int], None]], strict: bool):
        self.source, self.config, self.srcarch, self.release = source, config, srcarch, release
        self.jobs, self.progress, self.strict = jobs, progress, strict
        self.scratch = tempfile.TemporaryDirectory(prefix="kmodsyms-make-", dir=scratch_root())
        self.outcome: object = None
        self.procs: list[subprocess.Popen] = []
        self.stop = threading.Event()
        # Waited for instead of the thread: a Thread.join() that a signal
        # handler interrupts (Ctrl-C, SIGTERM) marks a running thread as
        # ended (CPython's bpo-45274 fix), and every join after it returns at once.
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            self.outcome = self._evaluate()
        except BaseException as e:   # raised again by result(), in the caller's thread
            self.outcome = e
        finally:
            self.done.set()

    def _evaluate(self) -> KbuildEval:
        tree = self.source
        if not os.path.isdir(tree):
            dest = os.path.join(self.scratch.name, "source")
            os.mkdir(dest)
            report = (lambda done, total: self.progress("reading the source", done, total)) \
                if self.progress else None
            tree = unpack_makefiles(self.source, dest, self.jobs, report, self.stop)
        version, warnings, forced = _check_tree(tree, self.source, self.srcarch, self.release,
                                                self.strict)
        if self.stop.is_set():
            raise KmodsymsError("cancelled")
        if self.progress:
            self.progress("evaluating kbuild's Makefiles", 0, 0)
        driver = os.path.join(self.scratch.name, "driver.mk")
        with open(driver, "w", errors="surrogateescape") as f:
            f.write(auto_conf(self.config) + _DRIVER)
        shares = max(1, self.jobs or os.cpu_count() or 1)
        runs = [self._make(tree, driver, k, shares) for k in range(shares)]
        texts = []
        for proc, out, err in runs:
            status = proc.wait()
            out.seek(0)
            err.seek(0)
            text, errors = out.read(), err.read()
            out.close()
            err.close()
            if status != 0 and not self.stop.is_set():
                lines = [line for line in errors.splitlines() if "***" in line or "Error" in line]
                raise KmodsymsError(f"{self.source}: make could not evaluate kbuild's Makefiles: "
                                    f"{(lines or errors.splitlines() or ['(no message)'])[0].strip()}")
            texts.append(text)
        if self.stop.is_set():
            raise KmodsymsError("cancelled")
        text = "".join(texts)
        result = _parse(text, self.srcarch, _head_objects(tree))
        return KbuildEval(result.objects, result.directories, result.srcarch, version, tuple(warnings),
                          tuple(forced))

    def _make(self, tree: str, driver: str, share: int, shares: int):
        """One make process, of share ``share`` of ``shares``, in an object
        tree of its own; with its output files."""
        objtree = os.path.join(self.scratch.name, f"objtree{share}")
        os.mkdir(objtree)
        out = open(os.path.join(self.scratch.name, f"stdout{share}"), "w+", errors="replace")
        err = open(os.path.join(self.scratch.name, f"stderr{share}"), "w+", errors="replace")
        ring = " ".join(map(str, range(shares))) if shares > 1 else ""
        proc = subprocess.Popen(
            ["make", "-s", "-r", "-R", "--no-print-directory", "-C", objtree, "-f", driver,
             f"srctree={os.path.abspath(tree)}", f"SRCARCH={self.srcarch}", f"ARCH={self.srcarch}",
             f"__km_flags={' '.join(_FLAG_VARIABLES)}", f"__km_ring={ring}", f"__km_share={share}",
             *_NO_TOOLCHAIN, "__km_done"],
            stdin=subprocess.DEVNULL, stdout=out, stderr=err, env={**os.environ, "LC_ALL": "C"})
        self.procs.append(proc)
        return proc, out, err

    def result(self) -> KbuildEval:
        try:
            self.done.wait()
        finally:
            self.cancel()
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        return self.outcome

    def cancel(self) -> None:
        """Stop what is running (a caller that fails or is interrupted),
        wait for it, and remove the scratch tree."""
        self.stop.set()
        for proc in list(self.procs):
            if proc.poll() is None:
                proc.kill()
        if self.thread.ident is not None:
            self.done.wait()
        self.scratch.cleanup()


def start(source: str, config: str, arch: str = "", release: str = "", jobs: int = 0,
          progress: Optional[Callable[[str, int, int], None]] = None, strict: bool = True) -> PendingEval:
    """Begin :func:`evaluate`: the tarball is unpacked and make runs in a
    thread while the caller goes on.  ``release``, when given, is the
    kernel's: a source of another VERSION.PATCHLEVEL is refused (a
    directory's at once), or with ``strict`` False evaluated all the same
    and said so in the result's ``forced``.  ``progress(phase, done,
    total)`` hears how far it got."""
    if shutil.which("make") is None:
        raise KmodsymsError("GNU make is not installed; install it (apt-get install make)")
    srcarch = _SRCARCH.get(arch, arch) if arch else config_srcarch(config)
    auto_conf(config)   # a file that is no .config is refused before any work
    if not os.path.exists(source):
        raise KmodsymsError(f"{source}: no such kernel source directory or tarball")
    if os.path.isdir(source):
        _check_tree(source, source, srcarch, release, strict)
    pending = PendingEval(source, config, srcarch, release, jobs, progress, strict)
    pending.thread.start()
    return pending


def _check_tree(tree: str, source: str, srcarch: str, release: str,
                strict: bool) -> tuple[KernelVersion, list[str], list[str]]:
    """The files every evaluation reads are there, and the version is the
    kernel's (:func:`~.kernelsource.check_version`): the version, the
    warnings, and the refusal that ``strict`` False let pass."""
    for need in ("Kbuild", "scripts/Makefile.build", "scripts/Makefile.lib", f"arch/{srcarch}/Makefile"):
        if not os.path.exists(os.path.join(tree, need)):
            raise KmodsymsError(f"{source}: no {need}; give the top of a kernel source tree "
                                "(or its tarball) of the same version as the kernel")
    version = makefile_version(tree)
    try:
        return version, check_version(source, version, release) if release else [], []
    except KmodsymsError as e:
        if strict:
            raise
        return version, [], [str(e)]


def _head_objects(tree: str) -> list[str]:
    """The lines of ``scripts/head-object-list.txt`` (6.1 and later), the
    objects kbuild moves to the front of vmlinux.a."""
    try:
        with open(os.path.join(tree, "scripts", "head-object-list.txt"), errors="replace") as f:
            return [line.strip() for line in f if line.strip() and not line.startswith("#")]
    except OSError:
        return []


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


def _parse(text: str, srcarch: str, heads: list[str] = ()) -> KbuildEval:
    """Splice the per-directory listings into link order."""
    listing: dict[str, list[tuple[str, str]]] = {}
    libs: dict[str, list[KbuildObject]] = {}
    current: list[tuple[str, str]] = []
    current_libs: list[KbuildObject] = []
    modfiles: dict[str, tuple[str, ...]] = {}
    for line in text.splitlines():
        kind, _, rest = line.partition(" ")
        if kind == "D":
            # a directory above the shared ones is listed by every make process: once is kept
            current = listing.setdefault(rest, []) if rest not in listing else []
            current_libs = libs.setdefault(rest, []) if rest not in libs else []
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
    # kbuild: ar mPi FIRST vmlinux.a $(ar t vmlinux.a | grep -F -f head-object-list.txt)
    head = [o for o in ordered if any(line in o.path for line in heads)]
    if head:
        ordered = head + [o for o in ordered if o not in head]
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
