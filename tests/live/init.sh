#!/bin/busybox sh
# SPDX-License-Identifier: GPL-2.0-only OR UPL-1.0
#
# /init of tests/test_live.py's busybox initramfs.  It loads the modules
# /etc/live.env names, runs the static kmodsyms-c with its defaults (the
# running kernel's /proc/kallsyms, /lib/modules/$(uname -r), /sys,
# /proc/modules) as root and as an unprivileged user, and snapshots what the
# kernel showed at each step.  Everything goes out on the serial console as
# one gzipped tar, base64 between two marker lines, then the guest reboots
# (QEMU runs with -no-reboot, so it exits).
/bin/busybox echo "@@@@ init"     # the host knows the guest got this far
/bin/busybox mount -t proc proc /proc      # --install reads /proc/self/exe
/bin/busybox --install -s /bin
export PATH=/bin
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
. /etc/live.env      # RELOAD, INSERT, OTHER_SYMS, UNPRIVILEGED (uid:gid), SEED
OUT=/tmp/live
mkdir -p $OUT
uname -r > $OUT/release
cat /sys/kernel/notes > $OUT/notes
cat /proc/iomem > $OUT/iomem      # "Kernel code" starts at _text's physical address

# run DIR NAME CMD...: CMD's stdout, stderr and exit status in DIR/NAME.*
run() {
    dir=$1 name=$2
    shift 2
    mkdir -p "$dir"
    "$@" > "$dir/$name.out" 2> "$dir/$name.err"
    echo $? > "$dir/$name.rc"
}

# snapshot PHASE: what the kernel shows now, and the tools' answers.
snapshot() {
    s=$OUT/$1
    mkdir -p $s/proc
    cat /proc/kallsyms > $s/proc/kallsyms
    cat /proc/modules > $s/proc/modules
    for m in $(cut -d' ' -f1 /proc/modules); do
        for f in /sys/module/$m/sections/* /sys/module/$m/sections/.* \
                 /sys/module/$m/coresize /sys/module/$m/initsize \
                 /sys/module/$m/srcversion /sys/module/$m/notes/*; do
            [ -f "$f" ] || continue
            mkdir -p "$s${f%/*}"
            cat "$f" > "$s$f"
        done
    done
    addresses $SEED 4000 < /proc/kallsyms > $s/addresses
    run $s/tool lines kmodsyms-c lines
    run $s/tool kallmodsyms kmodsyms-c kallmodsyms
    run $s/tool modules kmodsyms-c modules
    run $s/tool resolve kmodsyms-c resolve --json < $s/addresses
}

# load_module NAME: insmod its installed file; a compressed one decompressed
# here first, as kmod's insmod does in user space (the kernel is built
# without CONFIG_MODULE_DECOMPRESS).
load_module() {
    f=$(find /lib/modules/$(uname -r) -name "$1.ko*" | head -n 1)
    case $f in
        *.xz) unxz -c "$f" > /tmp/$1.ko && f=/tmp/$1.ko ;;
        *.zst) zstd -dc "$f" > /tmp/$1.ko && f=/tmp/$1.ko ;;
    esac
    insmod "$f"
    echo "$1 $? $f" >> $OUT/insmod
}

# One kmodsyms-c refresh, loaded at the first step and followed across the
# others (kms_refresh()): a line written to it asks for a refresh, which
# writes its lines into the file the line names; each step's record, read
# back, says it is done before the next module change.
refresh_start() {
    mkfifo /tmp/refresh.in /tmp/refresh.out
    { kmodsyms-c refresh < /tmp/refresh.in > /tmp/refresh.out 2> $OUT/refresh.err
      echo $? > $OUT/refresh.rc; } &
    exec 3> /tmp/refresh.in 4< /tmp/refresh.out
    read -r record <&4 && echo "$record" >> $OUT/refresh.out
}
refresh_step() {
    mkdir -p $OUT/$1/tool
    echo $OUT/$1/tool/refresh-lines.out >&3
    read -r record <&4 && echo "$record" >> $OUT/refresh.out
}
refresh_stop() {
    exec 3>&-
    wait
    exec 4<&-
}

load_module $RELOAD
snapshot 1-loaded
run $OUT/1-loaded/tool stale kmodsyms-c lines --syms $OTHER_SYMS
run $OUT/1-loaded/tool forced kmodsyms-c modules --syms $OTHER_SYMS --force
refresh_start
rmmod $RELOAD
snapshot 2-unloaded
refresh_step 2-unloaded
load_module $RELOAD
snapshot 3-reloaded
refresh_step 3-reloaded
load_module $INSERT
snapshot 4-inserted
refresh_step 4-inserted
refresh_stop

# What an unprivileged reader meets: kernel/ksyms_common.c
# kallsyms_show_value() shows addresses to a reader without CAP_SYSLOG only
# when kptr_restrict is 0 and perf_event_paranoid <= 1, to root (with
# CAP_SYSLOG) unless kptr_restrict is 2.
# Each case: the sysctls, the reader's first kallsyms line, the tool's answer.
unprivileged() {
    name=$1 kptr=$2 paranoid=$3 who=$4
    d=$OUT/user/$name
    mkdir -p $d
    sysctl -w kernel.kptr_restrict=$kptr kernel.perf_event_paranoid=$paranoid > $d/sysctl
    if [ "$who" = root ]; then
        head -n 1 /proc/kallsyms > $d/kallsyms-head
        run $d tool kmodsyms-c lines
    else
        asuser ${UNPRIVILEGED%:*} ${UNPRIVILEGED#*:} head -n 1 /proc/kallsyms > $d/kallsyms-head
        run $d tool asuser ${UNPRIVILEGED%:*} ${UNPRIVILEGED#*:} kmodsyms-c lines
    fi
}
unprivileged open 0 1 user
unprivileged paranoid 0 2 user
unprivileged paranoid-root 0 2 root
unprivileged restricted 1 1 user
unprivileged restricted-paranoid 1 2 user
unprivileged restricted-as-root 1 2 root
unprivileged restricted-root 2 -1 root
sysctl -w kernel.kptr_restrict=0 > /dev/null

echo "@@@@ BEGIN live.tar.gz"
tar cf - -C $OUT . | gzip | base64
echo "@@@@ END live.tar.gz"
sync
reboot -f
