/* Vector float32 -> bfloat16 forms (the tables' to_bf16) against core/halfconv.h's scalar rule,
 * bit for bit: every sign / exponent edge with the rounding bits around the tie, subnormals,
 * infinities, signalling and quiet NaNs, and random bit patterns, at lengths with a tail. */
#include <stdio.h>
#include <string.h>

#include "core/halfconv.h"
#include "kernels/cpu_features.h"
#include "kernels/gmm_fast.h"
#include "support/testlib.h"

enum { N = 1 << 16 };

static void check_table(const qmoe_gemm_isa *isa, qt_rng *r)
{
    static float v[N];
    static uint16_t got[N];
    int64_t n = 0;
    /* exponents 0 (subnormal), 1, 126-128, 254, 255 (inf/NaN); mantissas around the tie */
    static const uint32_t exps[] = {0, 1, 2, 126, 127, 128, 253, 254, 255};
    static const uint32_t mans[] = {0, 1, 0x7FFF, 0x8000, 0x8001, 0x17FFF, 0x18000, 0x18001,
                                    0x3FFFFF, 0x400000, 0x7F7FFF, 0x7F8000, 0x7FFFFF};
    for (uint32_t s = 0; s < 2; s++)
        for (size_t e = 0; e < sizeof exps / sizeof exps[0]; e++)
            for (size_t m = 0; m < sizeof mans / sizeof mans[0]; m++)
                v[n++] = qmoe_bits_to_f32(s << 31 | exps[e] << 23 | mans[m]);
    while (n < N) v[n++] = qmoe_bits_to_f32((uint32_t)qt_next(r));
    static const int64_t lens[] = {N, N - 1, 15, 17, 1, 0};
    for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++) {
        memset(got, 0xAB, sizeof got);
        isa->to_bf16(got, v, lens[l]);
        int64_t bad = 0;
        for (int64_t i = 0; i < lens[l]; i++) bad += got[i] != qmoe_f32_to_bf16(v[i]);
        for (int64_t i = lens[l]; i < N; i++) bad += got[i] != 0xABAB; /* nothing past n */
        CHECK_MSG(bad == 0, "%s to_bf16, n = %lld: %lld values differ", isa->name,
                  (long long)lens[l], (long long)bad);
    }
}

int main(void)
{
    qt_rng r = {77};
    int tested = 0;
    for (int32_t id = 0; id < 16; id++) {
        const qmoe_gemm_isa *isa = qmoe_gemm_isa_for(id);
        if (!isa || !isa->to_bf16 || !qmoe_cpu_runs_kernel(id)) continue;
        check_table(isa, &r);
        tested++;
    }
    if (!tested) return qt_skip("test_convert_bf16", "no table with a vector bf16 form runs here");
    return qt_finish("test_convert_bf16");
}
