"""``resolve`` and ``lookup`` as a user and a script meet them: batches
that survive bad lines, the output formats, ``MOD`NAME+OFF`` lookups, the
basic conventions (--version, help) -- each the same from the typer CLI
and from the path that runs without typer (kmodsyms.cli.frontend.fast_main)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import FIXTURE, FIXTURE_KASLR, ROOT

from kmodsyms import load
from kmodsyms.cli.frontend import parse_address
from kmodsyms.errors import ArgumentError, KmodsymsError

KALLSYMS = os.path.join(FIXTURE, "kallsyms")


def _run(args, stdin=None, module="kmodsyms"):
    return subprocess.run([sys.executable, "-m", module, *args], input=stdin,
                          capture_output=True, text=True, cwd=ROOT)


def _both_paths(args, stdin=None):
    """The answer of the typer CLI (kmodsyms.cli.app) and of the entry
    point's path without typer: they must be the same; returns it."""
    full = _run(args, stdin, module="kmodsyms.cli.app")
    quick = _run(args, stdin)
    assert (quick.returncode, quick.stdout, quick.stderr) == \
        (full.returncode, full.stdout, full.stderr)
    return full


@pytest.fixture
def files(fixture_syms, tmp_path):
    ks = tmp_path / "kallsyms"
    ks.write_bytes(open(KALLSYMS, "rb").read())
    return ["--syms", fixture_syms, "--kallsyms", str(ks)]


def _vmlinux_symbols():
    """name -> (link address, size) of the fixture vmlinux's own symbol
    table, read by pyelftools (independent of kmodsyms' reader)."""
    from elftools.elf.elffile import ELFFile
    out = {}
    with open(os.path.join(FIXTURE, "vmlinux"), "rb") as f:
        for sym in ELFFile(f).get_section_by_name(".symtab").iter_symbols():
            out.setdefault(sym.name, []).append((sym["st_value"], sym["st_size"]))
    return out


def test_bad_stdin_lines_are_answered_in_place(files):
    """Issue 24.5: one line out for every line in, bad and blank ones
    included, so that 'paste' pairs them; the bad ones also on stderr."""
    good = 0xffffffffab600400
    stdin = f"{good:#x}\n-1\nzz\n\n0x1ffffffffffffffff\n{good + 4:x}\n"
    text = _both_paths(["resolve", *files, "-"], stdin)
    assert text.returncode == 1
    r = load(files[1], files[3])
    assert text.stdout.splitlines() == [
        str(r.resolve(good)), "? bad address '-1': negative",
        "? bad address 'zz': give it in hex, e.g. 0xffffffff81000000", "",
        "? bad address '0x1ffffffffffffffff': more than 64 bits", str(r.resolve(good + 4))]
    assert text.stderr.splitlines() == [
        "LINE 2: bad address '-1': negative",
        "LINE 3: bad address 'zz': give it in hex, e.g. 0xffffffff81000000",
        "LINE 5: bad address '0x1ffffffffffffffff': more than 64 bits"]
    as_json = _both_paths(["resolve", *files, "--json", "-"], stdin)
    docs = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert as_json.returncode == 1 and as_json.stderr == ""
    assert [d.get("input") for d in docs] == [None, "-1", "zz", "", "0x1ffffffffffffffff", None]
    assert "error" not in docs[3]          # a blank line is no error
    assert docs[1]["error"] == "bad address '-1': negative"
    assert [d["address"] for d in docs if "address" in d] == [hex(good), hex(good + 4)]


def _run_bytes(args, stdin: bytes, env=None, module="kmodsyms"):
    return subprocess.run([sys.executable, "-m", module, *args], input=stdin, capture_output=True,
                          cwd=ROOT, env=None if env is None else {**os.environ, **env})


def _not_text_inputs() -> dict:
    """Real data that is not addresses: what gzip, xz and bzip2 write (the
    standard library's, the tools' formats), an ELF file (the fixture's
    vmlinux) and binary data (a control byte in the first line)."""
    import bz2
    import gzip
    import lzma
    text = open(KALLSYMS, "rb").read()
    return {"gzip data: decompress it first": gzip.compress(text),
            "xz data: decompress it first": lzma.compress(text),
            "bzip2 data: decompress it first": bz2.compress(text),
            "an ELF file, not addresses: give one hex address a line":
                open(os.path.join(FIXTURE, "vmlinux"), "rb").read()[:4096],
            "binary data, not addresses: give one hex address a line":
                b"0xffffffffab600400\x00\x01\n0x1\n"}


