"""libkmodsyms' shape: every C file of libkmodsyms/ and of its consumers in
contrib/ (the library's kms_*.c and headers, its programs kmodsyms-c.c,
kms-bench.c and test_*.c, perf's dlfilter and its driver, DTrace's
kms-dt-module.c) at most 800 lines, every function at most 120, and every
global symbol of libkmodsyms.a either the API (libkmodsyms.map's kms_*) or
internal (kmsi_*)."""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess

import pytest
from conftest import ROOT

CSRC = os.path.join(ROOT, "libkmodsyms")
MAX_FILE_LINES = 800
MAX_FUNCTION_LINES = 120


def _blank_comments_and_literals(text: str) -> str:
    """TEXT with its comments, string and character literals and
    preprocessor lines blanked (newlines kept, so that line numbers stay)."""
    def blank(m: re.Match) -> str:
        return re.sub(r"[^\n]", " ", m.group(0))
    text = re.sub(r"/\*.*?\*/|//[^\n]*|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'",
                  blank, text, flags=re.S)
    return re.sub(r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", blank, text, flags=re.M)


def functions(text: str) -> list[tuple[str, int, int]]:
    """The top-level function definitions of C TEXT: (name, first line,
    last line), the first line the one of its name, the last its closing
    brace's.  A top-level brace opens a function when what comes before it
    (since the last top-level ';', '}' or brace) ends with ')'; anything
    else (struct, enum, an initializer) is not one."""
    code = _blank_comments_and_literals(text)
    found = []
    depth, start, head = 0, 0, 0
    for i, c in enumerate(code):
        if c == "{":
            if depth == 0:
                before = code[head:i]
                name = re.search(r"(\w+)\s*\(", before)
                if before.rstrip().endswith(")") and name and "=" not in before.split("(")[0]:
                    start = code.count("\n", 0, head + name.start(1)) + 1
                else:
                    start = 0
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                if start:
                    found.append((name.group(1), start, code.count("\n", 0, i) + 1))
                head = i + 1
        elif c == ";" and depth == 0:
            head = i + 1
    return found


def _sources() -> list[str]:
    """Every .c and .h of libkmodsyms/, of contrib/'s consumers and of the
    Python binding."""
    return sorted(p for d in (CSRC, os.path.join(ROOT, "contrib", "*"),
                              os.path.join(ROOT, "src", "kmodsyms", "binding"))
                  for ext in ("c", "h") for p in glob.glob(os.path.join(d, f"*.{ext}")))


def test_the_sources_are_the_library_and_its_consumers():
    """The files checked: the library, its programs, every consumer in
    contrib/ and the binding (a new file of any is checked without a change
    here)."""
    names = {os.path.relpath(p, ROOT) for p in _sources()}
    assert {"libkmodsyms/kms_query.c", "libkmodsyms/kmodsyms.h", "libkmodsyms/kms_internal.h",
            "libkmodsyms/kmodsyms-c.c", "libkmodsyms/kms-bench.c", "libkmodsyms/test_kms.c",
            "libkmodsyms/test_nomem.c", "contrib/perf/kmodsyms-dlfilter.c",
            "contrib/perf/test_dlfilter.c", "contrib/dtrace/kms-dt-module.c",
            "src/kmodsyms/binding/_kms.c", "src/kmodsyms/binding/_kms_records.c"} <= names


def test_the_scanner_finds_functions():
    """The scanner on a sample that has what the library's files have: a
    struct, an initializer, a prototype, a macro with braces, comments and
    strings with braces."""
    sample = ("struct s { int a; };\n"
              "static const int t[] = {1, 2};\n"
              "int proto(int x);\n"
              "#define M(x) { x }\n"
              "/* } { */\n"
              "static inline int\n"
              "f(int a) /* ) */\n"
              "{\n"
              "    const char *s = \"}\";\n"
              "    if (a) { return '}'; }\n"
              "    return 0;\n"
              "}\n"
              "void g(void) { struct { int x; } v = {0}; (void)v; }\n")
    assert functions(sample) == [("f", 7, 12), ("g", 13, 13)]


def test_every_file_is_at_most_800_lines():
    sources = _sources()
    assert sources
    long = {os.path.basename(p): n for p in sources
            if (n := len(open(p, encoding="utf-8").read().splitlines())) > MAX_FILE_LINES}
    assert not long, f"over {MAX_FILE_LINES} lines: {long}"


def test_every_function_is_at_most_120_lines():
    long, total = {}, 0
    for path in _sources():
        for name, first, last in functions(open(path, encoding="utf-8").read()):
            total += 1
            if last - first + 1 > MAX_FUNCTION_LINES:
                long[f"{os.path.basename(path)}:{first} {name}"] = last - first + 1
    assert total > 100  # the scanner found the library's functions
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"


def test_static_library_globals_are_the_api_or_internal(clib):
    """Only libkmodsyms.map's functions are named kms_; every other global
    symbol of libkmodsyms.a is kmsi_ (hidden from the shared library by
    kms_internal.h's visibility, apart from the API's names in the static
    one)."""
    if not shutil.which("nm"):
        pytest.skip("nm is not installed")
    out = subprocess.run(["nm", "-g", "--defined-only", os.path.join(clib["plain"], "libkmodsyms.a")],
                         capture_output=True, text=True, check=True).stdout
    names = {line.split()[-1] for line in out.splitlines() if len(line.split()) == 3}
    api = set(re.findall(r"\b(kms_\w+);", open(os.path.join(CSRC, "libkmodsyms.map")).read()))
    assert api and api <= names
    assert sorted(n for n in names if n not in api and not n.startswith("kmsi_")) == []
