/* Overflow-checked size arithmetic: every size computed from caller input goes through these. */
#ifndef QMOE_CORE_CHECKED_H
#define QMOE_CORE_CHECKED_H

#include <stdbool.h>
#include <stdint.h>

/* Each returns false (and leaves *out unspecified) when the exact result does not fit. */
static inline bool qmoe_mul_i64(int64_t a, int64_t b, int64_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}

static inline bool qmoe_add_i64(int64_t a, int64_t b, int64_t *out)
{
    return !__builtin_add_overflow(a, b, out);
}

#endif
