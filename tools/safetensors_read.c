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

static int integer(cursor *c, int64_t *v)
{
    skip_ws(c);
    uint64_t x = 0;
    size_t start = c->i;
    while (c->i < c->n && c->s[c->i] >= '0' && c->s[c->i] <= '9') {
        unsigned d = (unsigned)(c->s[c->i++] - '0');
        if (x > (UINT64_C(1) << 62) / 10) return fail(c, "integer too large");
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
                if (str_find(f, name)) {
                    fail(&c, "tensor %s given twice", name);
                    free(name);
                    goto bad;
                }
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
    for (size_t k = 0; k < f->n; k++)
        if (!strcmp(f->tensors[k].name, name)) return &f->tensors[k];
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
    if (f->map) munmap(f->map, f->size);
    memset(f, 0, sizeof *f);
}
