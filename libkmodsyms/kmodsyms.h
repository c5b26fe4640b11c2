/* SPDX-License-Identifier: GPL-2.0-only OR UPL-1.0 */
/*
 * libkmodsyms: which built-in module every kernel symbol belongs to, for a
 * tracer's start-up (DTrace's dt_module.c), in C11 with libc only.
 *
 * kms_load() maps a dtrace_syms file (docs/format.md), reads kallsyms
 * (/proc/kallsyms or a saved copy), places the file's object sections by its
 * recorded link layout (one KASLR shift per load segment, found and checked
 * by the anchors), attributes every kallsyms line and builds an address
 * index, by the rules of docs/resolver.md.  It is the one resolver: the
 * Python package reaches it through its binding (kmodsyms.load()), and the
 * tests hold its answers to the linker maps.
 *
 * Ownership and lifetime.  Every string and array the library returns in
 * struct kms_sym, struct kms_line, struct kms_module and struct kms_info points into memory the
 * handle owns: the mapped dtrace_syms file (module names, object paths), the
 * handle's copy of the kallsyms names (symbol names, loaded module names) or
 * its own tables (module lists).  They stay valid and unchanged until
 * kms_free() of that handle; the caller never frees them.  (kms_error holds
 * its message itself.)  A caller's kallsyms buffer (kms_load_buffer) is read
 * during the call and not kept (its names are copied): the caller may free
 * it as soon as the call returns.  Names are NUL-terminated; a name
 * holding a NUL byte (damaged kallsyms only) reads short as a C string,
 * and sym_len / name_len give its whole length.
 *
 * Threads.  kms_load*() and kms_free() are reentrant: the library has no
 * global state.  A loaded handle is read-only: any number of threads may
 * call the query functions on one handle at the same time, without locking
 * (test_kms.c does, with four).  kms_free() must not run concurrently with
 * queries on the same handle.
 *
 * Loaded modules.  Each loaded module's kallsyms lines take the ELF size,
 * type and binding of their symbol in the module's own .ko (found through
 * modules.dep, else by search, under the modules directory), placed by
 * sysfs or by anchors and refused for that module alone when it is not the
 * loaded build (docs/resolver.md R43-R47).  A .ko, .ko.xz, .ko.zst or
 * .ko.gz is read, signed or not; the decompressors are the system's
 * liblzma.so.5, libzstd.so.1 and libz.so.1, loaded at run time (dlopen) only
 * when a module needs one: without it that module keeps unsized lines
 * (KMS_MODULE_UNSUPPORTED, its reason naming the library).
 *
 * Errors.  A function that can fail fills a caller's struct kms_error (if
 * not NULL) with a code and one line of text saying what is wrong, which
 * file, and what to do.  The library never prints, exits or aborts.
 */
#ifndef KMODSYMS_H
#define KMODSYMS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KMS_VERSION_MAJOR 3

/*
 * Growable output structs.  Every struct the library fills (kms_sym,
 * kms_line, kms_range, kms_module, kms_info, kms_ksym) starts with SIZE, as
 * perf_dlfilter.h's do: the caller sets it to sizeof the struct it was
 * compiled with, and the library fills only the fields that fit in it
 * (later versions add fields at the end), never writing SIZE itself; a
 * field beyond what the library knows keeps the caller's value.  For an
 * array (kms_resolve_many, kms_lookup, kms_lookup_name, kms_module_ranges,
 * kms_module_spans, kms_modules) the caller sets OUT[0].size, which is the
 * array's stride; the library sets every other element's SIZE to it.  A
 * SIZE smaller than a size_t fills nothing.  kms_line as kms_foreach()
 * hands it to a callback is the library's own, with SIZE its sizeof.
 */

/*
 * Sizes.  Every size the library gives (kms_sym.sym_size, kms_line.sym_size,
 * kms_ksym.sym_size) is a uint64_t, and an unknown size is 0: so that an
 * end (start + size) is never wrong by more than the size's absence.  Where
 * 0 can also be a real size (a symbol whose ELF st_size is 0), SIZE_KIND
 * beside it says which (KMS_SIZE_UNKNOWN, or KMS_SIZE_EXACT with 0); the
 * Python binding gives None for an unknown size (docs/resolver.md §11.1).
 */

