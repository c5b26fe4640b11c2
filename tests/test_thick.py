import pytest

from kmodsyms.errors import KmodsymsError
from kmodsyms.scan.modmap.thick import module_name, parse_thick, read_thick


def test_module_names_as_the_kernel_spells_them():
    assert module_name("arch/x86/events/amd/amd-uncore.o") == "amd_uncore"
    assert module_name("kernel/fs/ext4/ext4.ko") == "ext4"
    assert module_name("net/netfilter/xt_CONNSECMARK.o") == "xt_CONNSECMARK"


def test_parse_composite_one_file_and_shared():
    thick = parse_thick(
        "fs/ext4/ext4.o: fs/ext4/balloc.o fs/ext4/bitmap.o\n"
        "arch/x86/kernel/msr.o:\n"
        "\n"
        "drivers/a/a.o: lib/shared.o drivers/a/x.o\n"
        "drivers/b/b-mod.o: lib/shared.o\n")
    assert thick.modules == ["ext4", "msr", "a", "b_mod"]
    assert thick.objects[1] == ["arch/x86/kernel/msr.o"]
    owners = thick.object_modules()
    assert owners["lib/shared.o"] == (2, 3)          # both, in file order
    assert owners["fs/ext4/bitmap.o"] == (0,)
    assert parse_thick(thick.format()).objects == thick.objects


@pytest.mark.parametrize("text, where", [
    ("fs/ext4/ext4.o fs/ext4/balloc.o\n", ":1:"),
    ("fs/ext4/ext4.o: ok.o\nfs/x.o: notanobject.c\n", ":2:"),
    ("a/m.o: a/x.o\na/m.o: a/y.o\n", ":2:"),
])
def test_malformed_lines_name_file_and_line(text, where, tmp_path):
    path = tmp_path / "modules_thick.builtin"
    path.write_text(text)
    with pytest.raises(KmodsymsError, match=str(path) + where):
        read_thick(str(path))


def test_fixture_thick_file(fixture_tree):
    thick = read_thick(fixture_tree + "/modules_thick.builtin")
    assert "amd_uncore" in thick.modules
    owners = thick.object_modules()
    shared = owners["drivers/net/phy/mdio_shared.o"]
    assert [thick.modules[m] for m in shared] == ["libphy", "fwnode_mdio"]
    # kbuild's "core" case: base name msr, but not module msr.
    assert "arch/x86/lib/msr.o" not in owners
    assert owners["arch/x86/kernel/msr.o"] == (thick.modules.index("msr"),)
