/*
 * Kernel selection by request and CPU features.
 *
 * QMOE_KERNEL_AUTO picks the fastest kernel this CPU runs, walking the architecture's priority
 * table (x86-64: amx_int8, avx512_vnni, avx_vnni, avx2; aarch64: neon_i8mm, neon_dot; then
 * portable, reference). The environment variable QMOE_ISA (a kernel name) caps that choice, so
 * every lower kernel can be exercised on one machine: the walk starts at the named kernel, so a
 * cap the CPU cannot run falls to the best kernel below it; a name not in this architecture's
 * table is ignored (AUTO stays the fastest). Explicit requests ignore QMOE_ISA and return NULL
 * when the CPU cannot run the kernel.
 */
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu_features.h"
#include "kernels/gmm_fast.h"
#include "kernels/kernel.h"
#include "kernels/x86_parts.h"
#include "kernels/arm_parts.h"
#include "qmoe/qmoe.h"

#define FAST_OPS(sym, isa, kid, kname)                                                           \
    static uint64_t sym##_scratch(const qmoe_gmm_params *p, int64_t rows, int64_t cols)        \
    {                                                                                            \
        return qmoe_fast_scratch_bytes(&isa, p, rows, cols);                                     \
    }                                                                                            \
    static void sym##_block(const qmoe_gmm_params *p, qmoe_thread_ctx *ctx, int64_t e,         \
                            int64_t m0, int64_t m1, int64_t j0, int64_t j1, float *s,           \
                            int64_t lds)                                                         \
    {                                                                                            \
        qmoe_fast_swiglu_block(&isa, p, ctx, e, m0, m1, j0, j1, s, lds);                         \
    }                                                                                            \
    static void sym##_quant(const qmoe_gmm_params *p, const float *s, int64_t lds, int64_t m0,  \
                            int64_t m1)                                                          \
    {                                                                                            \
        qmoe_fast_quantize_rows(&isa, p, s, lds, m0, m1);                                        \
    }                                                                                            \
    static const qmoe_kernel_ops sym = {                                                         \
        .id = kid,                                                                               \
        .name = kname,                                                                           \
        .row_block = 512,                                                                        \
        .col_align = QMOE_PK_UNIT,                                                               \
        .scratch_bytes = sym##_scratch,                                                          \
        .swiglu_block = sym##_block,                                                             \
        .quantize_rows = sym##_quant,                                                            \
    };

FAST_OPS(ops_portable, qmoe_isa_portable, QMOE_KERNEL_PORTABLE, "portable")
/* QMOE_HAVE_<SET>: the build compiled that set's files (cmake/qmoe_isa.cmake checks the compiler);
 * without the definitions (a build that does not run that check) x86-64 means all of them. */
#if !defined(QMOE_HAVE_AVX2) && (defined(__x86_64__) || defined(_M_X64))
#define QMOE_HAVE_AVX2 1
#define QMOE_HAVE_AVX_VNNI 1
#define QMOE_HAVE_AVX512_VNNI 1
#define QMOE_HAVE_AMX_INT8 1
#endif
#if QMOE_HAVE_AVX2
FAST_OPS(ops_avx2, qmoe_isa_avx2, QMOE_KERNEL_AVX2, "avx2")
#endif
#if QMOE_HAVE_AVX_VNNI
FAST_OPS(ops_avx_vnni, qmoe_isa_avx_vnni, QMOE_KERNEL_AVX_VNNI, "avx_vnni")
#endif
#if QMOE_HAVE_AVX512_VNNI
FAST_OPS(ops_avx512_vnni, qmoe_isa_avx512_vnni, QMOE_KERNEL_AVX512_VNNI, "avx512_vnni")
#endif
#ifndef QMOE_HAVE_NEON_DOT
#define QMOE_HAVE_NEON_DOT 0
#define QMOE_HAVE_NEON_I8MM 0
#endif
#if QMOE_HAVE_NEON_DOT
FAST_OPS(ops_neon_dot, qmoe_isa_neon_dot, QMOE_KERNEL_NEON_DOT, "neon_dot")
#endif
#if QMOE_HAVE_NEON_I8MM
FAST_OPS(ops_neon_i8mm, qmoe_isa_neon_i8mm, QMOE_KERNEL_NEON_I8MM, "neon_i8mm")
#endif
#if QMOE_HAVE_AMX_INT8

/* AMX-INT8: tiles pay off from 16 rows up (a C tile is 16 rows); smaller blocks (decode) take the
 * AVX-512 VNNI table, whose in-place NZ path streams the weights once. Both tables share the
 * packing and epilogue, so results do not depend on which one a block took. */
enum { AMX_MIN_ROWS = 16 };

static uint64_t ops_amx_scratch(const qmoe_gmm_params *p, int64_t rows, int64_t cols)
{
    uint64_t a = qmoe_fast_scratch_bytes(&qmoe_isa_amx_int8, p, rows, cols);
    uint64_t v = qmoe_fast_scratch_bytes(&qmoe_isa_avx512_vnni, p, rows, cols);
    return a > v ? a : v;
}

static void ops_amx_block(const qmoe_gmm_params *p, qmoe_thread_ctx *ctx, int64_t e, int64_t m0,
                          int64_t m1, int64_t j0, int64_t j1, float *s, int64_t lds)
{
    if (m1 - m0 < AMX_MIN_ROWS) {
        qmoe_fast_swiglu_block(&qmoe_isa_avx512_vnni, p, ctx, e, m0, m1, j0, j1, s, lds);
        return;
    }
    qmoe_fast_swiglu_block(&qmoe_isa_amx_int8, p, ctx, e, m0, m1, j0, j1, s, lds);
    qmoe_amx_release();
}

