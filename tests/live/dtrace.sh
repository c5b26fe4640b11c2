# SPDX-License-Identifier: GPL-2.0-only OR UPL-1.0
#
# /test.sh of tests/test_dtrace_live.py, run as root by
# tests/live/debian-init.sh on Debian's own kernel: the real dtrace (sid's
# 2.0.7) without, then with, a modules.builtin.ranges under its modpath
# /lib/modules/$(uname -r), where libdtrace reads it when there is no
# /proc/kallmodsyms.  Each scenario lists the fbt probes and traces a few
# functions of a built-in module and of a loaded one while a workload runs
# them.  What dtrace printed goes into $OUT/SCENARIO/; the host compares it
# with kmodsyms' answers for the same kernel.
#
# /etc/dtrace-live.env sets:
#   BUILTIN, BUILTIN_FUNCS   a built-in module and functions of it the workload runs
#   LOADABLE, LOADABLE_FUNCS a module loaded from its .ko(.xz) and functions of it
#   RANGES                   the modules.builtin.ranges 'kmodsyms install' wrote on the host
#   ASIDE                    D library files dtrace cannot compile on this kernel
. /etc/dtrace-live.env
MODPATH=/lib/modules/$(uname -r)
now() { cut -d' ' -f1 /proc/uptime; }
say() { echo "@@@@ $* ($(now) s)"; }

# run DIR NAME CMD...: CMD's stdout, stderr, exit status and seconds in DIR/NAME.*
run() {
    dir=$1 name=$2
    shift 2
    mkdir -p "$dir"
    start=$(now)
    timeout 600 "$@" > "$dir/$name.out" 2> "$dir/$name.err"
    echo $? > "$dir/$name.rc"
    echo "$start $(now)" > "$dir/$name.seconds"
}

# dtrace 2.0.7's D library for the newest kernel it knows (6.10) does not
# compile on some later kernels (io.d names struct buffer_head's b_end_io,
# gone in 7.x), and then every probe description fails: moved aside.
for f in $ASIDE; do
    mkdir -p /tmp/aside && mv "$f" /tmp/aside/ && echo "moved aside: $f" >> $OUT/aside
done

# The workload's disk: a loop device (the loadable module, with its
# dependencies from modules.dep) holding an ext2 file system, which the
# built-in ext4 driver mounts.
modprobe $LOADABLE
echo $? > $OUT/modprobe.rc
dd if=/dev/zero of=/tmp/disk.img bs=1M count=8 2>/dev/null
losetup /dev/loop0 /tmp/disk.img && mke2fs -q /dev/loop0 > /dev/null
echo $? > $OUT/mke2fs.rc
mkdir -p /mnt/disk
workload() {
    mount -t ext4 /dev/loop0 /mnt/disk &&
    echo hello > /mnt/disk/file && cat /mnt/disk/file > /dev/null && sync &&
    umount /mnt/disk
}

# trace DIR MODULE: BUILTIN_FUNCS as MODULE's fbt (fentry) and rawfbt
# (kprobe) probes, LOADABLE_FUNCS as LOADABLE's fbt probes, with stack(),
# and mod() and func() of each caller (its address printed by %x, the two
# by %a, their type's conversion), while the workload runs.  BEGIN's
# system() says the probes are enabled (dtrace's own output is buffered
# until it exits; system() is destructive: -w).
trace() {
    dir=$1 module=$2
    probes=
    for f in $BUILTIN_FUNCS; do
        probes="$probes${probes:+, }fbt:$module:$f:entry, rawfbt:$module:$f:entry"
    done
    for f in $LOADABLE_FUNCS; do probes="$probes, fbt:$LOADABLE:$f:entry"; done
    echo "$probes" > $dir/trace.probes
    rm -f /tmp/dtrace.ready
    start=$(now)
    timeout 600 dtrace -w -q -n "
        BEGIN { system(\"touch /tmp/dtrace.ready\"); }
        $probes {
            @calls[probeprov, probemod, probefunc] = count();
            @stacks[stack()] = count();
            @callers[caller, mod(caller), func(caller)] = count();
        }
        END {
            printf(\"@@ calls\\n\"); printa(@calls);
            printf(\"@@ callers\\n\"); printa(\"%x %a %a %@d\\n\", @callers);
            printf(\"@@ stacks\\n\"); printa(@stacks);
        }" > $dir/trace.out 2> $dir/trace.err &
    dt=$!       # dtrace's own: busybox's timeout execs the command in its place
    while [ ! -e /tmp/dtrace.ready ] && kill -0 $dt 2>/dev/null; do sleep 1; done
    echo "$start $(now)" > $dir/trace.ready
    workload
    echo $? > $dir/workload.rc
    sleep 2     # a buffer switch (1 s) for the last firings
    # TERM, not INT: a background job of a script starts with SIGINT
    # ignored, and dtrace then leaves it so
    kill -TERM $dt 2>/dev/null
    wait $dt
    echo $? > $dir/trace.rc
}

# scenario NAME MODULE: the probe lists and a trace; MODULE is the one
# BUILTIN's functions are expected under.
scenario() {
    d=$OUT/$1
    mkdir -p $d
    say "$1: dtrace -l -P fbt"
    run $d fbt dtrace -l -P fbt
    say "$1: dtrace -l -m $BUILTIN"
    run $d builtin dtrace -l -m $BUILTIN
    say "$1: tracing"
    trace $d $2
}

scenario without vmlinux
cp "$RANGES" $MODPATH/modules.builtin.ranges
scenario with $BUILTIN
say "done"
cat /proc/kallsyms > $OUT/kallsyms
cat /proc/modules > $OUT/modules
