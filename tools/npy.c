/*
 * .npy reader and writer. The format: "\x93NUMPY", major, minor, a little-endian header length
 * (2 bytes in 1.0, 4 in 2.0/3.0), then a Python dict literal with exactly the keys 'descr',
 * 'fortran_order' and 'shape', padded with spaces and a newline, then the raw data.
 * The reader trusts nothing: every size is overflow-checked and the data length must be exact.
 */
#define _POSIX_C_SOURCE 200809L
#include "npy.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static int
fail(char *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, NPY_ERR_LEN, fmt, ap);
    va_end(ap);
    return -1;
}

static const struct {
    const char *code;
    npy_dtype dtype;
    size_t size;
} dtypes[] = {
    {"i1", NPY_INT8, 1},   {"u1", NPY_UINT8, 1},   {"i4", NPY_INT32, 4},   {"i8", NPY_INT64, 8},
    {"u8", NPY_UINT64, 8}, {"f4", NPY_FLOAT32, 4}, {"f2", NPY_FLOAT16, 2}, {"u2", NPY_UINT16, 2},
};
enum { NDTYPES = sizeof dtypes / sizeof dtypes[0] };

size_t npy_itemsize(npy_dtype dtype) { return dtypes[dtype].size; }

const char *npy_descr(npy_dtype dtype)
{
    static const char *descr[] = {"|i1", "|u1", "<i4", "<i8", "<u8", "<f4", "<f2", "<u2"};
    return descr[dtype];
}

static int host_is_little_endian(void)
{
    uint16_t one = 1;
    uint8_t first;
    memcpy(&first, &one, 1);
    return first == 1;
}

/* ------------------------------------------------------------------ header ------------------- */

int npy_header_size(const void *buf, size_t len, size_t *header_size, char *err)
{
    const uint8_t *b = buf;
    if (len < 8 || memcmp(b, "\x93NUMPY", 6) != 0)
        return fail(err, "not a .npy file (no \\x93NUMPY magic)");
    if (b[6] < 1 || b[6] > 3 || b[7] != 0)
        return fail(err, "unsupported .npy format version %u.%u (1.0, 2.0 and 3.0 are)", b[6],
                    b[7]);
    size_t prefix = b[6] == 1 ? 10 : 12;
    if (len < prefix) return fail(err, "truncated header: %zu bytes", len);
    size_t hlen =
        b[6] == 1 ? (size_t)b[8] | (size_t)b[9] << 8
                  : (size_t)b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 | (size_t)b[11] << 24;
    if (hlen > NPY_MAX_HEADER)
        return fail(err, "header length %zu exceeds the %u byte limit", hlen, NPY_MAX_HEADER);
    *header_size = prefix + hlen;
    return 0;
}

/* A cursor over the header's dict literal. */
typedef struct cursor {
    const char *start, *p, *end;
    char *err;
} cursor;

static int syntax(cursor *c, const char *what)
{
    return fail(c->err, "header: expected %s at byte %td", what, c->p - c->start);
}

