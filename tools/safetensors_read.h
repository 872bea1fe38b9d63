/*
 * Reading a safetensors file: an 8-byte little-endian header length N, N bytes of JSON (an object
 * of tensor name -> {"dtype", "shape", "data_offsets"} plus an optional "__metadata__" object of
 * strings), then the tensors' bytes. The parser accepts only that shape of JSON, checks every
 * size and offset against the file, refuses duplicate names and metadata keys, and requires the
 * tensors' bytes to tile the data section (no overlap, no hole, nothing after): the rules of
 * docs/moe-layer.md "Checkpoint rules", which python/qmoe/_safetensors.py enforces too. Names are
 * found through a sorted index (n log n at worst, whatever the names), so a header at the 100 MB
 * cap parses in seconds.
 *
 * The file is mapped read-only, not copied (a layer file is gigabytes): it must not be truncated
 * or rewritten while it is read, since a mapped page past a shortened file's end raises SIGBUS,
 * which no reader can turn into an error. Replace a checkpoint by writing a new file and renaming
 * it over the old one (a reader keeps the old file's mapping).
 */
#ifndef QMOE_TOOLS_SAFETENSORS_READ_H
#define QMOE_TOOLS_SAFETENSORS_READ_H

#include <stddef.h>
#include <stdint.h>

#define STR_ERR_LEN 512
enum { STR_MAX_DIMS = 8 };

typedef struct str_tensor {
    char *name;
    char dtype[12];  /* as the file writes it: "F32", "BF16", "F16", ... */
    size_t itemsize;
    int ndim;
    int64_t shape[STR_MAX_DIMS];
    int64_t count;
    const void *data; /* inside the mapping; may be unaligned for the dtype */
    uint64_t offset;  /* of data in the data section */
    uint64_t nbytes;
} str_tensor;

typedef struct str_file {
    void *map;
    size_t size;
    str_tensor *tensors;
    size_t n;
    char **meta; /* key, value, key, value ... */
    size_t nmeta;
    const str_tensor **by_name; /* the tensors in strcmp order of their names (str_find) */
} str_file;

/* Opens and validates `path`; -1 with a reason in err (STR_ERR_LEN) and nothing held. */
int str_open(const char *path, str_file *f, char *err);

/* Parses a header image (the JSON text, len bytes) against a data section of data_len bytes at
 * `data`: the part of str_open that needs no file (the fuzzable seam). */
int str_parse_header(const char *json, size_t len, const uint8_t *data, uint64_t data_len,
                     str_file *f, char *err);

const str_tensor *str_find(const str_file *f, const char *name);
const char *str_meta(const str_file *f, const char *key); /* NULL when absent */
void str_close(str_file *f);

#endif
