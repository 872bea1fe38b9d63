#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#include "fuzz_tensor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

void fz_desc_set(fz_desc *d, int dtype, int format, int ndim, const int64_t *shape)
{
    memset(d, 0, sizeof *d);
    d->present = 1;
    d->dtype = dtype;
    d->format = format;
    d->ndim = ndim;
    memcpy(d->shape, shape, (size_t)ndim * sizeof *shape);
}

void fz_desc_mutate(fz_input *in, fz_desc *d, int axis, int mutation)
{
    switch (mutation) {
    case 0: d->present = !d->present; break;
    case 1: d->ndim = (int)fz_range(in, -2, QMOE_MAX_DIMS + 1); break;
    case 2: d->shape[axis] = fz_dim(in); break;
    case 3:
        d->has_strides = 1;
        for (int i = 0; i < QMOE_MAX_DIMS; i++) d->strides[i] = d->shape[i] ? 1 : 0;
        /* fallthrough: then set one stride */
    case 4: d->strides[axis] = fz_dim(in); break;
    case 5: d->dtype = (int)fz_range(in, -1, 9); break;
    case 6: d->format = (int)fz_range(in, -1, 3); break;
    case 7: d->null_data = !d->null_data; break;
    }
}

int fz_desc_step(fz_input *in, fz_desc *t, int slots, int own, fz_desc **picked)
{
    fz_desc *d = &t[fz_range(in, 0, slots - 1)];
    if (picked) *picked = d;
    int axis = (int)fz_range(in, 0, QMOE_MAX_DIMS - 1);
    int mutation = (int)fz_range(in, 0, FZ_DESC_MUTATIONS + own - 1);
    if (mutation >= FZ_DESC_MUTATIONS) return mutation;
    fz_desc_mutate(in, d, axis, mutation);
    return -1;
}

void *fz_unreadable(int slot, int slots, size_t slot_bytes)
{
    static uint8_t *base;
    if (!base) {
        void *m = mmap(NULL, (size_t)slots * slot_bytes, PROT_NONE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED) abort();
        base = m;
    }
    return base + (size_t)slot * slot_bytes;
}

int fz_documented(qmoe_status st)
{
    return st == QMOE_OK || st == QMOE_ERR_PARAM_NULLPTR || st == QMOE_ERR_PARAM_INVALID ||
           st == QMOE_ERR_INNER;
}

void fz_require(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz: %s (last error: %s)\n", what, qmoe_last_error());
        abort();
    }
}

qmoe_tensor *fz_tensor(const fz_desc *d, void *data)
{
    if (!d->present) return NULL;
    int n = d->ndim > 0 ? (d->ndim < QMOE_MAX_DIMS ? d->ndim : QMOE_MAX_DIMS) : 0;
    int64_t *shape = malloc((size_t)(n ? n : 1) * sizeof *shape);
    int64_t *strides = malloc((size_t)(n ? n : 1) * sizeof *strides);
    if (!shape || !strides) abort();
    memcpy(shape, d->shape, (size_t)n * sizeof *shape);
    memcpy(strides, d->strides, (size_t)n * sizeof *strides);
    qmoe_tensor *t = NULL;
    /* A rank past QMOE_MAX_DIMS is passed as such: create must refuse it before reading. */
    qmoe_status st = qmoe_tensor_create(shape, d->ndim, d->has_strides ? strides : NULL,
                                        (qmoe_dtype)d->dtype, (qmoe_format)d->format,
                                        d->null_data ? NULL : data, &t);
    free(shape);
    free(strides);
    fz_require(fz_documented(st), "qmoe_tensor_create returned an undocumented status");
    fz_require((st == QMOE_OK) == (t != NULL), "qmoe_tensor_create: status and tensor disagree");
    if (st) fz_require(qmoe_last_error()[0] != '\0', "qmoe_tensor_create failed without a message");
    return t;
}