static void skip_space(cursor *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

/* Skips spaces, then consumes `ch` if it is next. */
static int accept(cursor *c, char ch)
{
    skip_space(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return 1;
    }
    return 0;
}

static int expect(cursor *c, char ch, const char *what)
{
    return accept(c, ch) ? 0 : syntax(c, what);
}

/* A quoted string without escapes (numpy never writes any in these keys and values). */
static int parse_string(cursor *c, char *out, size_t cap)
{
    skip_space(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"')) return syntax(c, "a quoted string");
    char quote = *c->p++;
    size_t n = 0;
    while (c->p < c->end && *c->p != quote) {
        if (*c->p == '\\' || (unsigned char)*c->p < 0x20 || (unsigned char)*c->p > 0x7e)
            return syntax(c, "a plain ASCII string");
        if (n + 1 >= cap)
            return fail(c->err, "header: string too long at byte %td", c->p - c->start);
        out[n++] = *c->p++;
    }
    if (c->p >= c->end) return syntax(c, "a closing quote");
    c->p++;
    out[n] = '\0';
    return 0;
}

static int parse_bool(cursor *c, int *out)
{
    skip_space(c);
    size_t left = (size_t)(c->end - c->p);
    if (left >= 4 && !memcmp(c->p, "True", 4)) {
        c->p += 4;
        *out = 1;
        return 0;
    }
    if (left >= 5 && !memcmp(c->p, "False", 5)) {
        c->p += 5;
        *out = 0;
        return 0;
    }
    return syntax(c, "True or False");
}

static int parse_dim(cursor *c, int64_t *out)
{
    skip_space(c);
    if (c->p >= c->end || *c->p < '0' || *c->p > '9') return syntax(c, "a non-negative integer");
    int64_t v = 0;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
        int d = *c->p++ - '0';
        if (v > (INT64_MAX - d) / 10) return fail(c->err, "header: a dimension overflows int64");
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

/* A Python tuple of ints: (), (N,), (N, M) or (N, M,). */
static int parse_shape(cursor *c, npy_array *a)
{
    if (expect(c, '(', "'(' opening the shape tuple")) return -1;
    a->ndim = 0;
    if (accept(c, ')')) return 0;
    for (;;) {
        if (a->ndim == NPY_MAX_DIMS)
            return fail(c->err, "shape has more than %d dimensions", NPY_MAX_DIMS);
        if (parse_dim(c, &a->shape[a->ndim++])) return -1;
        if (accept(c, ')')) break;
        if (expect(c, ',', "',' or ')' in the shape tuple")) return -1;
        if (accept(c, ')')) return 0;
    }
    if (a->ndim == 1) return syntax(c, "a trailing ',' in a one-element shape tuple");
    return 0;
}

static int parse_descr(const char *descr, npy_dtype *out, char *err)
{
    char order = descr[0];
    if (order == '\0') return fail(err, "empty dtype descr");
    for (int i = 0; i < NDTYPES; i++) {
        if (strcmp(descr + 1, dtypes[i].code)) continue;
        int single = dtypes[i].size == 1;
        if (order == '>' && !single)
            return fail(err, "dtype '%s' is big-endian; save it as '<%s' (arr.astype('<%s'))",
                        descr, dtypes[i].code, dtypes[i].code);
        if (order == '<' || (single && order == '|')) {
            *out = dtypes[i].dtype;
            return 0;
        }
        break;
    }
    return fail(err, "dtype '%s' is not supported (|i1 |u1 <i4 <i8 <u8 <f4 <f2 <u2 are)", descr);
}

enum { KEY_DESCR = 1, KEY_FORTRAN = 2, KEY_SHAPE = 4 };

static int parse_entry(cursor *c, npy_array *a, int *seen)
{
    char key[32], descr[32];
    int fortran = 0, bit;
    if (parse_string(c, key, sizeof key)) return -1;
    if (expect(c, ':', "':' after a key")) return -1;
    if (!strcmp(key, "descr")) {
        bit = KEY_DESCR;
        if (parse_string(c, descr, sizeof descr) || parse_descr(descr, &a->dtype, c->err))
            return -1;
    } else if (!strcmp(key, "fortran_order")) {
        bit = KEY_FORTRAN;
        if (parse_bool(c, &fortran)) return -1;
        if (fortran)
            return fail(c->err, "fortran_order is True; only C-order arrays are supported "
                                "(save np.ascontiguousarray(arr))");
    } else if (!strcmp(key, "shape")) {
        bit = KEY_SHAPE;
        if (parse_shape(c, a)) return -1;
    } else {
        return fail(c->err, "header: unexpected key '%s'", key);
    }
    if (*seen & bit) return fail(c->err, "header: key '%s' appears twice", key);
    *seen |= bit;
    return 0;
}

static int parse_dict(cursor *c, npy_array *a)
{
    int seen = 0;
    if (expect(c, '{', "'{' opening the header dict")) return -1;
    while (!accept(c, '}')) {
        if (parse_entry(c, a, &seen)) return -1;
        if (accept(c, '}')) break;
        if (expect(c, ',', "',' or '}' in the header dict")) return -1;
    }
    if (seen != (KEY_DESCR | KEY_FORTRAN | KEY_SHAPE))
        return fail(c->err, "header: needs the keys 'descr', 'fortran_order' and 'shape'");
    skip_space(c);
    if (c->p != c->end) return syntax(c, "only spaces after the header dict");
    return 0;
}

/* count and nbytes from shape and dtype, overflow-checked. */
static int compute_sizes(npy_array *a, char *err)
{
    int64_t count = 1;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] == 0) count = 0;
    for (int i = 0; i < a->ndim && count; i++)
        if (__builtin_mul_overflow(count, a->shape[i], &count))
            return fail(err, "shape's element count overflows");
    size_t nbytes;
    if ((uint64_t)count > SIZE_MAX ||
        __builtin_mul_overflow((size_t)count, npy_itemsize(a->dtype), &nbytes) ||
        nbytes > (size_t)INT64_MAX - 128)
        return fail(err, "shape's byte size overflows");
    a->count = count;
    a->nbytes = nbytes;
    return 0;
}

int npy_parse_header(const void *buf, size_t len, npy_array *out, char *err)
{
    size_t header_size;
    if (!host_is_little_endian()) return fail(err, ".npy data needs a little-endian host");
    if (npy_header_size(buf, len, &header_size, err)) return -1;
    if (len < header_size)
        return fail(err, "truncated header: %zu bytes, the header needs %zu", len, header_size);
    size_t prefix = ((const uint8_t *)buf)[6] == 1 ? 10 : 12;
    npy_array a;
    memset(&a, 0, sizeof a);
    cursor c = {(const char *)buf + prefix, (const char *)buf + prefix,
                (const char *)buf + header_size, err};
    if (parse_dict(&c, &a) || compute_sizes(&a, err)) return -1;
    *out = a;
    return 0;
}

/* "(2, 3)" for messages. */
static const char *shape_text(const npy_array *a, char *buf, size_t cap)
{
    size_t n = (size_t)snprintf(buf, cap, "(");
    for (int i = 0; i < a->ndim && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? ", " : "", (long long)a->shape[i]);
    if (n < cap) snprintf(buf + n, cap - n, a->ndim == 1 ? ",)" : ")");
    return buf;
}

static int data_length_error(const npy_array *a, size_t have, char *err)
{
    char shape[192];
    if (have < a->nbytes)
        return fail(err, "truncated data: %zu bytes, shape %s of %s needs %zu", have,
                    shape_text(a, shape, sizeof shape), npy_descr(a->dtype), a->nbytes);
    return fail(err, "%zu unexpected bytes after the data of shape %s of %s", have - a->nbytes,
                shape_text(a, shape, sizeof shape), npy_descr(a->dtype));
}

int npy_parse(const void *buf, size_t len, npy_array *out, char *err)
{
    size_t header_size = 0;
    npy_array a;
    if (npy_parse_header(buf, len, &a, err) || npy_header_size(buf, len, &header_size, err))
        return -1;
    if (len - header_size != a.nbytes) return data_length_error(&a, len - header_size, err);
    a.data = (uint8_t *)buf + header_size;
    *out = a;
    return 0;
}

/* ------------------------------------------------------------------ memory ------------------- */

static void *alloc_aligned(size_t nbytes)
{
    /* 128 bytes: the multi-device split only divides outputs on 128-byte lines it owns whole. */
    size_t size = (nbytes + 127) & ~(size_t)127; /* nbytes <= INT64_MAX - 128: no wrap */
    return aligned_alloc(128, size ? size : 128);
}

int npy_describe(npy_array *out, npy_dtype dtype, int ndim, const int64_t *shape, char *err)
{
    npy_array a;
    memset(&a, 0, sizeof a);
    if (ndim < 0 || ndim > NPY_MAX_DIMS) return fail(err, "rank %d is out of range", ndim);
    a.dtype = dtype;
    a.ndim = ndim;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) return fail(err, "negative dimension %lld", (long long)shape[i]);
        a.shape[i] = shape[i];
    }
    if (compute_sizes(&a, err)) return -1;
    *out = a;
    return 0;
}

