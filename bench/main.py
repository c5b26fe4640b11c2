"""``python -m bench``: run the rows, print the table, write the JSON."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import traceback

from .corpus import ROOT, choose
from .measure import machine
from .rows import ALIASES, ROWS, Bench, result

DEFAULT_JSON = os.path.join(ROOT, "bench", "results", "latest.json")


def _byte_compile(log) -> None:
    """Byte-compile kmodsyms as pip does when it installs a package: an
    editable install under PYTHONDONTWRITEBYTECODE would otherwise compile
    every module from source in every timed process."""
    import compileall

    import kmodsyms
    package = os.path.dirname(os.path.abspath(kmodsyms.__file__))
    if not compileall.compile_dir(package, quiet=1):
        log(f"bench: warning: could not byte-compile {package}")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    p.add_argument("--quick", action="store_true", help="3 repetitions instead of 5 (or --runs)")
    p.add_argument("--runs", type=int, default=None, help="repetitions per measurement [5; --quick: 3]")
    p.add_argument("--corpus", metavar="DIR", help="unpacked kernel tree with vmlinux.a, kallsyms and "
                   "modules_thick.builtin.reference [default: the shared corpus via the tests' cache, "
                   "else synthetic]")
    p.add_argument("--synthetic", type=int, metavar="N", default=None,
                   help="use fixtures/kbuild replicated N times instead of a corpus")
    p.add_argument("--json", metavar="PATH", default=DEFAULT_JSON, help=f"[default: {DEFAULT_JSON}]")
    p.add_argument("--only", metavar="ROW", action="append", default=[],
                   help="run only this row (repeatable or comma-separated): "
                        + ", ".join(ROWS) + " (or 1-14)")
    p.add_argument("--keep", action="store_true", help="keep the scratch directory")
    return p.parse_args(argv)


def _fmt(value, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "s":
        return f"{value:.3f} s" if value >= 0.01 else f"{value * 1e3:.2f} ms"
    if unit == "s/object":
        return f"{value * 1e6:.1f} us/obj"
    if unit == "addr/s":
        return f"{value / 1e6:.2f} M/s"
    if unit == "bytes":
        return f"{value / 2**20:.1f} MiB" if value >= 2**20 else f"{value / 1024:.1f} KiB"
    return f"{value:.4g} {unit}"


def _spread(r: dict) -> str:
    """(max - min) / median of our own samples, as a noise indicator."""
    xs = r["samples"].get("ours") or r["samples"].get("seconds")
    if not xs or not all(isinstance(x, (int, float)) for x in xs):
        return "-"
    m = sorted(xs)[len(xs) // 2]
    return f"{(max(xs) - min(xs)) / m:.0%}" if m else "-"


def table(header: dict, corpus_desc: str, runs: int, rows: list[dict]) -> str:
    lines = [f"machine: {header['nproc']} CPUs ({header['usable_cpus']} usable), {header['cpu']}, "
             f"Python {header['python']}, numpy {header['numpy']}, kernel {header['kernel']}, "
             f"kmodsyms {header['git']}, {header['time']}",
             f"corpus:  {corpus_desc}; medians of {runs} runs",
             f"load:    1-min load average {header['loadavg_start']:.2f} at start, "
             f"{header['loadavg_end']:.2f} at end (includes the benchmark itself)"
             + ("  WARNING: the machine was busy at start; timings are noisy"
                if header["loadavg_start"] > 0.5 * header["nproc"] else "")]
    cols = ("row", "what", "ours", "spread", "baseline", "ratio", "target", "met?")
    body = []
    for r in rows:
        met = {True: "yes", False: "NO", None: "-"}[r["met"]]
        if r["status"] != "ok":
            met = r["status"]
        body.append((r["id"], r["what"], _fmt(r["ours"], r["unit"]), _spread(r),
                     _fmt(r["baseline"], r["unit"]),
                     "-" if r["ratio"] is None else f"{r['ratio']:.2f}x", r["target"], met))
    widths = [max(len(c), *(len(b[i]) for b in body)) if body else len(c) for i, c in enumerate(cols)]
    fmt = "  ".join(f"{{:{'>' if i in (2, 3, 4, 5) else '<'}{w}}}" for i, w in enumerate(widths))
    lines += ["", fmt.format(*cols), fmt.format(*("-" * w for w in widths))]
    lines += [fmt.format(*b) for b in body]
    lines.append("")
    for r in rows:
        if r["note"]:
            lines.append(f"  {r['id']}: {r['note']}")
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    selected = []
    for item in args.only:
        for name in item.split(","):
            name = ALIASES.get(name.strip(), name.strip())
            if name not in ROWS:
                print(f"bench: unknown row {name!r}; rows: {', '.join(ROWS)}", file=sys.stderr)
                return 2
            selected.append(name)
    selected = [n for n in ROWS if n in selected] or list(ROWS)
    runs = args.runs or (3 if args.quick else 5)

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    workdir = tempfile.mkdtemp(prefix="kmodsyms-bench-")
    status = 0
    try:
        corpus = choose(args.corpus, args.synthetic, workdir, log)
        _byte_compile(log)
        header = machine()
        header["loadavg_start"] = os.getloadavg()[0]
        log(f"bench: {corpus.description}; scratch {workdir}; rows {', '.join(selected)}")
        b = Bench(corpus, workdir, runs, args.quick, log)
        rows = []
        for name in selected:
            log(f"bench: {name} ...")
            t0 = time.perf_counter()
            try:
                rows += ROWS[name](b)
            except Exception as e:  # one broken row must not lose the others
                traceback.print_exc()
                rows.append(result(name, name, "", note=f"error: {type(e).__name__}: {e}",
                                   status="error"))
                status = 1
            log(f"bench: {name} done in {time.perf_counter() - t0:.1f}s")
        header["loadavg_end"] = os.getloadavg()[0]
        print(table(header, corpus.description, runs, rows))
        doc = {"machine": header, "corpus": {"kind": corpus.kind, "root": corpus.root,
                                             "thick": corpus.thick, "kallsyms": corpus.kallsyms,
                                             "description": corpus.description},
               "runs": runs, "quick": args.quick, "rows": rows}
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=2)
            f.write("\n")
        log(f"bench: wrote {args.json}")
    finally:
        if args.keep:
            log(f"bench: kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return status
