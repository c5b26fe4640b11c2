"""kmodsyms.scan.linkmap against links made here by gcc and ld in the
kernel's two steps (``ld -r`` into vmlinux.o, then the final link by a
script), held to the final ELF symbol table: each symbol's bytes are its
own object's in the composed maps."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from kmodsyms.scan.linkmap import vmlinux_object_map

# The same string literals in three objects: the final link merges their
# .rodata.str1.8 (SHF_MERGE|SHF_STRINGS) to one copy, while vmlinux.o.map
# still gives each object's piece at its offset before merging: c.o's past
# the merged section's end, where the final link put a_table (x86_64 links
# .data..ro_after_init into .rodata right after the strings).
SHARED = ('void {o}_f(int x) {{ printk("the first long message shared by all %d\\n", x);'
          ' printk("the second long message shared by all %d\\n", x); }}\n')
SOURCES = {
    "a.c": "extern int printk(const char *, ...);\n"
           "int a_table[64] __attribute__((section(\".data..ro_after_init\"))) = {1};\n" + SHARED.format(o="a"),
    "b.c": "extern int printk(const char *, ...);\n"
           "long b_value __attribute__((section(\".data..ro_after_init\"))) = 2;\n" + SHARED.format(o="b"),
    "c.c": "extern int printk(const char *, ...);\n" + SHARED.format(o="c"),
    "d.c": "int printk(const char *f, ...) { return 0; }\n",
}
SCRIPT = """SECTIONS {
  . = 0xffffffff81000000;
  .text : { *(.text .text.*) }
  .rodata : { *(.rodata) *(.rodata.*) . = ALIGN(8); *(.data..ro_after_init) }
  /DISCARD/ : { *(.note.GNU-stack) *(.comment) *(.eh_frame) *(.note.gnu.property) }
}
"""


def _symbols(path: str) -> list[tuple[str, int, int]]:
    from elftools.elf.elffile import ELFFile
    with open(path, "rb") as f:
        return [(s.name, s["st_value"], s["st_size"]) for s in ELFFile(f).get_section_by_name(".symtab").iter_symbols()
                if s["st_info"]["type"] in ("STT_FUNC", "STT_OBJECT")]


@pytest.fixture(scope="module")
def two_step_link(tmp_path_factory):
    if not (shutil.which("gcc") and shutil.which("ld")):
        pytest.skip("gcc and ld are needed (apt-get install gcc binutils)")
    work = str(tmp_path_factory.mktemp("two-step"))
    for name, text in SOURCES.items():
        with open(os.path.join(work, name), "w") as f:
            f.write(text)
    with open(os.path.join(work, "vmlinux.lds"), "w") as f:
        f.write(SCRIPT)
    run = lambda *cmd: subprocess.run(cmd, cwd=work, check=True, capture_output=True)  # noqa: E731
    run("gcc", "-O2", "-fno-asynchronous-unwind-tables", "-c", *SOURCES)
    run("ld", "-r", "-Map=vmlinux.o.map", "-o", "vmlinux.o", "a.o", "b.o", "c.o", "d.o")
    run("ld", "-T", "vmlinux.lds", "-Map=vmlinux.map", "--no-warn-rwx-segments", "-o", "vmlinux", "vmlinux.o")
    return work


def test_composed_maps_keep_merged_strings_inside_their_section(two_step_link):
    path = lambda n: os.path.join(two_step_link, n)  # noqa: E731
    om = vmlinux_object_map(path("vmlinux.map"), path("vmlinux.o.map"), path("vmlinux"))
    checked = 0
    for name, address, size in _symbols(path("vmlinux")):
        owner = "d.o" if name == "printk" else name[0] + ".o"
        for byte in range(address, address + size):
            assert om.object_at(byte) == owner, (name, hex(byte), om.object_at(byte))
        checked += 1
    assert checked == 6