int npy_alloc(npy_array *out, npy_dtype dtype, int ndim, const int64_t *shape, char *err)
{
    npy_array a;
    if (npy_describe(&a, dtype, ndim, shape, err)) return -1;
    a.owned = alloc_aligned(a.nbytes);
    if (!a.owned) return fail(err, "out of memory for %zu bytes", a.nbytes);
    memset(a.owned, 0, a.nbytes);
    a.data = a.owned;
    *out = a;
    return 0;
}

npy_array npy_view(const npy_array *a)
{
    npy_array v = *a;
    v.owned = NULL;
    return v;
}

void npy_free(npy_array *a)
{
    free(a->owned);
    memset(a, 0, sizeof *a);
}

/* ------------------------------------------------------------------ files -------------------- */

static int read_error(char *err) { return fail(err, "read error: %s", strerror(errno)); }

/* Reads the preamble and header into a malloc'd buffer. */
static int load_header(FILE *f, npy_array *a, char *err)
{
    uint8_t prefix[12];
    size_t header_size;
    size_t got = fread(prefix, 1, sizeof prefix, f);
    if (got < sizeof prefix && ferror(f)) return read_error(err);
    if (npy_header_size(prefix, got, &header_size, err)) return -1;
    char *header = malloc(header_size);
    if (!header) return fail(err, "out of memory for the header");
    size_t have = got < header_size ? got : header_size;
    memcpy(header, prefix, have);
    size_t more = fread(header + have, 1, header_size - have, f);
    int rc = ferror(f) ? read_error(err) : npy_parse_header(header, have + more, a, err);
    free(header);
    /* a valid header is never shorter than the 12 bytes read: its dict alone is longer */
    return rc;
}

