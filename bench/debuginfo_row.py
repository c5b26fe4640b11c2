"""Rows 'debuginfo' and 'debuginfo_dir': ``kmodsyms build --debuginfo`` as
docs/distributions.md tells users to run it, on Debian's real packages:
the -dbg package, the package with the config and /lib/modules, and
linux-source-X.Y, unpacked into one root ($KMODSYMS_DEBUG_ROOT, default
the slow tests' newest Debian unstable cloud-amd64 kernel in the corpus
cache), given as ``--root`` so that every input is found by its default:
the source is the tarball, decompressed as part of the build.
``debuginfo_dir`` is the same with the tarball unpacked beforehand (not
timed) and given as ``--source DIR``.  Targets: <= 10 s wall and <= 1 GiB
for the whole process tree, from the tarball.  Baseline: ``nm
--defined-only`` of the same debug vmlinux (reading its symbol table,
which any such tool must)."""

from __future__ import annotations

import glob
import os
import subprocess
import time

from .measure import interleaved, median, wall

GIB = 1 << 30
PAGE = os.sysconf("SC_PAGE_SIZE")


def _tree(pid: int) -> list[int]:
    found = [pid]
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                for child in f.read().split():
                    found += _tree(int(child))
    except OSError:
        pass
    return found


def _rss(pid: int) -> int:
    # statm's resident count is the kernel's own counter: reading it takes
    # no page-table walk, where smaps_rollup's would hold the process's
    # mmap lock 50 times a second and slow what it measures
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * PAGE
    except (OSError, IndexError, ValueError):
        return 0


def tree_peak(cmd: list[str]) -> tuple[float, int, float]:
    """Wall seconds, the peak summed RSS of the process tree (sampled every
    20 ms), and its CPU seconds (user + system, the processes it waited
    for included)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    peak = 0
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        peak = max(peak, sum(_rss(p) for p in _tree(proc.pid)))
        time.sleep(0.02)
    seconds = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd[:4])} ... exited {proc.returncode}")
    return seconds, peak, usage.ru_utime + usage.ru_stime


def debian_root() -> str:
    """$KMODSYMS_DEBUG_ROOT, else the newest kernel tests/debian_kernels.py
    unpacked for Debian unstable's cloud-amd64 flavour; "" when neither."""
    if os.environ.get("KMODSYMS_DEBUG_ROOT"):
        return os.environ["KMODSYMS_DEBUG_ROOT"]
    from .corpus import _corpus_cache_dir
    found = [p for p in glob.glob(os.path.join(_corpus_cache_dir(), "debian", "sid", "*-cloud-amd64"))
             if os.path.exists(os.path.join(p, ".complete"))]
    return sorted(found)[-1] if found else ""


def row_debuginfo(b) -> list[dict]:
    from .rows import result
    root = debian_root()
    vmlinux = sorted(glob.glob(os.path.join(root, "usr/lib/debug/boot/vmlinux-*")))[-1:] if root else []
    tarballs = glob.glob(os.path.join(root, "usr/src/linux-source-*.tar.*")) if root else []
    if not vmlinux or not tarballs:
        return [result(name, f"kmodsyms build --debuginfo (Debian's packages, {what})", "s",
                       target="<= 10 s, <= 1 GiB", status="skipped",
                       note="run the slow tests (tests/test_debian_packages.py) or set "
                            "KMODSYMS_DEBUG_ROOT: the -dbg, base or image and linux-source .debs "
                            "unpacked with dpkg-deb -x")
                for name, what in (("debuginfo", "from the tarball"), ("debuginfo_dir", "from a tree"))]
    from kmodsyms.scan.modmap.kernelsource import unpack_makefiles
    tree = b.path("debuginfo", "source")
    if not os.path.isdir(tree):
        os.makedirs(tree + ".tmp", exist_ok=True)
        unpacked = unpack_makefiles(tarballs[0], tree + ".tmp")
        os.rename(unpacked, tree)
    cmd = b.kmodsyms + ["build", "--debuginfo", "--root", root, "--quiet", "-o", b.path("debuginfo", "dtrace_syms")]
    return [_measure(b, "debuginfo", "from the tarball", cmd, vmlinux[0]),
            _measure(b, "debuginfo_dir", "from a tree unpacked beforehand", cmd + ["--source", tree], vmlinux[0])]


def _measure(b, name: str, what: str, cmd: list[str], vmlinux: str) -> dict:
    from .rows import result
    nm = ["nm", "--defined-only", vmlinux]
    runs: list[tuple[float, int, float]] = []
    ours, base = interleaved([lambda: runs.append(tree_peak(cmd)) or runs[-1][0],
                              lambda: wall(nm, stdout=subprocess.DEVNULL)], b.runs)
    from kmodsyms.scan.modmap.makeeval import filesystem_type, scratch_root
    scratch = f"{scratch_root()} ({filesystem_type(scratch_root()) or 'unknown filesystem'})"
    o, r = median(ours), median(base)
    rss = max(x[1] for x in runs[1:] or runs)
    return result(name, f"kmodsyms build --debuginfo (Debian's packages, {what}, process wall)", "s",
                  o, r, o / r, "<= 10 s, <= 1 GiB", o <= 10 and rss <= GIB,
                  {"ours": ours, "baseline": base, "peak_rss": [x[1] for x in runs],
                   "cpu": [x[2] for x in runs]},
                  f"baseline: nm --defined-only of the debug vmlinux; CPU (user+sys, all processes) "
                  f"{median([x[2] for x in runs]):.2f} s; peak process-tree RSS "
                  f"{rss / 2**20:.0f} MiB; scratch tree in {scratch}; {os.path.basename(vmlinux)}")
