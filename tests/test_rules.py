"""The resolver's rules are numbered once, in docs/resolver.md ("**R7** —"),
and the code cites them by number: every number cited in the C library, its
consumers and the Python package is a rule stated there, each rule is
stated once, and every rule is cited by the code that applies it or a test
of it.  Where the statement says more than a number can check: a rule that
names the file applying it is cited there, and the numbers a rule states
are the code's constants."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFINITION = re.compile(r"\*\*R(\d+)\*\* —")
CITATION = re.compile(r"\bR(\d+)\b")


def code_files() -> dict[str, str]:
    """Every file that may cite a rule: the C library's sources and headers,
    its consumers' (contrib/), and the Python package's modules."""
    paths = sorted((ROOT / "libkmodsyms").glob("*.[ch]")) + sorted((ROOT / "contrib").glob("*/*.[ch]")) + \
        sorted((ROOT / "src" / "kmodsyms").rglob("*.py"))
    return {str(p.relative_to(ROOT)): p.read_text(errors="replace") for p in paths}


def rule_problems(doc: str, files: dict[str, str]) -> list[str]:
    """What is wrong with the rules of DOC and the citations in FILES (path
    -> text): a rule stated twice, a gap in the numbering, a cited number
    that is no rule.  Empty when all is well."""
    problems = []
    defined = [int(n) for n in DEFINITION.findall(doc)]
    seen = set()
    for n in defined:
        if n in seen:
            problems.append(f"R{n} is stated more than once in docs/resolver.md")
        seen.add(n)
    if defined and sorted(seen) != list(range(1, max(seen) + 1)):
        missing = sorted(set(range(1, max(seen) + 1)) - seen)
        problems.append(f"docs/resolver.md's rules skip {', '.join(f'R{n}' for n in missing)}")
    if defined != sorted(defined):
        problems.append("docs/resolver.md states its rules out of order")
    for path, text in files.items():
        for m in CITATION.finditer(text):
            if int(m.group(1)) not in seen:
                line = text.count("\n", 0, m.start()) + 1
                problems.append(f"{path}:{line}: cites R{m.group(1)}, which docs/resolver.md does not state")
    return problems


def _doc() -> str:
    return (ROOT / "docs" / "resolver.md").read_text()


def test_every_cited_rule_is_stated_once():
    assert rule_problems(_doc(), code_files()) == []


def test_the_rules_are_cited():
    """Not vacuous: there are rules, and the C library and the build cite them."""
    doc, files = _doc(), code_files()
    assert len(set(DEFINITION.findall(doc))) >= 40
    c = sum(len(CITATION.findall(t)) for p, t in files.items() if p.startswith("libkmodsyms/"))
    build = sum(len(CITATION.findall(t)) for p, t in files.items() if p.startswith("src/kmodsyms/scan/"))
    assert c >= 30 and build >= 10, (c, build)


def test_an_unknown_citation_fails():
    doc = _doc()
    files = {"libkmodsyms/planted.c": "/* the innermost sized symbol (R9999) */\n"}
    assert rule_problems(doc, files) == \
        ["libkmodsyms/planted.c:1: cites R9999, which docs/resolver.md does not state"]


def test_a_rule_stated_twice_or_skipped_fails():
    doc = _doc()
    n = len(set(DEFINITION.findall(doc)))
    twice = doc + f"\n**R{n}** — a second statement of the last rule.\n"
    assert any("stated more than once" in p for p in rule_problems(twice, {}))
    skipped = doc.replace(f"**R{n}** —", f"**R{n + 1}** —")
    assert any(f"skip R{n}" in p for p in rule_problems(skipped, {}))


PYTHON_PATH = re.compile(r"\b(?:src/)?(kmodsyms/[\w/]+\.py)\b")


def test_the_c_library_names_only_python_that_exists():
    """A C comment that names a Python module (src/kmodsyms/...py) names one
    the package has: the run-time resolver is the library itself, and no
    comment describes it as mirroring Python that is gone."""
    c = {p: t for p, t in code_files().items() if p.startswith("libkmodsyms/")}
    gone = sorted({f"{p}: {m.group(1)}" for p, t in c.items() for m in PYTHON_PATH.finditer(t)
                   if not (ROOT / "src" / m.group(1)).exists()})
    assert gone == []


def test_files_are_found():
    """Not vacuous: the files cited from are where this test looks."""
    files = code_files()
    assert "libkmodsyms/kms_place.c" in files and "src/kmodsyms/scan/layout/search.py" in files


def _tests() -> dict[str, str]:
    paths = sorted((ROOT / "tests").glob("*.py")) + sorted((ROOT / "libkmodsyms").glob("test_*.c"))
    return {str(p.relative_to(ROOT)): p.read_text(errors="replace") for p in paths}


def _cited(files: dict[str, str]) -> dict[int, set[str]]:
    cited: dict[int, set[str]] = {}
    for path, text in files.items():
        for m in CITATION.finditer(text):
            cited.setdefault(int(m.group(1)), set()).add(path)
    return cited


def statements(doc: str) -> dict[int, str]:
    """Rule number -> its statement: from its bold number to the next
    rule's, or to the next heading."""
    parts = re.split(r"(\*\*R\d+\*\* —)", doc)
    return {int(parts[k][3:-4]): re.split(r"\n#+ ", parts[k + 1])[0] for k in range(1, len(parts), 2)}


