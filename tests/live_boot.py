"""A kernel of tests/kernel_build.py booted under QEMU with a busybox
initramfs (tests/live/init.sh as /init), and what the guest carried out:
its /proc/kallsyms, /proc/modules, /sys/module/*, /sys/kernel/notes and
uname -r at each step, and the static kmodsyms-c's answers there.

A ``Machine`` per architecture says how: QEMU's binary and arguments, the
serial console, the compiler of the guest's static programs (cross for a
guest not of this machine's architecture) and the busybox-static .deb of a
foreign guest.  KVM when the guest is of this machine's architecture and
/dev/kvm opens, else TCG.  The guest writes one gzipped tar, base64 between
two marker lines, to its serial console, then reboots; QEMU runs with
-no-reboot, so it exits.
"""

from __future__ import annotations

import base64
import glob
import gzip
import io
import os
import platform
import shutil
import subprocess
import tarfile
import time
from dataclasses import dataclass

import pytest
from kernel_build import Kernel, run

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
GUEST = os.path.join(HERE, "live")
BUSYBOX = ("/bin/busybox", "/usr/bin/busybox")
# Where a foreign guest's busybox-static_*_ARCH.deb is looked for:
# KMODSYMS_LIVE_DEBS (a directory), else apt's cache (.ci/run downloads it there).
DEBS = os.environ.get("KMODSYMS_LIVE_DEBS") or "/var/cache/apt/archives"
# The module loaded first, unloaded and loaded again; the one inserted
# after, installed compressed as `make modules_install` with
# CONFIG_MODULE_COMPRESS_XZ writes it (xz --check=crc32 --lzma2=dict=1MiB).
RELOAD, INSERT = "autofs4", "crc7"
UNPRIVILEGED = "1000:1000"
SEED = 20261201
BOOT_TIMEOUT = 900          # seconds: a boot with its work takes ~1 minute under TCG
KVM_START_TIMEOUT = 60      # seconds for KVM to reach /init (it takes ~2)
INIT_STARTED = b"@@@@ init"
_KVM_STALLED: list[str] = []   # once KVM stalled, the session's other boots go straight to TCG
BEGIN, END = b"@@@@ BEGIN live.tar.gz", b"@@@@ END live.tar.gz"


@dataclass(frozen=True)
class Machine:
    """How QEMU boots one architecture's kernels, and how its guest's
    programs are built."""

    qemu: str                   # the QEMU binary
    package: str                # Debian's package of it
    host: str                   # platform.machine() of a host that runs it natively (KVM)
    machine: tuple[str, ...]    # QEMU's board arguments
    kvm_cpu: str                # -cpu under KVM and under TCG
    tcg_cpu: str
    image: str                  # the boot image, in the tree
    console: str                # the serial console's device name
    append: str                 # the kernel command line's own options of this machine
    triplet: str                # the GNU triplet of its cross compiler
    deb_arch: str               # Debian's architecture name

    def native(self) -> bool:
        return platform.machine() == self.host

    def compiler(self) -> tuple[str, str]:
        """(CC, AR) for the guest's static programs: this machine's own for a
        native guest, else the cross ones; skips without them or a static libc."""
        cc, ar = ("cc", "ar") if self.native() else (f"{self.triplet}-gcc", f"{self.triplet}-ar")
        package = "gcc" if self.native() else f"gcc-{self.triplet} libc6-dev-{self.deb_arch}-cross"
        if shutil.which(cc) is None or shutil.which(ar) is None:
            pytest.skip(f"{cc} absent (apt-get install {package})")
        # -print-file-name answers the bare name when the file is nowhere
        libc = subprocess.run([cc, "-print-file-name=libc.a"], capture_output=True, text=True).stdout.strip()
        if not os.path.isabs(libc):
            pytest.skip(f"no static libc for {cc} (apt-get install {package})")
        return cc, ar


