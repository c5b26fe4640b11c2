"""contrib/perf's kmodsyms-dlfilter.so: perf script --dlfilter keeping the
samples whose kernel address lies in the named modules.

Driven two ways: by ``test_dlfilter`` (contrib/perf/test_dlfilter.c), which
loads the filter as perf does and calls ``filter_event()`` with real
``struct perf_dlfilter_sample`` values, on the first and last byte of every
sized symbol of the fixture and the corpora -- whose module the linker maps
say (tests/test_dtrace_consumer.py's truth); by the real ``perf script`` on a
perf.data of the same addresses written by the test (tests/perf_data.py);
and by the real ``perf`` on samples of this machine (``perf record -a -e
cpu-clock``, root), where no dtrace_syms exists: the degraded path.  Skipped without perf's header
(Debian: linux-perf) or, for the live test, without perf or root.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from conftest import ROOT
from perf_data import write_perf_data
from test_dtrace_consumer import FIXTURE_MODULES, OUTSIDE_VMLINUX_A, PSEUDO, corpus_truth, fixture_truth, kallsyms_lines, loaded_sizes
from test_loadable import FIXTURE_KALLSYMS, FUSE_CORE, FUSE_KO, fake_sysfs, module_lines

from kmodsyms import load
from kmodsyms.errors import StaleError

CSRC = os.path.join(ROOT, "libkmodsyms")
PERF_HEADER = "/usr/include/perf/perf_dlfilter.h"
KERNEL, USER = 1, 2   # PERF_RECORD_MISC_KERNEL, PERF_RECORD_MISC_USER
DEGRADED = "kmodsyms-dlfilter: no usable dtrace_syms"


@pytest.fixture(scope="session")
def dlfilter(clib):
    """(the filter, its driver), built with the library (conftest's clib)."""
    if not os.path.exists(PERF_HEADER):
        pytest.skip(f"{PERF_HEADER} is absent (Debian: apt-get install linux-perf)")
    out = clib["plain"]
    return os.path.join(out, "kmodsyms-dlfilter.so"), os.path.join(out, "test_dlfilter")


def drive(dlfilter, dlargs, samples, check=True):
    """filter_event() of each (ip, cpumode): {ip: kept}, and stderr."""
    so, driver = dlfilter
    stdin = "".join(f"{ip:x} {mode}\n" for ip, mode in samples).encode()
    proc = subprocess.run([driver, so, "run"] + dlargs, input=stdin, capture_output=True)
    if check:
        assert proc.returncode == 0, proc.stderr
    kept = {}
    for row in proc.stdout.decode().splitlines():
        ip, verdict = row.split()
        kept[int(ip, 16)] = verdict == "keep"
    return kept, proc


def sized_symbols(tree, truth, names=None, kallsyms=None):
    """(address, size, modules) of every line of KALLSYMS (default the
    tree's) with an ELF size whose module the linker maps say, and of every
    loaded module's line (its module's own: kallsyms' tag; the module span
    holds its first byte).  NAMES: only those."""
    out = []
    for addr, letter, name, tag in kallsyms_lines(kallsyms or os.path.join(tree, "kallsyms")):
        if names is not None and name not in names:
            continue
        if tag:
            if tag not in PSEUDO:
                out.append((addr, 1, [tag]))
        elif letter not in "aA" and truth.size.get((addr, name)) and (addr, name) in truth.modules:
            out.append((addr, truth.size[addr, name], truth.modules[addr, name]))
    return out


def check_keeps_exactly_the_module(dlfilter, tree, syms, truth, wanted, names=None,
                                   kallsyms=None, dlargs=(), stderr=""):
    """Every sized symbol's first and last byte: kept exactly when one of
    its modules is wanted; the same addresses in user mode: dropped.
    KALLSYMS: another than the tree's; DLARGS: more --dlarg values; STDERR:
    what the filter says at start."""
    symbols = sized_symbols(tree, truth, names, kallsyms)
    probes = sorted({a for addr, size, _m in symbols for a in (addr, addr + size - 1)})
    kallsyms = kallsyms or os.path.join(tree, "kallsyms")
    kept, proc = drive(dlfilter, [f"syms={syms}", f"kallsyms={kallsyms}", *dlargs,
                                  ",".join(wanted)], [(a, KERNEL) for a in probes])
    assert proc.stderr.decode() == stderr
    wanted_set = set(wanted)
    wrong = [(hex(a), mods) for addr, size, mods in symbols for a in (addr, addr + size - 1)
             if kept[a] != any(m in wanted_set for m in mods)]
    assert wrong == [], (len(wrong), wrong[:5])
    assert sum(kept.values()) > 0
    user, _ = drive(dlfilter, [f"syms={syms}", f"kallsyms={kallsyms}", *dlargs,
                               ",".join(wanted)], [(a, USER) for a in probes[:500]])
    assert not any(user.values())
    return sum(kept.values())


def test_fixture_built_in_and_loaded(dlfilter, fixture_tree, fixture_syms):
    """ext4 (built-in) and fuse (loaded); then libphy, whose shared object
    is also fwnode_mdio's."""
    truth = fixture_truth(fixture_tree)
    assert check_keeps_exactly_the_module(dlfilter, fixture_tree, fixture_syms, truth,
                                          ["ext4", "fuse"]) > 20
    assert check_keeps_exactly_the_module(dlfilter, fixture_tree, fixture_syms, truth,
                                          ["libphy"]) > 5


@pytest.mark.corpus
def test_corpus_built_in_and_loaded(dlfilter, corpus, corpus_syms):
    """x86_64: ext4 built-in, xfs loaded, and vmlinux (the core kernel)."""
    truth = corpus_truth(corpus)
    assert check_keeps_exactly_the_module(dlfilter, corpus, corpus_syms, truth,
                                          ["ext4", "xfs"]) > 10_000
    assert check_keeps_exactly_the_module(dlfilter, corpus, corpus_syms, truth,
                                          ["vmlinux"]) > 50_000


@pytest.mark.corpus
def test_corpus_version_timestamp_symbols_in_vmlinux(dlfilter, corpus, corpus_syms):
    """linux_banner and init_uts_ns (init/version-timestamp.o, linked
    outside vmlinux.a) lie in vmlinux."""
    check_keeps_exactly_the_module(dlfilter, corpus, corpus_syms, corpus_truth(corpus),
                                   ["vmlinux"], names=OUTSIDE_VMLINUX_A)


@pytest.mark.slow
@pytest.mark.corpus
def test_corpora_every_built_in_module(dlfilter, any_corpus, any_corpus_syms):
    """Both corpora: every built-in module told apart from every other, then
    all loaded ones.

    Each run keeps the modules whose index has bit i set, or the others
    (2 x log2 of the count runs, not one per module): a symbol kept for a
    module B that is not its own A is caught by the run of B's side of a bit
    where A and B differ, one dropped by any run holding A.  Each module
    that shares a symbol with another (libphy's object is also
    fwnode_mdio's) runs alone too, where bit sets cannot separate them.
    The runs of many modules also test the filter's join of their ranges."""
    truth = corpus_truth(any_corpus)
    builtin = sorted(truth.builtin)
    runs = [[m for n, m in enumerate(builtin) if (n >> bit & 1) == side]
            for bit in range(max(1, (len(builtin) - 1).bit_length())) for side in (0, 1)]
    shared = sorted({m for mods in truth.modules.values() if len(mods) > 1 for m in mods} & truth.builtin)
    runs += [[m] for m in shared] + [sorted(truth.loaded)]
    for wanted in runs:
        if wanted:
            check_keeps_exactly_the_module(dlfilter, any_corpus, any_corpus_syms, truth, wanted)


# ------------------------------------------- where loaded modules' files are
def fuse_ranges(sizes, core_end=None) -> list:
    """fuse's ranges as kms_module_ranges() defines a loaded module's:
    [lowest, highest end) of its t/T lines and of its other lines, a line
    ending at address + its size -- SIZES' (the .ko's ELF size, readelf),
    else the gap to the module's next line (R49's estimate), the highest
    line's bounded by CORE_END (its core, as the kernel reports it), else
    address + 1."""
    lines = module_lines(FIXTURE_KALLSYMS, "fuse")
    addrs = sorted({a for a, _l, _n in lines})
    ends = {}
    for a, letter, name in lines:
        above = [b for b in addrs if b > a]
        if (a, name) in sizes:
            end = a + sizes[a, name]
        else:
            end = above[0] if above else core_end or a + 1
        ends.setdefault(letter in "tT", []).append((a, end))
    return [(min(a for a, _e in v), max(e for _a, e in v)) for v in ends.values()]


def check_fuse_ranges(dlfilter, syms, dlargs, ranges, stderr=""):
    """The filter keeps exactly the bytes of RANGES among fuse's lines'
    first bytes and each range's edges (a byte below, the last, the next)."""
    probes = {a for a, _l, _n in module_lines(FIXTURE_KALLSYMS, "fuse")}
    probes |= {x for start, end in ranges for x in (start - 1, start, end - 1, end)}
    kept, proc = drive(dlfilter, [f"syms={syms}", f"kallsyms={FIXTURE_KALLSYMS}", *dlargs,
                                  "fuse"], [(a, KERNEL) for a in sorted(probes)])
    assert proc.stderr.decode() == stderr
    want = {a: any(s <= a < e for s, e in ranges) for a in probes}
    assert kept == want, sorted((hex(a), k) for a, k in kept.items() if k != want[a])


def test_modules_dir_sizes_loaded_modules_from_their_ko(dlfilter, fixture_tree, fixture_syms):
    """modules-dir=D: fuse.ko is read, so fuse's ranges end where its
    symbols do by the .ko's own table; without it, where the estimates do."""
    ko = loaded_sizes(fixture_tree, FIXTURE_MODULES)
    with_ko = fuse_ranges(ko)
    check_fuse_ranges(dlfilter, fixture_syms, [f"modules-dir={fixture_tree}"], with_ko)
    without = fuse_ranges({})
    assert with_ko != without
    check_fuse_ranges(dlfilter, fixture_syms, [], without)


def test_proc_modules_bounds_a_loaded_module_by_its_core(dlfilter, fixture_syms, tmp_path):
    """proc-modules=P: fuse's highest line reaches the end of its core."""
    proc_modules = tmp_path / "modules"
    proc_modules.write_text(FUSE_CORE)                   # 8448 bytes from 0xffffffffc0a00000
    check_fuse_ranges(dlfilter, fixture_syms, [f"proc-modules={proc_modules}"],
                      fuse_ranges({}, core_end=0xFFFFFFFFC0A00000 + 8448))


def test_sysfs_root_says_which_file_is_loaded_and_its_core(dlfilter, fixture_tree, fixture_syms,
                                                            tmp_path):
    """sysfs-root=S: /sys/module/fuse's sections (the kernel's placement of
    fuse.ko) match the file, which answers; with .text elsewhere the file
    is refused, said once, and fuse's highest line reaches the core that
    coresize and .text give."""
    lines = module_lines(FIXTURE_KALLSYMS, "fuse")
    ko = loaded_sizes(fixture_tree, FIXTURE_MODULES)
    sysfs = fake_sysfs(tmp_path / "same", FUSE_KO, lines)
    check_fuse_ranges(dlfilter, fixture_syms, [f"modules-dir={fixture_tree}",
                                               f"sysfs-root={sysfs}"], fuse_ranges(ko))
    elsewhere = fake_sysfs(tmp_path / "moved", FUSE_KO, lines, shift=0x40)
    with open(os.path.join(elsewhere, "module", "fuse", "coresize"), "w") as f:
        f.write("8448\n")
    refused = load(fixture_syms, FIXTURE_KALLSYMS, modules_dir=fixture_tree,
                   sysfs_root=elsewhere).module_warnings
    assert len(refused) == 1
    check_fuse_ranges(dlfilter, fixture_syms, [f"modules-dir={fixture_tree}",
                                               f"sysfs-root={elsewhere}"],
                      fuse_ranges({}, core_end=0xFFFFFFFFC0A00000 + 0x40 + 8448),
                      stderr=f"kmodsyms-dlfilter: warning: {refused[0]}\n")


def test_force_uses_another_builds_file(dlfilter, fixture_tree, fixture_syms, tmp_path):
    """A kallsyms where one anchor (rest_init) is not where the file's link
    layout puts it, as after a rebuild: refused in one line; with force,
    used, said once in the filter's words (--dlarg force), and every other
    symbol kept exactly by its modules (the linker maps)."""
    text = open(FIXTURE_KALLSYMS).read()
    moved = [f"{int(ln[:16], 16) + 0x10:016x}{ln[16:]}" if ln.endswith(" t rest_init") else ln
             for ln in text.splitlines()]
    assert moved != text.splitlines()
    stale = tmp_path / "kallsyms"
    stale.write_text("\n".join(moved) + "\n")
    base = [f"syms={fixture_syms}", f"kallsyms={stale}"]
    _kept, proc = drive(dlfilter, base + ["ext4"], [], check=False)
    assert proc.returncode == 1 and proc.stderr.decode().count("\n") == 2, proc.stderr
    assert proc.stderr.decode().startswith(f"kmodsyms-dlfilter: {fixture_syms} does not match")
    with pytest.raises(StaleError):
        load(fixture_syms, str(stale))
    warns = []
    load(fixture_syms, str(stale), force=True, warn=warns.append)
    [warning] = warns
    assert warning.startswith("used anyway (--force)")
    truth = fixture_truth(fixture_tree)
    assert check_keeps_exactly_the_module(
        dlfilter, fixture_tree, fixture_syms, truth, ["ext4", "fuse"], kallsyms=str(stale),
        dlargs=["force"], stderr="kmodsyms-dlfilter: warning: "
        + warning.replace("--force", "--dlarg force") + "\n") > 20


def test_arguments(dlfilter, fixture_syms, fixture_tree, tmp_path):
    """Bad --dlarg values: one line naming what is wrong, start() fails;
    an unknown module: said once, keeps nothing; '-' reads as '_'."""
    kallsyms = os.path.join(fixture_tree, "kallsyms")
    base = [f"syms={fixture_syms}", f"kallsyms={kallsyms}"]
    for args, words in (([], "name the modules"), (base + ["colour=red"], "unknown --dlarg"),
                        ([f"syms={tmp_path}/none", f"kallsyms={kallsyms}", "ext4"],
                         f"{tmp_path}/none")):
        _kept, proc = drive(dlfilter, args, [], check=False)
        assert proc.returncode == 1 and words in proc.stderr.decode(), proc.stderr
        assert proc.stderr.decode().count("\n") == 2   # the filter's line, the driver's
    kept, proc = drive(dlfilter, base + ["no-such"], [(0xffffffffab600400, KERNEL)])
    assert proc.stderr.decode() == \
        "kmodsyms-dlfilter: module no_such is neither built in nor loaded: it keeps no sample\n"
    assert kept == {0xffffffffab600400: False}
    so, driver = dlfilter
    text = subprocess.run([driver, so, "description"], capture_output=True, check=True,
                          text=True).stdout
    assert "kmodsyms" in text.splitlines()[0] and "--dlarg" in text


# ------------------------------------------------------------------ the real perf
def check_real_perf_on_written_samples(dlfilter, tree, syms, truth, wanted, tmp_path):
    """perf script itself, on a perf.data of the first and last byte of
    every sized symbol (tests/perf_data.py), keeps exactly the samples in
    the wanted modules."""
    if not shutil.which("perf"):
        pytest.skip("perf is not installed (Debian: linux-perf)")
    symbols = sized_symbols(tree, truth)
    probes = sorted({a for addr, size, _m in symbols for a in (addr, addr + size - 1)})
    want = sorted({a for addr, size, mods in symbols for a in (addr, addr + size - 1)
                   if any(m in wanted for m in mods)})
    data = str(tmp_path / "perf.data")
    write_perf_data(data, [(a, KERNEL) for a in probes] + [(probes[0], USER)])
    plain = perf_script(data)
    assert plain.returncode == 0 and len(plain.stdout.splitlines()) == len(probes) + 1, plain.stderr
    so, _driver = dlfilter
    kallsyms = os.path.join(tree, "kallsyms")
    proc = subprocess.run(["perf", "script", "-i", data, "-F", "ip", "--dlfilter", so,
                           "--dlarg", f"syms={syms}", "--dlarg", f"kallsyms={kallsyms}",
                           "--dlarg", ",".join(wanted)], capture_output=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert [int(x, 16) for x in proc.stdout.split()] == want
    return len(want)


def test_real_perf_on_fixture_samples(dlfilter, fixture_tree, fixture_syms, tmp_path):
    assert check_real_perf_on_written_samples(dlfilter, fixture_tree, fixture_syms,
                                              fixture_truth(fixture_tree), ["ext4", "fuse"],
                                              tmp_path) > 20


@pytest.mark.corpus
def test_real_perf_on_corpus_samples(dlfilter, corpus, corpus_syms, tmp_path):
    """x86_64 corpus addresses: ext4 (built-in) and xfs (loaded)."""
    assert check_real_perf_on_written_samples(dlfilter, corpus, corpus_syms,
                                              corpus_truth(corpus), ["ext4", "xfs"],
                                              tmp_path) > 10_000


@pytest.fixture(scope="module")
def perf_data(tmp_path_factory):
    """A few seconds of this machine's samples, as root records them."""
    if not shutil.which("perf") or os.geteuid() != 0:
        pytest.skip("needs perf (linux-perf) and root for perf record -a")
    path = str(tmp_path_factory.mktemp("perf") / "perf.data")
    proc = subprocess.run(["perf", "record", "-q", "-o", path, "-a", "-e", "cpu-clock", "--",
                           "sh", "-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; "
                           "cat /proc/kallsyms > /dev/null"],
                          capture_output=True, timeout=120)
    if proc.returncode != 0:
        pytest.skip(f"perf record -a failed here: {proc.stderr.decode().strip()[-200:]}")
    return path


def perf_script(data, *args):
    return subprocess.run(["perf", "script", "-i", data, "-F", "ip,dso"] + list(args),
                          capture_output=True, timeout=600)


def test_live_perf_without_dtrace_syms(dlfilter, perf_data):
    """This host has no dtrace_syms: the filter says so once, then keeps
    exactly the samples perf itself puts in the kernel for vmlinux, and
    none for a built-in module, which kallsyms alone cannot place."""
    if os.path.exists(f"/lib/modules/{os.uname().release}/kernel/dtrace_syms"):
        pytest.skip("this host has a dtrace_syms: not the degraded path")
    so, _driver = dlfilter
    plain = perf_script(perf_data)
    assert plain.returncode == 0, plain.stderr
    rows = plain.stdout.decode(errors="replace").splitlines()
    kernel = [r for r in rows if r.rstrip().endswith("([kernel.kallsyms])")]
    assert kernel and len(kernel) < len(rows)
    kept = perf_script(perf_data, "--dlfilter", so, "--dlarg", "vmlinux")
    assert kept.returncode == 0, kept.stderr
    assert kept.stdout.decode(errors="replace").splitlines() == kernel
    assert kept.stderr.decode().count(DEGRADED) == 1
    none = perf_script(perf_data, "--dlfilter", so, "--dlarg", "ext4")
    assert none.returncode == 0 and none.stdout == b""
    assert none.stderr.decode().count(DEGRADED) == 1


def test_live_perf_refuses_a_named_file_it_cannot_use(dlfilter, perf_data, tmp_path):
    so, _driver = dlfilter
    proc = perf_script(perf_data, "--dlfilter", so, "--dlarg", f"syms={tmp_path}/none",
                       "--dlarg", "ext4")
    assert proc.returncode != 0 and proc.stdout == b""
    assert f"kmodsyms-dlfilter: cannot read {tmp_path}/none" in proc.stderr.decode()


def _install(dlfilter, dest, *variables) -> None:
    proc = subprocess.run(["make", "-s", "-C", CSRC, f"O={os.path.dirname(dlfilter[0])}", "install",
                           "PREFIX=/usr", f"DESTDIR={dest}", *variables], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_installed_where_this_machines_perf_looks(dlfilter, tmp_path):
    """Issue 31 item 7: make install puts the filter in the dlfilters/
    directory of 'perf --exec-path' (Debian: /usr/lib/perf-core), where
    'perf script --dlfilter kmodsyms-dlfilter.so' finds it by its bare
    name; PERF_DLFILTERDIR overrides it."""
    if not shutil.which("perf"):
        pytest.skip("perf is not installed (Debian: linux-perf)")
    exec_path = subprocess.run(["perf", "--exec-path"], capture_output=True, text=True).stdout.strip()
    if not exec_path:
        pytest.skip("'perf --exec-path' names no directory (no perf for this kernel)")
    _install(dlfilter, tmp_path / "default")
    assert os.path.isfile(f"{tmp_path}/default{exec_path}/dlfilters/kmodsyms-dlfilter.so")
    assert os.path.isfile(tmp_path / "default/usr/include/kmodsyms.h")
    _install(dlfilter, tmp_path / "chosen", "PERF_DLFILTERDIR=/opt/perf/dlfilters")
    assert os.path.isfile(tmp_path / "chosen/opt/perf/dlfilters/kmodsyms-dlfilter.so")
    assert not os.path.exists(f"{tmp_path}/chosen{exec_path}")


def test_a_module_not_loaded_is_said_without_dtrace_syms_too(dlfilter, tmp_path):
    """Issue 31 item 7: without a dtrace_syms (the degraded path), a module
    that is not loaded is said, as it is with one; a loaded one and vmlinux
    are not."""
    if os.path.exists(f"/lib/modules/{os.uname().release}/kernel/dtrace_syms"):
        pytest.skip("this host has a dtrace_syms: not the degraded path")
    so, driver = dlfilter
    proc = subprocess.run([driver, so, "run", f"kallsyms={FIXTURE_KALLSYMS}", "ext5,fuse,vmlinux"],
                          input=b"", capture_output=True)
    lines = proc.stderr.decode().splitlines()
    assert proc.returncode == 0 and len(lines) == 2 and lines[0].startswith(DEGRADED), lines
    assert lines[1] == ("kmodsyms-dlfilter: module ext5 is not loaded, and built-in modules are "
                        "unknown without dtrace_syms: it keeps no sample")
