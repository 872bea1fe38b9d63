/* Vector float16 / bfloat16 -> float32 forms (the tables' half_to_f32, which widen prepacked
 * 16-bit weight scales) against core/halfconv.h's scalar rule: every one of the 65536 bit
 * patterns of both formats, bit for bit except that a NaN need only stay a NaN of the same sign
 * (F16C quiets signalling NaNs; a scale is only ever multiplied), at lengths with a tail and
 * nothing written past n. */
#include <stdio.h>
#include <string.h>

#include "core/halfconv.h"
#include "kernels/cpu_features.h"
#include "kernels/gmm_fast.h"
#include "support/testlib.h"

enum { N = 1 << 16 };

static int same(float a, float b)
{
    uint32_t x = qmoe_f32_to_bits(a), y = qmoe_f32_to_bits(b);
    if (a != a || b != b) return a != a && b != b && (x >> 31) == (y >> 31);
    return x == y;
}

static void check_table(const qmoe_gemm_isa *isa)
{
    static uint16_t s[N];
    static float got[N];
    for (int64_t i = 0; i < N; i++) s[i] = (uint16_t)i;
    static const int64_t lens[] = {N, N - 1, 15, 17, 3, 1, 0};
    for (int bf16 = 0; bf16 < 2; bf16++)
        for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++) {
            memset(got, 0xAB, sizeof got);
            isa->half_to_f32(got, s, bf16, lens[l]);
            int64_t bad = 0, past = 0;
            for (int64_t i = 0; i < lens[l]; i++)
                bad += !same(got[i], bf16 ? qmoe_bf16_to_f32(s[i]) : qmoe_f16_to_f32(s[i]));
            for (int64_t i = lens[l]; i < N; i++) past += qmoe_f32_to_bits(got[i]) != 0xABABABABu;
            CHECK_MSG(bad == 0 && past == 0, "%s half_to_f32 (%s), n = %lld: %lld values differ, "
                      "%lld written past n", isa->name, bf16 ? "bf16" : "f16", (long long)lens[l],
                      (long long)bad, (long long)past);
        }
}

int main(void)
{
    int tested = 0;
    for (int32_t id = 0; id < 16; id++) {
        const qmoe_gemm_isa *isa = qmoe_gemm_isa_for(id);
        if (!isa || !isa->half_to_f32 || !qmoe_cpu_runs_kernel(id)) continue;
        check_table(isa);
        tested++;
    }
    if (!tested) return qt_skip("test_convert_half", "no table with a vector half form runs here");
    return qt_finish("test_convert_half");
}
