"""Docs and comments name only what exists: every code name in backticks in
docs/*.md and the READMEs (a dotted Python path, a call ``f()``, a
CamelCase name, a ``kms_``/``KMS_`` identifier, a path of this tree, an
option of kmodsyms' CLIs), and every CamelCase name in libkmodsyms'
comments, is defined by the tree's source, or is one of the few outside
names listed in :data:`EXTERNAL` with the reason it is named."""

from __future__ import annotations

import ast
import re
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Names of other projects that the pages name as theirs, each group with why.
EXTERNAL = {
    # the kernel's functions whose behaviour the rules reproduce, cited with
    # their files (kernel/kallsyms.c, kernel/module/kallsyms.c,
    # kernel/ksyms_common.c, include/linux/module_symbol.h, kernel/bpf/core.c,
    # kernel/trace/ftrace.c, kernel/module/main.c)
    "kernel": {"kallsyms_show_value", "is_ksym_addr", "get_symbol_pos", "__sprint_symbol",
               "find_kallsyms_symbol", "kallsyms_lookup_buildid", "bpf_address_lookup",
               "ftrace_mod_address_lookup", "s_show", "is_mapping_symbol", "kallsyms_lookup",
               "module_init_layout_section", "layout_symtab", "is_core_symbol",
               "kallsyms_lookup_size_offset", "sprint_symbol"},
    # perf's struct that kms_sym is modelled on (contrib/perf plugs into perf)
    "perf": {"perf_dlfilter_al"},
    # the C library's and zlib's calls that a reader of the file format or
    # dt_module.c's change makes
    "libc, zlib": {"getline", "sscanf", "fopen", "strcmp", "memcmp", "crc32"},
    # other tools' options in the build recipes: make's, ld's, objcopy's, pkg-config's
    "tools' options": {"--no-print-directory", "--wrap", "--prefix-symbols", "--define-prefix"},
    # units, and the compilers' sanitizers the library's tests run under
    "words": {"KiB", "MiB", "GiB", "AddressSanitizer", "UndefinedBehaviorSanitizer"},
}
# dtrace-utils' own names (dt_module.c and the rest of libdtrace), which
# docs/dtrace-utils.md's change to it is about: its namespace.
EXTERNAL_PREFIXES = ("dt_", "dtrace_")

def _pages() -> list[Path]:
    return sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md", ROOT / "libkmodsyms" / "README.md"] + \
        sorted((ROOT / "contrib").glob("*/README.md"))


def _sources(*patterns: str) -> list[Path]:
    skip = ("fixtures/", ".git/")
    return [p for pattern in patterns for p in sorted(ROOT.glob(pattern))
            if not any(s in str(p.relative_to(ROOT)) + "/" for s in skip)]