/* For a regular file, checks the data length against the header before allocating, so a short
 * file with a huge shape is reported as truncated rather than as out of memory. */
static int check_file_size(FILE *f, const npy_array *a, char *err)
{
    struct stat st;
    long long pos = ftell(f);
    if (fstat(fileno(f), &st) || !S_ISREG(st.st_mode) || pos < 0 || st.st_size < pos) return 0;
    uint64_t have = (uint64_t)(st.st_size - pos);
    if (have != a->nbytes) return data_length_error(a, (size_t)have, err);
    return 0;
}

static int load_data(FILE *f, npy_array *a, char *err)
{
    if (check_file_size(f, a, err)) return -1;
    a->owned = alloc_aligned(a->nbytes);
    if (!a->owned) return fail(err, "out of memory for %zu bytes of data", a->nbytes);
    a->data = a->owned;
    size_t got = fread(a->data, 1, a->nbytes, f);
    if (got < a->nbytes) return ferror(f) ? read_error(err) : data_length_error(a, got, err);
    size_t extra = 0;
    char sink[4096];
    for (size_t n; (n = fread(sink, 1, sizeof sink, f)) > 0;) extra += n;
    if (ferror(f)) return read_error(err);
    if (extra) return data_length_error(a, a->nbytes + extra, err);
    return 0;
}

int npy_load_header(const char *path, npy_array *out, char *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) return fail(err, "%s", strerror(errno));
    npy_array a;
    memset(&a, 0, sizeof a);
    int rc = load_header(f, &a, err);
    if (!rc) rc = check_file_size(f, &a, err);
    fclose(f);
    if (!rc) *out = a;
    return rc;
}

