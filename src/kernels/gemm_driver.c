/*
 * The blocked GEMM driver shared by every instruction set and every int8 matmul operator: weight
 * layout decoding, staging through the copy queue, packing (or prepacked panels), the tile loop
 * and the scale fold. What happens to a folded float tile is the operator's epilogue
 * (gemm_driver.h): SwiGLU + quant for GroupedMatmulSwigluQuant (epilogue_swiglu_quant.c),
 * per-token dequant to a float type for the grouped matmul (epilogue_dequant.c).
 *
 * A block (expert e, rows [m0, m1), output columns [j0, j1)) goes panel by panel: a panel is up
 * to 64 output columns of each of two column halves, weight columns j and N2 + j (for SwiGLU the
 * activated and the gate half; for the plain matmul simply its left and right half). Its weights
 * are streamed, chunk of K by chunk, through the copy queue into a staging buffer of the
 * scratchpad and rearranged there once into the micro-kernel's order (gmm_fast.h); then every
 * row of the block reuses them. Rows go in blocks of mc, K in chunks that never cross a scale
 * group, so the int32 accumulators of one group are exact and are folded into float with that
 * group's scale; the float tile then goes to the epilogue.
 * Micro-kernels with a gemm_xt (AMX) also get x copied once per call in tile order, so each
 * A tile is one contiguous kilobyte instead of 16 rows K bytes apart, for every column panel.
 * A8W4 folds sum_g acc_g * ws_g and the epilogue multiplies xScale last (the vendor formula);
 * SwiGLU also adds corr = bias - 8 * sum_g ws_g * colsum_g, the vendor's high/low nibble formula
 * rewritten exactly. A8W8 multiplies in the spec's order, acc * xScale * ws (per group, summed in
 * group order), so xScale goes into the fold and the epilogue gets none: the same float
 * operations as the reference kernel, which keeps a weight scale near FLT_MAX from overflowing
 * acc * ws where the spec's product is finite.
 */
#include "kernels/gemm_driver.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/gmm_access.h"
#include "core/prepack.h"
#include "runtime/copyq.h"
#include "runtime/trace.h"

enum {
    MC = QMOE_PK_MC,  /* rows per block of the accumulator tile (unless the isa says) */
    KC = 512,         /* K positions per chunk (multiple of 16) */
    STAGE_ROW = 64,   /* staging bytes per K row: at most 4 units of int8 */
    PANEL_BUDGET = 1280 * 1024, /* packed panel bytes kept in L2 */
    IN_PLACE_ROWS = 16,         /* blocks of at most this many rows read weight tiles in place */
    GROUPS_MAX_K = 128,         /* groups of at most this many k go through gemm_groups */
};

typedef struct fast_layout {
    int64_t gk, gkp, Kp; /* group size, padded to 4, padded K */
    int64_t U;           /* units per half of a panel (<= 4) */
    int64_t rows;        /* row capacity of xoff */
    int64_t mc;          /* rows per accumulator block */
    int direct_x;        /* x rows are read in place */
    int tiled_x;         /* x is also packed in tile order for gemm_xt (xt, Kt bytes a row) */
    int64_t Kt;
    uint64_t wp, wsg, corr, csum, cs, stage, ones, onesw, tmp, xoff, xs, xpack, xt, acc, f, sr,
        total;
} fast_layout;

static uint64_t take(uint64_t *off, uint64_t bytes)
{
    uint64_t at = *off;
    *off += (bytes + 63u) & ~(uint64_t)63u;
    return at;
}

static int64_t units_for(const qmoe_gmm_params *p, int64_t Kp, int64_t cols)
{
    int64_t U = (cols + QMOE_PK_UNIT - 1) / QMOE_PK_UNIT;
    if (U > QMOE_PK_BLOCK) U = QMOE_PK_BLOCK;
    if (U < 1) U = 1;
    /* Keep the packed panel (weights and per-group scales) within a share of L2. */
    while (U > 1 && (uint64_t)(2 * QMOE_PK_UNIT * U) * (uint64_t)(Kp + 4 * p->G) > PANEL_BUDGET) U--;
    return U;
}

/* The scratchpad of one call. Sizes cannot overflow: every term is bounded by a validated shape
 * (K < 65536, N <= 10240, G <= K, rows <= M, and M * K bytes of x exist). Prepacked weights (and
 * the prepacking itself, `prepack`) use panels of QMOE_PP_COLS columns: 4 units. */
static fast_layout layout_for(const qmoe_gemm_isa *isa, const qmoe_gmm_params *p, int64_t rows,
                              int64_t cols, int prepack)
{
    fast_layout L;
    L.mc = isa->mc > 0 ? isa->mc : MC;
    L.gk = p->group_k;
    L.gkp = (L.gk + 3) & ~(int64_t)3;
    L.Kp = L.gkp * p->G;
    L.U = prepack || p->pp ? QMOE_PP_COLS / QMOE_PK_UNIT : units_for(p, L.Kp, cols);
    L.rows = rows;
    L.direct_x = p->x_s[1] == 1 && L.gk == L.gkp;
    /* Tile-ordered x: every chunk starts at a multiple of 64 when the group size is one. Blocks
     * of up to IN_PLACE_ROWS rows take the in-place path instead. */
    L.tiled_x = isa->gemm_xt && L.direct_x && L.gk > 0 && L.gk % 64 == 0 &&
                rows > IN_PLACE_ROWS && L.mc % 16 == 0;
    L.Kt = L.tiled_x ? L.Kp : 0;
    uint64_t cols2 = (uint64_t)(2 * QMOE_PK_UNIT * L.U);
    uint64_t mc = (uint64_t)(rows < L.mc ? rows : L.mc);
    uint64_t off = 0;
    L.wp = take(&off, cols2 * (uint64_t)L.Kp);
    L.wsg = take(&off, cols2 * (uint64_t)p->G * sizeof(float));
    L.corr = take(&off, cols2 * sizeof(float));
    L.csum = take(&off, cols2 * sizeof(double));
    L.cs = take(&off, cols2 * sizeof(int32_t));
    L.stage = take(&off, (uint64_t)KC * STAGE_ROW + QMOE_PK_BLOCK * 64);
    L.ones = take(&off, KC);
    L.onesw = take(&off, QMOE_PK_STEP);
    L.tmp = take(&off, QMOE_PK_MAX_MR * QMOE_PK_UNIT * QMOE_PK_BLOCK * sizeof(int32_t));
    L.xoff = take(&off, (uint64_t)rows * (uint64_t)p->G * sizeof(int32_t));
    L.xs = take(&off, mc * sizeof(float));
    L.xpack = take(&off, L.direct_x ? 0 : mc * (uint64_t)L.Kp);
    L.xt = take(&off, (uint64_t)((rows + 15) / 16 * 16) * (uint64_t)L.Kt);
    L.acc = take(&off, mc * cols2 * sizeof(int32_t));
    L.f = take(&off, mc * cols2 * sizeof(float));
    /* prepacked: S of a panel whose columns start off a 16-column edge (kernel.h lets a block
     * start anywhere; the planner never does) */
    L.sr = take(&off, p->pp ? mc * QMOE_PP_COLS * sizeof(float) : 0);
    L.total = off;
    return L;
}

/* The table a block of `rows` rows runs on (a table may hand blocks of few rows to another). */
static const qmoe_gemm_isa *isa_for_rows(const qmoe_gemm_isa *isa, int64_t rows)
{
    return isa->few_rows && rows < isa->few_rows_below ? isa->few_rows : isa;
}

/* ---------------------------------------------------------------- weight staging ----------- */

/* Where the 16 weight columns [n, n + 16) of row k live as plain bytes: row k at
 * base + (k / 16) * a + (k % 16) * b, 16 int8 or 8 bytes of int4 in a row. 0: not plain bytes. */
static int unit_source(const qmoe_gmm_params *p, int64_t e, int64_t n, const uint8_t **base,
                       int64_t *a, int64_t *b)
{
    const int64_t *s = p->w_s;
    const uint8_t *w = p->w;
    if (p->w_list) { /* per-expert weight list: the expert's own base, no expert stride */
        w = p->w_list[e];
        e = 0;
    }
    switch ((qmoe_wlayout)p->w_layout) {
    case QMOE_W_INT8_NZ:
        if (s[4] != 1 || n % 16) return 0;
        *base = w + e * s[0] + (n / 32) * s[1] + n % 32;
        *a = s[2];
        *b = s[3];
        return 1;
    case QMOE_W_INT8_ND:
        if (s[2] != 1) return 0;
        *base = w + e * s[0] + n;
        *a = 16 * s[1];
        *b = s[1];
        return 1;
    case QMOE_W_INT4_NZ:
        if (s[4] != 1 || n % 16 || (s[0] | s[1] | s[2] | s[3]) & 1) return 0;
        *base = w + (e * s[0] + (n / 64) * s[1] + n % 64) / 2;
        *a = s[2] / 2;
        *b = s[3] / 2;
        return 1;
    case QMOE_W_INT4_ND:
        if (s[2] != 1 || (s[0] | s[1] | n) & 1) return 0;
        *base = w + (e * s[0] + n) / 2;
        *a = 8 * s[1];
        *b = s[1] / 2;
        return 1;
    case QMOE_W_INT32_NZ:
        if (s[4] != 1 || n % 16) return 0;
        *base = w + 4 * (e * s[0] + (n / 64) * s[1] + (n % 64) / 8);
        *a = 4 * s[2];
        *b = 4 * s[3];
        return 1;
    case QMOE_W_INT32_ND:
        if (s[2] != 1 || n % 8) return 0;
        *base = w + 4 * (e * s[0] + n / 8);
        *a = 64 * s[1];
        *b = 4 * s[1];
        return 1;
    }
    return 0;
}

static void push(qmoe_copyq *q, void *dst, const void *src, size_t rows, size_t row_bytes,
                 size_t dst_stride, size_t src_stride)
{
    if (qmoe_copyq_pending(q) >= QMOE_COPYQ_DEPTH) (void)qmoe_copyq_pop(q);
    qmoe_copyq_push(q, dst, src, rows, row_bytes, dst_stride, src_stride);
}

/* Stages weight rows [k0, k0 + rows) of columns [n0, n0 + ncols) (nu units; columns past ncols
 * are 0) into `stage`, run by run: units whose rows continue one another in memory (a FRACTAL_NZ
 * strip, an ND row) form a run, copied through the copy queue as one block of rows x run bytes
 * (a single contiguous copy when the source rows are contiguous too). Anything else (unaligned
 * or partial units, unusual strides) is gathered element by element. With in_place (blocks of
 * a few rows, where a copy would cost as much as all the arithmetic done with it) plain runs are
 * read where they are. On return unit u's row r is at src[u] + r * stride[u]. */
static void stage_rows(const qmoe_gmm_params *p, qmoe_copyq *q, int64_t e, int64_t n0,
                       int64_t ncols, int64_t nu, int64_t k0, int64_t rows, uint8_t *stage,
                       int in_place, const uint8_t **src, int64_t *stride)
{
    int int4 = p->mode == QMOE_MODE_A8W4;
    int64_t bpu = int4 ? 8 : 16;
    uint8_t *at = stage;
    int64_t u = 0;
    while (u < nu) {
        const uint8_t *base;
        int64_t a, b, n = n0 + QMOE_PK_UNIT * u;
        if (ncols - QMOE_PK_UNIT * u < QMOE_PK_UNIT || !unit_source(p, e, n, &base, &a, &b)) {
            int64_t cnt = ncols - QMOE_PK_UNIT * u;
            for (int64_t r = 0; r < rows; r++) {
                uint8_t *d = at + r * bpu;
                for (int64_t c = 0; c < QMOE_PK_UNIT; c++) {
                    int v = c < cnt ? qmoe_w_get(p, e, k0 + r, n + c) : 0;
                    if (!int4) d[c] = (uint8_t)v;
                    else if (c & 1) d[c / 2] = (uint8_t)(d[c / 2] | (v & 0xF) << 4);
                    else d[c / 2] = (uint8_t)(v & 0xF);
                }
            }
            src[u] = at;
            stride[u] = bpu;
            at += (rows * bpu + 63) & ~(int64_t)63;
            u++;
            continue;
        }
        /* Merge the following units that continue the same byte rows. */
        int64_t len = bpu, u1 = u + 1;
        for (; u1 < nu && ncols - QMOE_PK_UNIT * u1 >= QMOE_PK_UNIT; u1++) {
            const uint8_t *nb;
            int64_t na, nbb;
            if (!unit_source(p, e, n0 + QMOE_PK_UNIT * u1, &nb, &na, &nbb) || nb != base + len ||
                na != a || nbb != b)
                break;
            len += bpu;
        }
        if (in_place && a == 16 * b) {
            for (int64_t i = u; i < u1; i++) {
                src[i] = base + k0 * b + (i - u) * bpu;
                stride[i] = b;
            }
            u = u1;
            continue;
        }
        if (a == 16 * b && b == len) {
            push(q, at, base + k0 * b, 1, (size_t)(rows * len), (size_t)(rows * len),
                 (size_t)(rows * len));
        } else if (a == 16 * b) {
            push(q, at, base + k0 * b, (size_t)rows, (size_t)len, (size_t)len, (size_t)b);
        } else {
            for (int64_t r = 0; r < rows;) {
                int64_t k = k0 + r, run = 16 - k % 16;
                if (run > rows - r) run = rows - r;
                push(q, at + r * len, base + (k / 16) * a + (k % 16) * b, (size_t)run,
                     (size_t)len, (size_t)len, (size_t)b);
                r += run;
            }
        }
        for (int64_t i = u; i < u1; i++) {
            src[i] = at + (i - u) * bpu;
            stride[i] = len;
        }
        at += (rows * len + 63) & ~(int64_t)63;
        u = u1;
    }
    while (qmoe_copyq_pending(q)) (void)qmoe_copyq_pop(q);
}

/* ---------------------------------------------------------------- panel packing ------------ */

typedef struct panel {
    int64_t jc, nc, nu; /* output columns [jc, jc + nc), nu = used units per half */
    uint8_t *wp;        /* act block, then gate block at wp + blk */
    int64_t blk, wstep;
    float *wsg;         /* [G][2 * 16 * U]: act columns then gate columns */
    /* prepacked 16-bit scales (same layout) that gemm_groups reads in place; the other paths
     * read wsg, into which they are widened first (run_block). NULL: wsg holds the scales. */
    const uint16_t *ws16;
    int ws16_kind; /* 1 float16, 2 bfloat16 */
    /* prepacked scale blocks, read in place by gemm_groups as ws16 is: multipliers (same layout)
     * and bases [G / wblk][ld]. NULL: none, or widened into wsg. */
    const int8_t *ws8;
    const float *wsb8;
    int64_t wblk;
    float *corr;        /* [2 * 16 * U] */
    int64_t ld;         /* 2 * 16 * U */
    int i4;             /* wp holds prepacked int4 steps for the isa's gemm_i4 (32 bytes a unit) */
    const uint8_t *tbl; /* with i4: the steps are codes for gemm_c4 / gemm_groups, bytes tbl[code] */
    int stream;         /* wp is read in place from prepacked weights: gemm_pf when the isa has it */
    const uint8_t *rec; /* prepacked: the panel's record */
    int64_t next_panel; /* prepacked: bytes from rec to the record this block reads after this
                           one (the call's next panel, after its last row block), else 0 */
    int u4;             /* wp's bytes are all <= 15 (int4 weights): gemm_u4 when the isa has it */
    int b6;             /* with i4: wp holds prepacked 6-bit steps (48 bytes a unit) for gemm_groups */
    const uint8_t *lazy6; /* a 6-bit record that groups_block widens into wp a chunk at a time,
                             just before the chunk's micro-tiles (NULL: wp is ready) */
} panel;

typedef void (*gemm_fn)(int, int, int64_t, const int8_t *, int64_t, const uint8_t *, int64_t,
                        int32_t *, int64_t, int);

/* The isa's gemm for steps of bytes <= 15 (int4 weights, units of ones). */
static gemm_fn gemm_narrow(const qmoe_gemm_isa *isa) { return isa->gemm_u4 ? isa->gemm_u4 : isa->gemm; }

/* A panel unpacked from its record (int4, codes: expanded into the scratchpad): micro-tile
 * [r, r + mr) of the K range [pos, pos + span), computed K ranges outer and rows inner,
 * prefetches its share of the record unpacked next, so that memory streams it while this
 * panel's micro-tiles compute from cache instead of stalling the next unpacking (Qwen3's A8W4
 * gate/up spent a quarter of its time there: docs/performance.md). Into L2 (locality 2).
 * Inlined: GCC takes a function of prefetches alone for one without effects and drops its calls. */
static inline __attribute__((always_inline)) void prefetch_next(const fast_layout *L,
                                                                const panel *pn, int64_t rows,
                                                                int64_t pos, int64_t span,
                                                                int64_t r, int mr)
{
    if (pn->stream || !pn->next_panel) return;
    const uint8_t *next = pn->rec + pn->next_panel;
    int64_t n = L->Kp * rows, at = pos * rows;
    int64_t o0 = pn->next_panel * (at + r * span) / n & ~(int64_t)63,
            o1 = pn->next_panel * (at + (r + mr) * span) / n;
    for (int64_t o = o0; o < o1; o += 64) __builtin_prefetch(next + o, 0, 2);
}

static int64_t weight_col(const qmoe_gmm_params *p, const panel *pn, int64_t half, int64_t c)
{
    return (half ? p->N2 : 0) + pn->jc + c;
}

/* Column sums of one packed chunk (both halves) into cs (int32, + off per position). */
static void chunk_colsums(const qmoe_gemm_isa *isa, const panel *pn, const uint8_t *ones,
                          int64_t pos, int64_t kq, int32_t *cs, int first)
{
    for (int64_t h = 0; h < 2; h++)
        for (int64_t u0 = 0; u0 < pn->nu; u0 += isa->nu) {
            int nu = (int)(pn->nu - u0 < isa->nu ? pn->nu - u0 : isa->nu);
            gemm_narrow(isa)(1, nu, kq, (const int8_t *)ones, 0,
                      pn->wp + h * pn->blk + (pos / 4) * pn->wstep + u0 * QMOE_PK_STEP, pn->wstep,
                      cs + h * pn->ld / 2 + u0 * QMOE_PK_UNIT, 0, !first);
        }
}

/* The panel's weight scales per group (wsg) and a zeroed corr accumulator (csum). */
static void panel_scales(const qmoe_gmm_params *p, const fast_layout *L, uint8_t *sp, int64_t e,
                         const panel *pn)
{
    int64_t half = pn->ld / 2, valid = pn->nu * QMOE_PK_UNIT;
    double *csum = (double *)(sp + L->csum);
    for (int64_t g = 0; g < p->G; g++)
        for (int64_t h = 0; h < 2; h++)
            for (int64_t c = 0; c < valid; c++)
                pn->wsg[g * pn->ld + h * half + c] =
                    c < pn->nc ? qmoe_ws_get(p, e, g, weight_col(p, pn, h, c)) : 0.0f;
    for (int64_t c = 0; c < pn->ld; c++) csum[c] = 0.0;
}

/* A8W4, after group g's chunks: csum += ws_g * colsum_g (cs holds sum of W + 8). */
static void panel_colsums(const qmoe_gmm_params *p, const fast_layout *L, uint8_t *sp,
                          const panel *pn, int64_t g)
{
    int64_t half = pn->ld / 2, valid = pn->nu * QMOE_PK_UNIT;
    double *csum = (double *)(sp + L->csum);
    const int32_t *cs = (const int32_t *)(sp + L->cs);
    (void)p;
    for (int64_t h = 0; h < 2; h++)
        for (int64_t c = 0; c < valid; c++) {
            int64_t i = h * half + c;
            csum[i] += (double)pn->wsg[g * pn->ld + i] * (double)(cs[i] - 8 * L->gk);
        }
}

/* corr = bias - 8 * sum_g ws_g * colsum_g (A8W4), 0 (A8W8). */
static void panel_corr(const qmoe_gmm_params *p, const fast_layout *L, uint8_t *sp, int64_t e,
                       const panel *pn)
{
    int64_t half = pn->ld / 2;
    const double *csum = (const double *)(sp + L->csum);
    for (int64_t h = 0; h < 2; h++)
        for (int64_t c = 0; c < half; c++) {
            float v = 0.0f;
            if (p->mode == QMOE_MODE_A8W4 && p->bias && c < pn->nc) {
                int64_t n = weight_col(p, pn, h, c);
                double bias = p->bias[e * p->bias_s[0] + n * p->bias_s[1]];
                v = (float)(bias - 8.0 * csum[h * half + c]);
            }
            pn->corr[h * half + c] = v;
        }
}

static void pack_panel(const qmoe_gemm_isa *isa, const qmoe_gmm_params *p, qmoe_copyq *q,
                       const fast_layout *L, uint8_t *sp, int64_t e, int in_place, panel *pn)
{
    int int4 = p->mode == QMOE_MODE_A8W4;
    int32_t *cs = (int32_t *)(sp + L->cs);
    uint8_t *stage = sp + L->stage, *ones = sp + L->ones;
    memset(ones, 1, KC);
    panel_scales(p, L, sp, e, pn);
    if (L->gk == 0) memset(cs, 0, sizeof(int32_t) * (size_t)pn->ld); /* K = 0 */
    for (int64_t g = 0; g < p->G; g++) {
        for (int64_t a = 0; a < L->gk; a += KC) {
            int64_t rows = L->gk - a < KC ? L->gk - a : KC, pos = g * L->gkp + a;
            int64_t kq = (rows + 3) / 4;
            for (int64_t h = 0; h < 2; h++) {
                const uint8_t *src[QMOE_PK_BLOCK];
                int64_t stride[QMOE_PK_BLOCK];
                stage_rows(p, q, e, weight_col(p, pn, h, 0), pn->nc, pn->nu, g * L->gk + a, rows,
                           stage, in_place, src, stride);
                isa->rearrange(src, stride, rows, (int)pn->nu, int4,
                               pn->wp + h * pn->blk + (pos / 4) * pn->wstep, pn->wstep);
            }
            if (int4) chunk_colsums(isa, pn, ones, pos, kq, cs, a == 0);
        }
        if (int4) panel_colsums(p, L, sp, pn, g);
    }
    panel_corr(p, L, sp, e, pn);
}

/* ---------------------------------------------------------------- activations -------------- */

/* off * sum of x over each K group, for rows [m0, m0 + rows) -> xoff[r * G + g]. */
static void row_offsets(const qmoe_gemm_isa *isa, const qmoe_gmm_params *p, const fast_layout *L,
                        uint8_t *sp, int64_t m0, int64_t rows, int32_t *xoff)
{
    int32_t off = p->mode == QMOE_MODE_A8W4 ? 8 : p->pp && p->pp->u4 ? 0 : 128;
    if (off == 0) { /* the bytes are the values: nothing to take off */
        memset(xoff, 0, sizeof(int32_t) * (size_t)(rows * p->G));
        return;
    }
    if (!L->direct_x) {
        for (int64_t r = 0; r < rows; r++)
            for (int64_t g = 0; g < p->G; g++) {
                int32_t sum = 0;
                for (int64_t k = g * L->gk; k < (g + 1) * L->gk; k++) sum += qmoe_x_get(p, m0 + r, k);
                xoff[r * p->G + g] = off * sum;
            }
        return;
    }
    /* sum_k x via the micro-kernel against a unit of ones (wstep 0 repeats it). */
    uint8_t *onesw = sp + L->onesw;
    int32_t *tmp = (int32_t *)(sp + L->tmp);
    memset(onesw, 1, QMOE_PK_STEP);
    for (int64_t r = 0; r < rows; r += isa->mr) {
        int mr = (int)(rows - r < isa->mr ? rows - r : isa->mr);
        for (int64_t g = 0; g < p->G; g++) {
            gemm_narrow(isa)(mr, 1, L->gk / 4, p->x + (m0 + r) * p->x_s[0] + g * L->gk, p->x_s[0],
                             onesw, 0, tmp, QMOE_PK_UNIT, 0);
            for (int i = 0; i < mr; i++) xoff[(r + i) * p->G + g] = off * tmp[i * QMOE_PK_UNIT];
        }
    }
}

/* x rows [m, m + rows) with each K group padded to a multiple of 4 (zeros). */
static void pack_x(const qmoe_gmm_params *p, const fast_layout *L, int64_t m, int64_t rows,
                   int8_t *xp)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t g = 0; g < p->G; g++) {
            int8_t *d = xp + r * L->Kp + g * L->gkp;
            for (int64_t i = 0; i < L->gk; i++) d[i] = (int8_t)qmoe_x_get(p, m + r, g * L->gk + i);
            for (int64_t i = L->gk; i < L->gkp; i++) d[i] = 0;
        }
}

/* x rows [m, m + rows) in tile order: group of 16 rows i at xt + i * 16 * Kt, its k block t
 * (64 k) at + 1024 t, row r of it at + 64 r; the last group padded with zero rows, so rows past
 * the last multiple of 16 also go through tiles (a tile product costs the same for 1 row as for
 * 16, where the VNNI kernel costs per row). Read once per call so every A tile is one contiguous
 * kilobyte for all column panels. */
static void pack_xt(const qmoe_gmm_params *p, const fast_layout *L, int64_t m, int64_t rows,
                    int8_t *xt)
{
    int64_t kb = L->Kt / 64, padded = (rows + 15) / 16 * 16;
    for (int64_t r = 0; r < padded; r++) {
        int8_t *dst = xt + (r / 16) * 16 * L->Kt + (r % 16) * 64;
        if (r >= rows) {
            for (int64_t t = 0; t < kb; t++) memset(dst + t * 1024, 0, 64);
            continue;
        }
        const int8_t *src = p->x + (m + r) * p->x_s[0];
        for (int64_t t = 0; t < kb; t++) memcpy(dst + t * 1024, src + t * 64, 64);
    }
}

/* ---------------------------------------------------------------- the block ---------------- */

/* One K chunk of the accumulator tile: rows x (both halves of the panel). xt: the block's
 * rows in tile order for gemm_xt (pos is then a multiple of 64), or NULL. */
static void tile_chunk(const qmoe_gemm_isa *isa, const fast_layout *L, const panel *pn,
                       const int8_t *x, int64_t ldx, const int8_t *xt, int64_t rows, int64_t pos,
                       int64_t kq, int32_t *acc, int accumulate)
{
    if (xt) {
        for (int64_t r = 0; r < rows; r += isa->mr) {
            int mr = (int)(rows - r < isa->mr ? rows - r : isa->mr);
            for (int64_t h = 0; h < 2; h++)
                for (int64_t u0 = 0; u0 < pn->nu; u0 += isa->nu) {
                    int nu = (int)(pn->nu - u0 < isa->nu ? pn->nu - u0 : isa->nu);
                    const uint8_t *w =
                        pn->wp + h * pn->blk + (pos / 4) * pn->wstep + u0 * QMOE_PK_STEP;
                    int32_t *c = acc + r * pn->ld + h * (pn->ld / 2) + u0 * QMOE_PK_UNIT;
                    isa->gemm_xt(mr, nu, kq, x + r * ldx + pos, ldx,
                                 xt + (r / 16) * 16 * L->Kt + (pos / 64) * 1024, 16 * L->Kt, w,
                                 pn->wstep, c, pn->ld, accumulate);
                }
        }
        return;
    }
    int64_t ustep = pn->i4 ? QMOE_PK_STEP / 2 : QMOE_PK_STEP;
    const uint8_t *tbl = pn->i4 ? pn->tbl : NULL; /* codes: gemm_c4 */
    int pf = !pn->i4 && pn->stream && isa->gemm_pf;
    gemm_fn gemm = pn->i4 ? isa->gemm_i4 : pn->u4 ? gemm_narrow(isa) : isa->gemm;
    /* gemm_pf: the first micro-tile streams this chunk from memory; the second prefetches what
     * the block reads next, the panel's next chunk (kq steps on) or after its last the next
     * panel's first (the same place of its record), which the next call finds in cache
     * (gmm_fast.h) */
    int64_t next = pos + 4 * kq < L->Kp ? kq * pn->wstep
                   : pn->next_panel ? pn->next_panel - (pos / 4) * pn->wstep
                                    : 0;
    for (int64_t r = 0; r < rows; r += isa->mr) {
        int mr = (int)(rows - r < isa->mr ? rows - r : isa->mr);
        int64_t ahead = r == 0 ? QMOE_PF_AHEAD : r == isa->mr ? next : 0;
        prefetch_next(L, pn, rows, pos, 4 * kq, r, mr);
        for (int64_t h = 0; h < 2; h++)
            for (int64_t u0 = 0; u0 < pn->nu; u0 += isa->nu) {
                int nu = (int)(pn->nu - u0 < isa->nu ? pn->nu - u0 : isa->nu);
                const uint8_t *w = pn->wp + h * pn->blk + (pos / 4) * pn->wstep + u0 * ustep;
                int32_t *c = acc + r * pn->ld + h * (pn->ld / 2) + u0 * QMOE_PK_UNIT;
                if (tbl)
                    isa->gemm_c4(mr, nu, kq, x + r * ldx + pos, ldx, w, pn->wstep, tbl, c, pn->ld,
                                 accumulate);
                else if (pf)
                    isa->gemm_pf(mr, nu, kq, x + r * ldx + pos, ldx, w, pn->wstep, ahead, c,
                                 pn->ld, accumulate);
                else
                    gemm(mr, nu, kq, x + r * ldx + pos, ldx, w, pn->wstep, c, pn->ld, accumulate);
            }
    }
}

/* One K group of the block through the isa's gemm_fold: each micro-tile is computed over the
 * whole group and folded into f at once, the same operations as tile_chunk + fold (gmm_fast.h). */
static void fold_group(const qmoe_gemm_isa *isa, const fast_layout *L, const panel *pn,
                       const int8_t *x, int64_t ldx, int64_t rows, int64_t pos, int64_t kq,
                       const int32_t *xoff, int64_t xoff_stride, const float *xs, const float *ws,
                       float *f, int first)
{
    int64_t half = pn->ld / 2;
    for (int64_t r = 0; r < rows; r += isa->mr) {
        int mr = (int)(rows - r < isa->mr ? rows - r : isa->mr);
        prefetch_next(L, pn, rows, pos, 4 * kq, r, mr);
        for (int64_t h = 0; h < 2; h++)
            for (int64_t u0 = 0; u0 < pn->nu; u0 += isa->nu) {
                int nu = (int)(pn->nu - u0 < isa->nu ? pn->nu - u0 : isa->nu);
                int64_t c = h * half + u0 * QMOE_PK_UNIT;
                isa->gemm_fold(mr, nu, kq, x + r * ldx + pos, ldx,
                               pn->wp + h * pn->blk + (pos / 4) * pn->wstep + u0 * QMOE_PK_STEP,
                               pn->wstep, xoff + r * xoff_stride, xoff_stride, xs ? xs + r : NULL,
                               ws + c, f + r * pn->ld + c, pn->ld, first);
            }
    }
}

/* 6-bit record (core/prepack.h) -> the int8 steps: v = low nibble | high two bits << 4, byte v
 * + 96. Sixteen bytes at a time with one shift per plane, so the compiler keeps it in vectors:
 * at one row a matrix the panel is widened every call. */
static void expand_bits6(const uint8_t *src, int64_t steps, uint8_t *dst)
{
    for (int64_t q = 0; q < steps; q++, src += QMOE_PP_STEP6, dst += QMOE_PK_STEP) {
        const uint8_t *lo = src, *hi = src + 32;
        for (int i = 0; i < 16; i++) {
            dst[i] = (uint8_t)(((lo[i] & 0xF) | (hi[i] & 3) << 4) + 96);
            dst[16 + i] = (uint8_t)(((lo[16 + i] & 0xF) | (hi[i] >> 2 & 3) << 4) + 96);
            dst[32 + i] = (uint8_t)(((lo[i] >> 4) | (hi[i] >> 4 & 3) << 4) + 96);
            dst[48 + i] = (uint8_t)(((lo[16 + i] >> 4) | (hi[i] >> 6) << 4) + 96);
        }
    }
}

/* The isa's vector widening where it has one, else the portable loop. */
static void widen_bits6(const qmoe_gemm_isa *isa, const uint8_t *src, int64_t steps, uint8_t *dst)
{
    (isa->expand_b6 ? isa->expand_b6 : expand_bits6)(src, steps, dst);
}

/* Groups [g0, g0 + ng) of the block, one gemm_groups call per micro-tile. */
static void groups_chunk(const qmoe_gemm_isa *isa, const fast_layout *L, const panel *pn,
                         const int8_t *x, int64_t ldx, int64_t rows, int64_t G, int64_t g0,
                         int64_t ng, int64_t kq, const int32_t *xoff, const float *xs, float *f)
{
    int64_t half = pn->ld / 2,
            ustep = pn->b6 ? QMOE_PP_STEP6 : pn->i4 ? QMOE_PK_STEP / 2 : QMOE_PK_STEP;
    for (int64_t r = 0; r < rows; r += isa->mr) {
        int mr = (int)(rows - r < isa->mr ? rows - r : isa->mr);
        prefetch_next(L, pn, rows, 4 * g0 * kq, 4 * ng * kq, r, mr);
        for (int64_t h = 0; h < 2; h++)
            for (int64_t u0 = 0; u0 < pn->nu; u0 += isa->nu) {
                int nu = (int)(pn->nu - u0 < isa->nu ? pn->nu - u0 : isa->nu);
                int64_t c = h * half + u0 * QMOE_PK_UNIT;
                isa->gemm_groups(mr, nu, pn->b6 ? 4 : pn->i4 ? (pn->tbl ? 2 : 1) : pn->u4 ? 3 : 0,
                                 pn->tbl, ng, kq,
                                 x + r * ldx + 4 * g0 * kq, ldx,
                                 pn->wp + h * pn->blk + g0 * kq * pn->wstep + u0 * ustep,
                                 pn->wstep, xoff + r * G + g0, G, xs ? xs + r : NULL,
                                 pn->ws16  ? (const void *)(pn->ws16 + g0 * pn->ld + c)
                                 : pn->ws8 ? (const void *)(pn->ws8 + g0 * pn->ld + c)
                                           : (const void *)(pn->wsg + g0 * pn->ld + c),
                                 pn->ws16 ? pn->ws16_kind : pn->ws8 ? 3 : 0, pn->ld,
                                 pn->ws8 ? pn->wsb8 + g0 / pn->wblk * pn->ld + c : NULL, pn->wblk,
                                 pn->ws8 ? g0 % pn->wblk : 0, f + r * pn->ld + c, pn->ld, g0 == 0);
            }
    }
}

/* Every K group of the block through the isa's gemm_groups, one call per micro-tile and chunk of
 * groups (at most KC k, so a chunk's x rows stay in L1 and its weights in L2 for every
 * micro-tile): the same operations as fold_group (or tile_chunk + fold) group after group, with
 * the float tile kept in registers across a chunk's groups. */
static void groups_block(const qmoe_gemm_isa *isa, const fast_layout *L, panel *pn,
                         const int8_t *x, int64_t ldx, int64_t rows, int64_t G, int64_t kq,
                         const int32_t *xoff, const float *xs, float *f)
{
    const int64_t kc = rows <= isa->mr && pn->i4 && isa->groups_k_one ? isa->groups_k_one : KC;
    int64_t per = kc / (4 * kq) > 0 ? kc / (4 * kq) : 1;
    for (int64_t g0 = 0; g0 < G; g0 += per) {
        int64_t ng = G - g0 < per ? G - g0 : per;
        if (pn->lazy6) /* the chunk's steps of both halves, while the last chunk's are in cache */
            for (int64_t h = 0; h < 2; h++)
                widen_bits6(isa,
                            pn->lazy6 + (h * (L->Kp / 4) + g0 * kq) * pn->nu * QMOE_PP_STEP6,
                            ng * kq * pn->nu, pn->wp + h * pn->blk + g0 * kq * pn->wstep);
        groups_chunk(isa, L, pn, x, ldx, rows, G, g0, ng, kq, xoff, xs, f);
    }
    pn->lazy6 = NULL; /* widened whole: the block's further row blocks read it as it is */
}

/* The accumulator dump of the test entry point (qmoe_fast_acc_block) exists only in the tests'
 * build (QMOE_TESTING, see CMakeLists.txt); elsewhere DUMPING() is 0 and its branches are
 * compiled out of the driver. */
#ifdef QMOE_TESTING
#define DUMPING(A) ((A)->dump != NULL)
#else
#define DUMPING(A) 0
#endif

typedef qmoe_gemm_block block_args;

/* A block of few rows on plain FRACTAL_NZ strips: the isa's gemm_nz reads the weights in place
 * and rearranges them in registers, nothing is packed; scales, correction and epilogue as in
 * run_block. Returns 0 (before any output) when gemm_nz does not take this panel. */
static int direct_panel(const block_args *A, qmoe_copyq *q, uint8_t *sp, const fast_layout *L,
                        panel *pn, const int32_t *xoff)
{
    const qmoe_gemm_isa *isa = A->isa;
    const qmoe_gmm_params *p = A->p;
    int int4 = p->mode == QMOE_MODE_A8W4;
    int64_t rows = A->m1 - A->m0, half = pn->ld / 2;
    int32_t *acc = (int32_t *)(sp + L->acc), *cs = (int32_t *)(sp + L->cs);
    float *f = (float *)(sp + L->f), *xs = (float *)(sp + L->xs);
    const int8_t *x = p->x + A->m0 * p->x_s[0];
    panel_scales(p, L, sp, A->e, pn);
    for (int64_t r = 0; r < rows && !DUMPING(A); r++) xs[r] = p->xs[(A->m0 + r) * p->xs_s];
    /* A8W8: xScale in the fold (acc * xScale * ws); A8W4: last, in the epilogue (file comment) */
    const float *xs_fold = int4 ? NULL : xs, *xs_epi = int4 ? xs : NULL;
    for (int64_t g = 0; g < p->G; g++) {
        if (L->gk == 0) { /* K = 0: acc and column sums are 0 */
            memset(acc, 0, sizeof(int32_t) * (size_t)(rows * pn->ld));
            memset(cs, 0, sizeof(int32_t) * (size_t)pn->ld);
        }
        for (int64_t a = 0; a < L->gk; a += KC) {
            int64_t n = L->gk - a < KC ? L->gk - a : KC;
            for (int64_t h = 0; h < 2; h++) {
                const uint8_t *src[QMOE_PK_BLOCK];
                int64_t stride[QMOE_PK_BLOCK];
                stage_rows(p, q, A->e, weight_col(p, pn, h, 0), pn->nc, pn->nu, g * L->gk + a, n,
                           sp + L->stage, 1, src, stride);
                for (int64_t r = 0; r < rows; r += 4) {
                    int mr = (int)(rows - r < 4 ? rows - r : 4);
                    if (!isa->gemm_nz(mr, (int)pn->nu, int4, n / 4, x + r * p->x_s[0] + g * L->gk + a,
                                      p->x_s[0], src, stride, acc + r * pn->ld + h * half, pn->ld,
                                      int4 && r == 0 ? cs + h * half : NULL, a != 0))
                        return 0;
                }
            }
        }
        if (DUMPING(A)) {
            for (int64_t r = 0; r < rows; r++)
                for (int64_t h = 0; h < 2; h++)
                    for (int64_t c = 0; c < pn->nc; c++) {
                        int64_t nall = A->j1 - A->j0;
                        A->dump[(r * p->G + g) * 2 * nall + h * nall + (pn->jc - A->j0) + c] =
                            acc[r * pn->ld + h * half + c] - xoff[r * p->G + g];
                    }
            continue;
        }
        if (int4) panel_colsums(p, L, sp, pn, g);
        for (int64_t h = 0; h < 2; h++)
            isa->fold(rows, pn->nu * QMOE_PK_UNIT, acc + h * half, pn->ld, xoff + g, p->G,
                      xs_fold, pn->wsg + g * pn->ld + h * half, f + h * half, pn->ld, g == 0);
    }
    if (DUMPING(A)) return 1;
    panel_corr(p, L, sp, A->e, pn);
    qmoe_gemm_tile t = {A->m0, rows, pn->jc, 0, pn->nc, half, f, pn->ld, pn->corr, xs_epi,
                        NULL};
    A->epilogue(A, &t);
    return 1;
}

/* ---------------------------------------------------------------- prepacked weights -------- */

/* int4 record -> the micro-kernel's steps: stored byte i of a step holds bytes i and 32 + i. */
static void expand_int4(const uint8_t *src, int64_t steps, uint8_t *dst)
{
    for (int64_t q = 0; q < steps; q++, src += 32, dst += QMOE_PK_STEP)
        for (int i = 0; i < 32; i++) {
            dst[i] = (uint8_t)(src[i] & 0xF);
            dst[32 + i] = (uint8_t)(src[i] >> 4);
        }
}

/* Prepacked codes (int4's record format) -> the int8 steps: each nibble's byte of tbl. */
static void expand_codes(const uint8_t *src, int64_t steps, uint8_t *dst, const uint8_t *tbl)
{
    for (int64_t q = 0; q < steps; q++, src += 32, dst += QMOE_PK_STEP)
        for (int i = 0; i < 32; i++) {
            dst[i] = tbl[src[i] & 0xF];
            dst[32 + i] = tbl[src[i] >> 4];
        }
}

/* n 16-bit scales -> float32: the table's vector form, or core/halfconv.h's rule. */
static void half_to_f32(const qmoe_gemm_isa *isa, float *d, const uint16_t *s, int bf16, int64_t n)
{
    if (isa->half_to_f32) {
        isa->half_to_f32(d, s, bf16, n);
        return;
    }
    for (int64_t j = 0; j < n; j++) d[j] = bf16 ? qmoe_bf16_to_f32(s[j]) : qmoe_f16_to_f32(s[j]);
}

/* Scale blocks -> float32 (gmm_fast.h widen_s8). */
static void widen_s8(float *d, const int8_t *q, const float *base, int64_t G, int64_t block)
{
    for (int64_t g = 0; g < G; g++)
        for (int64_t c = 0; c < QMOE_PP_LD; c++) d[g * QMOE_PP_LD + c] = qmoe_pp_block_scale(q, base, block, g, c);
}

/* The 16 bits of the panel's scales as given, in panel_scales' order and zero where it has 0. */
static void panel_scale_bits(const qmoe_gmm_params *p, int64_t e, const panel *pn, uint16_t *d)
{
    int64_t half = pn->ld / 2, valid = pn->nu * QMOE_PK_UNIT;
    for (int64_t i = 0; i < p->G * pn->ld; i++) d[i] = 0;
    for (int64_t g = 0; g < p->G; g++)
        for (int64_t h = 0; h < 2; h++)
            for (int64_t c = 0; c < valid && c < pn->nc; c++)
                d[g * pn->ld + h * half + c] = qmoe_ws_bits16(p, e, g, weight_col(p, pn, h, c));
}

/* Panel pn->jc / QMOE_PP_COLS of expert e from the prepacked object: int8 in place; int4 in
 * place for a block of one micro-tile of rows and an isa with gemm_i4 (expanded in registers,
 * once), else expanded once into the scratchpad's panel buffer (every further micro-tile would
 * expand again; tile kernels load B tiles from memory); 6 bits in place for blocks of up to two
 * micro-tiles that go through gemm_groups (`grouped`) of an isa with groups_b6, else widened
 * (by groups_block a chunk at a time when grouped); scales and corrections in place. */
static void prepacked_panel(const qmoe_gemm_isa *isa, const qmoe_gmm_params *p,
                            const fast_layout *L, uint8_t *sp, int64_t e, int64_t rows,
                            int grouped, panel *pn)
{
    const struct qmoe_weights *pp = p->pp;
    int64_t i = pn->jc / QMOE_PP_COLS;
    const uint8_t *rec = pp->w + (uint64_t)e * pp->expert_wbytes + (uint64_t)i * pp->panel_wbytes;
    pn->rec = rec;
    pn->nc = p->N2 - pn->jc < QMOE_PP_COLS ? p->N2 - pn->jc : QMOE_PP_COLS;
    pn->nu = qmoe_pp_units(pp, i);
    pn->wstep = pn->nu * QMOE_PK_STEP;
    pn->blk = (L->Kp / 4) * pn->wstep;
    uint64_t ws_at = (uint64_t)(e * pp->panels + i) * (uint64_t)(pp->G * QMOE_PP_LD);
    pn->ws16 = NULL;
    pn->ws8 = NULL;
    if (pp->ws_block) { /* base * multiplier: a quarter of the scale bytes to stream */
        pn->wsg = (float *)(sp + L->wsg);
        pn->ws8 = (const int8_t *)pp->ws + ws_at;
        pn->wsb8 = pp->wsb + (uint64_t)(e * pp->panels + i) * (uint64_t)(pp->nblk * QMOE_PP_LD);
        pn->wblk = pp->ws_block;
    } else if (pp->ws_kind == QMOE_SCALE_F32) {
        pn->wsg = (float *)pp->ws + ws_at;
    } else { /* 16-bit scales: read in place by gemm_groups, else widened into the scratchpad */
        pn->wsg = (float *)(sp + L->wsg);
        pn->ws16 = (const uint16_t *)pp->ws + ws_at;
        pn->ws16_kind = pp->ws_kind == QMOE_SCALE_BF16 ? 2 : 1;
    }
    pn->corr = pp->corr + (uint64_t)(e * pp->panels + i) * QMOE_PP_LD;
    pn->i4 = pn->b6 = 0;
    pn->lazy6 = NULL;
    pn->stream = 1;
    pn->tbl = pp->codes && !pp->u4 ? pp->tbl : NULL; /* u4: read as int4 steps */
    /* in place up to two micro-tiles: widening each step in registers twice cost less than
     * widening the panel into the scratchpad once (8 rows a matrix: 12-24 % faster) */
    if (pp->bits6 && grouped && isa->groups_b6 && rows <= 2 * isa->mr) {
        pn->i4 = pn->b6 = 1;
        pn->wp = (uint8_t *)(uintptr_t)rec;
        pn->wstep = pn->nu * QMOE_PP_STEP6;
        pn->blk = (L->Kp / 4) * pn->wstep;
        return;
    }
    if (pp->bits6) { /* widened once into the scratchpad: int8 steps for every kernel; a chunk
                      * at a time by groups_block when the block goes through gemm_groups */
        pn->stream = 0;
        pn->wp = sp + L->wp;
        if (grouped)
            pn->lazy6 = rec;
        else
            widen_bits6(isa, rec, 2 * (L->Kp / 4) * pn->nu, pn->wp);
        return;
    }
    if (p->mode == QMOE_MODE_A8W8 && !pp->codes) {
        pn->wp = (uint8_t *)(uintptr_t)rec; /* read only */
        return;
    }
    if ((pn->tbl ? isa->gemm_c4 != NULL : isa->gemm_i4 != NULL) && !L->tiled_x && rows <= isa->mr) {
        pn->i4 = 1;
        pn->wp = (uint8_t *)(uintptr_t)rec;
        pn->wstep = pn->nu * (QMOE_PK_STEP / 2);
        pn->blk = (L->Kp / 4) * pn->wstep;
        return;
    }
    pn->stream = 0;
    pn->wp = sp + L->wp;
    int64_t steps = 2 * (L->Kp / 4) * pn->nu;
    if (pn->tbl)
        (isa->expand_c4 ? isa->expand_c4 : expand_codes)(rec, steps, pn->wp, pn->tbl);
    else
        (isa->expand_i4 ? isa->expand_i4 : expand_int4)(rec, steps, pn->wp);
}

/* Prepacking: expert e's records, packed by the same staging, rearrange and correction code as
 * the raw path (so the bytes and the corrections are the raw path's), then stored. */
/* Whether byte b of step s is padding (a k past its group's gk or a column past the panel's),
 * which a compact record stores as the byte of 0: byte b = 4 col + t of unit u, step q of its
 * half. */
static int step_padding(const struct qmoe_weights *pp, const panel *pn, int64_t s, int b)
{
    int64_t q = s / pn->nu % (pp->Kp / 4), u = s % pn->nu, pos = 4 * q + b % 4;
    return !(pos % pp->gkp < pp->gk && u * QMOE_PK_UNIT + b / 4 < pn->nc);
}

/* A record's int8 steps [s0, s0 + steps) as codes (core/prepack.h; v and rec at step s0): 0 when
 * a byte is not in the table and is not padding (padding, where x is 0 or whose column is
 * dropped, takes the code of 0). */
static int pack_codes(const struct qmoe_weights *pp, const panel *pn, const uint8_t *v, int64_t s0,
                      int64_t steps, uint8_t *rec)
{
    int16_t code[256];
    for (int b = 0; b < 256; b++) code[b] = -1;
    for (int c = 15; c >= 0; c--) code[pp->tbl[c]] = (int16_t)c; /* the first equal entry */
    const int16_t zero = code[128];
    uint8_t n[QMOE_PK_STEP];
    for (int64_t s = s0; s < s0 + steps; s++, v += QMOE_PK_STEP, rec += 32) {
        for (int b = 0; b < QMOE_PK_STEP; b++) {
            int16_t c = code[v[b]];
            if (c < 0) {
                if (!step_padding(pp, pn, s, b)) return 0;
                c = zero;
            }
            n[b] = (uint8_t)c;
        }
        for (int b = 0; b < 32; b++) rec[b] = (uint8_t)(n[b] | n[32 + b] << 4);
    }
    return 1;
}

/* The same for the codebook {0, ..., 15} (u4): each step byte W + 128 gives its code W at once,
 * a loop the compiler vectorizes (the table lookup above was a sixth of a model's load);
 * a step holding any other byte goes through pack_codes, which keeps padding and refuses the
 * rest. */
static int pack_u4(const struct qmoe_weights *pp, const panel *pn, const uint8_t *v, int64_t steps,
                   uint8_t *rec)
{
    for (int64_t s = 0; s < steps; s++, v += QMOE_PK_STEP, rec += 32) {
        uint8_t bad = 0;
        for (int b = 0; b < 32; b++) {
            const uint8_t lo = (uint8_t)(v[b] ^ 0x80), hi = (uint8_t)(v[32 + b] ^ 0x80);
            bad |= (uint8_t)((lo | hi) & 0xF0);
            rec[b] = (uint8_t)(lo | hi << 4);
        }
        if (bad && !pack_codes(pp, pn, v, s, 1, rec)) return 0;
    }
    return 1;
}

/* A record's int8 steps in 6 bits (core/prepack.h): 0 when a byte is outside 96..159 (W in
 * [-32, 31]) and is not padding (padding, as for codes, is stored as the byte of 0). */
static int pack_bits6(const struct qmoe_weights *pp, const panel *pn, const uint8_t *v,
                      int64_t steps, uint8_t *rec)
{
    uint8_t n[QMOE_PK_STEP];
    for (int64_t s = 0; s < steps; s++, v += QMOE_PK_STEP, rec += QMOE_PP_STEP6) {
        for (int b = 0; b < QMOE_PK_STEP; b++) {
            int c = v[b] - 96;
            if (c < 0 || c > 63) {
                if (!step_padding(pp, pn, s, b)) return 0;
                c = 32;
            }
            n[b] = (uint8_t)c;
        }
        for (int b = 0; b < 32; b++) rec[b] = (uint8_t)((n[b] & 0xF) | (n[32 + b] & 0xF) << 4);
        for (int b = 0; b < 16; b++)
            rec[32 + b] = (uint8_t)(n[b] >> 4 | (n[16 + b] >> 4) << 2 | (n[32 + b] >> 4) << 4 |
                                    (n[48 + b] >> 4) << 6);
    }
    return 1;
}

int qmoe_fast_prepack_expert(const qmoe_gemm_isa *isa, const qmoe_gmm_params *p, int64_t e,
                             int64_t de, void *scratch, struct qmoe_weights *pp, float *ws32)
{
    fast_layout L = layout_for(isa, p, 1, p->N2, 1);
    uint8_t *sp = scratch;
    qmoe_copyq q;
    qmoe_copyq_init(&q);
    panel pn;
    pn.i4 = pn.stream = pn.b6 = 0;
    pn.lazy6 = NULL;
    pn.rec = NULL;
    pn.next_panel = 0;
    pn.tbl = NULL;
    pn.u4 = p->mode == QMOE_MODE_A8W4;
    pn.ld = 2 * QMOE_PK_UNIT * L.U;
    pn.wp = sp + L.wp;
    pn.wsg = (float *)(sp + L.wsg);
    pn.ws16 = NULL;
    pn.ws16_kind = 0;
    pn.ws8 = NULL;
    pn.wsb8 = NULL;
    pn.wblk = 1;
    pn.corr = (float *)(sp + L.corr);
    for (int64_t i = 0; i < pp->panels; i++) {
        pn.jc = i * QMOE_PP_COLS;
        pn.nc = p->N2 - pn.jc < QMOE_PP_COLS ? p->N2 - pn.jc : QMOE_PP_COLS;
        pn.nu = (pn.nc + QMOE_PK_UNIT - 1) / QMOE_PK_UNIT;
        pn.wstep = pn.nu * QMOE_PK_STEP;
        pn.blk = (L.Kp / 4) * pn.wstep;
        pack_panel(isa, p, &q, &L, sp, e, 0, &pn);
        /* the scales of the units a last panel lacks are never read, but kept: zero, so the
         * object's bytes (and the scale blocks factored from them) do not depend on scratch */
        for (int64_t g = 0; g < p->G; g++)
            for (int64_t h = 0; h < 2; h++)
                for (int64_t c = pn.nu * QMOE_PK_UNIT; c < pn.ld / 2; c++)
                    pn.wsg[g * pn.ld + h * (pn.ld / 2) + c] = 0.0f;
        uint8_t *rec = pp->w + (uint64_t)de * pp->expert_wbytes + (uint64_t)i * pp->panel_wbytes;
        int64_t steps = 2 * (L.Kp / 4) * pn.nu;
        if (pp->codes) {
            if (!(pp->u4 ? pack_u4(pp, &pn, pn.wp, steps, rec) : pack_codes(pp, &pn, pn.wp, 0, steps, rec)))
                return 0;
        } else if (pp->bits6) {
            if (!pack_bits6(pp, &pn, pn.wp, steps, rec)) return 0;
        } else if (p->mode == QMOE_MODE_A8W8) {
            memcpy(rec, pn.wp, (size_t)(steps * QMOE_PK_STEP));
        } else {
            const uint8_t *v = pn.wp;
            for (int64_t s = 0; s < steps; s++, v += QMOE_PK_STEP, rec += 32)
                for (int b = 0; b < 32; b++) rec[b] = (uint8_t)(v[b] | v[32 + b] << 4);
        }
        uint64_t ws_at = (uint64_t)(de * pp->panels + i) * (uint64_t)(pp->G * QMOE_PP_LD);
        if (ws32)
            memcpy(ws32 + i * p->G * QMOE_PP_LD, pn.wsg, sizeof(float) * (size_t)(p->G * QMOE_PP_LD));
        else if (pp->ws_kind == QMOE_SCALE_F32)
            memcpy((float *)pp->ws + ws_at, pn.wsg, sizeof(float) * (size_t)(p->G * QMOE_PP_LD));
        else
            panel_scale_bits(p, e, &pn, (uint16_t *)pp->ws + ws_at);
        memcpy(pp->corr + (uint64_t)(de * pp->panels + i) * QMOE_PP_LD, pn.corr,
               sizeof(float) * QMOE_PP_LD);
    }
    return 1;
}

uint64_t qmoe_fast_prepack_scratch_bytes(const qmoe_gemm_isa *isa, const qmoe_gmm_params *p)
{
    return layout_for(isa, p, 1, p->N2, 1).total;
}

static void run_block(const block_args *A, uint8_t *sp, const fast_layout *L)
{
    const qmoe_gemm_isa *isa = A->isa;
    const qmoe_gmm_params *p = A->p;
    qmoe_copyq local_q, *q = A->ctx->copyq;
    if (!q) {
        qmoe_copyq_init(&local_q);
        q = &local_q;
    }
    int64_t rows_all = A->m1 - A->m0, ncols_all = A->j1 - A->j0;
    int32_t *xoff = (int32_t *)(sp + L->xoff);
    row_offsets(isa, p, L, sp, A->m0, rows_all, xoff);
    int8_t *xt = L->tiled_x ? (int8_t *)(sp + L->xt) : NULL;
    if (xt) pack_xt(p, L, A->m0, rows_all, xt);

    panel pn;
    pn.i4 = pn.stream = pn.b6 = 0;
    pn.lazy6 = NULL;
    pn.rec = NULL;
    pn.next_panel = 0;
    pn.tbl = NULL;
    pn.u4 = p->mode == QMOE_MODE_A8W4 || (p->pp && p->pp->u4); /* expanded steps: bytes <= 15 */
    pn.ld = 2 * QMOE_PK_UNIT * L->U;
    /* Small groups (ggml's 32): a fold per group through memory would cost as much as the
     * group's products; gemm_groups keeps the float tile in registers. */
    const int grouped = isa->gemm_groups && !xt && p->G > 1 && L->gk > 0 &&
                        L->gkp <= GROUPS_MAX_K && !DUMPING(A);
    pn.wp = sp + L->wp;
    pn.wsg = (float *)(sp + L->wsg);
    pn.ws16 = NULL;
    pn.ws16_kind = 0;
    pn.ws8 = NULL;
    pn.wsb8 = NULL;
    pn.wblk = 1;
    pn.corr = (float *)(sp + L->corr);
    int32_t *acc = (int32_t *)(sp + L->acc);
    float *f = (float *)(sp + L->f), *xs = (float *)(sp + L->xs);
    int8_t *xpack = (int8_t *)(sp + L->xpack);
    int64_t half = pn.ld / 2;
    int a8w4 = p->mode == QMOE_MODE_A8W4; /* where xScale goes: see the file comment */
    /* Prepacked panels sit at multiples of QMOE_PP_COLS (half): a range that starts elsewhere
     * computes the whole panel and keeps its columns [c_lo, c_hi). */
    int64_t jstart = p->pp ? A->j0 / half * half : A->j0;

    for (pn.jc = jstart; pn.jc < A->j1; pn.jc += half) {
        int64_t c_lo = 0, c_hi;
        if (p->pp) {
            QMOE_TRACE_START(A->ctx->trace, QMOE_EV_COPY, pn.jc / QMOE_PK_UNIT);
            prepacked_panel(isa, p, L, sp, A->e, rows_all, grouped, &pn);
            QMOE_TRACE_STOP(A->ctx->trace, QMOE_EV_COPY, pn.jc / QMOE_PK_UNIT);
            c_lo = A->j0 > pn.jc ? A->j0 - pn.jc : 0;
            c_hi = A->j1 - pn.jc < pn.nc ? A->j1 - pn.jc : pn.nc;
        } else {
            pn.nc = A->j1 - pn.jc < half ? A->j1 - pn.jc : half;
            pn.nu = (pn.nc + QMOE_PK_UNIT - 1) / QMOE_PK_UNIT;
            pn.wstep = pn.nu * QMOE_PK_STEP;
            pn.blk = (L->Kp / 4) * pn.wstep;
            c_hi = pn.nc;
            if (rows_all <= IN_PLACE_ROWS && isa->gemm_nz && L->direct_x &&
                rows_all <= L->mc && direct_panel(A, q, sp, L, &pn, xoff))
                continue;
            QMOE_TRACE_START(A->ctx->trace, QMOE_EV_COPY, pn.jc / QMOE_PK_UNIT);
            pack_panel(isa, p, q, L, sp, A->e, rows_all <= IN_PLACE_ROWS, &pn);
            QMOE_TRACE_STOP(A->ctx->trace, QMOE_EV_COPY, pn.jc / QMOE_PK_UNIT);
        }

        for (int64_t mb = A->m0; mb < A->m1; mb += L->mc) {
            int64_t rows = A->m1 - mb < L->mc ? A->m1 - mb : L->mc;
            const int8_t *x = p->x + mb * p->x_s[0];
            int64_t ldx = p->x_s[0];
            if (!L->direct_x) {
                pack_x(p, L, mb, rows, xpack);
                x = xpack;
                ldx = L->Kp;
            }
            const int32_t *xo = xoff + (mb - A->m0) * p->G;
            pn.next_panel = p->pp && pn.jc + half < A->j1 && mb + rows >= A->m1
                                ? (int64_t)p->pp->panel_wbytes
                                : 0;
            for (int64_t r = 0; r < rows && !DUMPING(A); r++) xs[r] = p->xs[(mb + r) * p->xs_s];
            /* Blocks of several micro-tiles: each micro-tile takes a whole group in one call
             * and folds it at once (no int32 tile stored and reloaded per K chunk, no fold
             * pass); the weights then stream from L2, not L1, which pays only with a full
             * block of rows when a group spans several chunks (32 rows at K = 2048 were 5-10%
             * slower). A block of one micro-tile keeps gemm_i4 / gemm_pf, which stream. */
            int fused = isa->gemm_fold && !xt && !pn.i4 && L->gk > 0 && rows > isa->mr &&
                        (L->gk <= KC || rows >= L->mc) && !DUMPING(A);
            if (!grouped && pn.ws16) { /* the other paths read float scales: widened once */
                half_to_f32(isa, pn.wsg, pn.ws16, pn.ws16_kind == 2, p->G * QMOE_PP_LD);
                pn.ws16 = NULL;
            }
            if (!grouped && pn.ws8) {
                (isa->widen_s8 ? isa->widen_s8 : widen_s8)(pn.wsg, pn.ws8, pn.wsb8, p->G, pn.wblk);
                pn.ws8 = NULL;
            }
            if (grouped)
                groups_block(isa, L, &pn, x, ldx, rows, p->G, L->gkp / 4, xo, a8w4 ? NULL : xs, f);
            for (int64_t g = 0; g < p->G && !grouped; g++) {
                if (fused) {
                    fold_group(isa, L, &pn, x, ldx, rows, g * L->gkp, (L->gk + 3) / 4, xo + g, p->G,
                               a8w4 ? NULL : xs, pn.wsg + g * pn.ld, f, g == 0);
                    continue;
                }
                if (L->gk == 0) memset(acc, 0, sizeof(int32_t) * (size_t)(rows * pn.ld)); /* K = 0 */
                /* rows of xt start at multiples of 16: mb - m0 is a multiple of mc */
                const int8_t *xb = xt ? xt + (mb - A->m0) / 16 * 16 * L->Kt : NULL;
                /* Tile kernels take the whole group in one pass: each pass stores and reloads
                 * the C tiles, and tile loads are their bottleneck (7168 k in one pass was
                 * 5-10% faster than passes of 512, though A then comes from L2, not L1). */
                int64_t kc = xb ? L->gk : KC;
                for (int64_t a = 0; a < L->gk; a += kc) {
                    int64_t n = L->gk - a < kc ? L->gk - a : kc;
                    tile_chunk(isa, L, &pn, x, ldx, xb, rows, g * L->gkp + a, (n + 3) / 4, acc,
                               a != 0);
                }
                if (DUMPING(A)) {
                    for (int64_t r = 0; r < rows; r++)
                        for (int64_t h = 0; h < 2; h++)
                            for (int64_t c = c_lo; c < c_hi; c++) {
                                int64_t at = ((mb - A->m0 + r) * p->G + g) * 2 * ncols_all +
                                             h * ncols_all + (pn.jc - A->j0) + c;
                                A->dump[at] = acc[r * pn.ld + h * half + c] - xo[r * p->G + g];
                            }
                    continue;
                }
                for (int64_t h = 0; h < 2; h++)
                    isa->fold(rows, pn.nu * QMOE_PK_UNIT, acc + h * half, pn.ld, xo + g, p->G,
                              a8w4 ? NULL : xs, pn.wsg + g * pn.ld + h * half, f + h * half,
                              pn.ld, g == 0);
            }
            if (DUMPING(A)) continue;
            qmoe_gemm_tile t = {mb, rows, pn.jc, c_lo, c_hi, half, f, pn.ld, pn.corr,
                                a8w4 ? xs : NULL, p->pp ? (float *)(sp + L->sr) : NULL};
            A->epilogue(A, &t);
        }
    }
}

/* Blocks of any row count up to `rows` may run on the table or on its few_rows table: room for
 * the larger of the two. */
uint64_t qmoe_gemm_scratch_bytes(const qmoe_gemm_isa *isa, const qmoe_gmm_params *p,
                                 int64_t rows, int64_t cols)
{
    if (rows < 1) rows = 1;
    uint64_t a = layout_for(isa, p, rows, cols, 0).total;
    uint64_t b = isa->few_rows ? layout_for(isa->few_rows, p, rows, cols, 0).total : 0;
    return a > b ? a : b;
}

void qmoe_gemm_run(const qmoe_gemm_block *B)
{
    if (B->m1 <= B->m0 || B->j1 <= B->j0) return;
    qmoe_gemm_block b = *B;
    b.isa = isa_for_rows(B->isa, B->m1 - B->m0);
    /* Phase one sized the thread's slice with qmoe_gemm_scratch_bytes for the plan's largest
     * block, so every block fits: no allocation here. The checked build verifies the contract. */
    fast_layout L = layout_for(b.isa, b.p, b.m1 - b.m0, b.j1 - b.j0, 0);
#ifdef QMOE_CHECKED
    if (!b.ctx->scratch || b.ctx->scratch_bytes < L.total) {
        fprintf(stderr, "qmoe: %s block of %lld x %lld needs %llu scratch bytes, the plan gave "
                "%llu\n", b.isa->name, (long long)(b.m1 - b.m0), (long long)(b.j1 - b.j0),
                (unsigned long long)L.total, (unsigned long long)b.ctx->scratch_bytes);
        abort();
    }
#endif
    run_block(&b, b.ctx->scratch, &L);
    if (b.isa->release) b.isa->release();
}

#ifdef QMOE_TESTING
/* The test entry point's scratch: the caller's when large enough, otherwise a temporary one
 * (tests call it without planning a scratchpad; the operator never comes here). */
int qmoe_gemm_run_testing(const qmoe_gemm_block *B)
{
    if (B->m1 <= B->m0 || B->j1 <= B->j0) return 1;
    qmoe_gemm_block b = *B;
    b.isa = isa_for_rows(B->isa, B->m1 - B->m0);
    fast_layout L = layout_for(b.isa, b.p, b.m1 - b.m0, b.j1 - b.j0, 0);
    int fits = b.ctx->scratch && b.ctx->scratch_bytes >= L.total;
    void *sp = fits ? b.ctx->scratch : aligned_alloc(64, L.total);
    if (!sp) return 0;
    run_block(&b, sp, &L);
    if (b.isa->release) b.isa->release();
    if (!fits) free(sp);
    return 1;
}
#endif

#ifdef QMOE_TESTING
void qmoe_fast_acc_block(const qmoe_gemm_isa *isa, const qmoe_gmm_params *p, qmoe_thread_ctx *ctx,
                         int64_t e, int64_t m0, int64_t m1, int64_t j0, int64_t j1, int32_t *acc)
{
    qmoe_gemm_block B = {isa, p, ctx, e, m0, m1, j0, j1, NULL, NULL, 0, acc};
    (void)qmoe_gemm_run_testing(&B);
}
#endif
