/*
 * The prepacked weight object behind qmoe/weights.h, shared by phase one (src/ops/weights/prepack.c,
 * which builds and checks it) and the fast driver (src/kernels/gemm_driver.c, which streams it).
 *
 * Layout (version QMOE_PP_VERSION): the columns of each half (act: [0, N2), gate: [N2, N)) go in
 * panels of QMOE_PP_COLS = 64 columns, 4 units of gmm_fast.h; panel i of both halves is one
 * record: the act block, then the gate block, each Kp/4 steps of nu units (nu = 4 except the last
 * panel of a half with N2 % 64 != 0) in the micro-kernel's order [q][unit][64 bytes].
 * - int8 (A8W8): the 64 bytes of a unit step exactly as the micro-kernel reads them (W + 128), so
 *   the driver reads panels in place, with no copy.
 * - int4 (A8W4): each 64-byte unit step stored as 32 bytes, byte i = v[i] | v[32 + i] << 4 with
 *   v the step's bytes (W + 8, 0..15): one linear shift-and-mask pass restores the step.
 * - codes (A8W8 made with a codebook, `codes`): stored as int4 is, v being each byte's index in
 *   `tbl` (the codebook's values + 128, the bytes the int8 layout would hold); the same pass
 *   and then a lookup restore the int8 step. With the codebook {0, 1, ..., 15} (`u4`: ggml's
 *   q4_K codes, unsigned) the index is the value: the driver takes the record as int4 steps
 *   (bytes W, not W + 8) and subtracts no offset, the same integer sums without the lookup.
 * - 6 bits (A8W8 made with value_bits 6, `bits6`): each 64-byte unit step as 48 bytes of v =
 *   byte - 96 (W + 32, 0..63): 32 bytes of low nibbles as int4 stores them (byte i = lo v[i] |
 *   lo v[32 + i] << 4), then 16 of the high two bits (byte i = hi v[i] | hi v[16 + i] << 2 |
 *   hi v[32 + i] << 4 | hi v[48 + i] << 6); the driver restores the step (expand_bits6).
 * Records start at 64-byte boundaries: record (e, i) at w + e * expert_wbytes + i * panel_wbytes
 * (only the last panel of an expert may be shorter). Per record also the weight scale [G][128]
 * (act columns then gate columns, 0 past N2) at ws + (e * panels + i) * G * 128 elements, stored
 * as float32, or as the 16 bits given when the weightScale was float16 / bfloat16 (ws_kind; the
 * driver widens a panel's scales into its scratchpad, exactly, before the panel's products:
 * half the scale bytes to stream, the same floats) or, in an object made with a scale block B
 * (ws_block > 0), as int8 multipliers [G][128] at ws with, per record, a float32 base per block
 * of B groups [nblk][128] at wsb + (e * panels + i) * nblk * 128 (the driver widens them to
 * base * multiplier, which prepacking checked equal to each scale), and the
 * column correction [128] at corr + (e * panels + i) * 128 (A8W4: bias - 8 sum_g ws_g colsum_g,
 * exactly as the raw path computes it; A8W8: 0).
 */
#ifndef QMOE_CORE_PREPACK_H
#define QMOE_CORE_PREPACK_H

#include <stdint.h>

#include "qmoe/qmoe.h"

enum {
    QMOE_PP_VERSION = 5, /* 2: 16-bit scales kept 16-bit; 3: scale blocks; 4: codes; 5: 6 bits */
    QMOE_PP_STEP6 = 48,  /* stored bytes of a 6-bit unit step */
    QMOE_PP_COLS = 64, /* output columns per panel (per half) */
    QMOE_PP_LD = 128,  /* floats per scale / correction row of a panel: both halves */
};

#define QMOE_PP_MAGIC 0x4b43415045454d51ull /* "QMEEPACK" */

/* What the object was made for; a future operator (a plain grouped matmul) adds its own. */
typedef enum qmoe_pp_op {
    QMOE_PP_OP_SWIGLU = 1, /* act/gate halves paired, GroupedMatmulSwigluQuant */
} qmoe_pp_op;

struct qmoe_weights {
    uint64_t magic;
    uint32_t version;
    uint32_t op;            /* qmoe_pp_op */
    const void *build;      /* identifies the loaded library that made it (weights.c) */
    uint32_t cpu;           /* CPU feature bits when it was made */
    int32_t kernel;         /* qmoe_kernel it was made for */
    int32_t mode;           /* qmoe_gmm_mode */
    int32_t per_group;      /* weight_scale was [E,G,N] */
    int32_t ws_dtype;       /* qmoe_dtype of the weight scale it was made from */
    int32_t ws_kind;        /* qmoe_scale_type of ws: F32, F16 or BF16 (2 bytes an element) */
    int32_t src_layout;     /* qmoe_wlayout it was made from (information) */
    int32_t force_nz;       /* options.force_weight_nz it was made with (qmoe_weights_append) */
    int32_t threads;        /* threads that pack its experts (options.threads; its appends too) */
    int32_t has_bias;       /* made with a bias tensor */
    int32_t codes;          /* A8W8 kept as 4-bit indices into tbl (options.codebook) */
    uint8_t tbl[16];        /* codes: the codebook's values + 128 (the int8 step bytes) */
    int32_t u4;             /* codes of the codebook {0, 1, ..., 15}: each code is its value, so
                             * the driver reads the records as int4 steps whose bytes are the
                             * values themselves (no lookup; offset 0 where int4's is 8) */
    int32_t bits6;          /* A8W8 kept 6 bits a value (options.value_bits 6) */
    int64_t ws_block;       /* groups per scale block (ws: int8 multipliers, wsb: bases); 0: none */
    int64_t nblk;           /* blocks per column: ceil(G / ws_block) */
    int64_t filled;         /* experts packed so far: [0, filled); usable when E */
    int64_t E, K, N, N2, G, gk, gkp, Kp;
    int64_t panels;         /* per expert: ceil(N2 / 64) */
    int64_t step_bytes;     /* stored bytes per unit step: 64 (int8), 48 (bits6), 32 (int4, codes) */
    uint64_t panel_wbytes;  /* stored bytes of a full record, 64-aligned */
    uint64_t expert_wbytes; /* stored bytes of one expert's records */
    uint64_t weight_bytes;  /* E * expert_wbytes */
    uint64_t bytes;         /* everything held */
    uint8_t *w;
    void *ws;   /* ws_kind elements, or int8 multipliers (ws_block) */
    float *wsb; /* the blocks' bases (ws_block), else NULL */
    float *corr;
};

/* Scale g, element at, of a record kept as scale blocks: its block's base times its multiplier,
 * one float32 rounding (what prepacking checked equal to the scale, and every reader computes). */
static inline float qmoe_pp_block_scale(const int8_t *q, const float *base, int64_t block, int64_t g,
                                        int64_t at)
{
    return base[g / block * QMOE_PP_LD + at] * (float)q[g * QMOE_PP_LD + at];
}

/* Units in panel i (per half). */
static inline int64_t qmoe_pp_units(const struct qmoe_weights *pp, int64_t i)
{
    int64_t nc = pp->N2 - i * QMOE_PP_COLS;
    if (nc > QMOE_PP_COLS) nc = QMOE_PP_COLS;
    return (nc + 15) / 16;
}

/* Phase one with a prepacked weight (src/ops/weights/prepack.c): checks the object (build, layout,
 * CPU) and fills the weight fields of the plan from it (*Kw: its K), or checks a given
 * weightScale against it after phase one's own checks. QMOE_ERR_PARAM_INVALID with a message. */
struct qmoe_gmm_params;
/* The identity stamped on every object (ops/weights/plan.c): the address of this library copy's
 * tag and this CPU's feature word. */
extern const char qmoe_pp_build_tag;
uint32_t qmoe_pp_cpu_bits(void);
qmoe_status qmoe_pp_plan_weight(const struct qmoe_weights *pp, struct qmoe_gmm_params *p, int64_t *Kw);
qmoe_status qmoe_pp_plan_scale(const struct qmoe_weights *pp, int ws_dtype, struct qmoe_gmm_params *p);

#endif