/* How a size is known (kms_sym.size_kind, kms_line.size_kind). */
enum kms_size_kind {
    KMS_SIZE_UNKNOWN = 0, /* no size (0): the line has no ELF symbol and nothing bounds it */
    KMS_SIZE_EXACT,       /* st_size of the symbol in an ELF symbol table (vmlinux, its
                           * objects, a loaded module's .ko); 0 is an exact size */
    KMS_SIZE_ESTIMATED    /* the gap to the next kallsyms line of its module, bounded by
                           * its module's core or its region (docs/resolver.md R49) */
};

/* Error codes (kms_error.code). */
enum kms_code {
    KMS_OK = 0,
    KMS_E_NOMEM,        /* out of memory */
    KMS_E_IO,           /* a file cannot be opened or read */
    KMS_E_SYMS,         /* dtrace_syms is not a valid file: rebuild it */
    KMS_E_VERSION,      /* dtrace_syms of another format version: rebuild it */
    KMS_E_NO_LAYOUT,    /* dtrace_syms has no link layout: rebuild it with one */
    KMS_E_KALLSYMS,     /* kallsyms text is malformed or empty, or not text (compressed,
                         * ELF, binary: the message says which) */
    KMS_E_HIDDEN,       /* every kallsyms address is 0: the message says why, by the
                         * kernel's rule (kptr_restrict, perf_event_paranoid, CAP_SYSLOG) */
    KMS_E_STALE,        /* dtrace_syms is for another kernel (release, build-id, anchors) */
    KMS_E_ARG,          /* bad argument (NULL handle, malformed "mod`name") */
    KMS_E_NO_SYMS       /* no dtrace_syms file at the path (a host with none installed:
                         * a normal case; KMS_LOAD_FALLBACK answers from kallsyms alone) */
};

/* A static phrase for CODE (enum kms_code), never NULL: "unknown error" for
 * a code this version does not know.  kms_error.message says more. */
const char *kms_strerror(int code);

/*
 * What DATA, the first N bytes of an input (it reads at most 64), is when it
 * is not text: "gzip data", "xz data", "zstd data" or "bzip2 data" (then
 * *COMPRESSED, when not NULL, is set to 1), "an ELF file", or "binary data"
 * (a control byte that no text has); NULL (and *COMPRESSED 0) when it may be
 * text.  A static phrase.  kms_load*() name a kallsyms file that is not text
 * by it ("K: gzip data: decompress it first", KMS_E_KALLSYMS); a front end
 * can name its own inputs the same way (2.1).
 */
const char *kms_data_kind(const void *data, size_t n, int *compressed);

/*
 * Where a caller must act on the file's being another kernel's, a message
 * names the flag that overrides it, as the word KMS_FORCE_WORD (in an error:
 * "...; rebuild it or load with KMS_LOAD_FORCE"; in the warning a forced
 * load gives: "used anyway (KMS_LOAD_FORCE), ...").  The word appears in no
 * other way: a front end with its own option replaces it (kmodsyms' CLI and
 * Python binding: "--force").
 */
#define KMS_FORCE_WORD "KMS_LOAD_FORCE"
/* The same for the option naming where loaded modules' .ko files are: a
 * modules_dir that is no directory is refused (KMS_E_ARG) in a message
 * naming it by this word. */
#define KMS_MODULES_DIR_WORD "kms_load_opts.modules_dir"

typedef struct kms_error {
    int code;            /* enum kms_code */
    char message[400];   /* one line, no newline; "" when code is KMS_OK */
} kms_error;

/* kms_load() flags. */
#define KMS_LOAD_FORCE 0x1u /* use a file of another kernel anyway (CLI --force): see
                             * kms_load() */
#define KMS_LOAD_LIVE 0x2u  /* kms_load_buffer(): the text is the running kernel's
                             * /proc/kallsyms, so check release and build-id */
#define KMS_LOAD_NO_MODULES 0x4u /* read no .ko, sysfs or /proc/modules, even for the
                                  * running kernel: loaded modules' lines stay unsized */
