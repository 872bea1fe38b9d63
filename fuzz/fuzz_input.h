/* Decoding fuzzer bytes into values: reads run past the end as zeros, so every input decodes. */
#ifndef QMOE_FUZZ_INPUT_H
#define QMOE_FUZZ_INPUT_H

#include <stddef.h>
#include <stdint.h>

typedef struct fz_input {
    const uint8_t *data;
    size_t size, pos;
} fz_input;

uint8_t fz_u8(fz_input *in);
uint64_t fz_u64(fz_input *in);
/* A value in [lo, hi] (inclusive) from one or two bytes. */
int64_t fz_range(fz_input *in, int64_t lo, int64_t hi);
/* A size: mostly small, sometimes one of the values that break arithmetic (0, -1, 2^31, 2^32,
 * 2^62, INT64_MAX, INT64_MIN, ...), sometimes arbitrary 64 bits. */
int64_t fz_dim(fz_input *in);
size_t fz_left(const fz_input *in);

/* splitmix64: the harnesses' reproducible generator of bulk data from a seed the input gives. */
uint64_t fz_mix(uint64_t *state);
/* calloc that never returns NULL (aborts) and takes a count of 0. */
void *fz_xcalloc(size_t n, size_t size);

#endif
