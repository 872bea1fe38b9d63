/*
 * Writing a safetensors file (the format of the `safetensors` package): an 8-byte little-endian
 * header length, a JSON header naming each tensor's dtype, shape and byte range (plus string
 * metadata), padded with spaces to 8 bytes, then the tensors' bytes back to back in the order
 * they were added. Tensor data is produced by a callback in chunks, so a file larger than memory
 * can be written.
 */
#ifndef QMOE_TOOLS_SAFETENSORS_WRITE_H
#define QMOE_TOOLS_SAFETENSORS_WRITE_H

#include <stddef.h>
#include <stdint.h>

#define ST_ERR_LEN 512
enum { ST_MAX_DIMS = 4 };

typedef enum st_dtype { ST_F32, ST_BF16 } st_dtype;

/* Fills `count` elements starting at element `first` of tensor `index` into `out` (the file's
 * dtype: float32 or bfloat16 bits). Returns 0, or -1 with a reason in err (ST_ERR_LEN). */
typedef int (*st_fill)(void *ctx, size_t index, int64_t first, int64_t count, void *out,
                       char *err);

typedef struct st_tensor {
    char *name;
    st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    int64_t count, nbytes;
} st_tensor;

typedef struct st_file {
    st_tensor *tensors;
    size_t n, cap;
    char **meta; /* key, value, key, value ... */
    size_t nmeta;
    int64_t data_bytes;
    st_fill fill;
    void *ctx;
} st_file;

void st_init(st_file *f, st_fill fill, void *ctx);

/* Adds a tensor (names must be unique, JSON-safe: letters, digits, '.', '_', '-'); -1 with a
 * reason when a size overflows or memory runs out. */
int st_add(st_file *f, const char *name, st_dtype dtype, int ndim, const int64_t *shape, char *err);

/* Adds a metadata entry (same characters as names, plus ' ', ',', '/', ':'). */
int st_meta(st_file *f, const char *key, const char *value, char *err);

/* The whole file's size in bytes (header included), known before writing. */
int st_file_size(const st_file *f, int64_t *size, char *err);

/* Writes the file to `path` as it is opened (fopen "wb"): what tools/outfile.c hands a writer. */
int st_write(const char *path, st_file *f, char *err);

void st_free(st_file *f);

#endif
