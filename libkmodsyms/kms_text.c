// SPDX-License-Identifier: GPL-2.0-only OR UPL-1.0
/*
 * Text: the one formatter of what kmodsyms prints (kmodsyms.h, "Text"):
 * kallmodsyms lines (kms_format_line()), answer records in DTrace's
 * notation, JSON or as the kernel's %pS (kms_format_sym()), JSON strings
 * (kms_format_json_string()), and the %pS text of kms_resolve_kernel()
 * (kmsi_ksym_text()).  Every function writes into a caller's buffer and
 * returns the whole text's length, as snprintf does.
 */
#include "kms_internal.h"

#include <stdio.h>

/* A text being written into BUF (LEN bytes): N bytes so far, of which
 * those below LEN - 1 are in BUF. */
struct text {
    char *buf;
    size_t len, n;
};

static void put(struct text *t, const char *s, size_t k)
{
    if (t->n < t->len) {
        size_t room = t->len - 1 - t->n;
        memcpy(t->buf + t->n, s, k < room ? k : room);
    }
    t->n += k;
}

static void put_str(struct text *t, const char *s)
{
    put(t, s, strlen(s));
}

/* "0x" and V in lower-case hex (0 as "0x0", as Python's and the kernel's %#x). */
static void put_hex(struct text *t, uint64_t v)
{
    char d[18];
    size_t i = sizeof d;
    do
        d[--i] = "0123456789abcdef"[v & 15];
    while (v >>= 4);
    d[--i] = 'x';
    d[--i] = '0';
    put(t, d + i, sizeof d - i);
}

static void put_dec(struct text *t, uint64_t v)
{
    char d[24];
    put(t, d, (size_t)snprintf(d, sizeof d, "%llu", (unsigned long long)v));
}

static void put_decimal(struct text *t, uint64_t v)
{
    char d[24];
    put(t, d, (size_t)snprintf(d, sizeof d, "%llu", (unsigned long long)v));
}

/* The text's length; BUF NUL-terminated where it holds any byte. */
static size_t done(struct text *t)
{
    if (t->len)
        t->buf[t->n < t->len ? t->n : t->len - 1] = 0;
    return t->n;
}

/* ------------------------------------------------------------------ JSON */

/* The code point of the UTF-8 sequence at P (before END), or U+DC00 + the
 * byte for a byte that starts none (Python's surrogateescape, so that a
 * reader decoding the JSON gets the name's bytes back); *LEN: how many
 * bytes it takes. */
static unsigned decode_utf8(const unsigned char *p, const unsigned char *end, unsigned *len)
{
    unsigned c = *p, need = 0, cp = 0, lo = 0x80, hi = 0xBF;
    *len = 1;
    if (c < 0x80)
        return c;
    if (c >= 0xC2 && c <= 0xDF) {
        need = 1;
        cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 2;
        cp = c & 0x0F;
        lo = c == 0xE0 ? 0xA0 : lo;
        hi = c == 0xED ? 0x9F : hi;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3;
        cp = c & 0x07;
        lo = c == 0xF0 ? 0x90 : lo;
        hi = c == 0xF4 ? 0x8F : hi;
    }
    unsigned k = 0;
    if (need && (size_t)(end - p) > need) {
        for (k = 1; k <= need; k++) {
            unsigned b = p[k];
            if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF))
                break;
            cp = cp << 6 | (b & 0x3F);
        }
    }
    if (!need || k != need + 1)
        return 0xDC00 + c;
    *len = need + 1;
    return cp;
}

static void put_u(struct text *t, unsigned u)
{
    char d[8];
    put(t, d, (size_t)snprintf(d, sizeof d, "\\u%04x", u));
}

/* S (N bytes) as a JSON string, quotes included: printable ASCII as it
 * is, everything else escaped, so that the text is ASCII whatever the
 * name's bytes. */
static void put_json(struct text *t, const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s, *end = p + n;
    put(t, "\"", 1);
    for (unsigned k; p < end; p += k) {
        unsigned c = decode_utf8(p, end, &k);
        const char *esc = c == '"' ? "\\\"" : c == '\\' ? "\\\\" : c == '\n' ? "\\n"
                        : c == '\r' ? "\\r" : c == '\t' ? "\\t" : c == '\b' ? "\\b"
                        : c == '\f' ? "\\f" : NULL;
        if (esc) {
            put_str(t, esc);
        } else if (c >= 0x10000) {
            put_u(t, 0xD800 + ((c - 0x10000) >> 10));
            put_u(t, 0xDC00 + ((c - 0x10000) & 0x3FF));
        } else if (c < 0x20 || c >= 0x7F) {
            put_u(t, c);
        } else {
            char ch = (char)c;
            put(t, &ch, 1);
        }
    }
    put(t, "\"", 1);
}

