// SPDX-License-Identifier: GPL-2.0-only OR UPL-1.0
/*
 * asuser UID GID PROG [ARG...]: run PROG as an unprivileged user (no
 * supplementary groups, no capabilities left), for the live suite's guest,
 * whose busybox setpriv cannot change ids.  Static, libc only.
 */
#define _DEFAULT_SOURCE /* setgroups */
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc < 4) {
        fputs("usage: asuser UID GID PROG [ARG...]\n", stderr);
        return 2;
    }
    uid_t uid = (uid_t)strtoul(argv[1], NULL, 10);
    gid_t gid = (gid_t)strtoul(argv[2], NULL, 10);
    if (setgroups(0, NULL) || setgid(gid) || setuid(uid) || !uid || getuid() != uid) {
        perror("asuser");
        return 2;
    }
    execvp(argv[3], argv + 3);
    perror(argv[3]);
    return 127;
}
