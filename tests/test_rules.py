"""The resolver's rules are numbered once, in docs/resolver.md ("**R7** —"),
and the code cites them by number: every number cited in the C library and
the Python package is a rule stated there, and each rule is stated once."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFINITION = re.compile(r"\*\*R(\d+)\*\* —")
CITATION = re.compile(r"\bR(\d+)\b")


def code_files() -> dict[str, str]:
    """Every file that may cite a rule: the C library's sources and headers,
    and the Python package's modules."""
    paths = sorted((ROOT / "libkmodsyms").glob("*.[ch]")) + sorted((ROOT / "src" / "kmodsyms").rglob("*.py"))
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
