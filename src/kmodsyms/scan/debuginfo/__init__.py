"""A distribution kernel's debug vmlinux as the input: DWARF, symbol table, checks."""