@lru_cache(maxsize=None)
def python_modules() -> dict[str, set[str]]:
    """Dotted module (``kmodsyms.scan.layout``) -> every name it defines at
    any depth (def, class, assignment, import, attribute of self, field)."""
    modules = {}
    for path in _sources("src/**/*.py", "tests/**/*.py", "bench/**/*.py", "docs/*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        parts = parts[1:] if parts[0] == "src" else parts
        parts = parts[:-1] if parts[-1] == "__init__" else parts
        names = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names.add(node.target.id)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names.update((a.asname or a.name).split(".")[0] for a in node.names)
        modules[".".join(parts)] = names
    return modules


@lru_cache(maxsize=None)
def c_names() -> set[str]:
    """Every identifier the tree's C defines: functions, macros, structs,
    unions, enums and their members, typedefs, struct fields, and the
    Python names the extension registers (methods, members, constants)."""
    names = set()
    for path in _sources("libkmodsyms/*.[ch]", "contrib/**/*.[ch]", "src/**/*.c"):
        text = re.sub(r"/\*.*?\*/|//[^\n]*", " ", path.read_text(errors="replace"), flags=re.S)
        names.update(re.findall(r"#\s*define\s+(\w+)", text))
        names.update(re.findall(r"\b(?:struct|union|enum)\s+(\w+)\s*\{", text))
        names.update(re.findall(r"}\s*(\w+)\s*;", text))                       # typedef ... } name;
        names.update(re.findall(r"^\w[\w \t\*]*?\b(\w+)\s*\([^;{]*\)\s*\{", text, re.M))   # functions
        for body in re.findall(r"\benum\s*\w*\s*\{(.*?)\}", text, re.S):   # enum members
            names.update(re.findall(r"(?:^|,)\s*([A-Za-z_]\w*)", body))
        names.update(re.findall(r"#\s*if(?:n?def)?\b[^\n]*?\b(KMS_\w+)", text))   # build options
        names.update(re.findall(r"^\s+[\w \t\*]+?\b\**(\w+)(?:\[[^\]]*\])?\s*(?::\s*\d+)?;", text, re.M))
        names.update(re.findall(r'\{\s*"(\w+)"', text))                       # PyMethodDef, members
        names.update(re.findall(r'PyModule_Add\w+\(\w+,\s*"(\w+)"', text))
    return names


@lru_cache(maxsize=None)
def cli_options() -> set[str]:
    """The options kmodsyms' typer CLI declares (every command's), those of
    kmodsyms-c, the consumers' and the bench's."""
    from typer.main import get_command

    from kmodsyms.cli.app import app
    click = get_command(app)
    options = {o for p in click.params for o in p.opts}
    for command in click.commands.values():
        options.update(o for p in command.params for o in p.opts)
    for path in _sources("libkmodsyms/*.c", "contrib/**/*.c", "bench/*.py"):
        options.update(re.findall(r'"(--[a-z][\w-]*)', path.read_text(errors="replace")))
    return {o for o in options if o.startswith("--")} | {"--help"}


def _in_python(dotted: str) -> bool:
    """``kmodsyms.scan.layout.SearchPlacer``, ``kmodsyms.load``,
    ``cli.frontend`` (relative to the package): a module of the tree and
    names it defines."""
    modules = python_modules()
    parts = dotted.split(".")
    for prefix in ([], ["kmodsyms"]):
        whole = prefix + parts
        for cut in range(len(whole), 0, -1):
            module = ".".join(whole[:cut])
            if module in modules:
                return all(name in modules[module] or ".".join(whole[:k + 1]) in modules
                           for k, name in enumerate(whole[cut:], cut))
    return False


def _defined_anywhere(name: str) -> bool:
    import builtins
    return name in c_names() or any(name in names for names in python_modules().values()) or \
        any(name in group for group in EXTERNAL.values()) or name.startswith(EXTERNAL_PREFIXES) or \
        hasattr(builtins, name)


def _stdlib(dotted: str) -> bool:
    """``zlib.crc32``: a module of Python's own and a name it has."""
    import importlib
    import sys
    module, _, name = dotted.rpartition(".")
    if module.split(".")[0] not in sys.stdlib_module_names:
        return False
    try:
        return hasattr(importlib.import_module(module), name)
    except ImportError:
        return False


PATH_ROOTS = ("src/", "libkmodsyms/", "contrib/", "tests/", "docs/", "bench/", "fixtures/", ".ci/")
CAMEL = re.compile(r"^[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+$")
KMS = re.compile(r"^(?:kms_|kmsi_|KMS_)\w+$")


def _file_problem(path: str) -> str | None:
    """A path of the tree: it exists, or is made from a source beside it
    (``contrib/dtrace/kms-dt-module`` from its ``.c``, ``kmodsyms.pc`` from
    its ``.in``)."""
    made = [path, path + ".c", path + ".in"]
    if path.startswith(PATH_ROOTS):
        return None if any((ROOT / p).exists() for p in made) or list(ROOT.glob(path)) else f"no file {path}"
    found = [q for p in made for q in ROOT.glob(f"**/{p}") if ".git" not in q.parts]
    return None if found else f"no file {path}"


def name_problem(span: str) -> str | None:
    """What is wrong with the code name in one backtick span, or None (also
    for a span that names no code: a symbol, a section, a command line)."""
    text = span.strip()
    if text.startswith(("kmodsyms ", "kmodsyms-c ")) or re.fullmatch(r"--[a-z][\w-]*(?:[ =]\S+)?", text):
        missing = [o for o in re.findall(r"(?:^|\s)(--[a-z][\w-]*)", text)
                   if o not in cli_options() and o not in EXTERNAL["tools' options"]]
        return f"option {missing[0]} of no CLI of the tree" if missing else None
    path = text.split("#")[0].rstrip("/")
    if re.fullmatch(r"[\w./+-]+", path) and (path.startswith(PATH_ROOTS) or
                                             re.fullmatch(r"(?:kms\w*|kmodsyms)\.(?:[ch]|pc(?:\.in)?|map)", path)):
        return _file_problem(path)
    call = re.fullmatch(r"([A-Za-z_][\w.]*)\(.*\)", text, re.S)
    name = call.group(1) if call else text
    if not re.fullmatch(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*", name):
        return None
    first, last = name.split(".")[0], name.rsplit(".", 1)[-1]
    if name.startswith("kmodsyms."):
        return None if _in_python(name) else f"no Python {name}"
    if "." in name:
        if _in_python(name) or _stdlib(name):
            return None
        if KMS.match(first) or CAMEL.match(first):     # kms_info.warning, Resolver.refresh()
            return None if _defined_anywhere(first) else f"no definition of {first}"
        if call:                                       # ks.resolve(addr): a method of some object
            return None if _defined_anywhere(last) else f"no definition of {last} ({text})"
        return None                                    # kernel.perf_event_paranoid, truth.tsv
    if call or CAMEL.match(name) or KMS.match(name):
        return None if _defined_anywhere(name) else f"no definition of {name}"
    return None


def backtick_spans(markdown: str) -> list[tuple[int, str]]:
    """(line number, text) of every inline code span, fenced blocks left out."""
    spans = []
    fenced = False
    for number, line in enumerate(markdown.splitlines(), 1):
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            continue
        if fenced or line.startswith("    "):
            continue
        spans += [(number, m.group(2)) for m in re.finditer(r"(`+)(.+?)\1", line)]
    return spans


def test_pages_name_only_what_exists():
    problems = []
    for page in _pages():
        for number, span in backtick_spans(page.read_text()):
            why = name_problem(span)
            if why:
                problems.append(f"{page.relative_to(ROOT)}:{number}: `{span}`: {why}")
    assert problems == []


def test_library_comments_name_only_what_exists():
    """A CamelCase name in a comment of libkmodsyms (``AnchorCheck``) is a
    name the tree defines."""
    problems = []
    for path in _sources("libkmodsyms/*.[ch]"):
        text = path.read_text(errors="replace")
        for m in re.finditer(r"/\*.*?\*/|//[^\n]*", text, re.S):
            for word in re.findall(r"\b[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+\b", m.group()):
                if not _defined_anywhere(word) and not _in_python(word):
                    line = text.count("\n", 0, m.start()) + 1
                    problems.append(f"{path.relative_to(ROOT)}:{line}: {word}")
    assert problems == []


def test_the_check_sees_what_is_gone():
    """Not vacuous: the names this project's pages once carried, gone from
    the tree, are refused; names that exist pass."""
    gone = ["LinkedPlacer", "kmodsyms.build.layout.place()", "kmodsyms.scan.layout.linked.LinkedPlacer",
            "AnchorCheck", "src/kmodsyms/format/namehash.py", "kms_no_such_call()", "KMS_LOAD_NOTHING",
            "kmodsyms build --no-such-option", "kms_gone.c"]
    assert [name for name in gone if name_problem(name) is None] == []
    there = ["SearchPlacer", "kmodsyms.scan.layout.SearchPlacer", "kmodsyms.load()", "kms_load()",
             "KMS_LOAD_FORCE", "kmodsyms build --no-layout", "libkmodsyms/kms_place.c", "kms_place.c",
             "cli.frontend", "StaleError", "ks.resolve(addr)", "struct kms_sym", "fs/ext4/super.o"]
    assert [(name, name_problem(name)) for name in there if name_problem(name)] == []