/* S as a JSON string, or null. */
static void put_json_or_null(struct text *t, const char *s)
{
    if (s)
        put_json(t, s, strlen(s));
    else
        put_str(t, "null");
}

/* A list of names as JSON, null when there are none (a record's modules). */
static void put_json_names(struct text *t, uint32_t n, const char *const *names)
{
    if (!n) {
        put_str(t, "null");
        return;
    }
    put(t, "[", 1);
    for (uint32_t k = 0; k < n; k++) {
        if (k)
            put(t, ", ", 2);
        put_json_or_null(t, names[k]);
    }
    put(t, "]", 1);
}

size_t kms_format_json_string(const char *s, size_t n, char *buf, size_t len)
{
    struct text t = {buf, len, 0};
    put_json(&t, s, n);
    return done(&t);
}

/* ------------------------------------------------------------------ lines */

size_t kms_format_line(const struct kms_line *line, char *buf, size_t len)
{
    struct kms_line l = {0};
    struct text t = {buf, len, 0};
    char head[48];
    memcpy(&l, line, caller_size(line) < sizeof l ? caller_size(line) : sizeof l);
    put(&t, head, (size_t)snprintf(head, sizeof head, "%016llx %llx %c ",
                                   (unsigned long long)l.address,
                                   (unsigned long long)l.sym_size, l.type));
    put(&t, l.name, l.name_len);
    for (uint32_t k = 0; k < l.nmodules; k++) {
        put(&t, k ? " [" : "\t[", 2);
        put_str(&t, l.modules[k]);
        put(&t, "]", 1);
    }
    return done(&t);
}

/* ---------------------------------------------------------------- records */

static const char *const origin_names[] = {NULL, "core", "builtin", "loadable", "pseudo"};
static const char *const binding_names[] = {"local", "global", "weak"};
static const char *const size_kind_names[] = {"unknown", "exact", "estimated"};

/* The module a text format names for R, NULL ('?') where it is not known:
 * none, or answered from kallsyms alone (H degraded), where a line outside
 * loaded and pseudo-modules may be the core kernel's or any built-in
 * module's (docs/resolver.md §8). */
static const char *shown_module(const kms_handle *h, const struct kms_sym *r)
{
    if (h->degraded[0] && r->origin != KMS_ORIGIN_LOADABLE && r->origin != KMS_ORIGIN_PSEUDO)
        return NULL;
    return r->dso;
}

/* DTrace's "mod`sym+0xoff" of R (MOD unknown: "?"; no offset: no "+0x0"). */
static void put_mod_sym(struct text *t, const char *mod, const struct kms_sym *r)
{
    put_str(t, mod ? mod : "?");
    put(t, "`", 1);
    put(t, r->sym, r->sym_len);
    if (r->symoff) {
        put(t, "+", 1);
        put_hex(t, r->symoff);
    }
}

/* "0xADDR mod`sym+0xoff (0xSIZE bytes, object, ambiguous: a | b,c)". */
static void put_verbose(struct text *t, const kms_handle *h, const struct kms_sym *r)
{
    const char *mod = shown_module(h, r);
    put_hex(t, r->address);
    if (!r->sym) {
        put(t, " ", 1);
        if (mod) {
            put_str(t, mod);
            put(t, "`", 1);
        }
        put(t, "?", 1);
        if (r->object) {
            put(t, " (", 2);
            put_str(t, r->object);
            put(t, ")", 1);
        }
        return;
    }
    put(t, " ", 1);
    put_mod_sym(t, mod, r);
    put(t, " (", 2);
    if (r->sized) {
        put_hex(t, (uint64_t)r->sym_size);
        put_str(t, " bytes");
    } else {
        put_str(t, "unsized");
    }
    if (r->object) {
        put(t, ", ", 2);
        put_str(t, r->object);
    }
    if (r->ambiguous) {
        put_str(t, ", ambiguous: ");
        for (uint32_t k = 0; k < r->ncandidates; k++) {
            if (k)
                put(t, " | ", 3);
            for (uint32_t m = 0; m < r->candidates[k].nmodules; m++) {
                if (m)
                    put(t, ",", 1);
                put_str(t, r->candidates[k].modules[m]);
            }
        }
    }
    put(t, ")", 1);
}

/* "mod`sym+0xoff" as DTrace's stack() prints a frame. */
static void put_dtrace(struct text *t, const kms_handle *h, const struct kms_sym *r)
{
    const char *mod = shown_module(h, r);
    if (!r->sym) {
        if (mod) {
            put_str(t, mod);
            put(t, "`", 1);
        }
        put_hex(t, r->address);
        return;
    }
    put_mod_sym(t, mod, r);
}