MACHINES = {
    # no_timer_check: a busy host's TCG can fail the IO-APIC timer check
    "x86": Machine("qemu-system-x86_64", "qemu-system-x86", "x86_64", (), "qemu64", "max",
                   os.path.join("arch", "x86", "boot", "bzImage"), "ttyS0", "no_timer_check",
                   "x86_64-linux-gnu", "amd64"),
    # virt: a PL011 UART, a GIC and PSCI (which resets it), described by the
    # device tree QEMU writes, with the /chosen/kaslr-seed KASLR reads
    "arm64": Machine("qemu-system-aarch64", "qemu-system-arm", "aarch64", ("-M", "virt"), "host", "max",
                     os.path.join("arch", "arm64", "boot", "Image"), "ttyAMA0", "",
                     "aarch64-linux-gnu", "arm64"),
}


def machine_for(kernel: Kernel) -> Machine:
    """KERNEL's architecture's machine; skips without its QEMU."""
    machine = MACHINES[kernel.arch]
    if shutil.which(machine.qemu) is None:
        pytest.skip(f"{machine.qemu} absent (apt-get install {machine.package})")
    return machine


@dataclass(frozen=True)
class Boot:
    """One boot's record on the host."""

    out: str            # the guest's tar, unpacked: release, notes, PHASE/..., user/...
    modules_dir: str    # the installed /lib/modules/RELEASE, as in the guest
    syms: str           # the guest's dtrace_syms (this build's)
    other_syms: str     # another build's of the same release
    accel: str          # "kvm" or "tcg"
    seconds: float      # QEMU's run, start to exit
    console: str        # the serial log without the tar

    def path(self, *parts: str) -> str:
        return os.path.join(self.out, *parts)

    def text(self, *parts: str) -> str:
        with open(self.path(*parts), encoding="utf-8", errors="surrogateescape") as f:
            return f.read()


def kvm_usable(machine: Machine) -> bool:
    """The guest is of this machine's architecture and /dev/kvm opens,
    unless KMODSYMS_LIVE_ACCEL=tcg says to emulate."""
    if os.environ.get("KMODSYMS_LIVE_ACCEL") == "tcg" or not machine.native():
        return False
    try:
        os.close(os.open("/dev/kvm", os.O_RDWR))
        return True
    except OSError:
        return False


def is_static(path: str) -> bool:
    return b"ld-linux" not in open(path, "rb").read(1 << 16)


def busybox(machine: Machine, work: str) -> str:
    """A statically linked busybox of the guest's architecture: this
    machine's own for a native guest, else busybox-static's .deb of that
    architecture from DEBS, unpacked into WORK; skips without it."""
    if machine.native():
        for path in BUSYBOX:
            if os.path.exists(path) and is_static(path):
                return path
    debs = sorted(glob.glob(os.path.join(DEBS, f"busybox-static_*_{machine.deb_arch}.deb")))
    if not debs and machine.native():
        pytest.skip("no static busybox (apt-get install busybox-static)")
    if not debs:
        pytest.skip(f"no busybox-static_*_{machine.deb_arch}.deb in {DEBS} (there: dpkg --add-architecture "
                    f"{machine.deb_arch} && apt-get update && apt-get download busybox-static:{machine.deb_arch}; "
                    "or name its directory in KMODSYMS_LIVE_DEBS)")
    unpacked = os.path.join(work, "busybox-deb")
    run(["dpkg-deb", "-x", debs[-1], unpacked], cwd=work)
    path = os.path.join(unpacked, "bin", "busybox")
    assert os.path.exists(path) and is_static(path), f"{debs[-1]}: no static bin/busybox"
    return path


