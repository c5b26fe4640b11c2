"""What a compressed dtrace_syms (.xz, .zst) would save on disk and cost at
load, on the corpus (docs/kernel-integration.md, "Compressed dtrace_syms").

    python -m bench.compression [--runs N] [--corpus DIR]

Builds the corpus' dtrace_syms into a scratch directory, compresses it with
the xz and zstd command-line tools at their default and maximum levels, and
times, interleaved in one run: decompressing each (Python's lzma; the
zstandard module when installed) against the two loads it would add to, a
``kmodsyms.load()`` (libkmodsyms, which maps the file).  Prints one line
per file: size, saving, decompression time and its ratio to each load.
"""

from __future__ import annotations

import argparse
import lzma
import os
import shutil
import subprocess
import sys
import tempfile
import time

from .corpus import cached_corpus
from .measure import interleaved, median

COMPRESSORS = {             # name: command writing the compressed file to stdout
    "xz -6": ["xz", "-6", "-c"],
    "xz -9e": ["xz", "-9e", "-c"],
    "zstd -3": ["zstd", "-3", "-c", "-q"],
    "zstd -19": ["zstd", "-19", "-c", "-q"],
}


def _timed(fn):
    def run():
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0
    return run


def _decompressor(name: str, path: str, size: int):
    if name.startswith("xz"):
        return lambda: lzma.decompress(open(path, "rb").read())
    try:
        import zstandard
    except ImportError:
        return None
    d = zstandard.ZstdDecompressor()
    return lambda: d.decompress(open(path, "rb").read(), max_output_size=size)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--corpus", help="an unpacked corpus tree (default: the cached shared corpus)")
    args = ap.parse_args(argv)
    tree = args.corpus or cached_corpus()
    if tree is None:
        print("the corpus (../shared/kernels) is absent", file=sys.stderr)
        return 2
    import kmodsyms
    from kmodsyms.scan.modmap.thick import read_thick
    from kmodsyms.scan.writer import build
    work = tempfile.mkdtemp(prefix="kmodsyms-compress-")
    try:
        syms = os.path.join(work, "dtrace_syms")
        thick = os.path.join(tree, "modules_thick.builtin.reference")
        build(tree, read_thick(thick), thick, syms, use_cache=False)
        kallsyms = os.path.join(tree, "kallsyms")
        size = os.path.getsize(syms)
        files = {}
        for name, cmd in COMPRESSORS.items():
            if shutil.which(cmd[0]) is None:
                continue
            out = os.path.join(work, name.replace(" ", ""))
            with open(syms, "rb") as src, open(out, "wb") as dst:
                subprocess.run(cmd, stdin=src, stdout=dst, check=True)
            fn = _decompressor(name, out, size)
            if fn is not None:
                assert fn() == open(syms, "rb").read()
                files[name] = (out, fn)
        fns = [_timed(lambda: kmodsyms.load(syms, kallsyms))]
        fns += [_timed(fn) for _, fn in files.values()]
        samples = [median(s) for s in interleaved(fns, args.runs)]
        cold = samples[0]
        print(f"dtrace_syms {size:,} bytes; load(): {cold * 1e3:.1f} ms (medians of {args.runs})")
        for (name, (path, _)), t in zip(files.items(), samples[1:]):
            packed = os.path.getsize(path)
            print(f"{name:9} {packed:>10,} bytes ({packed / size:5.1%}, saves {size - packed:,}); "
                  f"decompress {t * 1e3:6.1f} ms = {t / cold:4.2f}x the load")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
