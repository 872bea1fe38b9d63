/*
 * NumPy .npy files: a strict reader (from a memory buffer or a file) and a writer that never
 * leaves a partial file behind. Little-endian, C-order arrays of a few fixed dtypes only.
 *
 * Every function that can fail returns 0 on success and -1 on failure with a one-line reason in
 * `err` (no file name in it: callers prefix their own context).
 */
#ifndef QMOE_TOOLS_NPY_H
#define QMOE_TOOLS_NPY_H

#include <stddef.h>
#include <stdint.h>

#define NPY_MAX_DIMS 8
#define NPY_ERR_LEN  256
/* numpy itself refuses headers over 10000 bytes unless told otherwise; 1 MiB is generous. */
#define NPY_MAX_HEADER (1u << 20)

typedef enum npy_dtype {
    NPY_INT8,    /* |i1 */
    NPY_UINT8,   /* |u1 (packed int4 bytes) */
    NPY_INT32,   /* <i4 */
    NPY_INT64,   /* <i8 */
    NPY_UINT64,  /* <u8 */
    NPY_FLOAT32, /* <f4 */
    NPY_FLOAT16, /* <f2 */
    NPY_UINT16,  /* <u2 (numpy has no bfloat16: bf16 bits travel as <u2 when the user says so) */
} npy_dtype;

typedef struct npy_array {
    npy_dtype dtype;
    int ndim;
    int64_t shape[NPY_MAX_DIMS];
    int64_t count; /* number of elements: the product of shape (1 for shape ()) */
    size_t nbytes; /* count * itemsize */
    void *data;
    void *owned; /* the allocation npy_free releases; NULL for a view */
} npy_array;

size_t npy_itemsize(npy_dtype dtype);
const char *npy_descr(npy_dtype dtype); /* e.g. "<i4" */

/* Size of the preamble + header of the .npy image starting at `buf` (needs the first 12 bytes,
 * or 10 for version 1.0): the offset of the data. */
int npy_header_size(const void *buf, size_t len, size_t *header_size, char *err);

/* Parses the header (`len` must cover npy_header_size bytes) into dtype, ndim, shape, count
 * and nbytes; data and owned are left NULL. */
int npy_parse_header(const void *buf, size_t len, npy_array *out, char *err);

/* Parses a whole .npy image in memory. out->data points into `buf` (possibly unaligned for the
 * dtype); out->owned is NULL. The data must be exactly nbytes long. */
int npy_parse(const void *buf, size_t len, npy_array *out, char *err);

/* Reads a .npy file; the data is copied into a 64-byte aligned allocation (free with npy_free). */
int npy_load(const char *path, npy_array *out, char *err);

/* The header of a .npy file only (data and owned NULL), with the file's size checked against it
 * when it is a regular file: what the data will need, known before any of it is read. */
int npy_load_header(const char *path, npy_array *out, char *err);

/* An array's dtype, shape and sizes without memory (data and owned NULL). */
int npy_describe(npy_array *out, npy_dtype dtype, int ndim, const int64_t *shape, char *err);

/* A zero-filled, 64-byte aligned array of the given shape (free with npy_free). */
int npy_alloc(npy_array *out, npy_dtype dtype, int ndim, const int64_t *shape, char *err);

/* A view of a's memory: same fields, not owned. */
npy_array npy_view(const npy_array *a);

void npy_free(npy_array *a); /* a zeroed or view array is a no-op */

/* Writes `a` to `path` as it is opened (fopen "wb"): what tools/outfile.c hands a writer, a
 * temporary file or a device or pipe written in place. */
int npy_write(const char *path, const npy_array *a, char *err);

/* A temporary file next to `path` holding `a`; npy_discard removes it and frees the names. */
typedef struct npy_staged {
    char *tmp_path;
    char *path;
} npy_staged;

int npy_stage(const char *path, const npy_array *a, npy_staged *staged, char *err);
void npy_discard(npy_staged *staged);

/* One array written whole or not at all to a regular file (staged, then renamed). Commands
 * write through tools/outfile.h instead, which also guards devices, links and inputs. */
int npy_save(const char *path, const npy_array *a, char *err);

#endif