def static_programs(machine: Machine, work: str) -> dict[str, str]:
    """kmodsyms-c and the guest's helpers (tests/live/*.c), linked
    statically by the guest architecture's compiler."""
    cc, ar = machine.compiler()
    build = os.path.join(work, "c")
    run(["make", "-s", "-C", os.path.join(ROOT, "libkmodsyms"), f"O={build}", f"CC={cc}", f"AR={ar}",
         "LDFLAGS=-static", os.path.join(build, "kmodsyms-c")], cwd=ROOT)
    programs = {"kmodsyms-c": os.path.join(build, "kmodsyms-c")}
    for helper in ("addresses", "asuser"):
        programs[helper] = os.path.join(work, helper)
        run([cc, "-O2", "-static", "-Wall", "-Wextra", "-Werror", "-o", programs[helper],
             os.path.join(GUEST, f"{helper}.c")], cwd=work)
    return programs


def kernel_release(tree: str, kernel: Kernel) -> str:
    return run(["make", *kernel.make_args(), "-s", "kernelrelease"], cwd=tree).stdout.strip()


def install_modules(tree: str, kernel: Kernel, stage: str) -> str:
    """`make modules_install` into STAGE, INSERT's module compressed as
    kbuild compresses it; the modules directory."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    run(["make", *kernel.make_args(), "-s", f"INSTALL_MOD_PATH={stage}", "modules_install"],
        cwd=tree, env=env)
    modules_dir = os.path.join(stage, "lib", "modules", kernel_release(tree, kernel))
    for dirpath, _dirs, files in os.walk(modules_dir):
        for name in files:
            if name == f"{INSERT}.ko":
                run(["xz", "--check=crc32", "--lzma2=dict=1MiB", os.path.join(dirpath, name)],
                    cwd=dirpath)
    return modules_dir


def dtrace_syms(tree: str, out: str) -> str:
    import sys
    run([sys.executable, "-m", "kmodsyms", "build", "--kbuild", tree, "-o", out], cwd=ROOT)
    return out


def initramfs(tree: str, work: str, modules_dir: str, other_syms: str,
              programs: dict[str, str], busybox_path: str) -> str:
    """A newc cpio written by the tree's own usr/gen_init_cpio from a spec
    (device nodes and owners without root)."""
    stage_root = os.path.dirname(os.path.dirname(os.path.dirname(modules_dir)))
    env_file = os.path.join(work, "live.env")
    with open(env_file, "w") as f:
        f.write(f"RELOAD={RELOAD}\nINSERT={INSERT}\nOTHER_SYMS=/other/dtrace_syms\n"
                f"UNPRIVILEGED={UNPRIVILEGED}\nSEED={SEED}\n")
    spec = ["dir /bin 0755 0 0", "dir /dev 0755 0 0", "dir /etc 0755 0 0", "dir /proc 0755 0 0",
            "dir /sys 0755 0 0", "dir /tmp 1777 0 0", "dir /other 0755 0 0",
            "nod /dev/console 0600 0 0 c 5 1",
            f"file /bin/busybox {busybox_path} 0755 0 0",
            f"file /init {os.path.join(GUEST, 'init.sh')} 0755 0 0",
            f"file /etc/live.env {env_file} 0644 0 0",
            f"file /other/dtrace_syms {other_syms} 0644 0 0"]
    spec += [f"file /bin/{name} {path} 0755 0 0" for name, path in programs.items()]
    for dirpath, dirs, files in os.walk(stage_root):
        inside = "/" + os.path.relpath(dirpath, stage_root)
        if inside != "/.":
            spec.append(f"dir {inside} 0755 0 0")
        for name in sorted(files):
            path = os.path.join(dirpath, name)
            if os.path.islink(path):
                continue
            spec.append(f"file {os.path.join(inside, name)} {path} 0644 0 0")
    spec_file = os.path.join(work, "initramfs.spec")
    with open(spec_file, "w") as f:
        f.write("\n".join(spec) + "\n")
    cpio = os.path.join(work, "initramfs.cpio")
    with open(cpio, "wb") as f:
        subprocess.run([os.path.join(tree, "usr", "gen_init_cpio"), spec_file], stdout=f, check=True)
    return cpio


def run_qemu(cmd: list[str], log: str, started_within: float | None) -> tuple[int | None, bytes]:
    """Run QEMU, its serial console into LOG, until it exits or
    BOOT_TIMEOUT passes; (its exit status, the console).  When
    STARTED_WITHIN is given and /init has not said so by then, stop it:
    status None."""
    start, gave_up = time.monotonic(), False
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            while proc.poll() is None and time.monotonic() - start < BOOT_TIMEOUT:
                if started_within is not None and time.monotonic() - start > started_within:
                    with open(log, "rb") as f:
                        gave_up = INIT_STARTED not in f.read()
                    if gave_up:
                        break
                    started_within = None
                time.sleep(0.5)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
    with open(log, "rb") as f:
        return (None if gave_up else proc.returncode), f.read()


def boot(machine: Machine, tree: str, cpio: str, work: str, image: str | None = None,
         memory: str = "512M") -> tuple[str, float, str]:
    """Boot, wait for the guest to reboot, unpack its tar into WORK/out.
    The kernel is TREE's boot image unless IMAGE names another (a
    distribution's vmlinuz: tests/debian_guest.py).
    KVM first when usable; a KVM that runs the firmware but never
    reaches /init (nested KVM without long mode, as in some VMs) is
    left for TCG."""
    accels = (["kvm"] if kvm_usable(machine) and not _KVM_STALLED else []) + ["tcg"]
    for accel in accels:
        cmd = [machine.qemu, *machine.machine, "-accel", accel,
               "-cpu", machine.kvm_cpu if accel == "kvm" else machine.tcg_cpu,
               "-m", memory, "-smp", "1", "-nographic", "-no-reboot", "-monitor", "none",
               "-kernel", image or os.path.join(tree, machine.image), "-initrd", cpio,
               "-append", f"console={machine.console} panic=-1 oops=panic quiet loglevel=1 {machine.append}".rstrip()]
        start = time.monotonic()
        status, console = run_qemu(cmd, os.path.join(work, f"console-{accel}.log"),
                                   KVM_START_TIMEOUT if accel == "kvm" else None)
        seconds = time.monotonic() - start
        if status is not None:
            break
        _KVM_STALLED.append(accel)
    console = console.replace(b"\r", b"")
    begin, end = console.find(BEGIN), console.find(END)
    assert begin >= 0 and end > begin, \
        f"no tar on the serial console ({accel}, exit {status}, {seconds:.0f} s):\n" \
        f"{console[-3000:].decode(errors='replace')}"
    data = gzip.decompress(base64.b64decode(b"".join(console[begin + len(BEGIN):end].split())))
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(os.path.join(work, "out"), filter="data")
    rest = (console[:begin] + console[end + len(END):]).decode(errors="replace")
    return accel, seconds, rest


@dataclass(frozen=True)
class Guest:
    """What a guest runs besides its kernel, ready before the kernel is
    built, so that a missing QEMU, compiler or busybox skips at once."""

    machine: Machine
    programs: dict          # name in /bin -> its static build
    busybox: str


def guest(kernel: Kernel, work: str) -> Guest:
    machine = machine_for(kernel)
    os.makedirs(work, exist_ok=True)
    return Guest(machine, static_programs(machine, work), busybox(machine, work))


def boot_kernel(kernel: Kernel, tree: str, other_tree: str, work: str, ready: Guest) -> Boot:
    """Install, pack and boot ``kernel`` (built in TREE) with READY's
    programs; OTHER_TREE is another build of the same release, whose
    dtrace_syms the guest must refuse."""
    modules_dir = install_modules(tree, kernel, os.path.join(work, "stage"))
    syms = dtrace_syms(tree, os.path.join(modules_dir, "kernel", "dtrace_syms"))
    other_syms = dtrace_syms(other_tree, os.path.join(work, "other-dtrace_syms"))
    cpio = initramfs(tree, work, modules_dir, other_syms, ready.programs, ready.busybox)
    accel, seconds, console = boot(ready.machine, tree, cpio, work)
    return Boot(os.path.join(work, "out"), modules_dir, syms, other_syms, accel, seconds, console)
