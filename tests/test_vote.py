"""R11, the one majority vote: the library's kmsi_majority() (placement's
segment shifts, loaded modules' section bases), called directly and as the
build's search calls it for each section's votes (through the binding,
kmodsyms.scan.layout.search.majority_vote), held to the rule: the value
with more votes than any other wins, a tie for the most is no winner."""

from __future__ import annotations

import os
import subprocess

import numpy as np
import pytest
from conftest import ROOT

from kmodsyms.scan.layout.search import majority_vote

# (votes, the rule's winner or None for a tie, the most votes)
CASES = [
    ([], None, 0),
    ([7], 7, 1),
    ([5, 5, 5], 5, 3),
    ([1, 2], None, 1),                    # a tie of one vote each
    ([9, 3, 9, 3], None, 2),              # a tie for the most, whatever the order
    ([3, 9, 9, 3, 1], None, 2),
    ([2, 8, 8, 2, 8], 8, 3),              # the higher wins by votes
    ([8, 2, 2, 8, 2], 2, 3),              # the lower wins by votes
    ([0xFFFFFFFFC0000000, 0x1000, 0x1000], 0x1000, 2),
]

C_PROGRAM = r"""
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
int kmsi_majority(uint64_t *vote, size_t n, uint64_t *winner, size_t *most);
int main(int argc, char **argv)
{
    uint64_t v[64], winner = 0;
    size_t most = 0, n = 0;
    for (int k = 1; k < argc; k++)
        v[n++] = strtoull(argv[k], NULL, 0);
    int won = kmsi_majority(v, n, &winner, &most);
    printf("%d %" PRIu64 " %zu\n", won, won ? winner : 0, most);
    return 0;
}
"""


@pytest.fixture(scope="module")
def c_majority(clib, tmp_path_factory):
    """A program calling the library's kmsi_majority (linked with libkmodsyms.a)."""
    d = tmp_path_factory.mktemp("vote")
    src, prog = d / "vote.c", str(d / "vote")
    src.write_text(C_PROGRAM)
    subprocess.run([os.environ.get("CC", "cc"), "-o", prog, str(src),
                    os.path.join(clib["plain"], "libkmodsyms.a"), "-ldl"], check=True)
    return prog


@pytest.mark.parametrize("votes,winner,most", CASES)
def test_r11_library_vote(c_majority, votes, winner, most):
    out = subprocess.run([c_majority, *map(str, votes)], capture_output=True, text=True,
                         check=True).stdout.split()
    assert (int(out[0]), int(out[1]), int(out[2])) == (winner is not None, winner or 0, most)


@pytest.mark.parametrize("votes,winner,most", CASES)
def test_r11_build_vote(votes, winner, most):
    """One section's votes, and the same beside another section's that must
    not change them (section 5: one clear winner), the two sections' votes
    in turn and interleaved."""
    sections = np.array([0] * len(votes) + [5, 5, 5], dtype=np.int64)
    bases = np.array(votes + [40, 40, 41], dtype=np.uint64)
    interleaved = np.argsort(np.arange(len(sections)) % 2, kind="stable")
    for order in (np.arange(len(sections)), interleaved):
        chosen, base, conflicting = majority_vote(sections[order], bases[order])
        got = dict(zip(chosen.tolist(), base.tolist()))
        assert got.pop(5) == 40
        assert got == ({} if winner is None else {0: winner})
        assert conflicting == len(votes) - most + 1


def test_r11_binding_refuses_bounds_outside_the_votes():
    from kmodsyms.binding import _kms
    with pytest.raises(ValueError, match="bounds"):
        _kms.majority(np.zeros(2, np.uint64), np.array([0, 3], np.uint64))


def test_r11_is_documented_once():
    """One rule says the tie: R11; the code cites it where it votes."""
    doc = " ".join(open(os.path.join(ROOT, "docs", "resolver.md"), encoding="utf-8").read().split())
    assert doc.count("a tie for the most is no winner") == 1
    for path in ("libkmodsyms/kms_sort.c", "libkmodsyms/kms_place.c", "libkmodsyms/kms_match.c",
                 "src/kmodsyms/scan/layout/search.py"):
        assert "R11" in open(os.path.join(ROOT, path), encoding="utf-8").read(), path
