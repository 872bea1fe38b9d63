/* A strict safetensors reader (see safetensors_read.h). */
#define _POSIX_C_SOURCE 200809L
#include "safetensors_read.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* A header over this is refused (the safetensors package caps it at 100 MB too). */
#define MAX_HEADER (100u << 20)

typedef struct cursor {
    const char *s;
    size_t n, i;
    char *err;
} cursor;

static int fail(cursor *c, const char *fmt, ...)
{
    char why[STR_ERR_LEN - 40];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    snprintf(c->err, STR_ERR_LEN, "header byte %zu: %s", c->i, why);
    return -1;
}

static void skip_ws(cursor *c)
{
    while (c->i < c->n && (c->s[c->i] == ' ' || c->s[c->i] == '\n' || c->s[c->i] == '\r' ||
                           c->s[c->i] == '\t'))
        c->i++;
}

static int expect(cursor *c, char ch)
{
    skip_ws(c);
    if (c->i >= c->n || c->s[c->i] != ch) return fail(c, "expected '%c'", ch);
    c->i++;
    return 0;
}

static int peek(cursor *c, char ch)
{
    skip_ws(c);
    return c->i < c->n && c->s[c->i] == ch;
}

/* A JSON string of printable ASCII with the simple escapes; *out is malloc'ed. */
static int string(cursor *c, char **out)
{
    if (expect(c, '"')) return -1;
    size_t cap = 32, len = 0;
    char *b = malloc(cap);
    if (!b) return fail(c, "out of memory");
    for (;;) {
        if (c->i >= c->n) {
            free(b);
            return fail(c, "unterminated string");
        }
        char ch = c->s[c->i++];
        if (ch == '"') break;
        if ((unsigned char)ch < 0x20 || (unsigned char)ch > 0x7e) {
            free(b);
            return fail(c, "byte 0x%02x in a string (printable ASCII only)", (unsigned char)ch);
        }
        if (ch == '\\') {
            char e = c->i < c->n ? c->s[c->i++] : 0;
            ch = e == '"' ? '"' : e == '\\' ? '\\' : e == '/' ? '/' : e == 'n' ? '\n' : e == 't' ? '\t' : 0;
            if (!ch) {
                free(b);
                return fail(c, "unsupported escape in a string");
            }
        }
        if (len + 1 >= cap) {
            char *nb = realloc(b, cap *= 2);
            if (!nb) {
                free(b);
                return fail(c, "out of memory");
            }
            b = nb;
        }
        b[len++] = ch;
    }
    b[len] = 0;
    *out = b;
    return 0;
}

/* A decimal integer 0 .. 2^62 (no sign, fraction, exponent or leading zero). */
static int integer(cursor *c, int64_t *v)
{
    skip_ws(c);
    const uint64_t max = UINT64_C(1) << 62;
    uint64_t x = 0;
    size_t start = c->i;
    while (c->i < c->n && c->s[c->i] >= '0' && c->s[c->i] <= '9') {
        unsigned d = (unsigned)(c->s[c->i++] - '0');
        if (x > (max - d) / 10) return fail(c, "integer over 2^62");
        x = x * 10 + d;
    }
    if (c->i == start) return fail(c, "expected a non-negative integer");
    if (c->i - start > 1 && c->s[start] == '0') return fail(c, "leading zero in an integer");
    *v = (int64_t)x;
    return 0;
}

/* [int, int, ...]: at most `max` of them. */
static int int_array(cursor *c, int64_t *v, int max, int *count)
{
    if (expect(c, '[')) return -1;
    *count = 0;
    if (peek(c, ']')) return c->i++, 0;
    for (;;) {
        if (*count == max) return fail(c, "more than %d numbers", max);
        if (integer(c, &v[(*count)++])) return -1;
        if (peek(c, ',')) {
            c->i++;
            continue;
        }
        return expect(c, ']');
    }
}

