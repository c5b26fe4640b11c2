"""The build side: a kernel's objects and module map in, one dtrace_syms out.

Inputs are read by :mod:`.thick`, :mod:`.kbuild` and :mod:`.modmap` (which
objects make up each built-in module), :mod:`.archive` (vmlinux's objects
in link order) and the ELF readers :mod:`.elffile`, :mod:`.elfscan` and
:mod:`.elfimage`; :mod:`.tables` turns the scans into the file's tables,
:mod:`.layout` records where the linker placed every section, and
:mod:`.writer` writes the file through :mod:`kmodsyms.format`.
:mod:`.verify` holds a built file to the linker maps, :mod:`.install`
puts it where the run time looks for it.
"""