@pytest.mark.parametrize("module", ["kmodsyms", "kmodsyms.cli.app"])
def test_stdin_that_is_not_text_is_named(files, module):
    """Issue 24 item 7: compressed or binary stdin is one error line naming
    it and what it is (the library's kms_data_kind()), exit 2, nothing on
    stdout; and under strict UTF-8 stdio too."""
    for what, data in _not_text_inputs().items():
        for env in (None, {"PYTHONIOENCODING": "utf-8:strict", "LC_ALL": "C.UTF-8"}):
            out = _run_bytes(["resolve", *files, "-"], data, env, module)
            assert (out.returncode, out.stdout, out.stderr.decode()) == \
                (2, b"", f"kmodsyms: error: <stdin>: {what}\n"), what


def test_stdin_that_is_not_utf8_is_answered_in_any_locale(files):
    """Bytes that are no UTF-8 on a later line of stdin: that line's error
    quotes its bytes as the kernel's tools do ('\\x8b', kmodsyms.errors.shown),
    in every locale, and the rest are answered (before: a UnicodeDecodeError
    traceback under strict UTF-8 stdio, '\\udc8b' escapes otherwise)."""
    stdin = b"0xffffffffab600400\n\x8b\x91ff\n\xc3\xa9\n0xffffffffab600404\n"
    for env in (None, {"PYTHONIOENCODING": "utf-8:strict", "LC_ALL": "C.UTF-8"},
                {"PYTHONIOENCODING": "ascii:strict", "LC_ALL": "C"}):
        out = _run_bytes(["resolve", *files, "--format", "dtrace", "-"], stdin, env)
        assert out.returncode == 1, out.stderr
        assert out.stdout.decode().splitlines() == [
            "ext4`init_once+0x10",
            "? bad address '\\x8b\\x91ff': give it in hex, e.g. 0xffffffff81000000",
            "? bad address '\\xc3\\xa9': give it in hex, e.g. 0xffffffff81000000",
            "ext4`init_once+0x14"]
        assert out.stderr.decode().splitlines() == [
            "LINE 2: bad address '\\x8b\\x91ff': give it in hex, e.g. 0xffffffff81000000",
            "LINE 3: bad address '\\xc3\\xa9': give it in hex, e.g. 0xffffffff81000000"]


def test_a_bad_argument_is_refused_before_loading(files):
    out = _run(["resolve", *files, "--", "0x10", "-0x10"])
    assert (out.returncode, out.stdout) == (2, "")
    assert out.stderr == "kmodsyms: error: bad address '-0x10': negative\n"


@pytest.mark.parametrize("module", ["kmodsyms", "kmodsyms.cli.app"])
@pytest.mark.parametrize("address", ["-0x10", "-1", "-ffffffff81000000"])
def test_a_negative_address_needs_no_double_dash(files, module, address):
    """Issue 31 item 3: a negative address before or without '--' gets the
    one line it gets after '--', not typer's 'No such option: -0'."""
    for args in ([address], ["0x10", address], ["--", address], [address, "--format", "dtrace"]):
        out = _run(["resolve", *files, *args], module=module)
        assert (out.returncode, out.stdout, out.stderr) == \
            (2, "", f"kmodsyms: error: bad address '{address}': negative\n"), args


def _run_argv(args: list, stdin: bytes = b"") -> tuple[int, str, str]:
    out = subprocess.run([sys.executable, "-m", "kmodsyms", *args], input=stdin, capture_output=True,
                         cwd=ROOT, env={**os.environ, "LC_ALL": "C.UTF-8"})
    return out.returncode, out.stdout.decode(), out.stderr.decode()


