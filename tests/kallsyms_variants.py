"""kallsyms texts of other configurations, derived from a build's own
System.map and kallsyms by the kernel's rules (test helpers)."""

from __future__ import annotations

TEXT_RANGES = (("_stext", "_etext"), ("_sinittext", "_einittext"))
MODULE_TEXT_LETTERS = (b"t", b"T", b"w", b"W")


def text_only(system_map: str, kallsyms: bytes) -> bytes:
    """What ``/proc/kallsyms`` of the same kernel built with
    ``CONFIG_KALLSYMS_ALL=n`` lists: ``scripts/kallsyms.c`` without
    ``--all-symbols`` keeps ``__start_*``/``__stop_*`` and what lies in
    ``[_stext, _etext]`` or ``[_sinittext, _einittext]``, except, at a
    range's end, anything but the end symbol itself.  Of a loaded module
    the kernel then keeps only the symbols of its executable sections
    (kernel/module/kallsyms.c is_core_symbol() without CONFIG_KALLSYMS_ALL,
    as a live text-only kernel shows: tests/test_live.py): in the text,
    the lines whose letter is a text one (t, w: weak non-objects, which
    elf_type() gives only so); pseudo-module lines are all text."""
    link = {}
    for line in open(system_map):
        address, _letter, name = line.split()
        link.setdefault(name, int(address, 16))
    lines = kallsyms.splitlines(keepends=True)
    shift = next(int(ln.split()[0], 16) - link["_stext"] for ln in lines
                 if ln.split()[2:] == [b"_stext"])
    ranges = [(link[s] + shift, link[e] + shift, e.encode()) for s, e in TEXT_RANGES]
    kept = []
    for line in lines:
        fields = line.split()
        if len(fields) > 3:
            if fields[1] in MODULE_TEXT_LETTERS:
                kept.append(line)
            continue
        address, name = int(fields[0], 16), fields[2]
        if name.startswith((b"__start_", b"__stop_")):
            kept.append(line)
        elif any(start <= address <= end for start, end, _ in ranges) and \
                not any(address == end and name != end_name for _, end, end_name in ranges):
            kept.append(line)
    return b"".join(kept)


def kernel_module_letters(kallsyms: bytes, exported: set[tuple[bytes, bytes]]) -> bytes:
    """The same kallsyms with each loaded module's line lettered as
    kernel/kallsyms.c s_show() prints it: upper case exactly when the module
    exports the symbol ((module, name) in ``exported``), else lower case,
    whatever the symbol's ELF binding (a global ``cleanup_module`` is
    ``t``), as a live kernel shows (tests/test_live.py).  nm's letters,
    which fixtures/kbuild/mkkallsyms.py writes, upper-case every global."""
    out = []
    for line in kallsyms.splitlines(keepends=True):
        head, tab, tag = line.partition(b"\t")
        module = tag.strip()[1:-1]
        if tab and not module.startswith((b"__builtin__", b"bpf")):
            address, letter, name = head.split(b" ", 2)
            letter = letter.upper() if (module, name) in exported else letter.lower()
            line = b" ".join((address, letter, name)) + tab + tag
        out.append(line)
    return b"".join(out)