int npy_load(const char *path, npy_array *out, char *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) return fail(err, "%s", strerror(errno));
    npy_array a;
    memset(&a, 0, sizeof a);
    int rc = load_header(f, &a, err);
    if (!rc) rc = load_data(f, &a, err);
    fclose(f);
    if (rc) {
        npy_free(&a);
        return -1;
    }
    *out = a;
    return 0;
}

/* The version 1.0 preamble and header, padded so the data starts on a 64-byte boundary. */
static size_t format_header(const npy_array *a, char *buf, size_t cap)
{
    char shape[192];
    int n = snprintf(buf + 10, cap - 10, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                     npy_descr(a->dtype), shape_text(a, shape, sizeof shape));
    size_t total = (10 + (size_t)n + 1 + 63) & ~(size_t)63;
    memset(buf + 10 + n, ' ', total - 10 - (size_t)n - 1);
    buf[total - 1] = '\n';
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    buf[8] = (char)((total - 10) & 0xFF);
    buf[9] = (char)((total - 10) >> 8);
    return total;
}

static int write_file(FILE *f, const npy_array *a, char *err)
{
    char header[512];
    size_t hsize = format_header(a, header, sizeof header);
    if (fwrite(header, 1, hsize, f) != hsize || fwrite(a->data, 1, a->nbytes, f) != a->nbytes ||
        fflush(f))
        return fail(err, "write error: %s", strerror(errno));
    return 0;
}

/* mkstemp makes 0600 files; give the output the mode a plain fopen would. */
static void set_default_mode(int fd)
{
    mode_t mask = umask(0);
    umask(mask);
    (void)fchmod(fd, 0666 & ~mask);
}

int npy_stage(const char *path, const npy_array *a, npy_staged *staged, char *err)
{
    size_t len = strlen(path);
    staged->tmp_path = malloc(len + 8);
    staged->path = malloc(len + 1);
    if (!staged->tmp_path || !staged->path) {
        npy_discard(staged);
        return fail(err, "out of memory");
    }
    memcpy(staged->path, path, len + 1);
    memcpy(staged->tmp_path, path, len);
    memcpy(staged->tmp_path + len, ".XXXXXX", 8);
    int fd = mkstemp(staged->tmp_path);
    if (fd < 0) {
        int rc = fail(err, "cannot create a file next to it: %s", strerror(errno));
        free(staged->tmp_path);
        staged->tmp_path = NULL; /* nothing to remove */
        npy_discard(staged);
        return rc;
    }
    set_default_mode(fd);
    FILE *f = fdopen(fd, "wb");
    if (!f) {
        int rc = fail(err, "cannot open: %s", strerror(errno));
        close(fd);
        npy_discard(staged);
        return rc;
    }
    int rc = write_file(f, a, err);
    if (fclose(f) && !rc) rc = fail(err, "write error: %s", strerror(errno));
    if (rc) npy_discard(staged);
    return rc;
}

void npy_discard(npy_staged *staged)
{
    if (staged->tmp_path) remove(staged->tmp_path);
    free(staged->tmp_path);
    free(staged->path);
    staged->tmp_path = staged->path = NULL;
}

int npy_write(const char *path, const npy_array *a, char *err)
{
    FILE *f = fopen(path, "wb");
    if (!f) return fail(err, "cannot open for writing: %s", strerror(errno));
    int rc = write_file(f, a, err);
    if (fclose(f) && !rc) rc = fail(err, "write error: %s", strerror(errno));
    return rc;
}

int npy_save(const char *path, const npy_array *a, char *err)
{
    npy_staged staged;
    if (npy_stage(path, a, &staged, err)) return -1;
    int rc = 0;
    if (rename(staged.tmp_path, staged.path))
        rc = fail(err, "cannot rename the finished file into place: %s", strerror(errno));
    npy_discard(&staged); /* removes the temporary file if it is still there */
    return rc;
}