static size_t itemsize_of(const char *d)
{
    static const struct { const char *n; size_t s; } t[] = {
        {"BOOL", 1}, {"U8", 1}, {"I8", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"I16", 2}, {"U16", 2},
        {"F16", 2},  {"BF16", 2}, {"I32", 4}, {"U32", 4}, {"F32", 4}, {"I64", 8}, {"U64", 8}, {"F64", 8}};
    for (size_t k = 0; k < sizeof t / sizeof t[0]; k++)
        if (!strcmp(d, t[k].n)) return t[k].s;
    return 0;
}

static int tensor(cursor *c, str_tensor *t, const uint8_t *data, uint64_t data_len)
{
    int have_d = 0, have_s = 0, have_o = 0;
    int64_t off[2] = {0, 0};
    if (expect(c, '{')) return -1;
    for (;;) {
        char *key = NULL;
        if (string(c, &key) || expect(c, ':')) {
            free(key);
            return -1;
        }
        int r = 0;
        if (!strcmp(key, "dtype") && !have_d) {
            char *d = NULL;
            r = string(c, &d);
            if (!r && (strlen(d) >= sizeof t->dtype || !(t->itemsize = itemsize_of(d))))
                r = fail(c, "tensor %s: unknown dtype \"%.20s\"", t->name, d);
            if (!r) strcpy(t->dtype, d);
            free(d);
            have_d = 1;
        } else if (!strcmp(key, "shape") && !have_s) {
            r = int_array(c, t->shape, STR_MAX_DIMS, &t->ndim);
            have_s = 1;
        } else if (!strcmp(key, "data_offsets") && !have_o) {
            int n = 0;
            r = int_array(c, off, 2, &n);
            if (!r && n != 2) r = fail(c, "tensor %s: data_offsets needs 2 numbers", t->name);
            have_o = 1;
        } else {
            r = fail(c, "tensor %s: unexpected or repeated key \"%.40s\"", t->name, key);
        }
        free(key);
        if (r) return -1;
        if (peek(c, ',')) {
            c->i++;
            continue;
        }
        if (expect(c, '}')) return -1;
        break;
    }
    if (!have_d || !have_s || !have_o) return fail(c, "tensor %s: needs dtype, shape and data_offsets", t->name);
    uint64_t count = 1;
    for (int k = 0; k < t->ndim; k++)
        if (t->shape[k] && count > UINT64_MAX / 16 / (uint64_t)t->shape[k])
            return fail(c, "tensor %s: shape overflows", t->name);
        else
            count *= (uint64_t)t->shape[k];
    t->count = (int64_t)count;
    t->nbytes = count * t->itemsize;
    if (off[0] > off[1] || (uint64_t)off[1] > data_len || (uint64_t)(off[1] - off[0]) != t->nbytes)
        return fail(c, "tensor %s: data_offsets [%" PRId64 ", %" PRId64 "] do not hold %" PRIu64
                    " bytes inside the %" PRIu64 "-byte data section", t->name, off[0], off[1], t->nbytes, data_len);
    t->data = data + off[0];
    t->offset = (uint64_t)off[0];
    return 0;
}

static int metadata(cursor *c, str_file *f)
{
    if (expect(c, '{')) return -1;
    if (peek(c, '}')) return c->i++, 0;
    for (;;) {
        char *k = NULL, *v = NULL;
        if (string(c, &k) || expect(c, ':') || string(c, &v)) {
            free(k), free(v);
            return -1;
        }
        char **m = realloc(f->meta, (f->nmeta + 2) * sizeof *m);
        if (!m) {
            free(k), free(v);
            return fail(c, "out of memory");
        }
        f->meta = m;
        m[f->nmeta++] = k, m[f->nmeta++] = v;
        if (peek(c, ',')) {
            c->i++;
            continue;
        }
        return expect(c, '}');
    }
}

