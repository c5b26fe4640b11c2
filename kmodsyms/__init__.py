"""kmodsyms: which built-in kernel module every kernel symbol belongs to.

The pipeline, one module per stage:

* :mod:`kmodsyms.build.thick` reads modules_thick.builtin (which objects make up
  each built-in module); :mod:`kmodsyms.build.kbuild` derives it from a tree's
  ``.cmd`` files when the kernel does not write it.
* :mod:`kmodsyms.build.archive` lists vmlinux's objects; :mod:`kmodsyms.build.elfscan`
  scans each; :mod:`kmodsyms.build.writer` writes them as one dtrace_syms file,
  whose layout :mod:`kmodsyms.format.symsfile` implements and docs/format.md
  specifies (with vmlinux's segments and build-id from
  :mod:`kmodsyms.build.elfimage`).  The three read ELF files (objects, vmlinux,
  .ko) through one layer, :mod:`kmodsyms.build.elffile`, with the constants of
  :mod:`kmodsyms.build.elfdefs`.
* :mod:`kmodsyms.build.kallsyms` reads /proc/kallsyms; :mod:`kmodsyms.build.layout`
  places every object of the file in the running kernel;
  :mod:`kmodsyms.loadable` matches each loaded module with its own .ko;
  :mod:`kmodsyms.resolver` indexes it all and answers address ->
  ``mod`sym+off`` and ``mod`name`` -> address through the
  :class:`kmodsyms.answer.Answerer` it holds, which makes the records.
* :mod:`kmodsyms.snapshot` saves a loaded resolver's state so that the next
  load restores it and the next ``kmodsyms resolve`` answers without numpy
  (:mod:`kmodsyms.quick`; entry point: :mod:`kmodsyms.__main__`; CLI:
  :mod:`kmodsyms.cli.app`, output shared by both in :mod:`kmodsyms.cli.frontend`).
  docs/resolver.md section 10 shows the layers.

:func:`load` is the entry point a tracer's start-up code calls.
"""

__version__ = "0.1.0"


def load(syms=None, kallsyms=None, force=False, cache=True, fallback=False, warn=None,
         modules_dir=None, sysfs_root=None, proc_modules=None):
    """Load ``dtrace_syms`` and kallsyms (and the loaded modules' .ko files)
    and return a ready :class:`kmodsyms.resolver.Resolver`.  See its
    docstring for the contract."""
    from .resolver import load as _load
    return _load(syms=syms, kallsyms=kallsyms, force=force, cache=cache, fallback=fallback,
                 warn=warn, modules_dir=modules_dir, sysfs_root=sysfs_root,
                 proc_modules=proc_modules)