static void ops_amx_quant(const qmoe_gmm_params *p, const float *s, int64_t lds, int64_t m0,
                          int64_t m1)
{
    qmoe_fast_quantize_rows(&qmoe_isa_amx_int8, p, s, lds, m0, m1);
}

static const qmoe_kernel_ops ops_amx_int8 = {
    .id = QMOE_KERNEL_AMX_INT8,
    .name = "amx_int8",
    /* Each call repacks its columns' weights: 2048-row calls (the planner caps them at 16 MiB
     * of x) were 6-10% faster than 512 in bench_kernel; the VNNI kernel gained nothing. */
    .row_block = 2048,
    .col_align = QMOE_PK_UNIT,
    .scratch_bytes = ops_amx_scratch,
    .swiglu_block = ops_amx_block,
    .quantize_rows = ops_amx_quant,
};
#endif

const qmoe_gemm_isa *qmoe_gemm_isa_for(int32_t kernel_id)
{
    switch (kernel_id) {
    case QMOE_KERNEL_PORTABLE: return &qmoe_isa_portable;
#if QMOE_HAVE_AVX2
    case QMOE_KERNEL_AVX2: return &qmoe_isa_avx2;
#endif
#if QMOE_HAVE_AVX_VNNI
    case QMOE_KERNEL_AVX_VNNI: return &qmoe_isa_avx_vnni;
#endif
#if QMOE_HAVE_AVX512_VNNI
    case QMOE_KERNEL_AVX512_VNNI: return &qmoe_isa_avx512_vnni;
#endif
#if QMOE_HAVE_AMX_INT8
    case QMOE_KERNEL_AMX_INT8: return &qmoe_isa_amx_int8;
#endif
#if QMOE_HAVE_NEON_DOT
    case QMOE_KERNEL_NEON_DOT: return &qmoe_isa_neon_dot;
#endif
#if QMOE_HAVE_NEON_I8MM
    case QMOE_KERNEL_NEON_I8MM: return &qmoe_isa_neon_i8mm;
#endif
    }
    return NULL;
}

static const qmoe_kernel_ops *ops_for(int32_t kernel)
{
    switch (kernel) {
    case QMOE_KERNEL_REFERENCE: return &qmoe_kernel_reference;
    case QMOE_KERNEL_PORTABLE: return &ops_portable;
#if QMOE_HAVE_AVX2
    case QMOE_KERNEL_AVX2: return &ops_avx2;
#endif
#if QMOE_HAVE_AVX_VNNI
    case QMOE_KERNEL_AVX_VNNI: return &ops_avx_vnni;
#endif
#if QMOE_HAVE_AVX512_VNNI
    case QMOE_KERNEL_AVX512_VNNI: return &ops_avx512_vnni;
#endif
#if QMOE_HAVE_AMX_INT8
    case QMOE_KERNEL_AMX_INT8: return &ops_amx_int8;
#endif
#if QMOE_HAVE_NEON_DOT
    case QMOE_KERNEL_NEON_DOT: return &ops_neon_dot;
#endif
#if QMOE_HAVE_NEON_I8MM
    case QMOE_KERNEL_NEON_I8MM: return &ops_neon_i8mm;
#endif
    }
    return NULL;
}

/* AUTO's order on this architecture: the enum's order says nothing about speed across sets. */
static const int32_t priority[] = {
#if defined(__x86_64__) || defined(_M_X64)
    QMOE_KERNEL_AMX_INT8, QMOE_KERNEL_AVX512_VNNI, QMOE_KERNEL_AVX_VNNI, QMOE_KERNEL_AVX2,
#elif defined(__aarch64__)
    QMOE_KERNEL_NEON_I8MM, QMOE_KERNEL_NEON_DOT,
#endif
    QMOE_KERNEL_PORTABLE, QMOE_KERNEL_REFERENCE,
};
enum { PRIORITY_COUNT = sizeof priority / sizeof priority[0] };

const int32_t *qmoe_kernel_priority(size_t *count)
{
    *count = PRIORITY_COUNT;
    return priority;
}

/* Where AUTO's walk starts: the QMOE_ISA cap's place in the table; 0 when unset or not there. */
static size_t isa_cap(void)
{
    const char *v = getenv("QMOE_ISA");
    if (v)
        for (size_t i = 0; i < PRIORITY_COUNT; i++)
            if (!strcmp(v, qmoe_kernel_name((qmoe_kernel)priority[i]))) return i;
    return 0;
}

const qmoe_kernel_ops *qmoe_kernel_lookup(int32_t requested)
{
    if (requested == QMOE_KERNEL_AUTO) {
        for (size_t i = isa_cap(); i < PRIORITY_COUNT; i++) {
            const qmoe_kernel_ops *ops = ops_for(priority[i]);
            if (ops && qmoe_cpu_runs_kernel(priority[i])) return ops;
        }
        return &qmoe_kernel_reference;
    }
    if (!qmoe_cpu_runs_kernel(requested)) return NULL;
    return ops_for(requested);
}

const char *qmoe_kernel_name(qmoe_kernel kernel)
{
    switch (kernel) {
    case QMOE_KERNEL_AUTO: return "auto";
    case QMOE_KERNEL_REFERENCE: return "reference";
    case QMOE_KERNEL_PORTABLE: return "portable";
    case QMOE_KERNEL_AVX2: return "avx2";
    case QMOE_KERNEL_AVX_VNNI: return "avx_vnni";
    case QMOE_KERNEL_AVX512_VNNI: return "avx512_vnni";
    case QMOE_KERNEL_AMX_INT8: return "amx_int8";
    case QMOE_KERNEL_NEON_DOT: return "neon_dot";
    case QMOE_KERNEL_NEON_I8MM: return "neon_i8mm";
    }
    return "unknown";
}