def test_every_rule_is_applied_or_tested_where_it_says():
    """Each rule is cited by the code that applies it, or else by a test
    that holds the code to it; and a rule that names the source file
    applying it (`kms_place.c`, `src/kmodsyms/scan/layout/search.py`) is
    cited in that file."""
    doc, code = _doc(), code_files()
    by_code, by_tests = _cited(code), _cited(_tests())
    rules = statements(doc)
    assert [n for n in rules if n not in by_code and n not in by_tests] == []
    named = re.compile(r"`((?:[\w./-]+/)?(?:kms_\w+\.[ch]|[\w/]+\.py))`")
    where = {}
    for n, text in rules.items():
        for name in named.findall(text):
            path = name if "/" in name else f"libkmodsyms/{name}"
            where[(n, path)] = path in code and n in by_code and path in by_code[n]
    assert len(where) >= 3 and [k for k, ok in where.items() if not ok] == []


def _define(path: str, name: str) -> int:
    """The number a C #define or a Python assignment of NAME in PATH sets."""
    text = (ROOT / path).read_text()
    m = re.search(rf"^(?:#define {name}|{name} =) (\d+)u?\b", text, re.M)
    assert m, (path, name)
    return int(m.group(1))


def test_the_numbers_a_rule_states_are_the_codes():
    """The thresholds docs/resolver.md states, read from the statement,
    against the constants of the code that applies them."""
    rules = statements(_doc())
    r6 = re.search(r"up to (\d+) anchors per\s+segment", rules[6])
    assert int(r6.group(1)) == _define("src/kmodsyms/scan/tables.py", "ANCHORS_PER_SEGMENT")
    r38 = re.search(r"fewer than \*\*(\d+)\*\* anchors.*?`max\((\d+), anchors // (\d+)\)`",
                    rules[38], re.S)
    from kmodsyms.scan.layout.search import MIN_SEARCH_ANCHORS, conflicting_votes_allowed
    assert int(r38.group(1)) == MIN_SEARCH_ANCHORS
    for anchors in (0, 100, 1000, 98386):
        assert max(int(r38.group(2)), anchors // int(r38.group(3))) == conflicting_votes_allowed(anchors)
    r7 = re.search(r"not a\s+multiple of (\d+) KiB", rules[7])
    assert int(r7.group(1)) * 1024 == _define("libkmodsyms/kms_place.c", "SHIFT_ALIGNMENT")