def test_input_that_is_not_utf8_is_echoed_as_its_bytes(files, clib):
    """Issue 31 item 4: every message that echoes input shows bytes that
    are no UTF-8 as \\xNN, never as Python's surrogate escapes (\\udcff):
    resolve's bad address (argument and stdin), lookup's bad name, unknown
    module and missing symbol, dump's unknown module, and the C CLI's
    missing symbol."""
    assert _run_argv(["resolve", *files, b"\xff\xfe"]) == \
        (2, "", "kmodsyms: error: bad address '\\xff\\xfe': give it in hex, e.g. 0xffffffff81000000\n")
    assert _run_argv(["resolve", *files, "-"], b"\xff\xfe\n") == \
        (1, "? bad address '\\xff\\xfe': give it in hex, e.g. 0xffffffff81000000\n",
         "LINE 1: bad address '\\xff\\xfe': give it in hex, e.g. 0xffffffff81000000\n")
    assert _run_argv(["lookup", *files, b"\xff\xfe", b"\xfe`init_once"]) == \
        (1, "", "kmodsyms: no symbol \\xff\\xfe\n"
                "kmodsyms: no module '\\xfe' (for \\xfe`init_once): not vmlinux, a built-in module "
                "or a loaded module\n")
    assert _run_argv(["lookup", *files, b"\xff`"]) == \
        (2, "", "kmodsyms: error: bad name '\\xff`': give [MOD`]NAME[+0xOFF], "
                "e.g. ext4`ext4_file_open+0x1c\n")
    syms = files[1]
    assert _run_argv(["dump", syms, "--module", b"ext\xff"]) == \
        (2, "", f"kmodsyms: error: no built-in module 'ext\\xff' in {syms} (see 'kmodsyms info {syms}')\n")
    c = subprocess.run([os.path.join(clib["plain"], "kmodsyms-c"), "lookup", *files, b"\xff\xfe"],
                       capture_output=True)
    assert (c.returncode, c.stderr) == (1, b"kmodsyms-c: no symbol \\xff\\xfe\n")


@pytest.mark.parametrize("command", ["resolve", "lookup", "kallmodsyms", "modules", "annotate"])
def test_a_modules_dir_that_does_not_exist_is_refused(files, tmp_path, command):
    """Issue 31 item 5: --modules-dir naming no directory is refused in one
    line, before anything is answered (annotate too: a typo is no reason to
    pass the text through unannotated)."""
    arguments = {"resolve": ["0xffffffffab600400"], "lookup": ["init_once"]}.get(command, [])
    missing = tmp_path / "nonexistent"
    out = _run([command, *files, "--modules-dir", str(missing), *arguments], stdin="")
    assert (out.returncode, out.stdout, out.stderr) == \
        (2, "", f"kmodsyms: error: {missing}: no such directory (--modules-dir: where the loaded "
                "modules' .ko files are, /lib/modules/RELEASE)\n")


def test_a_modules_dir_that_is_no_directory_is_refused_by_the_library(files, clib, tmp_path):
    """The rule is the library's (kms_load): the Python API and the C CLI
    refuse it too, in the same words, where they once read no .ko and said
    nothing."""
    syms, kallsyms = files[1], files[3]
    for path, what in ((tmp_path / "nonexistent", "no such directory"), (syms, "not a directory")):
        with pytest.raises(ArgumentError) as e:
            load(syms=syms, kallsyms=kallsyms, modules_dir=str(path))
        assert str(e.value) == (f"{path}: {what} (--modules-dir: where the loaded modules' .ko "
                                "files are, /lib/modules/RELEASE)")
        c = subprocess.run([os.path.join(clib["plain"], "kmodsyms-c"), "kallmodsyms", "--syms", syms,
                            "--kallsyms", kallsyms, "--modules-dir", str(path)], capture_output=True,
                           text=True)
        assert (c.returncode, c.stdout) == (2, "") and \
            c.stderr.startswith(f"kmodsyms-c: error: {path}: {what} ("), c.stderr


@pytest.mark.parametrize("as_json", [False, True])
def test_modules_says_when_none_is_loaded(files, tmp_path, as_json):
    """Issue 31 item 10: a kallsyms with no [MODULE] line: 'modules' says
    so on stderr (stdout stays a list of modules: here none), exit 0."""
    plain = tmp_path / "kallsyms.core"
    plain.write_text("".join(line for line in open(KALLSYMS) if "\t[" not in line))
    assert len(plain.read_text().splitlines()) > 100
    out = _run(["modules", "--syms", files[1], "--kallsyms", str(plain)] + (["--json"] if as_json else []))
    assert (out.returncode, out.stdout, out.stderr) == \
        (0, "", f"kmodsyms: no loaded modules (no '[MODULE]' line in {plain})\n")
    loaded = _run(["modules", *files])
    assert loaded.returncode == 0 and loaded.stdout.startswith("fuse\t") and loaded.stderr == ""


def test_api_refuses_negative_and_wide_addresses(fixture_syms):
    r = load(fixture_syms, KALLSYMS)
    for bad in (-1, 1 << 64):
        with pytest.raises(KmodsymsError):
            r.resolve(bad)
    with pytest.raises(KmodsymsError, match="negative"):
        parse_address("-0x1")
    with pytest.raises(KmodsymsError):
        parse_address("0x0x12")


