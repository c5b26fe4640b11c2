#!/bin/busybox sh
# SPDX-License-Identifier: GPL-2.0-only OR UPL-1.0
#
# /init of tests/debian_guest.py's initramfs: Debian's own kernel, its
# /lib/modules tree, sid's dtrace and busybox.  It mounts what dtrace
# reads, runs the test's /test.sh as root with $OUT to write into, and
# sends $OUT out on the serial console as one gzipped tar, base64 between
# two marker lines (tests/live_boot.py reads them), then reboots (QEMU runs
# with -no-reboot, so it exits).
/bin/busybox echo "@@@@ init"     # the host knows the guest got this far
/bin/busybox mount -t proc proc /proc      # --install reads /proc/self/exe
/bin/busybox --install -s /bin
export PATH=/usr/sbin:/usr/bin
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
# dtrace's providers: tracefs (available_filter_functions, the kprobe and
# uprobe event files), reached at either of its two places
mount -t tracefs tracefs /sys/kernel/tracing
mount -t debugfs debugfs /sys/kernel/debug
# the types dtrace compiles D with: no CTF on Debian's kernels, so its
# BTF, which libdtrace converts at start-up (no bpf file system is needed:
# dtrace pins nothing)
[ -r /sys/kernel/btf/vmlinux ] || echo "no /sys/kernel/btf/vmlinux" >&2
export OUT=/tmp/out
mkdir -p $OUT
uname -r > $OUT/release
# its output on the console too: the host's record of a guest that hangs
{ sh /test.sh; echo $? > $OUT/test.rc; } 2>&1 | tee $OUT/test.log
dmesg > $OUT/dmesg
echo "@@@@ BEGIN live.tar.gz"
tar cf - -C $OUT . | gzip | base64
echo "@@@@ END live.tar.gz"
sync
reboot -f
