"""Read System.map (the build's symbol list, in kallsyms' format) in one
gulp into arrays, for the build's layout search and the tests.  At run
time libkmodsyms reads kallsyms.

Each line is ``ADDR TYPE NAME`` or ``ADDR TYPE NAME\\t[MOD]``.  The text is
read once; addresses, type letters, module ids and the byte span of each
name are extracted with numpy over the whole buffer, so no Python object is
made per line.  Names stay in the raw text and are decoded only when an
answer needs them (as perf's lazy symbol names do).

Modules: id 0 is the core kernel (no ``[MOD]``); the others are listed in
``module_names`` in order of first appearance.  ``[bpf]`` and
``[__builtin__*]`` are the kernel's pseudo-modules (BPF programs, ftrace and
kprobe trampolines), kept and labelled as such.
"""

from __future__ import annotations

import re

import numpy as np

from kmodsyms.errors import KmodsymsError, shown
from kmodsyms.format.fileformat import MAGIC
from kmodsyms.format.spans import equal_spans, words

# Bounds of the address ranges that scripts/kallsyms.c keeps when it is not
# given --all-symbols (CONFIG_KALLSYMS_ALL=n): text and init text.
TEXT_RANGES = ((b"_stext", b"_etext"), (b"_sinittext", b"_einittext"))

# Names that never reach System.map or kallsyms: scripts/mksysmap deletes
# them (kallsyms is made from the same list).  Mapping symbols ($x, $d...),
# local labels, the arm64 EFI stub's and the PIE/nVHE objects' copies of
# those, linker thunks, CFI type ids, modversions CRCs, export tables, and
# (7.x) the built-in device-table aliases and modinfo entries.
NEVER_LISTED_PREFIXES = (b"$", b".L", b"__efistub_", b"__pi_$", b"__pi_.L", b"__kvm_nvhe_$",
                         b"__kvm_nvhe_.L", b"__AArch64ADRPThunk_", b"__ARMV5PILongThunk_",
                         b"__ARMV7PILongThunk_", b"__ThumbV7PILongThunk_", b"__LA25Thunk_",
                         b"__microLA25Thunk_", b"__kcfi_typeid_", b"__kvm_nvhe___kcfi_typeid_",
                         b"__pi___kcfi_typeid_", b"__crc_", b"__kstrtab_", b"__kstrtabns_",
                         b"__mod_device_table__")
NEVER_LISTED_SUFFIXES = (b"_from_arm", b"_from_thumb", b"_veneer")
NEVER_LISTED_NAMES = frozenset((b"L0", b"_SDA_BASE_", b"_SDA2_BASE_"))
NEVER_LISTED_PARTS = (b".long_branch.", b".plt_branch.")      # ppc stubs


_UNIQUE_MODINFO = re.compile(rb"__UNIQUE_ID_modinfo_[0-9]*")


def never_listed(name: bytes) -> bool:
    """Whether scripts/mksysmap deletes ``name`` (so no kallsyms lists it)."""
    return (name.startswith(NEVER_LISTED_PREFIXES) or name.endswith(NEVER_LISTED_SUFFIXES)
            or name in NEVER_LISTED_NAMES or any(part in name for part in NEVER_LISTED_PARTS)
            or (name.startswith(b"__UNIQUE_ID_modinfo_") and _UNIQUE_MODINFO.fullmatch(name) is not None))


_HEX = np.full(256, 255, dtype=np.uint8)
for _i, _c in enumerate(b"0123456789abcdef"):
    _HEX[_c] = _i
for _i, _c in enumerate(b"ABCDEF"):
    _HEX[_c] = 10 + _i


