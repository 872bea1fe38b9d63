/*
 * The weighted row sums of finalize routing (kernels/rows_sum.h): every implementation this CPU
 * runs equals, bit for bit, the sum written here in float32 (each element: acc, then + w[j] * row
 * in choice order, no fused multiply-add), over float32 and bfloat16 rows, tails of every width.
 */
#include <stdlib.h>
#include <string.h>

#include "core/halfconv.h"
#include "kernels/cpu_features.h"
#include "kernels/rows_sum.h"
#include "kernels/x86/rows_sum_avx512vnni.h"
#include "support/testlib.h"


static void expected(float *acc, int64_t H, char *const *rows, const float *w, int n, int bf16)
{
    for (int64_t h = 0; h < H; h++)
        for (int j = 0; j < n; j++) {
            float r = bf16 ? qmoe_bits_to_f32((uint32_t)((const uint16_t *)(void *)rows[j])[h] << 16)
                           : ((const float *)(void *)rows[j])[h];
            float p = w[j] * r;
            acc[h] = acc[h] + p;
        }
}

static void check(qmoe_rows_sum_fn f, const char *name, qt_rng *r)
{
    for (int round = 0; round < 200; round++) {
        int64_t H = qt_range(r, 1, 300);
        int n = (int)qt_range(r, 1, 32), bf16 = (int)qt_range(r, 0, 1);
        char *rows[32];
        float w[32], *a = malloc(sizeof(float) * (size_t)H), *b = malloc(sizeof(float) * (size_t)H);
        for (int j = 0; j < n; j++) {
            rows[j] = malloc((size_t)H * 4);
            for (int64_t h = 0; h < H; h++) {
                float v = qt_uniform(r, -4.0f, 4.0f);
                if (bf16) ((uint16_t *)(void *)rows[j])[h] = qmoe_f32_to_bf16(v);
                else ((float *)(void *)rows[j])[h] = v;
            }
            w[j] = qt_uniform(r, 0.0f, 1.0f);
        }
        for (int64_t h = 0; h < H; h++) a[h] = b[h] = qt_uniform(r, -1.0f, 1.0f);
        f(a, H, (const char *const *)rows, w, n, bf16);
        expected(b, H, rows, w, n, bf16);
        CHECK_MSG(!memcmp(a, b, sizeof(float) * (size_t)H), "%s: H %lld n %d bf16 %d", name,
                  (long long)H, n, bf16);
        for (int j = 0; j < n; j++) free(rows[j]);
        free(a), free(b);
    }
    float v[70];
    uint16_t d[70], e[70];
    for (int i = 0; i < 70; i++) v[i] = qt_uniform(r, -100.0f, 100.0f), e[i] = qmoe_f32_to_bf16(v[i]);
    qmoe_rows_sum_fn pick;
    qmoe_bf16_store_fn store;
    qmoe_rows_sum_pick(&pick, &store);
    store(d, v, 70);
    CHECK(!memcmp(d, e, sizeof d));
}

int main(void)
{
    qt_rng r = {42};
    check(qmoe_rows_sum_portable, "portable", &r);
#if defined(__x86_64__) && (!defined(QMOE_HAVE_AVX512_VNNI) || QMOE_HAVE_AVX512_VNNI)
    if (qmoe_cpu_features_get().avx512) check(qmoe_rows_sum_avx512, "avx512", &r);
    else fprintf(stderr, "rows_sum: no AVX-512 on this CPU: the portable sum only\n");
#endif
    return qt_finish("rows_sum");
}
