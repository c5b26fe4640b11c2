"""The one compiled part of kmodsyms: libkmodsyms (`libkmodsyms/`), built from
its own sources with the binding's (src/kmodsyms/binding/_kms*.c) into the
extension kmodsyms.binding._kms.  Everything else
is declared in pyproject.toml."""

import glob
import os

from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))
CSRC = "libkmodsyms"


def library_sources() -> list:
    """The library's C files (kms_*.c, and kmodsyms.c while it exists),
    relative to this directory as setuptools wants them."""
    names = sorted(glob.glob(os.path.join(HERE, CSRC, "kms_*.c")))
    names += glob.glob(os.path.join(HERE, CSRC, "kmodsyms.c"))
    return [os.path.relpath(n, HERE) for n in names]


setup(ext_modules=[Extension(
    "kmodsyms.binding._kms",
    sources=sorted(glob.glob("src/kmodsyms/binding/_kms*.c")) + library_sources(),
    include_dirs=[CSRC],
    extra_compile_args=["-std=c11", "-O2"],
    libraries=["dl"],
)])
