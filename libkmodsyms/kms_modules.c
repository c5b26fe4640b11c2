// SPDX-License-Identifier: GPL-2.0-only OR UPL-1.0
/*
 * libkmodsyms: loaded modules matched with their own .ko files, so that
 * their kallsyms lines get ELF sizes, types and bindings (docs/resolver.md
 * §9, R43-R46): the interface the index calls (kms_modules.h).
 *
 * For every loaded module of kallsyms (pseudo-modules skipped):
 *   1. its file under the modules directory (R43, kms_modfind.c);
 *   2. the file read as installed: a .ko, .ko.xz, .ko.zst or .ko.gz
 *      (kms_decompress.c, with the system's liblzma, libzstd or zlib loaded
 *      at run time: without it that module is KMS_MODULE_UNSUPPORTED, its
 *      lines unsized), signed or not (kms_elf.c);
 *   3. the kernel's word, when readable (kms_sysfs.c):
 *      /sys/module/NAME/sections/<name>, srcversion,
 *      notes/.note.gnu.build-id, and the module's core from /proc/modules
 *      or /sys/module/NAME/coresize;
 *   4. the match (kms_match.c): sections placed from sysfs, else by
 *      anchors, else by shape (R44); the file refused (for that module
 *      only) on any disagreement (R45); its lines answered from its
 *      symbols (R46).
 */
#include "kms_ko.h"

#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>

#define STB_GNU_UNIQUE 10u

int kmsi_is_pseudo_module(const char *name)
{
    return strcmp(name, "bpf") == 0 || strncmp(name, "__builtin__", 11) == 0;
}

/* Mapping symbols and local labels: .L*, L0*, $a $d $t $x (alone or with a
 * '.' suffix), which never answer an address (R27, R46). */
int kmsi_is_mapping_symbol(const char *p, uint32_t len)
{
    if ((len >= 2 && p[0] == '.' && p[1] == 'L') || (len >= 2 && p[0] == 'L' && p[1] == '0'))
        return 1;
    return len >= 2 && p[0] == '$' && p[1] && strchr("adtx", p[1]) && (len == 2 || p[2] == '.');
}


int kmsi_modules_oom(kms_error *err)
{
    if (err) {
        err->code = KMS_E_NOMEM;
        snprintf(err->message, sizeof err->message, "out of memory reading loaded modules");
    }
    return KMS_E_NOMEM;
}

/* Add a module's outcome (FILE, REASON, WARNING now owned by OUT); -1 when
 * a refusal's text could not be made (out of memory). */
static int add_status(struct kmsi_loaded *out, const char *name, char *file, uint8_t status,
                      size_t lines, char *reason, char *warning)
{
    struct kms_module *st = &out->status[out->nstatus++];
    st->size = sizeof *st;
    st->name = name;
    st->file = file;
    st->status = status;
    st->lines = lines;
    st->sized = 0;
    st->reason = reason;
    st->warning = warning;
    return (status == KMS_MODULE_MATCHED || status == KMS_MODULE_MISSING ||
            status == KMS_MODULE_DEFERRED || (reason && warning)) ? 0 : -1;
}

/* The section count of every matched .ko is unknown until read: extents
 * grow as needed. */
static int reserve_extents(struct kmsi_loaded *out, size_t *cap, size_t more)
{
    if (out->nextent + more <= *cap)
        return 0;
    size_t nc = (*cap ? *cap * 2 : 256) + more;
    struct kmsi_ko_extent *nx = realloc(out->extent, nc * sizeof *nx);
    if (!nx)
        return -1;
    out->extent = nx;
    *cap = nc;
    return 0;
}

/* Whether a section NAME stays in the module's core after its init: the
 * kernel frees .init* (kernel/module/main.c module_init_layout_section()),
 * and .exit* too when built without CONFIG_MODULE_UNLOAD; sysfs keeps
 * listing them, so one kallsyms does not show is not taken as the
 * module's (R44).  (The .symtab and .strtab sysfs lists, in init memory
 * too, are not allocated in the file, so kmsi_ko_read() keeps no section of them.) */
static int in_core(const char *name)
{
    return strncmp(name, ".init", 5) != 0 && strncmp(name, ".exit", 5) != 0;
}