def test_formats_against_the_vmlinux_symbol_table(files):
    """dtrace and kernel forms of every sized core or built-in function of
    the fixture, +3 bytes into it, against vmlinux's own symbol table."""
    symbols = _vmlinux_symbols()
    r = load(files[1], files[3])
    at_link = {}
    for entries in symbols.values():
        for link, _size in entries:
            at_link[link] = at_link.get(link, 0) + 1
    probes = []   # (the module is the resolver's: tests/test_resolver.py holds it to the maps)
    for name, entries in symbols.items():
        if len(entries) == 1 and entries[0][1] > 4 and not name.startswith("__pfx_") \
                and at_link[entries[0][0]] == 1:
            link, size = entries[0]
            if link >= 0xffffffff81000000:
                probes.append((name, link + FIXTURE_KASLR + 3, size))
    assert len(probes) > 10
    addresses = [f"{a:#x}" for _, a, _ in probes]
    for fmt in ("dtrace", "kernel"):
        out = _both_paths(["resolve", *files, "--format", fmt, *addresses])
        assert out.returncode == 0
        for (name, address, size), line in zip(probes, out.stdout.splitlines()):
            module = r.resolve(address).module
            if fmt == "dtrace":
                assert line == f"{module}`{name}+0x3"
            else:   # %pS: the size is the gap to the next kallsyms address
                gap = next_address(files[3], address) - (address - 3)
                assert line == f"{name}+0x3/{gap:#x}" + ("" if module == "vmlinux" else f" [{module}]")


def next_address(kallsyms: str, address: int) -> int:
    """The lowest kallsyms address above ADDRESS (kallsyms_lookup_size_offset())."""
    with open(kallsyms) as f:
        return min(a for a in (int(line.split()[0], 16) for line in f) if a > address)


def test_kernel_format_never_prints_an_offset_beyond_its_size(files):
    """Where a function's ELF size ends before the next kallsyms line (its
    padding), %pS still names it with the kernel's size: the offset is
    below the size (issue 24 item 1: 'ext4_file_open+0x32f/0x32e' before)."""
    symbols = _vmlinux_symbols()
    probes = []
    for name, entries in symbols.items():
        if len(entries) == 1 and entries[0][1] > 0 and entries[0][0] >= 0xffffffff81000000 \
                and not name.startswith("__pfx_"):
            start = entries[0][0] + FIXTURE_KASLR
            end = start + entries[0][1]
            if next_address(files[3], start) > end:
                probes.append((name, start, end))
    assert probes
    out = _both_paths(["resolve", *files, "--format", "kernel", *(f"{e:#x}" for _, _, e in probes)])
    for (name, start, end), line in zip(probes, out.stdout.splitlines()):
        gap = next_address(files[3], start) - start
        assert line.split(" [")[0] == f"{name}+{end - start:#x}/{gap:#x}", line


def test_kernel_format_says_a_size_it_does_not_know(files, tmp_path):
    """%pS of every kallsyms line of the fixture, at its address and a few
    bytes in: the offset is below the size, or the size is '?' where no end
    above the address is known -- a loaded module's last line (the kernel
    bounds it by its module's text memory, find_kallsyms_symbol(), which
    kallsyms does not show), a pseudo-module's one line (issue 24 item 1:
    'fuse_inode_count+0x8/0x0 [fuse]').  /proc/modules bounds the module
    by its core's end."""
    import re
    probes = sorted({int(line.split()[0], 16) + k for line in open(files[3])
                     for k in (0, 1, 7)} - {0, 1, 7})
    out = _both_paths(["resolve", *files, "--format", "kernel", *(f"{a:#x}" for a in probes)])
    unknown = []
    for address, line in zip(probes, out.stdout.splitlines()):
        m = re.fullmatch(r"(\S+)\+0x([0-9a-f]+)/(0x[0-9a-f]+|\?)( \[\S+\])?|0x[0-9a-f]+", line)
        assert m, line
        if m[3] == "?":
            unknown.append(line)
        elif m[1]:
            assert int(m[2], 16) < int(m[3], 16), line
    assert unknown == ["ftrace_trampoline+0x0/? [__builtin__ftrace]",
                       "ftrace_trampoline+0x1/? [__builtin__ftrace]",
                       "ftrace_trampoline+0x7/? [__builtin__ftrace]",
                       "bpf_prog_6deef7357e7b4530_sd_fw_ingress+0x0/? [bpf]",
                       "bpf_prog_6deef7357e7b4530_sd_fw_ingress+0x1/? [bpf]",
                       "bpf_prog_6deef7357e7b4530_sd_fw_ingress+0x7/? [bpf]",
                       "fuse_inode_count+0x0/? [fuse]", "fuse_inode_count+0x1/? [fuse]",
                       "fuse_inode_count+0x7/? [fuse]"]
    proc_modules = tmp_path / "modules"
    proc_modules.write_text("fuse 8400 0 - Live 0xffffffffc0a00000\n")
    bounded = load(files[1], files[3], proc_modules=str(proc_modules))
    ksym = bounded.kernel_symbol(0xffffffffc0a020b8)
    assert (ksym.text, ksym.size, ksym.exact) == ("fuse_inode_count+0x8/0x20 [fuse]", 0x20, False)
    assert load(files[1], files[3]).kernel_symbol(0xffffffffc0a020b8).size is None


