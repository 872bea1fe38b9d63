/* The portable weighted row sum and the choice of the fastest one (kernels/rows_sum.h). */
#include "kernels/rows_sum.h"

#include "core/halfconv.h"
#include "kernels/cpu_features.h"
#include "kernels/rows_sum_scalar.h"
#include "kernels/x86/rows_sum_avx512vnni.h"
#include "kernels/x86/parts.h"

#if !defined(QMOE_HAVE_AVX512_VNNI) && (defined(__x86_64__) || defined(_M_X64))
#define QMOE_HAVE_AVX512_VNNI 1
#endif

void qmoe_rows_sum_portable(float *acc, int64_t H, const char *const *rows, const float *w, int n,
                            int bf16)
{
    qmoe_rows_sum_columns(acc, 0, H, rows, w, n, bf16);
}

void qmoe_bf16_store_portable(uint16_t *d, const float *v, int64_t n)
{
    for (int64_t i = 0; i < n; i++) d[i] = qmoe_f32_to_bf16(v[i]);
}

void qmoe_rows_sum_pick(qmoe_rows_sum_fn *sum, qmoe_bf16_store_fn *store)
{
    *sum = qmoe_rows_sum_portable;
    *store = qmoe_bf16_store_portable;
#if QMOE_HAVE_AVX512_VNNI
    if (qmoe_cpu_features_get().avx512) {
        *sum = qmoe_rows_sum_avx512;
        *store = qmoe_f32_to_bf16_avx512;
    }
#endif
}
