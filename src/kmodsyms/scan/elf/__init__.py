"""ELF readers: object files, archives and the linked image."""
