"""The scanner: a kernel's objects and module map in, one dtrace_syms out.

- :mod:`.modmap`: which objects make up each built-in module
  (``modules_thick.builtin``, kbuild's ``.cmd`` files, or kbuild's
  Makefiles evaluated; :mod:`.modmap.choose` picks one);
- :mod:`.elf`: the ELF readers (objects, ``vmlinux.a`` in link order,
  the linked image);
- :mod:`.debuginfo`: a distribution's debug vmlinux (DWARF, symbol table)
  in place of a build tree, and the checks that its inputs belong together;
- :mod:`.sysmap` reads System.map; :mod:`.tables` turns the scans into the
  file's tables, :mod:`.layout` records where the linker placed every
  section, :mod:`.writer` writes the file through :mod:`kmodsyms.format`;
- :mod:`.verify` holds a built file to the linker maps, :mod:`.install`
  puts it where the run time looks for it.
"""
