/*
 * The grouped matmul's epilogue on the shared GEMM driver (gemm_driver.h): per-token dequant of
 * the folded tile to the output's float type. A8W8 folded acc * xScale * scale already (xs NULL
 * here); A8W4 folded sum_g acc_g * scale_g and multiplies xScale last, as the vendor formula does.
 * The optional float32 bias comes after the scaling; one rounding to the output dtype.
 */
#include <string.h>

#include "core/halfconv.h"
#include "kernels/gmm_fast.h"
#include "kernels/epilogue_dequant.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <emmintrin.h> /* SSE2, part of x86-64: streaming stores */
#include <xmmintrin.h>
#define QMOE_STREAM_STORES 1
#endif

/* n floats -> bfloat16 by qmoe_f32_to_bf16's rule: the instruction set's vector form when it
 * has one, else this loop (branch-free, so it vectorizes). */
static void store_bf16(const qmoe_gemm_isa *isa, uint16_t *d, const float *v, int64_t n)
{
    if (isa->to_bf16) {
        isa->to_bf16(d, v, n);
        return;
    }
    for (int64_t j = 0; j < n; j++) d[j] = qmoe_f32_to_bf16(v[j]);
}

/* A row segment of bf16 output. Whole 64-byte lines go out as streaming stores: the output is
 * written once and never read here, and ordinary stores would first read every line from memory
 * (the output of a prefill is twice the weights' bytes) and evict the packed panels. */
static void store_bf16_row(const qmoe_gemm_isa *isa, uint16_t *d, const float *v, int64_t n)
{
#ifdef QMOE_STREAM_STORES
    if ((uintptr_t)d % 64 == 0 && n % 32 == 0) {
        uint16_t tmp[QMOE_PK_UNIT * QMOE_PK_BLOCK] __attribute__((aligned(16)));
        store_bf16(isa, tmp, v, n);
        for (int64_t j = 0; j < n; j += 8)
            _mm_stream_si128((__m128i *)(void *)(d + j), _mm_load_si128((const __m128i *)(const void *)(tmp + j)));
        return;
    }
#endif
    store_bf16(isa, d, v, n);
}

/* A row segment of float32 output, streamed in whole 64-byte lines for the same reason. */
static void store_f32_row(float *d, const float *v, int64_t n)
{
#ifdef QMOE_STREAM_STORES
    if ((uintptr_t)d % 64 == 0 && n % 16 == 0) {
        for (int64_t j = 0; j < n; j += 4) _mm_stream_ps(d + j, _mm_loadu_ps(v + j));
        return;
    }
#endif
    memcpy(d, v, sizeof(float) * (size_t)n);
}

void qmoe_epilogue_dequant(const qmoe_gemm_block *B, const qmoe_gemm_tile *t)
{
    const gmm_dequant_out *o = B->out;
    const qmoe_gmm_params *p = B->p;
    const moe_view *out = &o->out;
    const float *bias = (const float *)o->bias.data;
    int64_t nc = t->c_hi - t->c_lo;
    float v[QMOE_PK_UNIT * QMOE_PK_BLOCK]; /* a panel half is at most 64 columns */
    for (int64_t r = 0; r < t->rows; r++) {
        const float *fr = t->f + r * t->ldf;
        float xs = t->xs ? t->xs[r] : 1.0f;
        int64_t row = (t->m + r) * out->st[0];
        for (int64_t h = 0; h < 2; h++) {
            int64_t n0 = (h ? p->N2 : 0) + t->jc + t->c_lo;
            const float *fh = fr + h * t->half + t->c_lo;
            if (t->xs)
                for (int64_t c = 0; c < nc; c++) v[c] = fh[c] * xs;
            else
                memcpy(v, fh, sizeof(float) * (size_t)nc);
            if (bias) {
                const float *b = bias + B->e * o->bias.st[0];
                for (int64_t c = 0; c < nc; c++) v[c] += b[(n0 + c) * o->bias.st[1]];
            }
            int64_t at = row + n0 * out->st[1];
            if (out->st[1] == 1 && out->dtype == QMOE_DTYPE_BFLOAT16)
                store_bf16_row(B->isa, (uint16_t *)out->data + at, v, nc);
            else if (out->st[1] == 1 && out->dtype == QMOE_DTYPE_FLOAT32)
                store_f32_row((float *)out->data + at, v, nc);
            else
                moe_store_row(out, at, out->st[1], nc, v);
        }
    }
#ifdef QMOE_STREAM_STORES
    _mm_sfence(); /* streaming stores are weakly ordered: visible before the block is done */
#endif
}
