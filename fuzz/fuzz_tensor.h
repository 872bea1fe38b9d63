/* Tensor descriptors for the phase-one harnesses: built from fuzzer bytes, mutated one field at a
 * time, turned into qmoe tensors whose data lies in memory that faults when read. */
#ifndef QMOE_FUZZ_TENSOR_H
#define QMOE_FUZZ_TENSOR_H

#include "fuzz_input.h"
#include "qmoe/qmoe.h"

typedef struct fz_desc {
    int present, ndim, dtype, format, has_strides, null_data;
    int64_t shape[QMOE_MAX_DIMS], strides[QMOE_MAX_DIMS];
} fz_desc;

/* A present, row-major descriptor. */
void fz_desc_set(fz_desc *d, int dtype, int format, int ndim, const int64_t *shape);

/* Mutations 0..7 of one descriptor (presence, rank, a dim, all strides then one, one stride,
 * dtype, format, data pointer); `axis` picks the dim or stride. Harnesses number their own
 * mutations from 8. */
enum { FZ_DESC_MUTATIONS = 8 };
void fz_desc_mutate(fz_input *in, fz_desc *d, int axis, int mutation);

/* One mutation step of a harness over descriptors t[0 .. slots-1]: draws a slot, an axis and a
 * mutation in [0, FZ_DESC_MUTATIONS + own); applies a descriptor mutation itself (returns -1) or
 * returns the harness's own mutation number (FZ_DESC_MUTATIONS ..); *picked (when not NULL) is
 * the drawn descriptor. */
int fz_desc_step(fz_input *in, fz_desc *t, int slots, int own, fz_desc **picked);

/* Slot `slot` of `slots` distinct PROT_NONE regions of `slot_bytes` each (mapped on first use,
 * same sizes every call): phase one refuses outputs that share memory with inputs, so every tensor
 * of a valid template gets its own, and reading any of them faults. */
void *fz_unreadable(int slot, int slots, size_t slot_bytes);

/* The statuses phase one may answer: 0, 161001, 161002, 561000. */
int fz_documented(qmoe_status st);

/* Stops the fuzzer with `what` and the library's last error when `ok` is 0. */
void fz_require(int ok, const char *what);

/* The tensor of `d` over `data` (NULL when absent or refused); the shape and strides are passed
 * in exact-size heap copies, so a read past `ndim` is caught by AddressSanitizer. */
qmoe_tensor *fz_tensor(const fz_desc *d, void *data);

#endif
