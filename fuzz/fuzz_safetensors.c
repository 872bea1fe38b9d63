/*
 * The safetensors reader of `qmoe moe run` (tools/safetensors_read.c) on arbitrary bytes: the
 * input is a whole file image (8-byte header length, JSON, data). str_parse_header on the image
 * and str_open on the same bytes as a file must agree, never crash or read outside the input;
 * every accepted tensor lies inside the data section with nbytes = count * itemsize, the tensors
 * tile it (disjoint, covering it), and no name or metadata key is given twice.
 */
#define _DEFAULT_SOURCE /* getpid under -std=c11 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "safetensors_read.h"

static void require(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_safetensors: %s\n", what);
        abort();
    }
}

static char path[64];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!path[0]) snprintf(path, sizeof path, "/tmp/fuzz_safetensors.%d", (int)getpid());
    int parsed = -1;
    size_t n = 0;
    if (size >= 8) {
        uint64_t hlen = 0;
        for (int k = 7; k >= 0; k--) hlen = hlen << 8 | data[k];
        if (hlen <= size - 8 && hlen <= (100u << 20)) {
            /* a copy of exactly the header, so reading past it is caught */
            char *json = malloc(hlen ? hlen : 1);
            require(json != NULL, "out of memory");
            memcpy(json, data + 8, hlen);
            str_file f;
            memset(&f, 0, sizeof f);
            char err[STR_ERR_LEN];
            const uint8_t *d = data + 8 + hlen;
            uint64_t dlen = size - 8 - hlen;
            parsed = str_parse_header(json, hlen, d, dlen, &f, err);
            if (!parsed) {
                n = f.n;
                uint64_t covered = 0;
                for (size_t i = 0; i < f.n; i++) {
                    const str_tensor *t = &f.tensors[i];
                    const uint8_t *p = t->data;
                    require(p >= d && t->nbytes <= dlen && (uint64_t)(p - d) <= dlen - t->nbytes, "tensor outside the data");
                    require(t->nbytes == (uint64_t)t->count * t->itemsize, "nbytes != count * itemsize");
                    require(t->offset == (uint64_t)(p - d), "offset is not the data's");
                    require(str_find(&f, t->name) == t, "a name given twice");
                    covered += t->nbytes;
                }
                /* in bounds and (below) disjoint: then covering dlen bytes is tiling them */
                require(covered == dlen, "the tensors do not cover the data section exactly");
                for (size_t i = 0; i + 1 < f.n && f.n < 512; i++)
                    for (size_t j = i + 1; j < f.n; j++) {
                        const str_tensor *a = &f.tensors[i], *b = &f.tensors[j];
                        require(!a->nbytes || !b->nbytes || a->offset + a->nbytes <= b->offset ||
                                    b->offset + b->nbytes <= a->offset,
                                "two tensors share bytes");
                    }
                for (size_t i = 0; i + 2 < f.nmeta && f.nmeta < 512; i += 2)
                    for (size_t j = i + 2; j + 1 < f.nmeta; j += 2)
                        require(strcmp(f.meta[i], f.meta[j]) != 0, "a metadata key given twice");
                str_close(&f);
            } else {
                require(f.n == 0 && f.tensors == NULL && f.meta == NULL, "a refused header left state");
                require(strlen(err) > 0, "a refusal without a reason");
            }
            free(json);
        }
    }
    FILE *fp = fopen(path, "wb");
    require(fp && fwrite(data, 1, size, fp) == size && fclose(fp) == 0, "cannot write the temp file");
    str_file g;
    char err[STR_ERR_LEN];
    int opened = str_open(path, &g, err);
    require((opened == 0) == (parsed == 0), "str_open and str_parse_header disagree");
    if (!opened) {
        require(g.n == n, "str_open found other tensors");
        str_close(&g);
    }
    unlink(path);
    return 0;
}
