"""The benchmark rows.  Each takes the :class:`Bench` context and returns
one or more result dicts (see :func:`result`)."""

from __future__ import annotations

import gc
import json
import os
import re
import shutil
import subprocess
import sys
import time
from typing import Optional

import numpy as np

from .corpus import Corpus, ar_members, replicate_tree
from .debuginfo_row import row_debuginfo
from .measure import interleaved, kmodsyms_cmd, median, wall

N_ADDRESSES = 1_000_000
SEED = 20241129


class Bench:
    """Shared state of one run: the corpus, a scratch dir, the repetition
    count, and things several rows need (built once, on demand)."""

    def __init__(self, corpus: Corpus, workdir: str, runs: int, quick: bool, log=print):
        self.corpus = corpus
        self.workdir = workdir
        self.runs = runs
        self.quick = quick
        self.log = log
        self.kmodsyms = kmodsyms_cmd()
        self._full_build: Optional[list[float]] = None
        self._syms: Optional[str] = None
        self._core_range: Optional[tuple[int, int, int]] = None

    def path(self, *parts: str) -> str:
        p = os.path.join(self.workdir, *parts)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        return p

    def build_cmd(self, root: str, thick: str, out: str, cache: bool) -> list[str]:
        cmd = self.kmodsyms + ["build", "--kbuild", root, "--thick", thick, "-o", out]
        return cmd if cache else cmd + ["--no-cache"]

    # -- things several rows need ------------------------------------------
    def syms(self) -> str:
        """dtrace_syms matching the corpus kallsyms (built once, untimed)."""
        if self._syms is None:
            c = self.corpus
            out = self.path("load", "dtrace_syms")
            self.log(f"  building {out} for the loader rows")
            wall(self.build_cmd(c.load_root, c.load_thick, out, cache=False))
            self._syms = out
        return self._syms

    def core_range(self) -> tuple[int, int, int]:
        """(lowest, highest core address, a core text address) of kallsyms:
        lines without ``[module]``, absolute (A/a, per-cpu offsets) left out."""
        if self._core_range is None:
            lo, hi, text = None, None, []
            with open(self.corpus.kallsyms, "rb") as f:
                for line in f:
                    if b"[" in line:
                        continue
                    parts = line.split()
                    if len(parts) < 3 or parts[1] in (b"a", b"A"):
                        continue
                    a = int(parts[0], 16)
                    lo = a if lo is None or a < lo else lo
                    hi = a if hi is None or a > hi else hi
                    if parts[1] in (b"T", b"t"):
                        text.append(a)
            if lo is None:
                raise RuntimeError(f"{self.corpus.kallsyms}: no core symbols")
            text.sort()
            self._core_range = (lo, hi, (text[len(text) // 2] if text else lo) + 4)
        return self._core_range

    def full_build(self) -> list[float]:
        """Samples of the --no-cache build (row 1's 'ours')."""
        if self._full_build is None:
            c = self.corpus
            out = self.path("build", "dtrace_syms")
            cmd = self.build_cmd(c.root, c.thick, out, cache=False)
            self._full_build = interleaved([lambda: wall(cmd)], self.runs)[0]
        return self._full_build


def result(id: str, what: str, unit: str, ours=None, baseline=None, ratio=None,
           target: str = "", met=None, samples=None, note: str = "", status: str = "ok") -> dict:
    return {"id": id, "what": what, "unit": unit, "ours": ours, "baseline": baseline,
            "ratio": ratio, "target": target, "met": met, "samples": samples or {},
            "note": note, "status": status}


# -- 1. build ----------------------------------------------------------------
def row_build(b: Bench) -> list[dict]:
    c = b.corpus
    out = b.path("build", "dtrace_syms")
    ours_cmd = b.build_cmd(c.root, c.thick, out, cache=False)
    objects = ar_members(c.root)
    nm_cmd = ["nm", "--defined-only"] + objects
    ours, base = interleaved([lambda: wall(ours_cmd), lambda: wall(nm_cmd, cwd=c.root)], b.runs)
    b._full_build = ours
    o, r = median(ours), median(base)
    return [result("build", "kmodsyms build --no-cache (process wall)", "s", o, r, o / r,
                   "<= 1.0x", o / r <= 1.0, {"ours": ours, "baseline": base},
                   f"baseline: one 'nm --defined-only' over the {len(objects)} objects of "
                   f"'ar t vmlinux.a'; -j default ({os.cpu_count()} CPUs)")]


# -- 2. rebuild with an unchanged cache --------------------------------------
def row_rebuild(b: Bench) -> list[dict]:
    c = b.corpus
    out = b.path("rebuild", "dtrace_syms")
    cmd = b.build_cmd(c.root, c.thick, out, cache=True)
    wall(cmd)  # fills OUT.cache
    ours = interleaved([lambda: wall(cmd)], b.runs)[0]
    base = b.full_build()
    o, r = median(ours), median(base)
    return [result("rebuild", "kmodsyms build, cache warm, nothing changed", "s", o, r, o / r,
                   "<= 0.1x", o / r <= 0.1, {"ours": ours, "baseline": base},
                   "baseline: the full --no-cache build (row 'build')")]


# -- 3. load ------------------------------------------------------------------
def _drgn_loader():
    """drgn's /proc/kallsyms-format parser, callable on a file name, or
    (None, reason)."""
    try:
        import drgn  # noqa: F401
    except ImportError as e:
        return None, f"drgn is not installed ({e}); pip install '.[bench]'"
    fn = None
    try:
        from drgn.helpers.linux.kallsyms import _load_proc_kallsyms as fn
    except ImportError:
        try:
            from _drgn import _linux_helper_load_proc_kallsyms as fn
        except ImportError:
            pass
    if fn is None:
        return None, (f"drgn {getattr(drgn, '__version__', '?')} has no _load_proc_kallsyms "
                      "(drgn.helpers.linux.kallsyms)")
    return fn, f"drgn {getattr(drgn, '__version__', '?')}"


def row_load(b: Bench) -> list[dict]:
    """A cold kmodsyms.load() in-process (libkmodsyms through the binding:
    map and check dtrace_syms, read kallsyms, place, attribute, index)
    against drgn's kallsyms loader on the same file, alternating."""
    import kmodsyms
    import kmodsyms.binding  # noqa: F401  (imports outside the timing)
    syms, ks = b.syms(), b.corpus.kallsyms
    state = {}

    def ours() -> float:
        state.pop("r", None)
        gc.collect()
        t0 = time.perf_counter()
        state["r"] = kmodsyms.load(syms=syms, kallsyms=ks)
        return time.perf_counter() - t0

    fn, why = _drgn_loader()
    call = None
    if fn is not None:
        # drgn 0.0.27+: _load_proc_kallsyms(filename=None, modules=False).
        # modules=True: index the module lines too, as kmodsyms.load does.
        for attempt in (lambda: fn(ks, True), lambda: fn(filename=ks, modules=True), lambda: fn(ks)):
            try:
                attempt()
                call = attempt
                break
            except TypeError as e:
                why_call = str(e)
        if call is None:
            why = f"{why}: _load_proc_kallsyms cannot be called on a file ({why_call})"

    def base() -> float:
        state.pop("d", None)
        gc.collect()
        t0 = time.perf_counter()
        state["d"] = call()
        return time.perf_counter() - t0

    if call is None:
        s = interleaved([ours], b.runs)[0]
        return [result("load", "kmodsyms.load(syms, kallsyms) in-process, cold", "s", median(s),
                       target="<= 0.25x", samples={"ours": s},
                       note=f"baseline missing: {why}", status="baseline missing")]
    s, d = interleaved([ours, base], b.runs)
    o, r = median(s), median(d)
    return [result("load", "kmodsyms.load(syms, kallsyms) in-process, cold", "s", o, r, o / r,
                   "<= 0.25x", o / r <= 0.25, {"ours": s, "baseline": d},
                   f"baseline: {why} _load_proc_kallsyms(FILE, modules=True); "
                   f"kallsyms {os.path.getsize(ks):,} bytes; libkmodsyms through "
                   "kmodsyms.binding, nothing cached anywhere")]


# -- 4. resolve_many ------------------------------------------------------------
def row_resolve_many(b: Bench) -> list[dict]:
    """Resolver.resolve_many over a numpy uint64 array (any buffer serves):
    the library's columnar resolve (kms_resolve_lines) through the binding."""
    import kmodsyms
    lo, hi, _ = b.core_range()
    r = kmodsyms.load(syms=b.syms(), kallsyms=b.corpus.kallsyms)
    rng = np.random.default_rng(SEED)
    q = rng.integers(lo, hi, size=N_ADDRESSES, dtype=np.uint64, endpoint=True)

    def once() -> float:
        t0 = time.perf_counter()
        r.resolve_many(q)
        return time.perf_counter() - t0

    s = interleaved([once], b.runs)[0]
    rate = N_ADDRESSES / median(s)
    batch = r.resolve_many(q)
    lines, sized = np.frombuffer(batch.lines, np.int32), np.frombuffer(batch.sized, np.uint8)
    return [result("resolve_many", f"resolve_many, {N_ADDRESSES:,} random core addresses", "addr/s",
                   rate, None, None, ">= 10,000,000/s", rate >= 10_000_000,
                   {"seconds": s},
                   f"uniform over [{lo:#x}, {hi:#x}], seed {SEED}; {float(np.mean(lines >= 0)):.1%} "
                   f"answered, {float(np.mean(sized)):.1%} sized; columns array('i') + "
                   "array('B'), no object per address")]


# -- 5. kmodsyms resolve, whole process ----------------------------------------
def import_time_us(module: str, runs: int = 5) -> float:
    """Median cumulative import time (us) of ``module`` as a top-level import."""
    vals = []
    pat = re.compile(r"^import time:\s*(\d+) \|\s*(\d+) \| (\S.*)$")
    for _ in range(runs):
        err = subprocess.run([sys.executable, "-X", "importtime", "-c", f"import {module}"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                             check=True).stderr
        total = 0
        for line in err.splitlines():
            m = pat.match(line)
            if m and (m.group(3) == module or m.group(3) == module.split(".")[0]):
                total += int(m.group(2))
        vals.append(total)
    return median(vals)


def row_resolve_cli(b: Bench) -> list[dict]:
    """Whole cold ``kmodsyms resolve ADDR`` processes against cat + python:
    nothing is cached anywhere (every run loads through the library), and
    the process imports neither typer nor numpy."""
    syms, ks = b.syms(), b.corpus.kallsyms
    _, _, addr = b.core_range()
    cmd = b.kmodsyms + ["resolve", "--syms", syms, "--kallsyms", ks, f"{addr:#x}"]
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"kmodsyms resolve exited {out.returncode}: {out.stderr.strip()}")
    cat = ["cat", ks]
    py = [sys.executable, "-c", "pass"]
    s, c, p = interleaved([lambda: wall(cmd), lambda: wall(cat), lambda: wall(py)], b.runs)
    o, r = median(s), median(c) + median(p)
    fast_imports = import_time_us("kmodsyms.cli.frontend", runs=3 if b.quick else 5)
    binding_imports = import_time_us("kmodsyms.binding", runs=3 if b.quick else 5)
    cli_imports = import_time_us("kmodsyms.cli.app", runs=3 if b.quick else 5)
    return [result("resolve_cli", "kmodsyms resolve ADDR (process wall, cold)", "s", o, r, o / r,
                   "<= 3x", o / r <= 3.0, {"ours": s, "cat": c, "python_pass": p},
                   f"baseline: cat kallsyms >/dev/null ({median(c):.3f}s) + python -c pass "
                   f"({median(p):.3f}s); no cache anywhere: each run loads through libkmodsyms; "
                   f"imports (-X importtime, cumulative): kmodsyms.cli.frontend "
                   f"{fast_imports / 1000:.1f} ms, kmodsyms.binding {binding_imports / 1000:.1f} ms "
                   f"(typer's CLI, not imported: kmodsyms.cli.app {cli_imports / 1000:.1f} ms); "
                   f"answer: {out.stdout.strip()}")]


def row_lookup_cli(b: Bench) -> list[dict]:
    """Whole cold ``kmodsyms lookup NAME`` processes against ``kmodsyms
    resolve ADDR`` of the same symbol."""
    syms, ks = b.syms(), b.corpus.kallsyms
    _, _, addr = b.core_range()
    files = ["--syms", syms, "--kallsyms", ks]
    resolve = b.kmodsyms + ["resolve", *files, "--json", f"{addr:#x}"]
    out = subprocess.run(resolve, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"kmodsyms resolve exited {out.returncode}: {out.stderr.strip()}")
    name = json.loads(out.stdout)["symbol"]
    lookup = b.kmodsyms + ["lookup", *files, name]
    found = subprocess.run(lookup, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if found.returncode != 0:
        raise RuntimeError(f"kmodsyms lookup exited {found.returncode}: {found.stderr.strip()}")
    ours, base = interleaved([lambda: wall(lookup), lambda: wall(resolve)], b.runs)
    o, r = median(ours), median(base)
    return [result("lookup_cli", "kmodsyms lookup NAME (process wall, cold)", "s", o, r, o / r,
                   "<= 1.1x", o / r <= 1.1, {"ours": ours, "baseline": base},
                   f"baseline: kmodsyms resolve --json of the same symbol's address; "
                   f"answer: {found.stdout.strip()[:120]}")]


# -- 6. loader memory ------------------------------------------------------------
_MEM_SCRIPT = r"""
import gc, json, os, resource, sys
import kmodsyms, kmodsyms.binding
syms, ks, mode = sys.argv[1:4]

def status(field):
    # VmHWM/VmRSS of this mm.  Not ru_maxrss: Linux carries ru_maxrss across
    # execve, and subprocess vforks, so a child starts with the *parent's* peak.
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None

gc.collect()
if mode == "rss":
    how = "VmHWM"
    try:   # reset the high-water mark to the current RSS (Linux >= 4.0)
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        before = status("VmRSS")
    except OSError:
        before = status("VmHWM")
    if before is None:
        how = "ru_maxrss"
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    r = kmodsyms.load(syms=syms, kallsyms=ks)
    after = (status("VmHWM") if how == "VmHWM"
             else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    print(json.dumps({"before": before, "after": after, "peak": after - before, "how": how}))
else:
    import tracemalloc
    tracemalloc.start()
    r = kmodsyms.load(syms=syms, kallsyms=ks)
    cur, peak = tracemalloc.get_traced_memory()
    print(json.dumps({"peak": peak, "current": cur}))
"""


def _mem(syms: str, ks: str, mode: str) -> dict:
    out = subprocess.run([sys.executable, "-c", _MEM_SCRIPT, syms, ks, mode],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"memory probe exited {out.returncode}: {out.stderr.strip()[-500:]}")
    return json.loads(out.stdout)


def row_memory(b: Bench) -> list[dict]:
    """Peak memory of a cold start-up load (libkmodsyms through the binding)."""
    syms, ks = b.syms(), b.corpus.kallsyms
    size = os.path.getsize(ks)
    _mem(syms, ks, "rss")
    rss = [_mem(syms, ks, "rss") for _ in range(b.runs)]
    tm = [_mem(syms, ks, "tracemalloc") for _ in range(3 if b.quick else b.runs)]
    peak = median([x["peak"] for x in rss])
    tpeak = median([x["peak"] for x in tm])
    ratio = peak / size
    return [result("memory", "load(): peak RSS above the interpreter / kallsyms size", "bytes",
                   peak, size, ratio, "<= 3x", ratio <= 3.0, {"rss": rss, "tracemalloc": tm},
                   f"fresh subprocess, {rss[0]['how']} after load - RSS after imports "
                   f"({median([x['before'] for x in rss]) / 2**20:.0f} MiB); baseline = kallsyms "
                   f"text size; Python objects (tracemalloc peak) {tpeak / size:.3f}x: the "
                   f"library's memory is its own; syms file {os.path.getsize(syms):,} bytes")]


# -- 7. scan scaling ---------------------------------------------------------------
SCALES = (1, 2, 4)


def row_scaling(b: Bench) -> list[dict]:
    c = b.corpus
    trees = {}
    for k in SCALES:
        dest = os.path.join(b.workdir, "scale", f"x{k}")
        n = replicate_tree(c.root, c.thick, dest, k)
        trees[k] = (dest, n)
    b.log("  scaling trees: " + ", ".join(f"x{k}={n} objects" for k, (_, n) in trees.items()))
    cmds = {k: b.build_cmd(d, os.path.join(d, "modules_thick.builtin"),
                           b.path("scale", f"out{k}", "dtrace_syms"), cache=False)
            for k, (d, _) in trees.items()}
    samples = interleaved([lambda k=k: wall(cmds[k]) for k in SCALES], b.runs)
    per = {k: median(s) / trees[k][1] for k, s in zip(SCALES, samples)}
    # least-squares fit t = fixed + slope * n, to show where the deviation comes from
    ns = np.array([trees[k][1] for k in SCALES], float)
    ts = np.array([median(s) for s in samples])
    slope, fixed = np.polyfit(ns, ts, 1)
    rows = []
    for k in SCALES[1:]:
        ratio = per[k] / per[1]
        rows.append(result(
            f"scaling_x{k}", f"build --no-cache of {k}x the objects: time per object", "s/object",
            per[k], per[1], ratio, "0.85x .. 1.15x", 0.85 <= ratio <= 1.15,
            {"ours": samples[SCALES.index(k)], "baseline": samples[0]},
            f"baseline: per-object time at 1x ({trees[1][1]} objects, {median(samples[0]):.2f}s); "
            f"{k}x = {trees[k][1]} objects, {median(samples[SCALES.index(k)]):.2f}s; "
            f"linear fit: {fixed:.2f}s fixed + {slope * 1e3:.3f} ms/object"))
    return rows


# -- 8. Resolver.refresh --------------------------------------------------------
def _modules_listing(kallsyms: bytes, drop: bytes = b"") -> tuple[bytes, bytes]:
    """kallsyms without module ``drop``'s lines, and a /proc/modules for the
    loadable modules left (use counts and addresses as a non-root user sees
    them: refresh() compares names, sizes and states)."""
    kept, names = [], []
    for line in kallsyms.splitlines(keepends=True):
        tag = line.rstrip(b"\n").rpartition(b"\t")[2]
        if tag == b"[" + drop + b"]":
            continue
        kept.append(line)
        name = tag[1:-1]
        if tag.startswith(b"[") and name not in names and name != b"bpf" \
                and not name.startswith(b"__builtin__"):
            names.append(name)
    return b"".join(kept), b"".join(n + b" 65536 0 - Live 0x0000000000000000\n" for n in names)


def row_refresh(b: Bench) -> list[dict]:
    """refresh() when nothing changed (the common case: a tracer polls it),
    against reading /proc/modules itself; a refresh that follows a module
    load or unload is timed alongside (note)."""
    import kmodsyms
    with open(b.corpus.kallsyms, "rb") as f:
        full = f.read()
    kallsyms, modules = b.path("refresh", "kallsyms"), b.path("refresh", "modules")
    loaded = [full, _modules_listing(full)[1]]
    module = next(name for name in (line.rpartition(b"\t[")[2][:-1] for line in full.splitlines()
                                    if line.endswith(b"]"))
                  if name != b"bpf" and not name.startswith(b"__builtin__"))   # the first loaded
    unloaded = list(_modules_listing(full, module))
    for path, data in ((kallsyms, loaded[0]), (modules, loaded[1])):
        with open(path, "wb") as f:
            f.write(data)
    r = kmodsyms.load(syms=b.syms(), kallsyms=kallsyms, modules_dir=b.corpus.load_root,
                      proc_modules=modules)

    def unchanged() -> float:
        t0 = time.perf_counter()
        r.refresh()
        return time.perf_counter() - t0

    def read_proc_modules() -> float:
        t0 = time.perf_counter()
        with open(modules, "rb") as f:
            f.read()
        return time.perf_counter() - t0

    state = {"next": unloaded}

    def changed() -> float:
        for path, data in zip((kallsyms, modules), state["next"]):
            with open(path, "wb") as f:
                f.write(data)
        state["next"] = loaded if state["next"] is unloaded else unloaded
        t0 = time.perf_counter()
        r.refresh()
        return time.perf_counter() - t0

    # Many calls per sample: one takes microseconds.
    calls = 200

    def per_call(fn):
        return lambda: sum(fn() for _ in range(calls)) / calls

    s, base, c = interleaved([per_call(unchanged), per_call(read_proc_modules), changed], b.runs)
    o, r0 = median(s), median(base)
    return [result("refresh", "Resolver.refresh(), no module changed", "s", o, r0, o / r0,
                   "<= 1 ms", o <= 0.001, {"ours": s, "baseline": base, "changed": c},
                   f"baseline: reading /proc/modules ({len(loaded[1]):,} bytes here); "
                   f"mean of {calls} calls per sample; a refresh after [{module.decode()}] "
                   f"is loaded or unloaded takes {median(c):.3f}s (the sources loaded again)")]


# -- 9. the C loader (libkmodsyms, libkmodsyms) ------------------------------------
def _kms_bench(b: Bench) -> str:
    """libkmodsyms' kms-bench, built (optimised, as installed) into the scratch dir once."""
    out = b.path("clib", "kms-bench")
    if not os.path.exists(out):
        src = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                           "libkmodsyms")
        subprocess.run(["make", "-s", "-C", src, f"O={os.path.dirname(out)}",
                        os.path.join(os.path.dirname(out), "kms-bench")],
                       check=True, stdout=subprocess.DEVNULL)
    return out


def _kms(b: Bench, *args) -> dict:
    proc = subprocess.run([_kms_bench(b)] + [str(a) for a in args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"kms-bench {args[0]} exited {proc.returncode}: {proc.stderr.strip()}")
    return json.loads(proc.stdout)


def row_c_load(b: Bench) -> list[dict]:
    """Cold kms_load() of the corpus (map and check dtrace_syms, read and
    parse kallsyms, place, attribute, index: nothing is cached between
    loads), against drgn's kallsyms loader and against the floor: reading
    the kallsyms file and finding its lines, in C."""
    syms, ks = b.syms(), b.corpus.kallsyms

    def ours() -> float:
        return _kms(b, "load", syms, ks, 1)["seconds"][0]

    def floor() -> float:
        return _kms(b, "floor", ks, 1)["seconds"][0]

    fn, why = _drgn_loader()
    fns = [ours, floor]
    if fn is not None:
        def drgn() -> float:
            gc.collect()
            t0 = time.perf_counter()
            fn(ks, True)
            return time.perf_counter() - t0
        fns.append(drgn)
    samples = interleaved(fns, b.runs)
    o, f = median(samples[0]), median(samples[1])
    size = f"kallsyms {os.path.getsize(ks):,} bytes, dtrace_syms {os.path.getsize(syms):,} bytes"
    rows = [result("c_load_floor", "C kms_load() cold / reading kallsyms and splitting its lines in C",
                   "s", o, f, o / f, "<= 2x", o / f <= 2.0,
                   {"ours": samples[0], "baseline": samples[1]},
                   f"in-process, one load per fresh process; {size}")]
    if fn is None:
        rows.append(result("c_load_drgn", "C kms_load() cold / drgn's kallsyms loader", "s", o,
                           target="<= 0.25x", samples={"ours": samples[0]},
                           note=f"baseline missing: {why}", status="baseline missing"))
    else:
        d = median(samples[2])
        rows.append(result("c_load_drgn", "C kms_load() cold / drgn's kallsyms loader", "s", o, d,
                           o / d, "<= 0.25x", o / d <= 0.25,
                           {"ours": samples[0], "baseline": samples[2]},
                           f"baseline: {why} _load_proc_kallsyms(FILE, modules=True) in-process; {size}"))
    return rows


def _module_install(b: Bench) -> tuple[str, str, list[str]]:
    """The corpus's loaded modules installed as a distribution does: each
    .ko of the load tree that kallsyms has loaded copied to
    kernel/PATH under a scratch modules directory with its modules.dep,
    and a /proc/modules of kallsyms' loaded modules (row refresh's).
    Returns (modules directory, /proc/modules file, the .ko paths)."""
    with open(b.corpus.kallsyms, "rb") as f:
        listing = _modules_listing(f.read())[1]
    loaded = [line.split()[0].decode() for line in listing.splitlines()]
    found = {}
    for d, _dirs, names in os.walk(b.corpus.load_root):
        for n in names:
            if n.endswith(".ko") and n[:-3].replace("-", "_") in loaded:
                found.setdefault(n[:-3].replace("-", "_"),
                                 os.path.relpath(os.path.join(d, n), b.corpus.load_root))
    moddir = os.path.dirname(b.path("c_load_modules", "lib", "modules.dep"))
    names = [name for name in loaded if name in found]
    files = [os.path.join("kernel", found[name]) for name in names]
    for name, rel in zip(names, files):
        os.makedirs(os.path.join(moddir, os.path.dirname(rel)), exist_ok=True)
        shutil.copyfile(os.path.join(b.corpus.load_root, found[name]), os.path.join(moddir, rel))
    with open(os.path.join(moddir, "modules.dep"), "w") as f:
        f.writelines(f"{rel}:\n" for rel in files)
    proc_modules = b.path("c_load_modules", "modules")
    with open(proc_modules, "wb") as f:
        f.write(listing)
    return moddir, proc_modules, files


def row_c_load_modules(b: Bench) -> list[dict]:
    """Cold kms_load_opts() that also finds, reads and matches each loaded
    module's .ko (modules.dep, the ELF read, sections placed, every module
    line given its ELF size), against the plain cold kms_load() of row
    c_load, alternating in the same run."""
    syms, ks = b.syms(), b.corpus.kallsyms
    moddir, proc_modules, files = _module_install(b)
    if not files:
        return [result("c_load_modules", "C kms_load_opts() cold, with loaded modules' .ko / "
                       "without", "s", target="<= 1.25x", status="skipped",
                       note=f"no .ko of kallsyms' loaded modules under {b.corpus.load_root}")]
    last: dict = {}

    def with_modules() -> float:
        last.update(_kms(b, "load-modules", syms, ks, moddir, proc_modules, 1))
        return last["seconds"][0]

    def plain() -> float:
        return _kms(b, "load", syms, ks, 1)["seconds"][0]

    samples = interleaved([with_modules, plain], b.runs)
    if last["matched"] != len(files):
        raise RuntimeError(f"kms-bench load-modules matched {last['matched']} of the "
                           f"{len(files)} .ko files: the row would time refusals")
    o, p = median(samples[0]), median(samples[1])
    size = sum(os.path.getsize(os.path.join(moddir, rel)) for rel in files)
    return [result("c_load_modules", "C kms_load_opts() cold, with loaded modules' .ko / without",
                   "s", o, p, o / p, "<= 1.25x", o / p <= 1.25,
                   {"ours": samples[0], "baseline": samples[1]},
                   f"baseline: kms_load() as in row c_load; the .ko of {len(files)} of the "
                   f"{last['modules']} loaded modules ({size:,} bytes, through modules.dep) "
                   f"matched, {last['sized']:,} module lines sized; /proc/modules as a non-root "
                   f"user reads it (no cores)")]


N_COMPRESSED_MODULES = 150   # a distribution host's loaded modules (issue 21 part 3)


def _module_files(root: str, modules: list[str]) -> dict[str, str]:
    """Each module's plain .ko under ROOT (its path relative to ROOT), by
    its kernel name (as kallsyms spells it, '-' read as '_')."""
    found = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            if name.endswith(".ko"):
                mod = name[:-len(".ko")].replace("-", "_")
                if mod in modules:
                    found.setdefault(mod, os.path.relpath(os.path.join(dirpath, name), root))
    return found


def _compressed_install(b: Bench, suffix: str) -> tuple[str, str, str, int]:
    """A host with N_COMPRESSED_MODULES loaded modules installed compressed
    as a distribution does (signed is immaterial to the cost): the
    corpus's loaded modules with a .ko, copied round-robin under new names
    (MOD_cNNN, its kallsyms lines moved to a base of its own above every
    other line), each .ko compressed by the distribution's tool, with a
    modules.dep.  Returns (kallsyms, modules directory, an empty
    /proc/modules, bytes of compressed files)."""
    tool = {".xz": ["xz", "-c", "-T1"], ".zst": ["zstd", "-q", "-c"]}[suffix]
    with open(b.corpus.kallsyms, "rb") as f:
        text = f.read()
    core, lines_of = [], {}
    for line in text.splitlines(keepends=True):
        tag = line.rstrip(b"\n").rpartition(b"\t")[2]
        if tag.startswith(b"["):
            lines_of.setdefault(tag[1:-1].decode(), []).append(line)
        else:
            core.append(line)
    found = _module_files(b.corpus.load_root, list(lines_of))
    names = [m for m in lines_of if m in found]
    if not names:
        raise RuntimeError(f"no .ko of kallsyms' loaded modules under {b.corpus.load_root}")
    top = max(int(line.split()[0], 16) for line in text.splitlines() if line.strip())
    align = 1 << 20
    base = (top // align + 1) * align
    moddir = os.path.dirname(b.path(f"c_load_compressed{suffix}", "lib", "modules.dep"))
    out, dep, size = list(core), [], 0
    packed = {}
    for k in range(N_COMPRESSED_MODULES):
        mod = names[k % len(names)]
        new = f"{mod}_c{k:03d}"
        addrs = [int(line.split()[0], 16) for line in lines_of[mod]]
        low, high = min(addrs), max(addrs)
        for line, a in zip(lines_of[mod], addrs):
            fields = line.split(b" ", 1)
            rest = fields[1].rpartition(b"\t")[0]
            out.append(b"%016x %s\t[%s]\n" % (base + a - low, rest, new.encode()))
        base += ((high - low) // align + 2) * align
        if base >= 2**64:
            raise RuntimeError("the copies do not fit above the kernel's lines")
        rel = f"kernel/{os.path.dirname(found[mod])}/{new}.ko{suffix}"
        if mod not in packed:
            with open(os.path.join(b.corpus.load_root, found[mod]), "rb") as f:
                packed[mod] = subprocess.run(tool, input=f.read(), capture_output=True,
                                             check=True).stdout
        os.makedirs(os.path.join(moddir, os.path.dirname(rel)), exist_ok=True)
        with open(os.path.join(moddir, rel), "wb") as f:
            f.write(packed[mod])
        size += len(packed[mod])
        dep.append(f"{rel}:\n")
    with open(os.path.join(moddir, "modules.dep"), "w") as f:
        f.writelines(dep)
    kallsyms = b.path(f"c_load_compressed{suffix}", "kallsyms")
    with open(kallsyms, "wb") as f:
        f.writelines(out)
    proc_modules = b.path(f"c_load_compressed{suffix}", "modules")
    open(proc_modules, "wb").close()
    return kallsyms, moddir, proc_modules, size


def row_c_load_compressed(b: Bench) -> list[dict]:
    """Cold kms_load_opts() of a host with 150 loaded modules installed as
    .ko.xz and as .ko.zst (each read, decompressed and matched at every
    load), the first load of a process and a second one in it (nothing is
    kept between loads: the second costs what the first does), against
    kms_load() of the same kallsyms reading no .ko; and the lazy way
    (KMS_LOAD_DEFER_MODULES, then kms_read_modules() of the one module a
    caller first asks about) in the note."""
    rows = []
    for suffix in (".xz", ".zst"):
        tool = {".xz": "xz", ".zst": "zstd"}[suffix]
        rid = f"c_load_compressed{suffix.replace('.', '_')}"
        what = (f"C kms_load_opts() with {N_COMPRESSED_MODULES} loaded modules' .ko{suffix}, "
                "cold / again / reading no .ko")
        if not shutil.which(tool):
            rows.append(result(rid, what, "s", status="skipped", note=f"no {tool} tool"))
            continue
        syms = b.syms()
        kallsyms, moddir, proc_modules, size = _compressed_install(b, suffix)
        last: dict = {}

        again: list[float] = []

        def cold() -> float:
            last.update(_kms(b, "load-modules", syms, kallsyms, moddir, proc_modules, 2))
            again.append(last["seconds"][1])
            return last["seconds"][0]

        def plain() -> float:
            return _kms(b, "load", syms, kallsyms, 1)["seconds"][0]

        deferred: dict = {"first": []}

        def lazy() -> float:
            got = _kms(b, "load-deferred", syms, kallsyms, moddir, proc_modules, 1)
            deferred["first"] += got["first"]
            deferred["module"] = got["module"]
            return got["seconds"][0]

        samples = interleaved([cold, plain, lazy], b.runs)
        if last["matched"] != N_COMPRESSED_MODULES:
            raise RuntimeError(f"kms-bench load-modules matched {last['matched']} of the "
                               f"{N_COMPRESSED_MODULES} .ko{suffix} files")
        o, p, a = median(samples[0]), median(samples[1]), median(again[-len(samples[0]):])
        lz, first = median(samples[2]), median(deferred["first"][-len(samples[2]):])
        rows.append(result(rid, what, "s", o, p, o / p, "(measured: issue 21 part 3)", None,
                           {"ours": samples[0], "again": again[-len(samples[0]):],
                            "baseline": samples[1], "deferred": samples[2],
                            "first_module": deferred["first"][-len(samples[2]):]},
                           f"again (a second load in the process): {a:.3f}s, {a / p:.2f}x; "
                           f"KMS_LOAD_DEFER_MODULES: the load {lz:.3f}s ({lz / p:.2f}x), then "
                           f"kms_read_modules() of one ({deferred['module']}) {first:.3f}s; "
                           f"{N_COMPRESSED_MODULES} copies of the corpus's loaded modules "
                           f"({size:,} bytes compressed, {last['sized']:,} lines sized); "
                           f"baseline: kms_load() of the same kallsyms, no .ko read"))
    return rows


def _c_resolve_row(b: Bench, mode: str, row_id: str, what: str) -> list[dict]:
    """Rows c_resolve and c_resolve_many: kms-bench MODE of the same N_ADDRESSES
    addresses (kms-bench makes them from the range)."""
    lo, hi, _ = b.core_range()
    runs = [_kms(b, mode, b.syms(), b.corpus.kallsyms, N_ADDRESSES, hex(lo), hex(hi))
            for _ in range(b.runs)]
    s = [r["seconds"] for r in runs]
    rate = N_ADDRESSES / median(s)
    return [result(row_id, what, "addr/s", rate, None, None, ">= 20,000,000/s", rate >= 20_000_000,
                   {"seconds": s},
                   f"uniform over [{lo:#x}, {hi:#x}] (xorshift64); {runs[0]['answered'] / N_ADDRESSES:.1%} "
                   f"answered, {runs[0]['sized'] / N_ADDRESSES:.1%} sized; the full record is filled")]


def row_c_resolve(b: Bench) -> list[dict]:
    return _c_resolve_row(b, "resolve", "c_resolve",
                          f"C kms_resolve(), {N_ADDRESSES:,} random core addresses, one thread")


def row_c_resolve_many(b: Bench) -> list[dict]:
    return _c_resolve_row(b, "resolve-many", "c_resolve_many",
                          f"C kms_resolve_many(), {N_ADDRESSES:,} random core addresses, "
                          f"KMS_RESOLVE_BATCH (4,096) a call, one thread")


def row_c_memory(b: Bench) -> list[dict]:
    syms, ks = b.syms(), b.corpus.kallsyms
    size = os.path.getsize(ks)
    probes = [_kms(b, "memory", syms, ks) for _ in range(b.runs)]
    peak = median([p["peak"] for p in probes])
    anon = median([p["rss_anon"] for p in probes])
    file = median([p["rss_file"] for p in probes])
    return [result("c_memory", "C kms_load(): peak RSS above the process's / kallsyms size", "bytes",
                   peak, size, peak / size, "<= 1.5x", peak / size <= 1.5, {"probes": probes},
                   f"fresh process, VmHWM after the load - VmRSS before (file-backed pages "
                   f"count: the mapped dtrace_syms is all read); after it, anonymous "
                   f"{anon / 2**20:.1f} MiB (the names of the kallsyms lines, a 32-byte row per line, "
                   f"the piece index) and file-backed {file / 2**20:.1f} MiB (the mapped dtrace_syms, "
                   f"{os.path.getsize(syms) / 2**20:.1f} MiB, shared with the page cache)")]


# -- 14. DTrace's module table from libkmodsyms (contrib/dtrace) -----------------------
def _dt_module(b: Bench, *args) -> dict:
    """contrib/dtrace's kms-dt-module ``time``, built into the scratch dir once."""
    out = b.path("clib", "kms-dt-module")
    if not os.path.exists(out):
        src = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                           "libkmodsyms")
        subprocess.run(["make", "-s", "-C", src, f"O={os.path.dirname(out)}", out],
                       check=True, stdout=subprocess.DEVNULL)
    proc = subprocess.run([out] + [str(a) for a in args] + ["time"], capture_output=True,
                          text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"kms-dt-module exited {proc.returncode}: {proc.stderr.strip()}")
    return json.loads(proc.stdout)


def row_c_dtrace_update(b: Bench) -> list[dict]:
    """dtrace_update()'s kernel part changed as docs/dtrace-utils.md says:
    cold kms_load_opts() (with the loaded modules' .ko) and kms_foreach()
    into dtrace's module table, against today's read loop over the
    /proc/kallmodsyms text of the same lines (getline, sscanf, the same
    table), each in a fresh process, alternating."""
    import kmodsyms
    syms, ks = b.syms(), b.corpus.kallsyms
    text = b.path("c_dtrace_update", "kallmodsyms")
    r = kmodsyms.load(syms=syms, kallsyms=ks, modules_dir=b.corpus.load_root)
    with open(text, "w", encoding="utf-8", errors="surrogateescape") as f:
        f.writelines(t + "\n" for t in r.kallmodsyms_lines())
    runs: dict = {"ours": [], "text": [], "plain": []}

    def ours() -> float:
        runs["ours"].append(_dt_module(b, "--syms", syms, "--kallsyms", ks, "--modules-dir",
                                       b.corpus.load_root))
        return runs["ours"][-1]["read"]

    def kallmodsyms_text() -> float:
        runs["text"].append(_dt_module(b, "--kallmodsyms", text))
        return runs["text"][-1]["read"]

    def plain() -> float:
        runs["plain"].append(_dt_module(b, "--plain-kallsyms", ks))
        return runs["plain"][-1]["read"]

    samples = interleaved([ours, kallmodsyms_text, plain], b.runs)
    o, t, p = (median(x) for x in samples)
    last = runs["ours"][-1]
    cpu = median([a["read_cpu"] for a in runs["ours"]]) / median([a["read_cpu"] for a in runs["text"]])
    return [result("c_dtrace_update", "dtrace's module table from kms_load_opts()+kms_foreach() / "
                   "from /proc/kallmodsyms text", "s", o, t, o / t, "<= 2x", o / t <= 2.0,
                   {"ours": samples[0], "baseline": samples[1], "plain_kallsyms": samples[2]},
                   f"baseline: the same program's read loop over 'kmodsyms kallmodsyms' output "
                   f"({os.path.getsize(text):,} bytes) as dt_modsym_update() parses it; "
                   f"{last['symbols']:,} symbols in {last['modules']} modules; dtrace on plain "
                   f"kallsyms (no built-in modules) reads in {p:.3f}s; in CPU time the ratio is "
                   f"{cpu:.2f}x; sorting the tables "
                   f"{median([x['sort'] for x in runs['ours']]):.3f}s more, either way")]


ROWS = {
    "build": row_build,
    "rebuild": row_rebuild,
    "load": row_load,
    "resolve_many": row_resolve_many,
    "resolve_cli": row_resolve_cli,
    "lookup_cli": row_lookup_cli,
    "memory": row_memory,
    "scaling": row_scaling,
    "refresh": row_refresh,
    "c_load": row_c_load,
    "c_load_modules": row_c_load_modules,
    "c_load_compressed": row_c_load_compressed,
    "c_resolve": row_c_resolve,
    "c_resolve_many": row_c_resolve_many,
    "c_memory": row_c_memory,
    "debuginfo": row_debuginfo,      # and debuginfo_dir
    "c_dtrace_update": row_c_dtrace_update,
}
ALIASES = {"1": "build", "2": "rebuild", "3": "load", "4": "resolve_many", "5": "resolve_cli",
           "6": "memory", "7": "scaling", "resolve": "resolve_cli", "mem": "memory",
           "scan_scaling": "scaling", "lookup": "lookup_cli", "8": "refresh", "9": "c_load",
           "10": "c_resolve", "11": "c_memory", "12": "c_load_modules",
           "13": "c_resolve_many", "14": "debuginfo", "15": "c_load_compressed",
           "16": "c_dtrace_update"}
