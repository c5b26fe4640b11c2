import os
import shutil
import subprocess

import pytest

from kmodsyms.errors import KmodsymsError
from kmodsyms.scan.elf.archive import archive_members, vmlinux_objects


def test_vmlinux_a_matches_ar(fixture_tree):
    if not shutil.which("ar"):
        pytest.skip("binutils ar is absent")
    expected = subprocess.run(["ar", "t", "vmlinux.a"], cwd=fixture_tree, check=True,
                              capture_output=True, text=True).stdout.split()
    objects, source = vmlinux_objects(fixture_tree)
    assert source == "vmlinux.a"
    assert objects == expected


def test_built_in_a_fallback_and_nested_thin_archives(fixture_tree, tmp_path):
    if not shutil.which("ar"):
        pytest.skip("binutils ar is absent")
    tree = tmp_path / "tree"
    shutil.copytree(os.path.join(fixture_tree, "fs"), tree / "fs")
    shutil.copytree(os.path.join(fixture_tree, "kernel"), tree / "kernel")
    # Per-directory thin archives, one nested in another, as kbuild 4.13+ makes.
    subprocess.run(["ar", "cDPrST", "ext4/built-in.a", "ext4/super.o", "ext4/inode.o"],
                   cwd=tree / "fs", check=True)
    subprocess.run(["ar", "cDPrST", "built-in.a", "ext4/built-in.a", "isofs/dir.o"],
                   cwd=tree / "fs", check=True)
    subprocess.run(["ar", "cDPrST", "built-in.a", "fork.o"], cwd=tree / "kernel", check=True)
    objects, source = vmlinux_objects(str(tree))
    assert source == "built-in.a"
    assert sorted(objects) == sorted(["fs/ext4/super.o", "fs/ext4/inode.o", "fs/isofs/dir.o",
                                      "kernel/fork.o"])


def test_long_member_names_in_regular_archive(tmp_path, fixture_tree):
    if not shutil.which("ar"):
        pytest.skip("binutils ar is absent")
    long_name = tmp_path / ("a_rather_long_object_file_name_" * 2 + ".o")
    shutil.copy(os.path.join(fixture_tree, "kernel/fork.o"), long_name)
    subprocess.run(["ar", "rcD", "lib.a", long_name.name], cwd=tmp_path, check=True)
    assert archive_members(str(tmp_path / "lib.a")) == [long_name.name]


@pytest.mark.parametrize("content", [b"not an archive", b"!<thin>\nshort header"])
def test_bad_archives(tmp_path, content):
    path = tmp_path / "vmlinux.a"
    path.write_bytes(content)
    with pytest.raises(KmodsymsError, match="vmlinux.a"):
        archive_members(str(path))