/* A refused module's warning: "module NAME: WHY; its symbols stay unsized"
 * (NULL when out of memory, or WHY is NULL). */
static char *unsized(const char *name, const char *why)
{
    return why ? kmsi_format("module %s: %s; its symbols stay unsized", name, why) : NULL;
}

/* Module NAME's file FULL read into KO (decompressed, its ELF read): 0, 1
 * (refused: its status added to OUT, PATH owned by it) or -1 (out of
 * memory, PATH freed). */
static int read_module_file(struct kmsi_loaded *out, struct kms_decompressors *dz, struct kmsi_ko *ko,
                            const char *name, char *path, const char *full, size_t nl)
{
    struct stat st;
    char *why = NULL;
    int e;
    memset(ko, 0, sizeof *ko);
    if (stat(full, &st) != 0) {
        why = kmsi_format("cannot read %s: %s", full, strerror(errno));
        return add_status(out, name, path, KMS_MODULE_REFUSED, nl, why, unsized(name, why)) ? -1 : 1;
    }
    if ((e = kmsi_map_ko(full, ko)) != 0) {
        if (e == ENOMEM)
            return free(path), -1;
        why = kmsi_format("cannot read module %s: %s", full, strerror(e));
        return add_status(out, name, path, KMS_MODULE_REFUSED, nl, why, unsized(name, why)) ? -1 : 1;
    }
    const char *kind = kmsi_compression(full);
    if (kind) { /* R43: the decompressed file is the one read */
        unsigned char *plain;
        size_t len;
        int z = kmsi_decompress(dz, full, kind, ko->data, ko->n, &plain, &len, &why);
        kmsi_ko_free(ko);
        memset(ko, 0, sizeof *ko);
        if (z < 0)
            return free(path), -1;
        if (z)
            return add_status(out, name, path, z == 2 ? KMS_MODULE_UNSUPPORTED : KMS_MODULE_REFUSED,
                              nl, why, unsized(name, why)) ? -1 : 1;
        ko->data = plain;
        ko->n = len;
    }
    int refused = kmsi_ko_read(ko, full, &why);
    if (refused < 0)
        return free(path), -1;
    if (refused)
        return add_status(out, name, path, KMS_MODULE_REFUSED, nl, why, unsized(name, why)) ? -1 : 1;
    return 0;
}

/* A matched module's answers into OUT: an extent each section kallsyms
 * shows, and each that sysfs places in the module's core (R44: a text-only
 * kernel shows no data line of a module, yet the .rodata, .data and .bss
 * are the module's); each line its symbol's size, type and binding (R46).
 * -1: out of memory (PATH freed). */
static int add_matched(struct kmsi_loaded *out, size_t *ext_cap, const struct kmsi_match *m,
                       const char *name, char *path, const size_t *idx, size_t nl)
{
    const struct kmsi_ko *ko = m->ko;
    uint32_t k0 = (uint32_t)out->nko;
    size_t sized = 0;
    int32_t *extent_of = malloc((ko->nsec ? ko->nsec : 1) * sizeof *extent_of);
    if (!extent_of || reserve_extents(out, ext_cap, ko->nsec)) {
        free(extent_of);
        free(path);
        return -1;
    }
    add_status(out, name, path, KMS_MODULE_MATCHED, nl, NULL, NULL);
    for (uint32_t sec = 0; sec < ko->nsec; sec++) {
        extent_of[sec] = NO;
        if (!m->shown[sec] && !(m->by_kernel[sec] && in_core(ko->sec[sec].name)))
            continue;
        struct kmsi_ko_extent *x = &out->extent[out->nextent];
        x->start = m->base[sec];
        x->end = m->base[sec] + ko->sec[sec].size;
        x->ko = k0;
        extent_of[sec] = (int32_t)out->nextent++;
    }
    for (size_t k = 0; k < nl; k++) {
        int32_t s = m->line_sym[k];
        if (s < 0)
            continue;
        const struct kmsi_ko_sym *sym = &ko->sym[s];
        struct kmsi_ko_line *r = &out->line[idx[k]].ko;
        uint8_t bind = sym->info >> 4;
        r->size = (int64_t)sym->size;
        r->typed = (sym->info & 0xF) != 0;
        r->binding = bind == STB_GNU_UNIQUE ? 1 : bind;
        r->extent = extent_of[sym->sec];
        sized += sym->size > 0;
    }
    out->status[out->nstatus - 1].sized = sized;
    out->ko_status[out->nko++] = (uint32_t)(out->nstatus - 1);
    free(extent_of);
    return 0;
}