#define KMS_LOAD_DEFER_MODULES 0x10u /* find each loaded module's file but read none
                                     * (KMS_MODULE_DEFERRED) until kms_read_modules()
                                     * asks: a start that decompresses nothing.  Since 2.0 */
#define KMS_LOAD_FALLBACK 0x8u /* the default dtrace_syms (syms_path NULL) missing, unreadable,
                                * corrupt, without a link layout or another kernel's: answer
                                * from kallsyms alone (kms_info.degraded says why) rather than
                                * fail.  Not passing it is the strict policy.  Since 2.0 */

typedef struct kms_handle kms_handle;

/*
 * Load SYMS_PATH (NULL: /lib/modules/$(uname -r)/kernel/dtrace_syms) and
 * KALLSYMS_PATH (NULL: /proc/kallsyms).  With the live /proc/kallsyms the
 * file's kernel release must equal uname -r and its build-id the running
 * kernel's (/sys/kernel/notes); for any kallsyms its anchors must sit at
 * their link addresses plus their segment's shift, and none of its function
 * anchors may be absent (docs/resolver.md R36, R37, R40).  Under
 * KMS_LOAD_FORCE the checks still run, and a mismatch is no KMS_E_STALE but
 * the handle's warning (kms_info.warning: "used anyway (KMS_LOAD_FORCE),
 * answers may be wrong: ..."), and absent function anchors no error but
 * that warning, in R37's words (R41).
 * Returns NULL on failure, with ERR filled.
 */
kms_handle *kms_load(const char *syms_path, const char *kallsyms_path, unsigned flags,
                     kms_error *err);

/*
 * The same with kallsyms text the caller has read (LEN bytes, need not be
 * NUL-terminated; read in place, not kept).  NAME names it in messages (NULL: "kallsyms").
 * Pass KMS_LOAD_LIVE when the text was read from the running kernel's
 * /proc/kallsyms.
 */
kms_handle *kms_load_buffer(const char *syms_path, const char *kallsyms_text, size_t len,
                            const char *name, unsigned flags, kms_error *err);

/*
 * Everything a load can be told (kmodsyms.load() of the Python API).  Zero
 * it, set SIZE to sizeof(struct kms_load_opts) (later versions add fields at
 * the end and read only what SIZE covers), and fill what is not a default.
 */
struct kms_load_opts {
    size_t size;                /* sizeof(struct kms_load_opts) */
    const char *syms_path;      /* NULL: /lib/modules/$(uname -r)/kernel/dtrace_syms */
    const char *kallsyms_path;  /* NULL: /proc/kallsyms (unless kallsyms_text) */
    const char *kallsyms_text;  /* non-NULL: kallsyms text the caller read, as kms_load_buffer() */
    size_t kallsyms_len;
    const char *kallsyms_name;  /* names kallsyms_text in messages (NULL: "kallsyms") */
    /*
     * Where loaded modules' files are, and what the kernel says of them.
     * With the live /proc/kallsyms (or KMS_LOAD_LIVE) each NULL means the
     * running kernel's: /lib/modules/$(uname -r), /sys, /proc/modules; with
     * any other kallsyms, NULL means not read (no .ko without modules_dir).
     */
    const char *modules_dir;    /* .ko files, through modules.dep or by search; one named
                                 * that is no directory: KMS_E_ARG */
    const char *sysfs_root;     /* module/NAME/sections/<section>, srcversion, notes, coresize */
    const char *proc_modules;   /* each module's core (address, size) */
    unsigned flags;             /* KMS_LOAD_* */
};

/* Load as OPTS says (NULL: every default).  NULL on failure, with ERR
 * filled.  kms_load() and kms_load_buffer() are this with their arguments. */
kms_handle *kms_load_opts(const struct kms_load_opts *opts, kms_error *err);

/* Release H and everything it owns (every string and array its queries
 * returned).  H NULL: nothing. */
void kms_free(kms_handle *h);

