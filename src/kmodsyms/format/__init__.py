"""The dtrace_syms file format (docs/format.md): its one table of facts
(:mod:`.fileformat`), and its reader and writer (:mod:`.symsfile`), which
the build side writes through and ``kmodsyms info``/``dump`` read."""