/* Read and match one module's file FULL (PATH relative, owned by its
 * status from here); its outcome added to OUT->status, its lines' answers
 * to OUT->line.  -1: out of memory. */
static int one_module(struct kmsi_loaded *out, size_t *ext_cap, struct kms_decompressors *dz,
                      const char *name, char *path, const char *full, const struct kmsi_live *live,
                      const struct kmsi_mline *lines, const size_t *idx, size_t nl)
{
    struct kmsi_ko ko;
    struct kmsi_match m;
    char *why = NULL;
    int rc = read_module_file(out, dz, &ko, name, path, full, nl);
    if (rc) {
        kmsi_ko_free(&ko);
        return rc < 0 ? -1 : 0;
    }
    int refused = kmsi_match_module(&m, &ko, lines, idx, nl, live, &why);
    if (refused < 0) {
        free(path);
        rc = -1;
    } else if (refused) {
        rc = add_status(out, name, path, KMS_MODULE_REFUSED, nl, why,
                        kmsi_format("module %s: %s is not the loaded module (%s); its symbols "
                                    "stay unsized", name, full, why));
    } else {
        rc = add_matched(out, ext_cap, &m, name, path, idx, nl);
    }
    kmsi_match_free(&m);
    kmsi_ko_free(&ko);
    return rc;
}

int kmsi_modules_match(struct kmsi_loaded *out, const struct kmsi_mline *lines, size_t n,
                       const char *const *mod_name, uint32_t nmods, const struct kmsi_sources *src,
                       kms_error *err)
{
    struct kmsi_wanted w = {NULL, 0, NULL, NULL};
    size_t *count = NULL, *idx = NULL, ext_cap = 0;
    struct kms_decompressors dz;
    int rc = KMS_OK;
    memset(out, 0, sizeof *out);
    memset(&dz, 0, sizeof dz);
    out->nmods = nmods;
    out->nlines = n;
    const char **wanted = malloc((nmods ? nmods : 1) * sizeof *wanted);
    out->line = malloc((n ? n : 1) * sizeof *out->line);
    out->core_known = calloc(nmods ? nmods : 1, 1);
    out->core_start = calloc(nmods ? nmods : 1, sizeof *out->core_start);
    out->core_size = calloc(nmods ? nmods : 1, sizeof *out->core_size);
    out->status = calloc(nmods ? nmods : 1, sizeof *out->status);
    out->ko_status = calloc(nmods ? nmods : 1, sizeof *out->ko_status);
    count = calloc((size_t)nmods + 1, sizeof *count);
    idx = malloc((n ? n : 1) * sizeof *idx);
    if (!wanted || !out->line || !out->core_known || !out->core_start || !out->core_size ||
        !out->status || !out->ko_status || !count || !idx)
        goto nomem;
    for (size_t k = 0; k < n; k++) {
        out->line[k].line = lines[k].line;
        out->line[k].ko.size = NO;
        out->line[k].ko.extent = NO;
        out->line[k].ko.typed = out->line[k].ko.binding = 0;
    }
    /* each module's lines, in kallsyms order: idx[count[m] .. count[m + 1]) */
    for (size_t k = 0; k < n; k++)
        count[lines[k].module + 1]++;
    for (uint32_t m = 0; m < nmods; m++)
        count[m + 1] += count[m];
    for (size_t k = 0, *at = count; k < n; k++)
        idx[at[lines[k].module]++] = k;
    for (uint32_t m = nmods; m > 0; m--)
        count[m] = count[m - 1];
    count[0] = 0;
    for (uint32_t m = 1; m < nmods; m++)
        if (!kmsi_is_pseudo_module(mod_name[m]))
            wanted[w.n++] = mod_name[m];
    w.name = wanted;
    w.path = calloc(w.n ? w.n : 1, sizeof *w.path);
    w.rank = calloc(w.n ? w.n : 1, sizeof *w.rank);
    if (!w.path || !w.rank)
        goto nomem;
    kmsi_proc_modules_cores(out, src->proc_modules, mod_name);
    if (src->modules_dir && w.n && (rc = kmsi_find_module_files(&w, src->modules_dir, err)) != KMS_OK)
        goto done;
    for (uint32_t m = 1, k = 0; m < nmods; m++) {
        if (kmsi_is_pseudo_module(mod_name[m]))
            continue;
        struct kmsi_live live;
        size_t nl = count[m + 1] - count[m];
        char *path = w.path[k++], *full = NULL;
        if (kmsi_read_live(&live, src->sysfs_root, mod_name[m]))
            goto nomem_live;
        kmsi_sysfs_core(out, m, src->sysfs_root, mod_name[m], &live);
        w.path[k - 1] = NULL; /* owned by the status from here */
        int deferred = src->defer && path;
        for (size_t r = 0; deferred && r < src->nread; r++)
            deferred = strcmp(src->read[r], mod_name[m]) != 0;
        if (!path || deferred) {
            if (add_status(out, mod_name[m], path, path ? KMS_MODULE_DEFERRED : KMS_MODULE_MISSING,
                           nl, NULL, NULL))
                goto nomem_live;
        } else if (!(full = kmsi_join(src->modules_dir, path))) {
            free(path);
            goto nomem_live;
        } else if (one_module(out, &ext_cap, &dz, mod_name[m], path, full, &live, lines,
                              idx + count[m], nl)) {
            free(full);
            goto nomem_live;
        }
        free(full);
        kmsi_live_free(&live);
        continue;
    nomem_live:
        kmsi_live_free(&live);
        goto nomem;
    }
    goto done;
nomem:
    rc = kmsi_modules_oom(err);
done:
    kmsi_decompressors_close(&dz);
    for (size_t k = 0; w.path && k < w.n; k++)
        free(w.path[k]);
    free(w.path);
    free(w.rank);
    free(wanted);
    free(count);
    free(idx);
    if (rc != KMS_OK)
        kmsi_modules_free(out);
    return rc;
}

