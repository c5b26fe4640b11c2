"""The run-time path's modules import only downwards: every import of a
module named in docs/architecture.md's layer table goes to a module of its
own layer or of one before it, so an answer flows library -> binding ->
output and never back."""

from __future__ import annotations

import ast
import os
import re

from conftest import ROOT

PACKAGE = os.path.join(ROOT, "src", "kmodsyms")


def _layers() -> dict[str, int]:
    """Module (``binding``, ``cli.frontend``) -> its layer's rank, from
    the table of docs/architecture.md."""
    with open(os.path.join(ROOT, "docs", "architecture.md"), encoding="utf-8") as f:
        text = f.read()
    rows = re.findall(r"^\| [a-z]+ \| ((?:`[\w.]+`(?:, )?)+) \|", text, re.M)
    assert len(rows) >= 4, "docs/architecture.md has no layer table"
    return {name: rank for rank, row in enumerate(rows) for name in re.findall(r"`([\w.]+)`", row)}


def _module_path(name: str) -> str:
    path = os.path.join(PACKAGE, *name.split("."))
    return os.path.join(path, "__init__.py") if os.path.isdir(path) else path + ".py"


def _imports(name: str) -> set[str]:
    """The kmodsyms modules ``name`` imports, anywhere in it, each prefixed
    ``~`` when imported only inside a function.  The package root
    (``from . import __version__``) is left out: exempt."""
    path = _module_path(name)
    package = name.split(".")[:-1] if not path.endswith("__init__.py") else name.split(".")
    top, inside = set(), set()

    def targets(node) -> list[str]:
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package[:len(package) - (node.level - 1)]
            target = base + (node.module.split(".") if node.module else [])
            found = []
            for alias in node.names:
                sub = ".".join(target + [alias.name])
                found.append(sub if os.path.exists(_module_path(sub)) else ".".join(target))
            return found
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("kmodsyms"):
            return [node.module.removeprefix("kmodsyms").lstrip(".")]
        if isinstance(node, ast.Import):
            return [a.name.removeprefix("kmodsyms").lstrip(".") for a in node.names
                    if a.name.startswith("kmodsyms")]
        return []

    def visit(node, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            (inside if in_function else top).update(t for t in targets(child) if t)
            visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))

    visit(ast.parse(open(path, encoding="utf-8").read()), False)
    return top | {"~" + target for target in inside - top}


def _upward(layers: dict[str, int], imports) -> list[tuple[str, str]]:
    """(module, what it imports) of every import going up the layers."""
    return [(name, target) for name in layers
            for target in sorted(t.lstrip("~") for t in imports(name))
            if target in layers and layers[target] > layers[name]]


def test_every_layout_module_exists():
    missing = [name for name in _layers() if not os.path.exists(_module_path(name))]
    assert not missing, f"docs/architecture.md names modules that are gone: {missing}"


def test_no_module_imports_one_above_it():
    upward = _upward(_layers(), _imports)
    assert not upward, f"imports against the layers of docs/architecture.md: {upward}"


def test_the_check_sees_a_back_edge():
    """Not vacuous: the records importing the resolver, or the binding
    importing the CLI's output (for a warning's wording, say), is refused."""
    layers = _layers()

    def with_back_edges(name: str) -> set[str]:
        extra = {"binding.records": {"binding"}, "binding": {"cli.frontend"}}.get(name, set())
        return _imports(name) | extra

    assert _upward(layers, with_back_edges) == [("binding.records", "binding"),
                                                ("binding", "cli.frontend")]
