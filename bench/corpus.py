"""Where the benchmark's kernel tree comes from.

* the shared corpus, unpacked once per machine into the same cache the test
  suite's ``corpus`` fixture uses (tests/conftest.py);
* ``--corpus DIR``: an already unpacked tree;
* otherwise (or with ``--synthetic N``) a synthetic tree: the objects of
  fixtures/kbuild replicated N times under rep1/ .. repN/, with a generated
  thin ``vmlinux.a`` (``ar cDPrST``) and ``modules_thick.builtin``.

:func:`replicate_tree` also makes the 1x/2x/4x trees of the scaling row.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
from dataclasses import dataclass
from typing import Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURE = os.path.join(ROOT, "fixtures", "kbuild")
# ../shared/kernels of the repository; KMODSYMS_KERNELS names another (a git worktree's).
KERNELS = os.environ.get("KMODSYMS_KERNELS") or os.path.join(os.path.dirname(ROOT), "shared", "kernels")
CORPUS_NAME = "linux-6.12-defconfig"            # x86_64, the benchmark's
ARM64_CORPUS_NAME = "linux-6.12-arm64"
CORPUS_NAMES = (CORPUS_NAME, ARM64_CORPUS_NAME)


def corpus_tarball(name: str = CORPUS_NAME) -> str:
    """Where corpus ``name`` is looked for (what a skip names when it is absent)."""
    return os.path.join(KERNELS, name + ".tar.xz")


CORPUS_TARBALL = corpus_tarball()
DEFAULT_REPLICAS = 128      # 128 x 22 fixture objects ~ the corpus's 2936


@dataclass
class Corpus:
    """A kernel build tree to benchmark.

    ``root``/``thick``: what ``kmodsyms build`` scans.  ``load_root``/
    ``load_thick``: the tree whose dtrace_syms matches ``kallsyms`` (the same
    tree for a real corpus; the unreplicated fixture for a synthetic one,
    since a replicated tree matches no kallsyms)."""

    kind: str                 # "corpus" or "synthetic"
    root: str
    thick: str
    kallsyms: str
    load_root: str
    load_thick: str
    description: str


def _corpus_cache_dir() -> str:
    """Same rule as tests/conftest.py."""
    return os.environ.get("KMODSYMS_CORPUS_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "kmodsyms-corpus")


def cached_corpus(log=print, name: str = CORPUS_NAME) -> Optional[str]:
    """The unpacked shared corpus ``name`` (unpacking it into the cache the
    first time, exactly as the tests' ``corpus`` fixture does), or None when
    its tarball is absent."""
    tarball = corpus_tarball(name)
    if not os.path.exists(tarball):
        return None
    st = os.stat(tarball)
    root = os.path.join(_corpus_cache_dir(), f"{st.st_size}-{int(st.st_mtime)}")
    tree = os.path.join(root, name)
    stamp = os.path.join(root, ".complete")
    if not os.path.exists(stamp):
        log(f"unpacking {tarball} into {root} (once per machine)")
        shutil.rmtree(root, ignore_errors=True)
        os.makedirs(root)
        if shutil.which("tar"):
            subprocess.run(["tar", "xJf", tarball, "-C", root], check=True)
        else:
            with tarfile.open(tarball) as tar:
                tar.extractall(root)
        open(stamp, "w").close()
    return tree


def pick_thick(tree: str) -> str:
    for name in ("modules_thick.builtin.reference", "modules_thick.builtin", "modules.builtin.objs"):
        path = os.path.join(tree, name)
        if os.path.exists(path):
            return path
    raise SystemExit(f"bench: {tree}: no modules_thick.builtin(.reference) or modules.builtin.objs")


def real_corpus(tree: str) -> Corpus:
    tree = os.path.abspath(tree)
    for need in ("vmlinux.a", "kallsyms"):
        if not os.path.exists(os.path.join(tree, need)):
            raise SystemExit(f"bench: {tree}: no {need} (not an unpacked corpus tree?)")
    thick = pick_thick(tree)
    return Corpus("corpus", tree, thick, os.path.join(tree, "kallsyms"), tree, thick,
                  f"corpus {tree}")


def ar_members(tree: str) -> list[str]:
    """``ar t vmlinux.a`` of the tree: the object list nm is given."""
    out = subprocess.run(["ar", "t", "vmlinux.a"], cwd=tree, check=True,
                         stdout=subprocess.PIPE, text=True).stdout
    return [line for line in out.splitlines() if line]


def read_thick_lines(path: str) -> list[tuple[str, list[str]]]:
    """(module path, objects) per line; a one-file module lists itself."""
    lines = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            module, _, rest = line.partition(":")
            module = module.strip()
            lines.append((module, rest.split() or [module]))
    return lines


def _module_name(path: str) -> str:
    """As kmodsyms.scan.modmap.thick.module_name: base name, no .o/.ko, '-' -> '_'."""
    base = os.path.basename(path)
    for suffix in (".ko", ".o"):
        if base.endswith(suffix):
            base = base[: -len(suffix)]
    return base.replace("-", "_")


def _link(src: str, dst: str) -> None:
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def replicate_tree(src: str, thick: str, dest: str, copies: int) -> int:
    """Make ``dest`` a kbuild tree holding ``copies`` replicas of ``src``'s
    objects (rep1/..repN/, hard links, copies across file systems), a thin
    ``vmlinux.a`` listing every replica in order, and a thick file (written
    as both ``modules_thick.builtin`` and ``modules_thick.builtin.reference``)
    whose modules of replica r >= 2 are renamed ``NAME_rR`` (plus ``x``
    until unique: module names must be unique).  Returns the number of objects in vmlinux.a."""
    members = ar_members(src)
    modules = read_thick_lines(thick)
    objects = list(dict.fromkeys(members + [o for _, objs in modules for o in objs]))
    objects = [o for o in objects if os.path.exists(os.path.join(src, o))]
    os.makedirs(dest, exist_ok=True)
    listed: list[str] = []
    thick_lines: list[str] = []
    used = {_module_name(m) for m, _ in modules}
    for r in range(1, copies + 1):
        prefix = f"rep{r}"
        for obj in objects:
            _link(os.path.join(src, obj), os.path.join(dest, prefix, obj))
        listed += [f"{prefix}/{m}" for m in members]
        for module, objs in modules:
            if r > 1:
                base, ext = os.path.splitext(module)
                suffix = f"_r{r}"
                while _module_name(base + suffix + ext) in used:
                    suffix += "x"
                module = base + suffix + ext
                used.add(_module_name(module))
            thick_lines.append(f"{prefix}/{module}: " + " ".join(f"{prefix}/{o}" for o in objs))
    archive = os.path.join(dest, "vmlinux.a")
    if os.path.exists(archive):
        os.unlink(archive)
    listfile = os.path.join(dest, ".bench-members")
    with open(listfile, "w") as f:
        f.write("\n".join(listed) + "\n")
    # Response file: the 4x corpus list is too long for some ARG_MAXes.
    subprocess.run(["ar", "cDPrST", "vmlinux.a", "@" + listfile], cwd=dest, check=True)
    os.unlink(listfile)
    text = "\n".join(thick_lines) + "\n"
    for name in ("modules_thick.builtin", "modules_thick.builtin.reference"):
        with open(os.path.join(dest, name), "w") as f:
            f.write(text)
    return len(listed)


def synthetic_corpus(workdir: str, copies: int) -> Corpus:
    dest = os.path.join(workdir, "synthetic")
    n = replicate_tree(FIXTURE, os.path.join(FIXTURE, "modules_thick.builtin"), dest, copies)
    shutil.copy2(os.path.join(FIXTURE, "kallsyms"), os.path.join(dest, "kallsyms"))
    return Corpus("synthetic", dest, os.path.join(dest, "modules_thick.builtin.reference"),
                  os.path.join(FIXTURE, "kallsyms"), FIXTURE,
                  os.path.join(FIXTURE, "modules_thick.builtin"),
                  f"synthetic: fixtures/kbuild x{copies} ({n} objects); loader rows use "
                  f"fixtures/kbuild itself and its kallsyms")


def choose(corpus_dir: Optional[str], synthetic: Optional[int], workdir: str, log=print) -> Corpus:
    if synthetic is not None:
        return synthetic_corpus(workdir, synthetic)
    if corpus_dir:
        return real_corpus(corpus_dir)
    tree = cached_corpus(log)
    if tree is not None:
        return real_corpus(tree)
    log(f"bench: {CORPUS_TARBALL} is absent: using a synthetic corpus "
        f"(fixtures/kbuild x{DEFAULT_REPLICAS})")
    return synthetic_corpus(workdir, DEFAULT_REPLICAS)