void kmsi_modules_free(struct kmsi_loaded *m)
{
    for (size_t k = 0; m->status && k < m->nstatus; k++) {
        free((char *)m->status[k].file);
        free((char *)m->status[k].reason);
        free((char *)m->status[k].warning);
    }
    free(m->status);
    free(m->line);
    free(m->extent);
    free(m->ko_status);
    free(m->core_known);
    free(m->core_start);
    free(m->core_size);
    memset(m, 0, sizeof *m);
}

int kmsi_modules_outside_core(const struct kmsi_loaded *m, uint32_t mod, uint64_t addr)
{
    if (mod >= m->nmods || !m->core_known[mod])
        return 0;
    uint64_t start = m->core_start[mod], size = m->core_size[mod];
    return addr < start || addr - start >= size;
}

int kmsi_modules_core_last(const struct kmsi_loaded *m, uint32_t mod, uint64_t *last)
{
    if (mod >= m->nmods || !m->core_known[mod])
        return 0;
    uint64_t start = m->core_start[mod], size = m->core_size[mod];
    *last = size == 0 ? start - 1 : size - 1 <= UINT64_MAX - start ? start + size - 1 : UINT64_MAX;
    return 1;
}

/* ------------------------------------------------------------ the index's side */

/*
 * Match the loaded modules with their .ko files (kms_modules.c).  Each
 * placed .ko section becomes section count[T_SECTIONS] + k (its object
 * count[T_OBJECTS] + the .ko's number), and each line from a .ko is in its
 * section: one numbering of dtrace_syms' sections and the .ko's, which
 * the queries read alike (R46).
 */
