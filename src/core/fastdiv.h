/*
 * Division by a run-time constant as a multiply and a shift (Granlund–Montgomery, round-up
 * variant). The host computes the constants once, in the plan; inner loops call qmoe_fastdiv().
 * Exact for every 32-bit dividend and every divisor in [1, 2^31].
 */
#ifndef QMOE_CORE_FASTDIV_H
#define QMOE_CORE_FASTDIV_H

#include <stdint.h>

typedef struct qmoe_fastdiv_t {
    uint32_t mul;   /* floor(2^32 * (2^shift - d) / d) + 1 */
    uint32_t shift; /* ceil(log2(d)) */
    uint32_t d;
} qmoe_fastdiv_t;

static inline qmoe_fastdiv_t qmoe_fastdiv_init(uint32_t d)
{
    qmoe_fastdiv_t f = {0, 0, d};
    while ((UINT64_C(1) << f.shift) < d) f.shift++;
    f.mul = (uint32_t)(((UINT64_C(1) << 32) * ((UINT64_C(1) << f.shift) - d)) / d + 1);
    return f;
}

static inline uint32_t qmoe_fastdiv(uint32_t n, const qmoe_fastdiv_t *f)
{
    uint64_t t = ((uint64_t)n * f->mul) >> 32;
    return (uint32_t)((t + n) >> f->shift);
}

static inline uint32_t qmoe_fastmod(uint32_t n, const qmoe_fastdiv_t *f)
{
    return n - qmoe_fastdiv(n, f) * f->d;
}

#endif
