"""ELF constants (the System V gABI's names and values), in one place for
every reader of ELF files here; the structures are :mod:`kmodsyms.scan.elf.elffile`'s."""

ELFMAG = b"\x7fELF"
ELFCLASS32, ELFCLASS64 = 1, 2          # e_ident[EI_CLASS]
ELFDATA2LSB, ELFDATA2MSB = 1, 2        # e_ident[EI_DATA]

PT_LOAD = 1
PT_NOTE = 4
PN_XNUM = 0xFFFF                       # e_phnum too large: the count is section 0's sh_info

SHT_SYMTAB = 2
SHT_NOTE = 7
SHT_NOBITS = 8
SHT_SYMTAB_SHNDX = 18

SHF_ALLOC = 0x2
SHF_EXECINSTR = 0x4
SHF_LINK_ORDER = 0x80

SHN_UNDEF = 0
SHN_LORESERVE = 0xFF00
SHN_ABS = 0xFFF1
SHN_XINDEX = 0xFFFF

STB_LOCAL, STB_GLOBAL, STB_WEAK = 0, 1, 2
STB_GNU_UNIQUE = 10
BINDING_NAMES = {STB_LOCAL: "local", STB_GLOBAL: "global", STB_WEAK: "weak"}

STT_NOTYPE, STT_OBJECT, STT_FUNC, STT_SECTION, STT_FILE = 0, 1, 2, 3, 4

NT_GNU_BUILD_ID = 3