int kmsi_match_modules(kms_handle *h, const struct kmsi_sources *src, kms_error *err)
{
    size_t nml = 0;
    struct scratch_mark mark = kmsi_scratch_mark(h);
    struct kmsi_mline *ml;
    if (!SCRATCH(h, ml, h->n - h->core_lines))
        return kmsi_fail(err, KMS_E_NOMEM, "out of memory reading loaded modules");
    for (size_t i = h->modules_from; i < h->n; i++)
        if (line_module(h, i)) {
            ml[nml].addr = h->line[i].addr;
            ml[nml].name = line_name(h, i);
            ml[nml].name_len = h->line[i].name_len;
            ml[nml].module = line_module(h, i);
            ml[nml++].line = (uint32_t)i;
        }
    int rc = kmsi_modules_match(&h->mods, ml, nml, h->mod_name, h->nmods, src, err);
    kmsi_scratch_release(h, mark);
    if (rc)
        return rc;
    uint32_t nsec = h->count[T_SECTIONS], nobj = h->count[T_OBJECTS];
    size_t next = h->mods.nextent, nko = h->mods.nko;
    uint32_t *so = realloc(h->section_object, (nsec + next + 1) * sizeof *so);
    if (so)
        h->section_object = so;
    uint8_t *placed = so ? realloc(h->placed, nsec + next + 1) : NULL;
    if (placed)
        h->placed = placed;
    struct object_info *obj = placed ? realloc(h->object, (nobj + nko + 1) * sizeof *obj) : NULL;
    if (!obj)
        return kmsi_fail(err, KMS_E_NOMEM, "out of memory reading loaded modules");
    h->object = obj;
    for (size_t e = 0; e < next; e++) {
        h->section_object[nsec + e] = nobj + h->mods.extent[e].ko;
        h->placed[nsec + e] = 0;
    }
    for (size_t k = 0; k < nko; k++) {
        const struct kms_module *st = &h->mods.status[h->mods.ko_status[k]];
        uint32_t m = 1;
        while (h->mod_name[m] != st->name)
            m++;
        h->object[nobj + k].path = st->file;
        h->object[nobj + k].modules.modules = h->mod_name + m;
        h->object[nobj + k].modules.nmodules = 1;
        h->object[nobj + k].dso = h->mod_name[m];
        h->object[nobj + k].origin = KMS_ORIGIN_LOADABLE;
    }
    for (size_t k = 0; k < h->mods.nlines; k++)
        if (h->mods.line[k].ko.extent >= 0)
            h->load->line_section[h->mods.line[k].line] = (int32_t)nsec + h->mods.line[k].ko.extent;
    return KMS_OK;
}

/* The placed .ko sections (R44) join the extents that queries
 * see, by start (dtrace_syms' first among equal starts), however low they
 * lie (arm64 loads modules below the kernel image). */
int kmsi_add_ko_extents(kms_handle *h, kms_error *err)
{
    size_t nk = h->mods.nextent, nv = h->next;
    if (!nk)
        return KMS_OK;
    struct scratch_mark mark = kmsi_scratch_mark(h);
    struct keyed *ko = kmsi_scratch(h, nk, sizeof *ko);
    uint64_t *start = realloc(h->ext_start, (nv + nk) * sizeof *start);
    if (start)
        h->ext_start = start;
    void *ext = start ? realloc(h->ext, (nv + nk) * sizeof *h->ext) : NULL;
    if (ext)
        h->ext = ext;
    for (size_t e = 0; ko && e < nk; e++) {
        ko[e].key = h->mods.extent[e].start;
        ko[e].idx = (uint32_t)e;
    }
    if (!ko || !ext || kmsi_sort_keyed(h, ko, nk)) {
        return kmsi_fail(err, KMS_E_NOMEM, "out of memory indexing loaded modules");
    }
    /* merge from the top: the .ko's above dtrace_syms' at equal starts */
    size_t i = nv, j = nk, o = nv + nk;
    while (j > 0) {
        o--;
        if (i > h->ext_first && h->ext_start[i - 1] > ko[j - 1].key) {
            i--;
            h->ext_start[o] = h->ext_start[i];
            h->ext[o] = h->ext[i];
        } else {
            j--;
            h->ext_start[o] = ko[j].key;
            h->ext[o].end = h->mods.extent[ko[j].idx].end;
            h->ext[o].sec = h->count[T_SECTIONS] + ko[j].idx;
        }
    }
    h->next = (uint32_t)(nv + nk);
    kmsi_scratch_release(h, mark);
    return KMS_OK;
}