/* Where an answer's module comes from. */
enum kms_origin {
    KMS_ORIGIN_NONE = 0, /* unknown (no symbol and no object) */
    KMS_ORIGIN_CORE,     /* core kernel: module "vmlinux" */
    KMS_ORIGIN_BUILTIN,  /* an object of one or more built-in modules */
    KMS_ORIGIN_LOADABLE, /* a loaded module ([mod] in kallsyms) */
    KMS_ORIGIN_PSEUDO    /* [bpf], [__builtin__ftrace], ... */
};

/* A list of module names (kms_sym.candidates). */
struct kms_modlist {
    const char *const *modules;
    uint32_t nmodules;
};

#define KMS_BINDING_UNKNOWN 0xFF /* not STB_LOCAL (0), STB_GLOBAL (1), STB_WEAK (2) */

/*
 * One answer, modelled on perf's struct perf_dlfilter_al: an address
 * resolved (kms_resolve), or a symbol's own line (kms_lookup).  No record of
 * the library's shapes its layout: it grows at the end, as every struct with
 * SIZE first.
 */
struct kms_sym {
    size_t size;           /* sizeof(struct kms_sym) as the caller knows it (see above) */
    uint64_t address;      /* the address asked about (lookup: the symbol's address) */
    const char *sym;       /* symbol name, NULL when no symbol answers */
    uint32_t sym_len;      /* its length in bytes (a NUL can be in it only in damaged input) */
    uint32_t line;         /* the symbol's kallsyms line (kms_line_at()), UINT32_MAX: none */
    uint64_t symoff;       /* address - sym_start */
    uint64_t sym_start;    /* the symbol's address */
    uint64_t sym_end;      /* sym_start + sym_size (sym_start when the size is unknown) */
    uint64_t sym_size;     /* the symbol's size as size_kind says it is known; 0 unknown
                            * ("Sizes" above) */
    const char *dso;       /* first module: built-in, "vmlinux", loaded or pseudo; NULL unknown */
    const char *const *modules; /* every module, in module-map order */
    const char *object;    /* build-tree path of the object (fs/ext4/super.o), or NULL */
    const struct kms_modlist *candidates; /* when ambiguous: the module list of every
                            * candidate copy ("vmlinux" for core kernel) */
    uint32_t nmodules;     /* number of modules[] (0 when dso is NULL) */
    uint32_t ncandidates;  /* number of candidates[] */
    uint8_t sym_binding;   /* STB_LOCAL/GLOBAL/WEAK, KMS_BINDING_UNKNOWN */
    char type;             /* kallsyms type letter ('t', 'T', 'W', 'A', ...), 0 without symbol */
    uint8_t sized;         /* 1 when the size is exact and [sym_start, sym_end) holds address */
    uint8_t ambiguous;     /* 1 when the symbol's object cannot be known: its name is only
                            * on copies in sections the build could not place */
    uint8_t origin;        /* enum kms_origin */
    uint8_t size_kind;     /* enum kms_size_kind of sym_size (UNKNOWN without symbol) */
    uint8_t reserved[2];   /* 0 */
};

/* Answer ADDR (docs/resolver.md section 4).  Never fails on a loaded handle. */
void kms_resolve(const kms_handle *h, uint64_t addr, struct kms_sym *out);

/*
 * Answer ADDRS[0..N): OUT[i] is what kms_resolve(h, ADDRS[i], &OUT[i]) gives,
 * for addresses in any order, repeated or not (N may be 0; OUT must not
 * overlap ADDRS).  Faster than one call per address when there are many:
 * the lookups of a batch of addresses wait for memory together rather than
 * one after the other.  Never fails on a loaded handle; threads as
 * kms_resolve.  Since libkmodsyms 1.1.
 */
void kms_resolve_many(const kms_handle *h, const uint64_t *addrs, size_t n, struct kms_sym *out);

/*
 * The columnar form of kms_resolve_many: LINE[i] is the index, in kallsyms
 * order (kms_foreach's), of the line answering ADDRS[i] (UINT32_MAX when
 * none does), SIZED[i] its kms_sym.sized.  For callers that keep columns
 * (the Python binding's resolve_many).  Never fails on a loaded handle.
 */
void kms_resolve_lines(const kms_handle *h, const uint64_t *addrs, size_t n, uint32_t *line,
                       uint8_t *sized);

/*
 * The record of ADDR answered by kallsyms line INDEX (< kms_info.lines; a
 * kms_resolve_lines answer), as kms_resolve fills it, sized when the
 * line's symbol holds ADDR.
 */
void kms_line_sym(const kms_handle *h, uint32_t index, uint64_t addr, struct kms_sym *out);

/* A batch for kms_resolve_many whose records (448 KiB on LP64) stay in the
 * cache until the caller reads them: one call over a much larger array
 * spends its time writing records out to memory (docs/loader.md). */
#define KMS_RESOLVE_BATCH 4096

/*
 * Every kallsyms line called NAME whose module list contains MOD, for SPEC
 * "MOD`NAME" ("-" in MOD reads as "_"; "vmlinux" is the core kernel only), or
 * every line called NAME for a bare "NAME", in kallsyms order.  Fills up to
 * MAX records and returns how many there are (more than MAX: call again with
 * room for them); 0 when none.  DTrace's "MOD`NAME+0xOFF" (a last '+' and a
 * hex number, 0x optional) asks for the address OFF bytes into each: the
 * record's address is sym_start + OFF, symoff OFF, sized when the exact
 * size holds it (the rest of the record is the symbol's).
 */
size_t kms_lookup(const kms_handle *h, const char *spec, struct kms_sym *out, size_t max);

/*
 * The same with the module and the name apart: MOD NULL for any module,
 * NAME exactly (no "+OFF" read in it), OFFSET as "+0xOFF".  Since 2.0.
 */
size_t kms_lookup_name(const kms_handle *h, const char *mod, const char *name, uint64_t offset,
                       struct kms_sym *out, size_t max);

/* Whether MOD ("-" read as "_") is vmlinux, a built-in module of the file,
 * or a loaded or pseudo-module of kallsyms. */
int kms_module_known(const kms_handle *h, const char *mod);

/* One kallsyms line with its attribution (what dt_modsym_update() consumes). */
struct kms_line {
    size_t size;           /* sizeof(struct kms_line) as the caller knows it */
    uint64_t address;
    uint64_t sym_size;     /* exact or estimated (size_kind), 0 unknown ("Sizes" above) */
    char type;             /* kallsyms type letter */
    const char *name;
    uint32_t name_len;     /* its length in bytes */
    uint32_t nmodules;     /* 0 for core kernel */
    const char *const *modules; /* built-in module(s), or the loaded/pseudo-module */
    uint8_t origin;        /* enum kms_origin */
    uint8_t sym_binding;
    const char *object;    /* NULL for lines of no object; a loaded module's .ko (its path
                            * under the modules directory) when its line is from it */
    uint32_t index;        /* its index in kallsyms order (kms_line_at()) */
    uint8_t size_kind;     /* enum kms_size_kind of sym_size */
};

/*
 * Call CB for every kallsyms line, in kallsyms order; stop early when CB
 * returns nonzero and return that value, else return 0.
 */
int kms_foreach(const kms_handle *h, int (*cb)(const struct kms_line *line, void *arg),
                void *arg);

/* Kallsyms line INDEX (kms_sym.line, kms_line.index) into OUT: KMS_OK, or
 * KMS_E_ARG when there is no such line.  Since 2.0. */
int kms_line_at(const kms_handle *h, uint32_t index, struct kms_line *out);

/*
 * Module MOD's symbol list ("-" read as "_"): the index of every kallsyms
 * line whose module list (as kms_foreach() gives it) holds MOD, "vmlinux"
 * the core kernel's, in kallsyms order.  Fills up to MAX and returns how
 * many there are.  Since 2.0.
 */
size_t kms_module_lines(const kms_handle *h, const char *mod, uint32_t *index, size_t max);

/* The built-in modules the dtrace_syms file knows, in its order (names live
 * until kms_free()): fills up to MAX and returns how many there are.  Since 2.0. */
size_t kms_builtin_modules(const kms_handle *h, const char **out, size_t max);

/* An address range of a module. */
struct kms_range {
    size_t size;           /* sizeof(struct kms_range) as the caller knows it */
    uint64_t start, end;   /* [start, end) */
    uint8_t text;          /* 1: code (an SHF_EXECINSTR section, or one holding t/T lines;
                            * a loaded module's t/T lines), 0: data */
};

/*
 * The address ranges of module MOD ("vmlinux", a built-in module, or a
 * loaded or pseudo-module), ascending: for vmlinux and built-in modules the
 * placed object sections of its objects (per-cpu sections, whose symbols
 * are offsets, left out), one range for two of one kind with no other
 * section between them and a gap below the second's alignment (ld's
 * padding); for a loaded module [lowest, highest end) of its t/T lines and
 * of its other lines, a line ending at address + its exact or estimated
 * size, or address + 1 (none).  Fills up to MAX and returns how many there
 * are; 0 for an unknown module.
 */
size_t kms_module_ranges(const kms_handle *h, const char *mod, struct kms_range *out,
                         size_t max);

/*
 * Module MOD's ranges as DTrace's dt_module.c builds them from kallmodsyms:
 * for vmlinux and built-in modules each run of its lines among the core
 * kernel's lines by address (text: t/T/w/W lines; a run ends at its last
 * line's address + exact or estimated size); for a loaded or pseudo-module
 * one text span and one data span, as kms_module_ranges() with w/W as
 * text.  Per-cpu lines ('A') are in none.  Ascending; fills up to MAX and
 * returns how many there are.  Since 2.0.
 */
size_t kms_module_spans(const kms_handle *h, const char *mod, struct kms_range *out,
                        size_t max);

/* How a loaded module's lines were answered (docs/resolver.md R46). */
enum kms_module_status {
    KMS_MODULE_MATCHED = 0,  /* its .ko is the loaded module: its lines have ELF sizes */
    KMS_MODULE_MISSING,      /* no file found (or no modules directory): unsized */
    KMS_MODULE_REFUSED,      /* the file is not the loaded module, or cannot be read: unsized */
    KMS_MODULE_UNSUPPORTED,  /* compressed (.ko.xz, .ko.zst, .ko.gz), and the library that
                              * decompresses it cannot be loaded: unsized */
    KMS_MODULE_DEFERRED      /* KMS_LOAD_DEFER_MODULES: found, not read yet
                              * (kms_read_modules()): unsized.  Since 2.0 */
};

/* One loaded module (not the pseudo-modules), as 'kmodsyms modules' lists it. */
struct kms_module {
    size_t size;           /* sizeof(struct kms_module) as the caller knows it */
    const char *name;      /* as kallsyms spells it */
    const char *file;      /* the file found, relative to the modules directory (as in
                            * modules.dep), or NULL */
    uint8_t status;        /* enum kms_module_status */
    size_t lines;          /* its kallsyms lines */
    size_t sized;          /* how many got a nonzero ELF size from the file */
    const char *reason;    /* REFUSED, UNSUPPORTED: why, one line; else NULL */
    const char *warning;   /* REFUSED, UNSUPPORTED: the one-line warning to show a user
                            * ("module NAME: ...; its symbols stay unsized"); else NULL */
};

/*
 * The loaded modules, in kallsyms order: fills up to MAX and returns how
 * many there are.  Strings live until kms_free().
 */
size_t kms_modules(const kms_handle *h, struct kms_module *out, size_t max);

/* Longest kms_ksym.text: a KSYM_NAME_LEN name, two 64-bit hex numbers, a module name. */
#define KMS_KSYM_TEXT 640

/* An address as the kernel's %pS prints it (kms_resolve_kernel()). */
struct kms_ksym {
    size_t size;           /* sizeof(struct kms_ksym) as the caller knows it */
    uint64_t address;      /* the address asked about */
    const char *sym;       /* the symbol %pS names, NULL for none (%pS prints the address) */
    uint32_t sym_len;      /* its length in bytes */
    uint32_t line;         /* its kallsyms line, UINT32_MAX: none */
    uint64_t sym_start;    /* its address */
    uint64_t offset;       /* address - sym_start */
    uint64_t sym_size;     /* the kernel's size: the gap to the next kallsyms address, or
                            * to the end of the kernel's text or module memory; 0
                            * unknown ("Sizes" above): no end above the address is known
                            * (a module's last line and no /proc/modules, a
                            * pseudo-module's), and TEXT prints the size as '?' */
    const char *module;    /* " [module]" of %pS: a loaded module, bpf or __builtin__ftrace;
                            * NULL for the core kernel (built-in modules included, as the
                            * kernel prints) */
    uint8_t exact;         /* 1: sym_size is the kernel's; 0: the end is a bound only
                            * approximated (a module's core, a pseudo-module's last line) */
    char text[KMS_KSYM_TEXT]; /* "name+0xoff/0xsize [module]" ("name+0xoff/? [module]" when
                               * the size is not known), or "0xaddress" */
};