static int by_name(const void *a, const void *b)
{
    return strcmp((*(const str_tensor *const *)a)->name, (*(const str_tensor *const *)b)->name);
}

/* By begin, then end; equal ranges (empty tensors) by position, so the order is total. */
static int by_offset(const void *a, const void *b)
{
    const str_tensor *x = *(const str_tensor *const *)a, *y = *(const str_tensor *const *)b;
    uint64_t xe = x->offset + x->nbytes, ye = y->offset + y->nbytes;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    if (xe != ye) return xe < ye ? -1 : 1;
    return (x > y) - (x < y);
}

static int by_key(const void *a, const void *b)
{
    return strcmp(**(char *const *const *)a, **(char *const *const *)b);
}

/* Pointers to n elements of `size` bytes from `base`, sorted by `cmp`; NULL (with err) when out
 * of memory. qsort is n log n at worst (unlike a hash set, which crafted names can flood). */
static const void **sorted(const void *base, size_t n, size_t size, int (*cmp)(const void *, const void *),
                           char *err)
{
    const void **ix = n <= SIZE_MAX / sizeof *ix ? malloc((n ? n : 1) * sizeof *ix) : NULL;
    if (!ix) {
        snprintf(err, STR_ERR_LEN, "out of memory for an index of %zu entries", n);
        return NULL;
    }
    for (size_t k = 0; k < n; k++) ix[k] = (const char *)base + k * size;
    qsort(ix, n, sizeof *ix, cmp);
    return ix;
}

/* The name index (str_find); a name given twice is refused (neighbours once sorted). */
static int index_names(str_file *f, char *err)
{
    const void **ix = sorted(f->tensors, f->n, sizeof *f->tensors, by_name, err);
    if (!ix) return -1;
    f->by_name = (const str_tensor **)ix;
    for (size_t k = 1; k < f->n; k++)
        if (!strcmp(f->by_name[k]->name, f->by_name[k - 1]->name)) {
            snprintf(err, STR_ERR_LEN, "tensor %.400s given twice", f->by_name[k]->name);
            return -1;
        }
    return 0;
}

static int check_meta(const str_file *f, char *err)
{
    size_t n = f->nmeta / 2;
    const void **ix = sorted(f->meta, n, 2 * sizeof *f->meta, by_key, err);
    if (!ix) return -1;
    int r = 0;
    for (size_t k = 1; k < n && !r; k++)
        if (!strcmp(*(char *const *)ix[k], *(char *const *)ix[k - 1]))
            r = -1, snprintf(err, STR_ERR_LEN, "__metadata__ key %.400s given twice", *(char *const *)ix[k]);
    free(ix);
    return r;
}

/* In order of their offsets, the tensors' bytes cover the data section exactly: each begins
 * where the one before ends, the last ends at the file's end. */
static int check_tiling(const str_file *f, uint64_t data_len, char *err)
{
    const void **ix = sorted(f->tensors, f->n, sizeof *f->tensors, by_offset, err);
    if (!ix) return -1;
    uint64_t at = 0;
    int r = 0;
    for (size_t k = 0; k < f->n && !r; k++) {
        const str_tensor *t = ix[k];
        if (t->offset != at)
            r = -1, snprintf(err, STR_ERR_LEN, "tensor %.300s: data_offsets [%" PRIu64 ", %" PRIu64 "] %s %" PRIu64
                             " (the tensors' bytes must tile the data section)", t->name, t->offset,
                             t->offset + t->nbytes,
                             t->offset < at ? "overlap the tensor before, which ends at" : "leave a hole from", at);
        at = t->offset + t->nbytes;
    }
    if (!r && at != data_len)
        r = -1, snprintf(err, STR_ERR_LEN, "the tensors' bytes end at %" PRIu64 " of a %" PRIu64
                         "-byte data section (bytes after the last tensor)", at, data_len);
    free(ix);
    return r;
}

