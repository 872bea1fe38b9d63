/* A safetensors writer (tools/safetensors_write.h). */
#define _POSIX_C_SOURCE 200809L
#include "safetensors_write.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { CHUNK = 1 << 16 }; /* elements produced per fill call */

void st_init(st_file *f, st_fill fill, void *ctx)
{
    memset(f, 0, sizeof *f);
    f->fill = fill;
    f->ctx = ctx;
}

static int safe_text(const char *s, const char *extra)
{
    if (!*s) return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              strchr("._-", *s) || (extra && strchr(extra, *s))))
            return 0;
    return 1;
}

static size_t item(st_dtype d) { return d == ST_F32 ? 4 : 2; }

int st_add(st_file *f, const char *name, st_dtype dtype, int ndim, const int64_t *shape, char *err)
{
    st_tensor t = {.dtype = dtype, .ndim = ndim, .count = 1};
    if (!safe_text(name, NULL) || ndim < 0 || ndim > ST_MAX_DIMS) {
        snprintf(err, ST_ERR_LEN, "tensor name '%.200s' or rank %d not supported", name, ndim);
        return -1;
    }
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0 || __builtin_mul_overflow(t.count, shape[d], &t.count)) {
            snprintf(err, ST_ERR_LEN, "%s: size overflows", name);
            return -1;
        }
        t.shape[d] = shape[d];
    }
    if (__builtin_mul_overflow(t.count, (int64_t)item(dtype), &t.nbytes) ||
        __builtin_add_overflow(f->data_bytes, t.nbytes, &f->data_bytes)) {
        snprintf(err, ST_ERR_LEN, "%s: the file's size overflows", name);
        return -1;
    }
    if (f->n == f->cap) {
        size_t cap = f->cap ? 2 * f->cap : 64;
        st_tensor *grown = realloc(f->tensors, cap * sizeof *grown);
        if (!grown) goto oom;
        f->tensors = grown;
        f->cap = cap;
    }
    if (!(t.name = strdup(name))) goto oom;
    f->tensors[f->n++] = t;
    return 0;
oom:
    snprintf(err, ST_ERR_LEN, "out of memory for the tensor list");
    return -1;
}

int st_meta(st_file *f, const char *key, const char *value, char *err)
{
    if (!safe_text(key, NULL) || !safe_text(value, " ,/:")) {
        snprintf(err, ST_ERR_LEN, "metadata '%.100s' = '%.100s' not supported", key, value);
        return -1;
    }
    char **grown = realloc(f->meta, (f->nmeta + 2) * sizeof *grown);
    if (!grown) goto oom;
    f->meta = grown;
    if (!(f->meta[f->nmeta] = strdup(key))) goto oom;
    if (!(f->meta[f->nmeta + 1] = strdup(value))) {
        free(f->meta[f->nmeta]);
        goto oom;
    }
    f->nmeta += 2;
    return 0;
oom:
    snprintf(err, ST_ERR_LEN, "out of memory for metadata");
    return -1;
}

/* The JSON header, padded with spaces to a multiple of 8 bytes; NULL when out of memory. */
static char *header(const st_file *f, size_t *len)
{
    size_t cap = 256 + f->nmeta * 64, n = 0;
    for (size_t i = 0; i < f->n; i++) cap += strlen(f->tensors[i].name) + 160;
    for (size_t i = 0; i < f->nmeta; i++) cap += strlen(f->meta[i]) + 8;
    char *h = malloc(cap);
    if (!h) return NULL;
#define PUT(...) n += (size_t)snprintf(h + n, cap - n, __VA_ARGS__)
    PUT("{");
    if (f->nmeta) {
        PUT("\"__metadata__\":{");
        for (size_t i = 0; i < f->nmeta; i += 2)
            PUT("%s\"%s\":\"%s\"", i ? "," : "", f->meta[i], f->meta[i + 1]);
        PUT("}%s", f->n ? "," : "");
    }
    int64_t at = 0;
    for (size_t i = 0; i < f->n; i++) {
        const st_tensor *t = &f->tensors[i];
        PUT("%s\"%s\":{\"dtype\":\"%s\",\"shape\":[", i ? "," : "", t->name,
            t->dtype == ST_F32 ? "F32" : "BF16");
        for (int d = 0; d < t->ndim; d++) PUT("%s%lld", d ? "," : "", (long long)t->shape[d]);
        PUT("],\"data_offsets\":[%lld,%lld]}", (long long)at, (long long)(at + t->nbytes));
        at += t->nbytes;
    }
    PUT("}");
    while (n % 8) PUT(" ");
#undef PUT
    *len = n;
    return h;
}

int st_file_size(const st_file *f, int64_t *size, char *err)
{
    size_t len;
    char *h = header(f, &len);
    if (!h) {
        snprintf(err, ST_ERR_LEN, "out of memory for the header");
        return -1;
    }
    free(h);
    if (__builtin_add_overflow(f->data_bytes, (int64_t)(8 + len), size)) {
        snprintf(err, ST_ERR_LEN, "the file's size overflows");
        return -1;
    }
    return 0;
}

int st_write(const char *path, st_file *f, char *err)
{
    size_t len;
    char *h = header(f, &len);
    void *buf = malloc((size_t)CHUNK * 4);
    FILE *out = h && buf ? fopen(path, "wb") : NULL;
    int rc = -1;
    if (!h || !buf) {
        snprintf(err, ST_ERR_LEN, "out of memory");
        goto done;
    }
    if (!out) {
        snprintf(err, ST_ERR_LEN, "cannot open: %s", strerror(errno));
        goto done;
    }
    unsigned char le[8];
    for (int i = 0; i < 8; i++) le[i] = (unsigned char)((uint64_t)len >> (8 * i));
    if (fwrite(le, 1, 8, out) != 8 || fwrite(h, 1, len, out) != len) goto io;
    for (size_t i = 0; i < f->n; i++) {
        const st_tensor *t = &f->tensors[i];
        for (int64_t first = 0; first < t->count; first += CHUNK) {
            int64_t count = t->count - first < CHUNK ? t->count - first : CHUNK;
            if (f->fill(f->ctx, i, first, count, buf, err)) goto done;
            size_t bytes = (size_t)count * item(t->dtype);
            if (fwrite(buf, 1, bytes, out) != bytes) goto io;
        }
    }
    if (fflush(out)) goto io;
    rc = 0;
    goto done;
io:
    snprintf(err, ST_ERR_LEN, "write failed: %s", strerror(errno));
done:
    if (out && fclose(out) && rc == 0) {
        snprintf(err, ST_ERR_LEN, "write failed: %s", strerror(errno));
        rc = -1;
    }
    free(h);
    free(buf);
    return rc;
}

void st_free(st_file *f)
{
    for (size_t i = 0; i < f->n; i++) free(f->tensors[i].name);
    for (size_t i = 0; i < f->nmeta; i++) free(f->meta[i]);
    free(f->tensors);
    free(f->meta);
    memset(f, 0, sizeof *f);
}