/*
 * ADDR as kernel/kallsyms.c's %pS prints it (sprint_symbol()): the symbol
 * kallsyms_lookup_size_offset() finds, with its offset and size and, for a
 * loaded or pseudo-module, " [module]" (docs/resolver.md R53-R55).  Returns 1 when
 * a symbol answers, 0 when %pS prints the bare address (OUT->text holds
 * it).  Never fails on a loaded handle.
 */
int kms_resolve_kernel(const kms_handle *h, uint64_t addr, struct kms_ksym *out);

/*
 * Text (3.0): what kmodsyms prints, formatted once for every front end
 * (kmodsyms' CLI through its binding, kmodsyms-c, a tracer).  Each writes
 * its text, without a newline, into BUF: at most LEN bytes, the last a NUL
 * (nothing when LEN is 0).  Each returns the whole text's length, NUL not
 * counted, as snprintf does: LEN or more means it was cut, and a BUF of the
 * return plus 1 holds it.  They never fail.  Names are bytes: the text
 * formats write them as they are, as the kernel's tools print them; JSON
 * escapes them as kms_format_json_string() does.
 */

/* kms_format_sym()'s formats.  A module not known prints as '?': a record
 * of no module, or of a load from kallsyms alone (kms_info.
 * builtin_modules_known 0) outside loaded and pseudo-modules. */
enum kms_format {
    KMS_FORMAT_VERBOSE = 0, /* "0xADDR mod`sym+0xoff (0xSIZE bytes, object)": "unsized" for no
                             * exact size holding it, then the object, then "ambiguous: a |
                             * b,c" (the candidates' modules); no symbol: "0xADDR mod`?
                             * (object)" or "0xADDR ?" */
    KMS_FORMAT_DTRACE,      /* "mod`sym+0xoff" as DTrace's stack() prints a frame (no "+0x0");
                             * no symbol: "mod`0xADDR", or "0xADDR" in no module */
    KMS_FORMAT_KERNEL,      /* the kernel's %pS, kms_resolve_kernel() of the address, naming a
                             * built-in module as %pS names a loaded one: "init_once+0x10/0x30
                             * [ext4]"; the core kernel bare, "[?]" for a module not known */
    KMS_FORMAT_JSON         /* one JSON object, the record's fields: "address", "module",
                             * "modules", "origin", "symbol", "offset", "start", "size",
                             * "size_kind", "sized", "type", "binding", "object",
                             * "ambiguous", then "candidates" when ambiguous and
                             * "builtin_modules_known": false from kallsyms alone */
};

/* SYM, a record H answered (kms_resolve(), kms_lookup(), ...), in FORMAT
 * (enum kms_format); an unknown FORMAT or a NULL H or SYM: "". */
size_t kms_format_sym(const kms_handle *h, const struct kms_sym *sym, int format, char *buf,
                      size_t len);

/* LINE as /proc/kallmodsyms printed it: "%016llx %llx %c NAME", the size
 * exact or estimated (0 unknown), then a tab and "[mod]" for each module
 * (space-separated), none for the core kernel. */
size_t kms_format_line(const struct kms_line *line, char *buf, size_t len);

/* S (N bytes) as a JSON string, quotes included: printable ASCII as it is,
 * '"', '\\' and control characters escaped, everything else as \uXXXX of
 * its UTF-8 code point, and a byte that is not UTF-8 as \udcXX (XX the byte,
 * as Python's surrogateescape reads it back): ASCII whatever the bytes. */
