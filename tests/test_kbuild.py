"""modules_thick.builtin derived from a kbuild tree's .cmd files, checked
against the fixture's own thick file and the corpus' reference; and the
whole pipeline thick -> build -> verify on the real corpus."""

import os
import subprocess
import sys

from kmodsyms.scan.modmap.kbuild import cmd_modfiles, derive_thick
from kmodsyms.scan.modmap.thick import parse_thick, read_thick


def as_sets(thick):
    return {m: set(objs) for m, objs in zip(thick.modules, thick.objects)}


def test_fixture_derivation_equals_its_thick_file(fixture_tree):
    derived = derive_thick(fixture_tree)
    assert as_sets(derived) == as_sets(read_thick(os.path.join(fixture_tree, "modules_thick.builtin")))
    # modules.builtin order, one-file modules written as "mod.o:" alone
    text = derived.format()
    assert "arch/x86/kernel/msr.o:\n" in text
    assert parse_thick(text).modules == derived.modules


def test_modfile_rules(fixture_tree):
    # An object shared by two modules names both, space-separated.
    assert cmd_modfiles(fixture_tree, "drivers/net/phy/mdio_shared.o") == \
        ["drivers/net/phy/libphy", "drivers/net/mdio/fwnode_mdio"]
    # kbuild gives every object a modfile; lib/msr.o's is not a built-in module.
    assert cmd_modfiles(fixture_tree, "arch/x86/lib/msr.o") == ["arch/x86/lib/msr"]
    owners = derive_thick(fixture_tree).object_modules()
    assert "arch/x86/lib/msr.o" not in owners


def test_corpus_derivation_equals_reference(corpus):
    derived = derive_thick(corpus)
    reference = read_thick(os.path.join(corpus, "modules_thick.builtin.reference"))
    assert derived.modules == reference.modules          # modules.builtin order
    assert as_sets(derived) == as_sets(reference)
    assert len(derived.modules) == 345


def test_corpus_thick_build_verify_end_to_end(corpus, tmp_path):
    cli = [sys.executable, "-m", "kmodsyms"]
    thick = tmp_path / "modules_thick.builtin"
    syms = tmp_path / "dtrace_syms"
    subprocess.run(cli + ["thick", "--kbuild", corpus, "-o", str(thick)], check=True)
    assert as_sets(read_thick(str(thick))) == \
        as_sets(read_thick(os.path.join(corpus, "modules_thick.builtin.reference")))
    subprocess.run(cli + ["build", "--kbuild", corpus, "--thick", str(thick), "-o", str(syms)],
                   check=True, capture_output=True)
    out = subprocess.run(cli + ["verify", "--kbuild", corpus, "--syms", str(syms)],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr
