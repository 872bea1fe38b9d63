/*
 * The fast kernels' GEMM tables: one blocked driver (gemm_driver.c) shared by every instruction
 * set and every int8 matmul operator, and per instruction set a small table of its pieces
 * (gemm_s8_<isa>.c, epilogue_<isa>.c, pack_<isa>.c): micro-kernels, packing, the scale fold and
 * the driver's tuning. What an operator does with the folded tile is its epilogue's business.
 *
 * Packed weights ("units"): 16 weight columns; for every step of 4 k, 16 columns x 4 bytes,
 * byte (c, t) = W[4q + t][c] + off as uint8, off = 128 (int8 weights) or 8 (int4). That is the
 * operand order of vpdpbusd (uint8 x int8 -> int32, 4 products per lane): the weights are the
 * unsigned side and the activations x stay signed, so sum_k x * (W + off) = acc + off * sum_k x,
 * and the exact acc comes back with one subtraction of off * sum_k x per row (and group).
 * A block holds up to 4 units, interleaved per step: [q][unit][64 bytes], so a micro-kernel
 * reads one contiguous stream. Positions past the end of a K group are 0 and x is 0 there.
 */
#ifndef QMOE_KERNELS_GMM_FAST_H
#define QMOE_KERNELS_GMM_FAST_H

#include <stddef.h>
#include <stdint.h>

#include "core/gmm_params.h"
#include "kernels/isa_list.h"
#include "kernels/kernel.h"
#include "qmoe/qmoe.h"
#include "runtime/thread_ctx.h"

enum {
    QMOE_PK_UNIT = 16,  /* columns per unit */
    QMOE_PK_STEP = 64,  /* bytes per unit per step of 4 k */
    QMOE_PK_BLOCK = 4,  /* units per block */
    QMOE_PK_MAX_MR = 8, /* most rows a micro-kernel takes */
    QMOE_PK_MC = 48,    /* the driver's rows per accumulator block when the isa names none */
    /* bytes ahead of a weight stream read from memory that gemm_pf's first micro-tile of a
     * block prefetches: 8 KB covers DRAM's latency where 2 KB did not (docs/performance.md) */
    QMOE_PF_AHEAD = 8192,
};

typedef struct qmoe_gemm_isa {
    const char *name;
    int32_t kernel_id; /* qmoe_kernel */
    int mr;            /* rows per micro-tile */
    int nu;            /* units per micro-tile (<= QMOE_PK_BLOCK) */
    int mc;            /* rows per accumulator block of the driver (0: its default) */
    int row_block;     /* rows per block call the planners aim for (0: 512): each call packs its
                          column panels once and every row reuses them */
    /* Optional (NULL: none): blocks of fewer than few_rows_below rows run on this table instead
     * (the same bits); release, called on the thread that ran a block after it (state the
     * micro-kernels set up). */
    const struct qmoe_gemm_isa *few_rows;
    int few_rows_below;
    void (*release)(void);

    /* acc[r * ldacc + c] (= or +=) sum_{q < kq} sum_{t < 4} x[r * ldx + 4q + t] * wp[q * wstep +
     * 4c + t] for r < mr, c < 16 * nu (unit u at wp + 64u). wstep 0 repeats one step. */
    void (*gemm)(int mr, int nu, int64_t kq, const int8_t *x, int64_t ldx, const uint8_t *wp,
                 int64_t wstep, int32_t *acc, int64_t ldacc, int accumulate);

    /* Staged weight rows -> ceil(rows / 4) packed steps of nub units at dst (step stride
     * wstep); unit u's row r is at src[u] + r * stride[u] (16 int8, or 8 bytes of int4 nibbles);
     * rows past `rows` in the last step are 0. */
    void (*rearrange)(const uint8_t *const *src, const int64_t *stride, int64_t rows, int nub,
                      int int4, uint8_t *dst, int64_t wstep);

    /* f[r][c] = (first ? v : f[r][c] + v), v = (float)(acc[r][c] - xoff[r]) * xs[r] * ws[c]
     * evaluated left to right (the spec's order), r < rows, c < cols; xs NULL: no xs factor
     * (A8W4, whose xScale comes last, in the epilogue). */
    void (*fold)(int64_t rows, int64_t cols, const int32_t *acc, int64_t ldacc,
                 const int32_t *xoff, int64_t xoff_stride, const float *xs, const float *ws,
                 float *f, int64_t ldf, int first);

    /* Optional (NULL: none): gemm with x also given in tile order: xt holds the rows in groups
     * of 16, each group as K / 64 blocks of 16 rows x 64 k (a contiguous 1 KB A tile), group
     * stride xt_ld; xt points at the first row's group and the block of the call's first k
     * (a multiple of 64). kq is a multiple of 16; the last group is padded with zero rows to
     * 16 (rows past mr are computed and dropped). The driver uses it when every K chunk starts
     * at a multiple of 64. */
    void (*gemm_xt)(int mr, int nu, int64_t kq, const int8_t *x, int64_t ldx, const int8_t *xt,
                    int64_t xt_ld, const uint8_t *wp, int64_t wstep, int32_t *acc, int64_t ldacc,
                    int accumulate);

    /* Optional (NULL: none): acc (and, when cs is given, the column sums of the weight bytes,
     * as the gemm of a row of ones) for mr rows and nu units read in place from FRACTAL_NZ strip
     * rows (unit u's row r at src[u] + r * stride[u]), 4 * kq rows. Returns 0, having done
     * nothing, when it does not take this layout or row count. */
    int (*gemm_nz)(int mr, int nu, int int4, int64_t kq, const int8_t *x, int64_t ldx,
                   const uint8_t *const *src, const int64_t *stride, int32_t *acc, int64_t ldacc,
                   int32_t *cs, int accumulate);

    /* Optional (NULL: none): gemm on prepacked int4 steps (core/prepack.h): wp holds 32 bytes
     * per unit and step (unit u at wp + 32u, steps wstep apart), each the nibbles of the 64-byte
     * step gemm reads, expanded in registers. Same results as gemm on the expanded steps. */
    void (*gemm_i4)(int mr, int nu, int64_t kq, const int8_t *x, int64_t ldx, const uint8_t *wp,
                    int64_t wstep, int32_t *acc, int64_t ldacc, int accumulate);

    /* Optional (NULL: the driver expands codes with expand_c4 first): gemm_i4 on prepacked codes
     * (core/prepack.h): each nibble n of a step stands for the byte tbl[n] (16 bytes) of the
     * 64-byte step gemm reads, looked up in registers. Same results as gemm on those steps. */
    void (*gemm_c4)(int mr, int nu, int64_t kq, const int8_t *x, int64_t ldx, const uint8_t *wp,
                    int64_t wstep, const uint8_t *tbl, int32_t *acc, int64_t ldacc, int accumulate);

    /* Optional (NULL: gemm): gemm on steps whose bytes are all <= 15 (int4 weights + 8, the
     * ones of the row and column sums): for a set without a 4-byte dot product, where knowing
     * that no pair of products can saturate int16 halves the multiplies. Same results as gemm. */
    void (*gemm_u4)(int mr, int nu, int64_t kq, const int8_t *x, int64_t ldx, const uint8_t *wp,
                    int64_t wstep, int32_t *acc, int64_t ldacc, int accumulate);

    /* Optional (NULL: gemm): gemm that prefetches, for prepacked int8 weights read in place
     * from memory: each step's lines `ahead` bytes past them (0: none). Same results as gemm.
     * The driver's first micro-tile of a block asks for QMOE_PF_AHEAD (memory's latency); its
     * second one for the block's next K chunk, so that memory streams while the block's other
     * micro-tiles re-read this chunk from cache instead of all at once in the first one's
     * (docs/performance.md, "The next chunk prefetched"); the others for none. */
    void (*gemm_pf)(int mr, int nu, int64_t kq, const int8_t *x, int64_t ldx, const uint8_t *wp,
                    int64_t wstep, int64_t ahead, int32_t *acc, int64_t ldacc, int accumulate);

    /* Optional (NULL: gemm, then fold): gemm of one whole K group from zero (kq steps of 64-byte
     * units, as gemm) folded at once into float as fold does it: f[r][c] = (first ? v :
     * f[r][c] + v), v = (float)(acc[r][c] - xoff[r * xoff_stride]) * xs[r] * ws[c], xs NULL: no
     * xs factor, for r < mr, c < 16 * nu. The driver uses it for blocks of several micro-tiles,
     * where gemm + fold store and reload the int32 tile once per K chunk and fold it per group. */
    void (*gemm_fold)(int mr, int nu, int64_t kq, const int8_t *x, int64_t ldx, const uint8_t *wp,
                      int64_t wstep, const int32_t *xoff, int64_t xoff_stride, const float *xs,
                      const float *ws, float *f, int64_t ldf, int first);

    /* Optional (NULL: gemm_fold, or gemm then fold, per group): ng whole K groups of kq steps
     * each, group g's steps at wp + g * kq * wstep and its x at x + 4 * g * kq, int8 steps
     * (unit u at wp + 64u) or, with i4, gemm_i4's prepacked int4 steps (wp + 32u), folded in
     * group order as fold does it: f[r][c] = (first ? v_0 : f[r][c] + v_0) + v_1 + ... + v_ng-1,
     * or, with i4 = 2, gemm_c4's codes of the table tbl (NULL otherwise), or, with i4 = 3,
     * int8 steps as 0 whose bytes are all <= 15 (expanded int4: a kernel may take gemm_u4's way),
     * or, with i4 = 4 (only where groups_b6 says so), prepacked 6-bit steps (core/prepack.h:
     * 48 bytes a unit, unit u at wp + 48u) widened in registers,
     * v_g = (float)(acc_g[r][c] - xoff[r * xoff_stride + g]) * xs[r] * ws[g * ws_stride + c],
     * xs NULL: no xs factor, for r < mr, c < 16 * nu. For small groups, where a fold per group
     * through memory costs as much as the group's products. ws holds float32 (ws_kind 0) or the
     * 16 bits of float16 (1) / bfloat16 (2) scales, widened exactly as half_to_f32 does, or
     * (3) int8 multipliers of the bases wsb, row (wb0 + g) / wblk for group g (ws_stride apart),
     * widened as widen_s8 does; wsb NULL for the other kinds. */
    void (*gemm_groups)(int mr, int nu, int i4, const uint8_t *tbl, int64_t ng, int64_t kq,
                        const int8_t *x,
                        int64_t ldx, const uint8_t *wp, int64_t wstep, const int32_t *xoff,
                        int64_t xoff_stride, const float *xs, const void *ws, int ws_kind,
                        int64_t ws_stride, const float *wsb, int64_t wblk, int64_t wb0, float *f,
                        int64_t ldf, int first);
    /* Optional (0: the driver's chunk, 512): k per gemm_groups call in a block of one
     * micro-tile (decode) on 4-bit steps (int4, codes) read in place from memory: a call covers
     * one column half of the panel, so a smaller chunk keeps both halves' streams in flight. */
    int64_t groups_k_one;
    /* Nonzero: gemm_groups takes i4 = 4 (6-bit steps in place), which the driver then uses for
     * blocks of up to two micro-tiles of 6-bit objects; others widen a panel first. */
    int groups_b6;

    /* Optional (NULL: portable loop): prepacked int4 steps (32 bytes, gemm_i4's format) -> the
     * 64-byte steps gemm reads, `steps` of them, src and dst contiguous. */
    void (*expand_i4)(const uint8_t *src, int64_t steps, uint8_t *dst);

    /* Optional (NULL: portable loop): prepacked codes (gemm_c4's format) -> the 64-byte steps
     * gemm reads, byte tbl[n] for each nibble n. */
    void (*expand_c4)(const uint8_t *src, int64_t steps, uint8_t *dst, const uint8_t *tbl);

    /* Optional (NULL: portable loop): prepacked 6-bit steps (48 bytes, core/prepack.h) -> the
     * 64-byte steps gemm reads. */
    void (*expand_b6)(const uint8_t *src, int64_t steps, uint8_t *dst);

    /* Optional (NULL: the portable loop): n float16 (bf16 0) or bfloat16 (bf16 1) values ->
     * float32, exact (core/halfconv.h's rule; a signalling float16 NaN may come back quieted,
     * which no arithmetic use can tell apart): prepacked 16-bit weight scales, per panel. */
    void (*half_to_f32)(float *d, const uint16_t *s, int bf16, int64_t n);

    /* Optional (NULL: the portable loop): prepacked scale blocks -> float32, d[g * 128 + c] =
     * base[(g / block) * 128 + c] * (float)q[g * 128 + c] for g < G, c < 128 (one rounding: the
     * values prepacking checked). */
    void (*widen_s8)(float *d, const int8_t *q, const float *base, int64_t G, int64_t block);

    /* Optional (NULL: the portable loop): n floats -> bfloat16 by core/halfconv.h's
     * qmoe_f32_to_bf16, the same bits (epilogues with bf16 output). */
    void (*to_bf16)(uint16_t *d, const float *v, int64_t n);

    /* The benchmark's peak: `iters` rounds of the set's int8 dot-product instruction on
     * independent register accumulators; returns the int8 operations done (2 per multiply-add). */
    uint64_t (*peak_loop)(uint64_t iters);
} qmoe_gemm_isa;

/* Bytes of one gemm_groups scale of ws_kind k (float32, 16-bit, int8 multiplier). */
static inline size_t qmoe_ws_bytes(int kind) { return kind == 0 ? 4 : kind == 3 ? 1 : 2; }

/* The tables: the portable one, and qmoe_isa_<name> of every kernel in kernels/isa_list.h
 * (declared on every architecture; defined where QMOE_HAVE_<SET> is 1). */
extern const qmoe_gemm_isa qmoe_isa_portable;
#define QMOE_ISA_DECLARE_(SET, name, ...) extern const qmoe_gemm_isa qmoe_isa_##name;
QMOE_ISA_LIST(QMOE_ISA_DECLARE_, QMOE_ISA_SKIP)
#undef QMOE_ISA_DECLARE_

/* Portable pieces other tables reuse. */
void qmoe_rearrange_portable(const uint8_t *const *src, const int64_t *stride, int64_t rows,
                             int nub, int int4, uint8_t *dst, int64_t wstep);
void qmoe_fold_portable(int64_t rows, int64_t cols, const int32_t *acc, int64_t ldacc,
                        const int32_t *xoff, int64_t xoff_stride, const float *xs,
                        const float *ws, float *f, int64_t ldf, int first);
void qmoe_swiglu_portable(int64_t rows, int64_t nc, const float *f, int64_t ldf, int64_t gate,
                          const float *corr, const float *xs, float limit, float *s, int64_t lds);

/* Test entry point, built only into the tests' library (QMOE_TESTING): the exact int32
 * accumulators of rows [m0, m1), every K group, for the act columns [j0, j1) followed by the gate
 * columns [N2 + j0, N2 + j1): acc[((m - m0) * G + g) * 2 * (j1 - j0) + c]. Uses the same
 * packing, micro-kernel and correction as the operators' blocks. */
void qmoe_fast_acc_block(const qmoe_gemm_isa *isa, const qmoe_gmm_params *p, qmoe_thread_ctx *ctx,
                         int64_t e, int64_t m0, int64_t m1, int64_t j0, int64_t j1, int32_t *acc);

/* Prepacked weights (core/prepack.h): the scratchpad prepacking needs, and p's expert e written
 * as pp's expert de (pp's geometry set by the caller) by the raw path's own packing code; its
 * scales go to pp's ws as its ws_kind says or, with ws32, to ws32 as float32 [panels][G][128]
 * (the caller keeps them as scale blocks). 0 when the object keeps codes and a weight value is
 * not in its table (the record is then incomplete), else 1. */
struct qmoe_weights;
uint64_t qmoe_fast_prepack_scratch_bytes(const qmoe_gemm_isa *isa, const qmoe_gmm_params *p);
int qmoe_fast_prepack_expert(const qmoe_gemm_isa *isa, const qmoe_gmm_params *p, int64_t e,
                              int64_t de, void *scratch, struct qmoe_weights *pp, float *ws32);

/* The table behind a kernel id; NULL for the reference kernel or one this build lacks. */
const qmoe_gemm_isa *qmoe_gemm_isa_for(int32_t kernel_id);

#endif
