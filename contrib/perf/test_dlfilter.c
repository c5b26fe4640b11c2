// SPDX-License-Identifier: GPL-2.0-only OR UPL-1.0
/*
 * test_dlfilter: drives a dlfilter as perf script does, for
 * tests/test_dlfilter.py: dlopen() it, give it perf_dlfilter_fns.args,
 * call start() with the --dlarg values, filter_event() once per sample
 * read from stdin ("IP CPUMODE", hex and decimal) in a struct
 * perf_dlfilter_sample of perf's size, then stop().  Prints each sample's
 * "IP keep" or "IP drop"; "description" alone prints filter_description().
 *
 *   test_dlfilter FILTER.so {description | run [DLARG...]}
 *
 * A filter error: its code on stderr, exit status 1; bad usage: 2.
 */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <perf/perf_dlfilter.h>

static char **dlargv;
static int dlargc;

static char **args(void *ctx, int *argc)
{
    (void)ctx;
    *argc = dlargc;
    return dlargv;
}

int main(int argc, char **argv)
{
    if (argc < 3 || (strcmp(argv[2], "description") && strcmp(argv[2], "run"))) {
        fputs("usage: test_dlfilter FILTER.so {description | run [DLARG...]}\n", stderr);
        return 2;
    }
    void *so = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!so) {
        fprintf(stderr, "test_dlfilter: %s\n", dlerror());
        return 2;
    }
    if (strcmp(argv[2], "description") == 0) {
        const char *(*describe)(const char **) =
            (const char *(*)(const char **))dlsym(so, "filter_description");
        const char *long_text = NULL;
        const char *text = describe(&long_text);
        printf("%s\n%s\n", text, long_text ? long_text : "");
        return 0;
    }
    struct perf_dlfilter_fns *fns = dlsym(so, "perf_dlfilter_fns");
    int (*start)(void **, void *) = (int (*)(void **, void *))dlsym(so, "start");
    int (*stop)(void *, void *) = (int (*)(void *, void *))dlsym(so, "stop");
    int (*filter)(void *, const struct perf_dlfilter_sample *, void *) =
        (int (*)(void *, const struct perf_dlfilter_sample *, void *))dlsym(so, "filter_event");
    if (!fns || !start || !stop || !filter) {
        fputs("test_dlfilter: the filter lacks perf_dlfilter_fns, start, stop or filter_event\n",
              stderr);
        return 2;
    }
    memset(fns, 0, sizeof *fns);
    fns->args = args;
    dlargv = argv + 3;
    dlargc = argc - 3;
    void *data = NULL;
    int rc = start(&data, NULL);
    if (rc) {
        fprintf(stderr, "test_dlfilter: start() returned %d\n", rc);
        return 1;
    }
    char line[128];
    while (fgets(line, sizeof line, stdin)) {
        struct perf_dlfilter_sample s;
        memset(&s, 0, sizeof s);
        s.size = sizeof s;
        unsigned mode = 0;
        uint64_t ip = 0;
        if (sscanf(line, "%" SCNx64 " %u", &ip, &mode) != 2) {
            fprintf(stderr, "test_dlfilter: not IP CPUMODE: %s", line);
            return 2;
        }
        s.ip = ip;
        s.cpumode = (__u8)mode;
        s.event = "cpu-clock";
        rc = filter(data, &s, NULL);
        if (rc < 0) {
            fprintf(stderr, "test_dlfilter: filter_event() returned %d\n", rc);
            return 1;
        }
        printf("%" PRIx64 " %s\n", (uint64_t)s.ip, rc ? "drop" : "keep");
    }
    rc = stop(data, NULL);
    if (rc) {
        fprintf(stderr, "test_dlfilter: stop() returned %d\n", rc);
        return 1;
    }
    return 0;
}
