"""A source tarball unpacked by the system's tools (kmodsyms.scan.modmap.kernelsource)
writes the members Python's tarfile path writes, and no more."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading

import pytest

from kmodsyms.scan.modmap import kernelsource


@pytest.mark.skipif(not (shutil.which("xz") and shutil.which("tar")), reason="needs xz and tar")
def test_the_tools_unpack_what_tarfile_unpacks(tmp_path):
    """kbuild's files anywhere and scripts/' own files, not what lies in
    scripts/' subdirectories (programs kbuild builds: scripts/dtc/)."""
    top = tmp_path / "src" / "linux-source-9.9"
    for name in ("Makefile", "Kbuild", "scripts/Makefile.build", "scripts/run.sh", "scripts/dtc/dtc.c",
                 "scripts/dtc/Makefile", "scripts/dtc/libfdt/fdt.c", "drivers/x/Makefile.extra",
                 "drivers/x/x.c", "arch/mips/Platform"):
        (top / name).parent.mkdir(parents=True, exist_ok=True)
        (top / name).write_text(name + "\n")
    tarball = str(tmp_path / "linux.tar.xz")
    subprocess.run(f"tar -C {top.parent} -cf - {top.name} | xz -T1 -1 > {tarball}", shell=True, check=True)
    found = {}
    for how in ("tools", "tarfile"):
        dest = tmp_path / how
        dest.mkdir()
        if how == "tools":
            kernelsource._unpack_with_tools(tarball, str(dest), ("xz", "-dc"), None, threading.Event())
        else:
            kernelsource._unpack_with_tarfile(tarball, str(dest), None, threading.Event())
        found[how] = sorted(os.path.relpath(os.path.join(d, n), dest / top.name)
                            for d, _dirs, names in os.walk(dest) for n in names)
    assert found["tools"] == found["tarfile"] == sorted(
        ["Makefile", "Kbuild", "scripts/Makefile.build", "scripts/run.sh", "scripts/dtc/Makefile",
         "drivers/x/Makefile.extra", "arch/mips/Platform"])
