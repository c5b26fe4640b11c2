"""Fenced code blocks of the docs, found by the heading of their section:
what tests take from the docs to run, so that the docs show what is tested."""

from __future__ import annotations

import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEADING = re.compile(r"#{1,6} ")


def section_blocks(doc: str, heading: str, lang: str) -> list[str]:
    """The ```LANG blocks of the section of DOC (a path below the repository
    root) whose heading line is HEADING (with its #s), up to the next heading
    of any level (a '#' line inside a code block is no heading)."""
    with open(os.path.join(ROOT, doc), encoding="utf-8") as f:
        lines = f.read().splitlines(keepends=True)
    blocks, block, fence, inside = [], None, False, False
    for line in lines:
        if line.startswith("```"):
            if not fence and inside and line.strip() == "```" + lang:
                block = []
            elif fence and block is not None:
                blocks.append("".join(block))
                block = None
            fence = not fence
        elif fence:
            if block is not None:
                block.append(line)
        elif HEADING.match(line):
            if inside:
                break
            inside = line.rstrip("\n") == heading
    assert inside or blocks, f"{doc} has no section {heading!r}"
    return blocks