size_t kms_format_json_string(const char *s, size_t n, char *buf, size_t len);

/*
 * What kms_refresh() found: modules loaded, unloaded and reloaded (the same
 * name with other lines or addresses), pseudo-modules included, in kallsyms
 * order.  Set SIZE to sizeof(struct kms_changes); the library fills what
 * SIZE covers.  The names stay valid until the next kms_refresh() or
 * kms_free() of the handle.  Since 2.0.
 */
struct kms_changes {
    size_t size;
    size_t nloaded;
    const char *const *loaded;
    size_t nunloaded;
    const char *const *unloaded;
    size_t nreloaded;
    const char *const *reloaded;
};

/*
 * Follow modules loaded or unloaded since H was loaded (docs/resolver.md R47;
 * the Python API's Resolver.refresh()):
 * when the /proc/modules it read (the proc_modules source) is unchanged, use
 * counts aside, nothing else is read and OUT says no change; otherwise H is
 * loaded again from the same sources (kallsyms, dtrace_syms, the modules
 * directory, sysfs) with the same flags, and OUT lists what changed.  On
 * failure H is unchanged and the code is returned (KMS_E_ARG for a handle
 * loaded from a caller's kallsyms text, which cannot be read again).  Not
 * concurrent with queries on H: its answers and strings change.  Since 2.0.
 */
int kms_refresh(kms_handle *h, struct kms_changes *out, kms_error *err);

/*
 * Read the .ko of the loaded modules MODS[0..N) (N 0: every deferred one)
 * of a handle loaded with KMS_LOAD_DEFER_MODULES: they become MATCHED (or
 * REFUSED, UNSUPPORTED) and their lines sized; modules read before stay
 * read.  H is loaded again from its sources (as kms_refresh(): the cost of
 * one load plus those files; kallsyms read again, so a module loaded or
 * unloaded meanwhile is followed too).  On failure H is unchanged.  Not
 * concurrent with queries on H.  Names already read, or not loaded, are
 * no error.  Since 2.0.
 */
int kms_read_modules(kms_handle *h, const char *const *mods, size_t n, kms_error *err);

/* The dtrace_syms header's flags (kms_info.file_flags; docs/format.md, the
 * header's flags field). */
#define KMS_FILE_MISSING_OBJECTS 0x1u /* some objects were missing when it was built
                                       * (kmodsyms build --allow-missing) */
#define KMS_FILE_FROM_DEBUG_INFO 0x2u /* built from a debug vmlinux (--debuginfo) */
#define KMS_FILE_GUESSED_MODULES 0x4u /* its module map is a guess (--guess-modules),
                                       * not kbuild's */
#define KMS_FILE_FORCED 0x8u          /* written with --force past a failed check of the
                                       * build (kms_info.warning says which).  Since 2.2 */

/* About the loaded files. */
struct kms_info {
    size_t size;                /* sizeof(struct kms_info) as the caller knows it */
    const char *kernel_release; /* recorded in dtrace_syms, or "" */
    const char *build_id;       /* vmlinux build-id (hex), or "" */
    size_t lines;               /* kallsyms lines kept */
    size_t core_lines;
    uint32_t segments;          /* load segments of the layout */
    uint32_t anchors;           /* anchors in the file */
    uint32_t anchors_verified;  /* found at link address + shift */
    /* since 2.0: the load policy's outcome */
    uint8_t builtin_modules_known; /* 0: answered from kallsyms alone (degraded) */
    const char *degraded;       /* "" or why (the dtrace_syms file's fault, one line) */
    const char *warning;        /* "" or the one line a front end shows once: the degraded
                                 * reason, or what KMS_LOAD_FORCE overrode */
    uint32_t file_flags;        /* the dtrace_syms header's flags, KMS_FILE_* (0 when
                                 * degraded).  Since 2.0 */
};

/* What H was loaded from and how (struct kms_info) into OUT, as much as
 * OUT->size covers.  Never fails on a loaded handle. */
void kms_get_info(const kms_handle *h, struct kms_info *out);

#ifdef __cplusplus
}
#endif

#endif /* KMODSYMS_H */