/* "name+0xoff/0xsize [module]" (no module: no brackets), or "0xaddress"
 * for no symbol (docs/resolver.md R55): the kernel's vsprintf writes %#lx
 * of 0 as 0x0, and a size not known is '?', never a number below the
 * offset. */
static void put_ksym(struct text *t, const struct kms_ksym *k, const char *module)
{
    if (!k->sym) {
        put_hex(t, k->address);
        return;
    }
    put(t, k->sym, k->sym_len);
    put(t, "+", 1);
    put_hex(t, k->offset);
    put(t, "/", 1);
    if (k->sym_size)
        put_hex(t, k->sym_size);
    else
        put(t, "?", 1);
    if (module) {
        put(t, " [", 2);
        put_str(t, module);
        put(t, "]", 1);
    }
}

size_t kmsi_ksym_text(const struct kms_ksym *k, char *buf, size_t len)
{
    struct text t = {buf, len, 0};
    put_ksym(&t, k, k->module);
    return done(&t);
}

/* The address as %pS prints it, with the module kmodsyms names: the
 * kernel's for a loaded or pseudo-module, else R's built-in module
 * (none for the core kernel, '?' for one not known). */
static void put_kernel(struct text *t, const kms_handle *h, const struct kms_sym *r)
{
    struct kms_ksym k = {.size = sizeof k};
    kms_resolve_kernel(h, r->address, &k);
    const char *mod = k.module ? k.module : shown_module(h, r);
    put_ksym(t, &k, !mod ? "?" : strcmp(mod, "vmlinux") ? mod : NULL);
}

/* 'kmodsyms resolve --json': the record's fields (src/kmodsyms/binding/
 * records.py, Symbolization.to_json()), key for key. */
static void put_record(struct text *t, const kms_handle *h, const struct kms_sym *r)
{
    put_str(t, "{\"address\": \"");
    put_hex(t, r->address);
    put_str(t, "\", \"module\": ");
    put_json_or_null(t, r->dso);
    put_str(t, ", \"modules\": ");
    put_json_names(t, r->nmodules, r->modules);
    put_str(t, ", \"origin\": ");
    put_json_or_null(t, r->origin < 5 ? origin_names[r->origin] : NULL);
    put_str(t, ", \"symbol\": ");
    if (r->sym) {
        put_json(t, r->sym, r->sym_len);
        put_str(t, ", \"offset\": ");
        put_dec(t, r->symoff);
        put_str(t, ", \"start\": \"");
        put_hex(t, r->sym_start);
        put_str(t, "\", \"size\": ");
        if (r->size_kind != KMS_SIZE_UNKNOWN)
            put_decimal(t, r->sym_size);
        else
            put_str(t, "null");
        put_str(t, ", \"size_kind\": ");
        put_json_or_null(t, r->size_kind < 3 ? size_kind_names[r->size_kind] : NULL);
        put_str(t, r->sized ? ", \"sized\": true, \"type\": " : ", \"sized\": false, \"type\": ");
        put_json(t, &r->type, 1);
    } else {
        put_str(t, "null, \"offset\": null, \"start\": null, \"size\": null, \"size_kind\": null, "
                   "\"sized\": false, \"type\": null");
    }
    put_str(t, ", \"binding\": ");
    put_json_or_null(t, r->sym_binding <= 2 ? binding_names[r->sym_binding] : NULL);
    put_str(t, ", \"object\": ");
    put_json_or_null(t, r->object);
    put_str(t, r->ambiguous ? ", \"ambiguous\": true" : ", \"ambiguous\": false");
    if (r->ambiguous) {
        put_str(t, ", \"candidates\": [");
        for (uint32_t k = 0; k < r->ncandidates; k++) {
            if (k)
                put(t, ", ", 2);
            put_json_names(t, r->candidates[k].nmodules, r->candidates[k].modules);
        }
        put(t, "]", 1);
    }
    if (h->degraded[0])
        put_str(t, ", \"builtin_modules_known\": false");
    put(t, "}", 1);
}

size_t kms_format_sym(const kms_handle *h, const struct kms_sym *sym, int format, char *buf,
                      size_t len)
{
    struct kms_sym r = {0};
    struct text t = {buf, len, 0};
    if (!h || !sym)
        return done(&t);
    memcpy(&r, sym, caller_size(sym) < sizeof r ? caller_size(sym) : sizeof r);
    if (format == KMS_FORMAT_VERBOSE)
        put_verbose(&t, h, &r);
    else if (format == KMS_FORMAT_DTRACE)
        put_dtrace(&t, h, &r);
    else if (format == KMS_FORMAT_KERNEL)
        put_kernel(&t, h, &r);
    else if (format == KMS_FORMAT_JSON)
        put_record(&t, h, &r);
    return done(&t);
}