int str_parse_header(const char *json, size_t len, const uint8_t *data, uint64_t data_len,
                     str_file *f, char *err)
{
    cursor c = {json, len, 0, err};
    size_t cap = 0;
    int seen_meta = 0;
    if (expect(&c, '{')) goto bad;
    if (peek(&c, '}')) {
        c.i++;
    } else {
        for (;;) {
            char *name = NULL;
            if (string(&c, &name) || expect(&c, ':')) {
                free(name);
                goto bad;
            }
            if (!strcmp(name, "__metadata__")) {
                free(name);
                if (seen_meta++) {
                    fail(&c, "__metadata__ given twice");
                    goto bad;
                }
                if (metadata(&c, f)) goto bad;
            } else {
                if (f->n == cap) {
                    str_tensor *t = realloc(f->tensors, (cap = cap ? 2 * cap : 64) * sizeof *t);
                    if (!t) {
                        free(name);
                        fail(&c, "out of memory");
                        goto bad;
                    }
                    f->tensors = t;
                }
                str_tensor *t = &f->tensors[f->n++];
                memset(t, 0, sizeof *t);
                t->name = name;
                if (tensor(&c, t, data, data_len)) goto bad;
            }
            if (peek(&c, ',')) {
                c.i++;
                continue;
            }
            if (expect(&c, '}')) goto bad;
            break;
        }
    }
    skip_ws(&c);
    if (c.i != len) {
        fail(&c, "text after the header object");
        goto bad;
    }
    if (index_names(f, err) || check_meta(f, err) || check_tiling(f, data_len, err)) goto bad;
    return 0;
bad:
    str_close(f);
    return -1;
}

int str_open(const char *path, str_file *f, char *err)
{
    memset(f, 0, sizeof *f);
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        snprintf(err, STR_ERR_LEN, "cannot open: %s", strerror(errno));
        return -1;
    }
    struct stat sb;
    if (fstat(fd, &sb) || !S_ISREG(sb.st_mode) || sb.st_size < 8) {
        snprintf(err, STR_ERR_LEN, "not a safetensors file (a regular file of at least 8 bytes)");
        close(fd);
        return -1;
    }
    size_t size = (size_t)sb.st_size;
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) {
        snprintf(err, STR_ERR_LEN, "cannot map: %s", strerror(errno));
        return -1;
    }
    const uint8_t *b = map;
    uint64_t hlen = 0;
    for (int k = 7; k >= 0; k--) hlen = hlen << 8 | b[k];
    if (hlen > MAX_HEADER || hlen > size - 8) {
        snprintf(err, STR_ERR_LEN, "header length %" PRIu64 " does not fit the %zu-byte file", hlen, size);
        munmap(map, size);
        return -1;
    }
    char why[STR_ERR_LEN];
    if (str_parse_header((const char *)b + 8, (size_t)hlen, b + 8 + hlen, size - 8 - hlen, f, why)) {
        snprintf(err, STR_ERR_LEN, "%s", why);
        munmap(map, size);
        return -1;
    }
    f->map = map;
    f->size = size;
    return 0;
}

const str_tensor *str_find(const str_file *f, const char *name)
{
    size_t lo = 0, hi = f->by_name ? f->n : 0;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const str_tensor *t = f->by_name[mid];
        int c = strcmp(t->name, name);
        if (!c) return t;
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

const char *str_meta(const str_file *f, const char *key)
{
    for (size_t k = 0; k + 1 < f->nmeta; k += 2)
        if (!strcmp(f->meta[k], key)) return f->meta[k + 1];
    return NULL;
}

void str_close(str_file *f)
{
    for (size_t k = 0; k < f->n; k++) free(f->tensors[k].name);
    for (size_t k = 0; k < f->nmeta; k++) free(f->meta[k]);
    free(f->tensors);
    free(f->meta);
    free((void *)f->by_name);
    if (f->map) munmap(f->map, f->size);
    memset(f, 0, sizeof *f);
}