def test_formats_of_loaded_unknown_and_absent_symbols(fixture_syms):
    r = load(fixture_syms, KALLSYMS)
    loaded = r.lookup("fuse_dev_open")[0].address  # kallsyms gives no size
    assert r.text(loaded, "dtrace") == "fuse`fuse_dev_open"
    gap = next_address(KALLSYMS, loaded) - loaded
    assert r.text(loaded, "kernel") == f"fuse_dev_open+0x0/{gap:#x} [fuse]"
    assert r.lookup_text("fuse_dev_open", fmt="kernel") == [f"fuse_dev_open+0x0/{gap:#x} [fuse]"]
    nowhere = 0x1234_5678_9abc_def0
    assert (r.text(nowhere, "dtrace"), r.text(nowhere, "kernel")) == ("0x123456789abcdef0",) * 2


def test_lookup_with_offset_and_unknown_module(files):
    symbols = _vmlinux_symbols()
    (link, _size), = symbols["ext4_file_open"]
    out = _both_paths(["lookup", *files, "--json", "ext4`ext4_file_open+0x1c"])
    doc = json.loads(out.stdout)
    assert (out.returncode, doc["address"], doc["offset"], doc["module"]) == \
        (0, hex(link + FIXTURE_KASLR + 0x1c), 0x1c, "ext4")
    missing = _both_paths(["lookup", *files, "nosuch`ext4_file_open", "isofs`ext4_file_open"])
    assert missing.returncode == 1 and missing.stdout == ""
    assert missing.stderr.splitlines() == [
        "kmodsyms: no module 'nosuch' (for nosuch`ext4_file_open): not vmlinux, a built-in "
        "module or a loaded module",
        "kmodsyms: no symbol isofs`ext4_file_open"]
    bad = _run(["lookup", *files, "ext4`ext4_file_open+0xzz"])
    assert (bad.returncode, bad.stdout) == (2, "") and len(bad.stderr.splitlines()) == 1


# What a resolve or lookup printing the library's text never imports: numpy
# and typer cost more than the answer; the records, enum (theirs and
# signal's), re and collections a fifth of the whole process (bench
# resolve_cli), where python -m's runpy has not imported them already.
NOT_FOR_AN_ANSWER = {"numpy", "typer", "kmodsyms.cli.app", "kmodsyms.scan"}
NOR_FROM_THE_COMMAND = {"kmodsyms.binding.records", "enum", "signal", "re", "collections"}


def _imported(command: list[str]) -> tuple[subprocess.CompletedProcess, set[str]]:
    proc = subprocess.run(command, capture_output=True, text=True, cwd=ROOT,
                          env=dict(os.environ, PYTHONPROFILEIMPORTTIME="1"))
    return proc, {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines()}


@pytest.mark.parametrize("command", ["lookup", "resolve"])
def test_answers_come_without_numpy_or_typer(files, command):
    """'kmodsyms.load()' and a resolve or lookup import none of
    NOT_FOR_AN_ANSWER through 'python -m kmodsyms', nor, through the
    installed command (bin/kmodsyms, where pip put it), any of
    NOR_FROM_THE_COMMAND."""
    target = "init_once" if command == "lookup" else "0xffffffffab600400"
    first = _run([command, *files, target])
    script = os.path.join(os.path.dirname(sys.executable), "kmodsyms")
    runs = [([sys.executable, "-m", "kmodsyms"], NOT_FOR_AN_ANSWER)]
    if os.path.exists(script):
        runs.append(([script], NOT_FOR_AN_ANSWER | NOR_FROM_THE_COMMAND))
    # What this interpreter's site imports (a .pth file may import re or
    # enum) is in every process before ours runs: only what the command adds
    # is its own cost.
    _, at_start = _imported([sys.executable, "-c", "pass"])
    for run, never in runs:
        second, imported = _imported(run + [command, *files, target])
        assert (second.returncode, second.stdout) == (0, first.stdout)
        assert "kmodsyms.cli.frontend" in imported
        assert not (imported - at_start) & never, run


