#include "fuzz_input.h"

#include <stdlib.h>

uint8_t fz_u8(fz_input *in) { return in->pos < in->size ? in->data[in->pos++] : 0; }

uint64_t fz_u64(fz_input *in)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)fz_u8(in) << (8 * i);
    return v;
}

int64_t fz_range(fz_input *in, int64_t lo, int64_t hi)
{
    uint64_t span = (uint64_t)(hi - lo) + 1;
    uint64_t v = fz_u8(in);
    if (span > 256) v |= (uint64_t)fz_u8(in) << 8;
    return lo + (int64_t)(v % span);
}

int64_t fz_dim(fz_input *in)
{
    static const int64_t edge[] = {
        0, 1, -1, 2, 16, 32, 64, 8, 4096, 10240, 10241, 65535, 65536, 20000, 19999,
        INT32_MAX, (int64_t)INT32_MAX + 1, UINT32_MAX, (int64_t)1 << 32, (int64_t)1 << 62,
        INT64_MAX, INT64_MAX / 2, INT64_MAX / 16 + 1, INT64_MIN, INT64_MIN + 1, -16,
    };
    uint8_t kind = fz_u8(in);
    if (kind < 160) return kind % 40;
    if (kind < 240) return edge[fz_u8(in) % (sizeof edge / sizeof edge[0])];
    return (int64_t)fz_u64(in);
}

size_t fz_left(const fz_input *in) { return in->size - in->pos; }

uint64_t fz_mix(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void *fz_xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size);
    if (!p) abort();
    return p;
}