def _hex_column(buf: np.ndarray, starts: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``width``-digit hex number at each of ``starts`` (uint64), and
    whether any of its characters is not a hex digit.  The digits are
    gathered eight at a time and decoded by ``bytes.fromhex`` in one call;
    only when that fails is each digit checked, to find the bad line."""
    text_words = words(buf)
    raw = np.stack([text_words[starts + 8 * k] for k in range(width // 8)], axis=1)
    digits = raw.view(np.uint8)
    dtype = ">u8" if width == 16 else ">u4"
    try:
        packed = bytes.fromhex(digits.tobytes().decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        packed = b""
    # fromhex skips whitespace, so a space among the digits shows as a short result.
    if len(packed) == len(starts) * width // 2:
        return np.frombuffer(packed, dtype=dtype).astype(np.uint64), np.zeros(len(starts), bool)
    nibbles = _HEX[digits]
    bad = (nibbles == 255).any(axis=1)
    packed = np.ascontiguousarray((nibbles[:, 0::2] << 4) | nibbles[:, 1::2])
    return packed.view(dtype)[:, 0].astype(np.uint64), bad


def _positions(buf: np.ndarray, byte: int, chunk: int = 1 << 20) -> np.ndarray:
    """Offsets of every ``byte`` in ``buf``, a chunk at a time so that the
    temporary mask stays small (a whole-text mask is as big as the text)."""
    found = [np.flatnonzero(buf[at:at + chunk] == byte) + at for at in range(0, len(buf), chunk)]
    return np.concatenate(found) if found else np.zeros(0, dtype=np.int64)


class Kallsyms:
    """kallsyms as arrays.

    ``address`` (uint64), ``type`` (uint8 ASCII letter), ``module`` (int32:
    0 core, else index into ``module_names``), ``name_start``/``name_end``
    (byte spans into ``text``: int32, or int64 for a text of 2 GiB
    or more).  Lines keep file order.
    """

    def __init__(self, text: bytes, source: str = "kallsyms", zero_is_hidden: bool = True):
        self.source = source
        self.text = text
        self.zero_is_hidden = zero_is_hidden
        self.module_names: list[str] = ["vmlinux"]
        self._parse()

    def __len__(self) -> int:
        return len(self.address)

    def _error(self, line_index: int, what: str) -> KmodsymsError:
        # Only on the error path: find the line again rather than keep every
        # line's span for the object's life.
        lines = [piece for piece in self.text.split(b"\n") if piece]
        if self.text.startswith(MAGIC):   # a swapped pair
            return KmodsymsError(f"{self.source} is a dtrace_syms file, not a kallsyms: "
                                 "were --syms and --kallsyms swapped?")
        if line_index == len(lines) - 1 and not self.text.endswith(b"\n"):
            return KmodsymsError(f"{self.source} ends in the middle of line {line_index + 1}: it is "
                                 "truncated; read /proc/kallsyms again, whole")
        return KmodsymsError(f"{self.source}:{line_index + 1}: {what}: '{shown(lines[line_index][:80])}'")

    def _layout_error(self, line_index: int, width: int, what: str) -> KmodsymsError:
        """A line without the first line's layout: ``what``, unless its
        address is of another width (libkmodsyms' layout_error())."""
        line = [piece for piece in self.text.split(b"\n") if piece][line_index]
        own = len(line) - len(line.lstrip(b"0123456789abcdefABCDEF"))
        if own and line[own:own + 1] == b" " and own != width:
            what = f"address {'narrower' if own < width else 'wider'} than the others (the first line's)"
        return self._error(line_index, what)

    def _parse(self) -> None:
        """The lines' columns, as R1-R4 read them."""
        text = self.text.replace(b"\r\n", b"\n") if b"\r" in self.text else self.text
        self.text = text
        buf = np.frombuffer(text, dtype=np.uint8)
        newlines = _positions(buf, 10)
        starts = np.concatenate(([0], newlines + 1))
        ends = np.concatenate((newlines, [len(buf)]))
        keep = ends > starts                       # blank lines (and the final "\n")
        starts, ends = starts[keep], ends[keep]
        n = len(starts)
        if n == 0:
            raise KmodsymsError(f"{self.source}: no symbols: the file is empty or blank "
                                "(is this a kallsyms file?)")
        # Address width is that of the first line (16 hex digits on 64-bit
        # kernels, 8 on 32-bit); every line must have the same layout.
        first_space = text.find(b" ", 0, ends[0])
        width = first_space - starts[0]
        if width not in (8, 16):
            raise self._error(0, "expected 'ADDRESS TYPE NAME'")
        lengths = ends - starts
        short = np.flatnonzero(lengths < width + 4)
        if len(short):
            raise self._layout_error(int(short[0]), width, "line too short for 'ADDRESS TYPE NAME'")
        address, bad = _hex_column(buf, starts, width)
        bad |= (buf[starts + width] != 32) | (buf[starts + width + 2] != 32)
        types = buf[starts + width + 1]
        bad |= ~(((types >= 65) & (types <= 90)) | ((types >= 97) & (types <= 122)) | (types == 63))
        if bad.any():
            raise self._layout_error(int(np.flatnonzero(bad)[0]), width, "expected 'ADDRESS TYPE NAME'")
        name_start = starts + width + 3
        name_end = ends.copy()
        module = np.zeros(n, dtype=np.int32)
        tabs = _positions(buf, 9)
        if len(tabs):
            # A tab ends the name; "[MOD]" follows.  Map each tab to its line.
            line_of_tab = np.searchsorted(starts, tabs, side="right") - 1
            first_tab = np.ones(len(tabs), dtype=bool)
            first_tab[1:] = line_of_tab[1:] != line_of_tab[:-1]
            tabs, line_of_tab = tabs[first_tab], line_of_tab[first_tab]
            name_end[line_of_tab] = tabs
            module[line_of_tab] = self._module_ids(tabs + 1, ends[line_of_tab], line_of_tab)
        empty = np.flatnonzero(name_end <= name_start)
        if len(empty):
            raise self._error(int(empty[0]), "missing symbol name")
        if not address.any():
            # R2: as libkmodsyms words a saved copy (the running kernel's
            # own file is the library's to read)
            raise KmodsymsError(
                f"{self.source}: every address is 0: the kernel hid them from whoever saved it "
                "(kernel.kptr_restrict, kernel.perf_event_paranoid and CAP_SYSLOG decide): "
                "save /proc/kallsyms again as root")
        if self.zero_is_hidden:
            # /proc/kallsyms prints a hidden address as 0; the only symbols
            # really at 0 are per-cpu offsets, which it prints as 'A'.
            shown = (address != 0) | (types == ord("A")) | (types == ord("a"))
            if not shown.all():
                address, types, module = address[shown], types[shown], module[shown]
                name_start, name_end = name_start[shown], name_end[shown]
        self.address, self.type, self.module = address, types, module
        span = np.int32 if len(text) < 1 << 31 else np.int64   # half the memory
        self.name_start, self.name_end = name_start.astype(span), name_end.astype(span)

    def _module_ids(self, tag_start: np.ndarray, tag_end: np.ndarray,
                    lines: np.ndarray) -> np.ndarray:
        """Module id of each tagged line from its ``[MOD]`` text.  A module's
        lines are consecutive in /proc/kallsyms, so only the first of each
        run of equal tags is decoded."""
        text = self.text
        length = tag_end - tag_start
        repeat = np.zeros(len(lines), dtype=bool)
        repeat[1:] = equal_spans(text, tag_start[1:], text, tag_start[:-1],
                                 length[1:], length[:-1])
        ids: dict[bytes, int] = {}
        firsts = np.flatnonzero(~repeat)
        first_ids = []
        for k in firsts.tolist():
            tag = text[int(tag_start[k]):int(tag_end[k])].strip()
            if not (tag.startswith(b"[") and tag.endswith(b"]") and len(tag) > 2):
                raise self._error(int(lines[k]), "expected '\\t[MODULE]' after the name")
            mid = ids.get(tag)
            if mid is None:
                mid = ids[tag] = len(self.module_names)
                self.module_names.append(tag[1:-1].decode("utf-8", "surrogateescape"))
            first_ids.append(mid)
        return np.array(first_ids, dtype=np.int32)[np.cumsum(~repeat) - 1]

    def by_address(self) -> np.ndarray:
        """Line indices sorted by address (stable), computed once: placement
        and the resolver's index both need it."""
        order = getattr(self, "_by_address", None)
        if order is None:
            order = self._by_address = np.argsort(self.address, kind="stable").astype(np.int32)
        return order

    def name_bytes(self, i: int) -> bytes:
        return self.text[self.name_start[i]:self.name_end[i]]

    def name(self, i: int) -> str:
        return self.name_bytes(i).decode("utf-8", "surrogateescape")

    def names_bytes(self, indices) -> list[bytes]:
        """Names of many lines at once (one slice each)."""
        text = self.text
        return [text[s:e] for s, e in zip(self.name_start[indices].tolist(),
                                          self.name_end[indices].tolist())]

    def text_ranges(self) -> list[tuple[int, int]]:
        """The ranges every kallsyms lists, ``_stext``..``_etext`` and
        ``_sinittext``..``_einittext`` (the ends excluded), as far as this
        list names their bounds: ``scripts/kallsyms.c`` keeps only these
        without ``CONFIG_KALLSYMS_ALL``."""
        ranges = []
        for start_name, end_name in TEXT_RANGES:
            bounds = []
            for name in (start_name, end_name):
                at = self.text.find(b" " + name + b"\n")
                if at < 0:
                    break
                line = int(np.searchsorted(self.name_start, at + 1))
                bounds.append(int(self.address[line]))
            if len(bounds) == 2 and bounds[0] < bounds[1]:
                ranges.append((bounds[0], bounds[1]))
        return ranges


def read_kallsyms(path: str = "/proc/kallsyms", zero_is_hidden: bool = True) -> Kallsyms:
    """Read kallsyms (the live /proc/kallsyms, or a saved copy) in one read.
    A line at address 0 that is not a per-cpu 'A' line is a hidden address
    and is left out; ``zero_is_hidden=False`` keeps it (System.map, where
    per-cpu data at 0 has its ordinary letter)."""
    return Kallsyms(read_text(path), path, zero_is_hidden)


def read_text(path: str) -> bytes:
    """The bytes of a kallsyms file, in one read."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise KmodsymsError(f"cannot read {path}: {e.strerror}") from None