def test_api_load_and_resolve_import_no_numpy(fixture_syms):
    code = ("import sys, kmodsyms; r = kmodsyms.load(sys.argv[1], sys.argv[2]); "
            "r.resolve(0xffffffffab600400); r.lookup('init_once'); "
            "r.resolve_many(bytes(8 * 100)); print('numpy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, fixture_syms, KALLSYMS],
                         capture_output=True, text=True, cwd=ROOT)
    assert (out.returncode, out.stdout) == (0, "False\n"), out.stderr


def test_version_and_help():
    from kmodsyms import __version__
    version = _run(["--version"])
    assert (version.returncode, version.stdout) == (0, f"kmodsyms {__version__}\n")
    bare = _run([])
    assert bare.returncode == 0 and bare.stdout.startswith("Usage:") and "resolve" in bare.stdout
    # rich renders help on a terminal: it must keep the literal "[mod]".
    rich = subprocess.run([sys.executable, "-m", "kmodsyms", "kallmodsyms", "--help"],
                          capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "FORCE_COLOR": "1",
                               "COLUMNS": "200", "TERM": "xterm"})
    assert "'\\t[mod]'" in rich.stdout


def test_help_at_80_columns_splits_no_hyphenated_word():
    """Issue 31 item 9: every command's --help at 80 columns (and click
    wraps no wider) keeps each hyphenated word whole ('a built- in module'
    was split)."""
    import re

    from typer.main import get_command

    from kmodsyms.cli.app import app
    split = []
    for command in ["", *get_command(app).commands]:
        text = subprocess.run([sys.executable, "-m", "kmodsyms", *([command] if command else []), "--help"],
                              capture_output=True, text=True, cwd=ROOT,
                              env={**os.environ, "COLUMNS": "80"}).stdout
        assert text.startswith("Usage:"), command
        split += [(command, line) for line in text.splitlines() if re.search(r"[A-Za-z]-$", line)]
    assert split == []


@pytest.mark.parametrize("command", ["resolve", "lookup", "kallmodsyms", "modules"])
def test_typer_and_the_path_without_typer_read_one_declaration(command):
    """The typer command is built from the declaration the path without
    typer parses with (kmodsyms.cli.frontend.COMMANDS): the same options
    with the same flags, the same arguments, the same help."""
    from typer.main import get_command

    from kmodsyms.cli.app import app
    from kmodsyms.cli.frontend import COMMANDS, OPTIONS
    declared = COMMANDS[command]
    click_command = get_command(app).commands[command]
    params = click_command.params
    typer_flags = [tuple(p.opts) for p in params if p.opts[0].startswith("-")]
    assert typer_flags == [OPTIONS[name].flags for name in declared.options]
    arguments = [p.name for p in params if not p.opts[0].startswith("-")]
    assert arguments == ([declared.argument.name] if declared.argument else [])
    assert click_command.help == declared.help


@pytest.mark.parametrize("args", [
    ["--form", "dtrace"],                 # abbreviated: click refuses
    ["-qf", "dtrace"],                    # bundled short flags
    ["-fdtrace"],                         # a short option's value attached
    ["-f=dtrace"],                        # click reads the value '=dtrace'
    ["--json=1"],                         # a flag given a value
    ["--format", "json", "--format", "dtrace"],   # the last one counts
    ["--format=kernel"],
    ["--format"],                         # no value
    ["--", "-0x10"],                      # an argument that starts with '-'
    ["-1"],
    ["--format", "bogus"],
    [],                                   # no address
])
def test_both_paths_read_a_command_line_alike(files, args):
    """Whatever the path without typer reads it reads as click does, and
    what it does not read (it declines) typer does: both paths give the
    same exit status, output and message for every command line (the
    program name in click's usage lines aside)."""
    address = [] if args in ([], ["--format"]) or args[:1] == ["--"] else ["0xffffffffab600400"]
    full = _run(["resolve", *files, *args, *address], module="kmodsyms.cli.app")
    quick = _run(["resolve", *files, *args, *address])
    assert (quick.returncode, quick.stdout, quick.stderr) == \
        (full.returncode, full.stdout, full.stderr.replace("kmodsyms.cli.app", "kmodsyms"))
