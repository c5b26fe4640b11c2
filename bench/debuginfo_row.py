"""Row 'debuginfo': ``kmodsyms build --debuginfo`` on a distribution's real
debug package (Debian's linux-image-*-dbg and its image package, unpacked
with ``dpkg-deb -x`` into one directory, $KMODSYMS_DEBUG_ROOT), with the
Makefiles of its source ($KMODSYMS_KERNEL_SOURCE, a directory: unpacking
the tarball is not timed).  Targets: <= 10 s wall and <= 1 GiB for the
whole process tree.  Baseline: ``nm --defined-only`` of the same debug
vmlinux (reading its symbol table, which any such tool must)."""

from __future__ import annotations

import glob
import os
import subprocess
import time

from .measure import interleaved, median, wall

GIB = 1 << 30


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


def _rss_pss(pid: int) -> tuple[int, int]:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            fields = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in f if line.endswith("kB\n")}
    except OSError:
        return 0, 0
    return fields.get("Rss", 0), fields.get("Pss", 0)


def tree_peak(cmd: list[str]) -> tuple[float, int, int, float]:
    """Wall seconds, the peak summed RSS and PSS of the process tree
    (sampled every 20 ms), and its CPU seconds (user + system, the
    processes it waited for included)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    peak_rss = peak_pss = 0
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        sizes = [_rss_pss(p) for p in _tree(proc.pid)]
        peak_rss = max(peak_rss, sum(r for r, _ in sizes))
        peak_pss = max(peak_pss, sum(p for _, p in sizes))
        time.sleep(0.02)
    seconds = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd[:4])} ... exited {proc.returncode}")
    return seconds, peak_rss, peak_pss, usage.ru_utime + usage.ru_stime


def debian_inputs(root: str) -> list[str] | None:
    """The --debuginfo options for the package unpacked in ``root``."""
    found = glob.glob(os.path.join(root, "usr/lib/debug/boot/vmlinux-*"))
    if not found:
        return None
    vmlinux = sorted(found)[-1]
    release = os.path.basename(vmlinux)[len("vmlinux-"):]
    return ["--debuginfo", "--vmlinux", vmlinux,
            "--system-map", os.path.join(root, f"usr/lib/debug/boot/System.map-{release}"),
            "--config", os.path.join(root, f"boot/config-{release}"),
            "--modules-dir", os.path.join(root, f"lib/modules/{release}")]


def row_debuginfo(b) -> list[dict]:
    from .rows import result
    root = os.environ.get("KMODSYMS_DEBUG_ROOT", "")
    source = os.environ.get("KMODSYMS_KERNEL_SOURCE", "")
    args = debian_inputs(root) if root else None
    if not args or not os.path.isdir(source):
        return [result("debuginfo", "kmodsyms build --debuginfo (Debian's -dbg package)", "s",
                       target="<= 10 s, <= 1 GiB", status="skipped",
                       note="set KMODSYMS_DEBUG_ROOT (the -dbg and image .debs unpacked with "
                            "dpkg-deb -x) and KMODSYMS_KERNEL_SOURCE (the linux-source tree)")]
    out = b.path("debuginfo", "dtrace_syms")
    cmd = b.kmodsyms + ["build", *args, "--source", source, "-o", out]
    nm = ["nm", "--defined-only", args[1]]
    runs: list[tuple[float, int, int, float]] = []
    ours, base = interleaved([lambda: runs.append(tree_peak(cmd)) or runs[-1][0],
                              lambda: wall(nm, stdout=subprocess.DEVNULL)], b.runs)
    o, r = median(ours), median(base)
    rss = max(x[1] for x in runs[1:] or runs)
    pss = max(x[2] for x in runs[1:] or runs)
    return [result("debuginfo", "kmodsyms build --debuginfo (Debian's -dbg package, process wall)", "s",
                   o, r, o / r, "<= 10 s, <= 1 GiB", o <= 10 and rss <= GIB,
                   {"ours": ours, "baseline": base, "peak_rss": [x[1] for x in runs],
                    "peak_pss": [x[2] for x in runs], "cpu": [x[3] for x in runs]},
                   f"baseline: nm --defined-only of the debug vmlinux; CPU (user+sys, all processes) "
                   f"{median([x[3] for x in runs]):.2f} s; peak process-tree RSS "
                   f"{rss / 2**20:.0f} MiB (PSS {pss / 2**20:.0f} MiB); {os.path.basename(args[1])}")]
