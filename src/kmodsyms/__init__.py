"""kmodsyms: which built-in kernel module every kernel symbol belongs to.

The pipeline, one module per stage:

* :mod:`kmodsyms.scan.modmap.thick` reads modules_thick.builtin (which objects make up
  each built-in module); :mod:`kmodsyms.scan.modmap.kbuild` derives it from a tree's
  ``.cmd`` files when the kernel does not write it.
* :mod:`kmodsyms.scan.elf.archive` lists vmlinux's objects; :mod:`kmodsyms.scan.elf.elfscan`
  scans each; :mod:`kmodsyms.scan.writer` writes them as one dtrace_syms file,
  whose layout :mod:`kmodsyms.format.symsfile` implements and docs/format.md
  specifies (with vmlinux's segments and build-id from
  :mod:`kmodsyms.scan.elf.elfimage`).  The three read ELF files (objects, vmlinux,
  .ko) through one layer, :mod:`kmodsyms.scan.elf.elffile`, with the constants of
  :mod:`kmodsyms.scan.elf.elfdefs`.
* :mod:`kmodsyms.scan.layout` places every object section against
  System.map (read by :mod:`kmodsyms.scan.sysmap`), which the file records as
  its link layout; :mod:`kmodsyms.scan.verify` checks the attribution against
  the linker maps.
* The run time is libkmodsyms (`libkmodsyms/`), bound by :mod:`kmodsyms.binding`
  (the extension ``pip install`` compiles from the library's sources): it
  reads kallsyms, shifts the layout into the running kernel, matches the
  loaded modules with their .ko files and answers address ->
  ``mod`sym+off`` and ``mod`name`` -> address, as the records of
  :mod:`kmodsyms.binding.records`.  The CLI (:mod:`kmodsyms.cli.app`) and the
  commands that answer from a loaded kernel (:mod:`kmodsyms.cli.frontend`,
  run without typer from :mod:`kmodsyms.__main__`) call it.
  docs/resolver.md section 10 shows the layers.

:func:`load` is the entry point a tracer's start-up code calls.
"""

__version__ = "0.1.0"


def load(syms=None, kallsyms=None, force=False, fallback=False, warn=None, modules_dir=None,
         sysfs_root=None, proc_modules=None, kallsyms_text=None, kallsyms_name=None):
    """Load ``dtrace_syms`` and kallsyms (and the loaded modules' .ko files)
    through libkmodsyms and return a ready :class:`kmodsyms.binding.Resolver`.
    See :func:`kmodsyms.binding.load` for the contract."""
    from kmodsyms.binding import load as _load
    return _load(syms=syms, kallsyms=kallsyms, force=force, fallback=fallback, warn=warn,
                 modules_dir=modules_dir, sysfs_root=sysfs_root, proc_modules=proc_modules,
                 kallsyms_text=kallsyms_text, kallsyms_name=kallsyms_name)
