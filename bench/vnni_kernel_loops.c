#define _POSIX_C_SOURCE 200809L
/*
 * vnni_kernel_loops: what limits the AVX-512 VNNI kernel at the shapes of issue 23's targets,
 * one thread, each part measured alone (docs/performance.md, "What limits the AVX-512 VNNI
 * rows"):
 *   peak    the peak probe (src/kernels/x86/peak_avx512vnni.c)
 *   l1      the driver's micro-kernel calls with K cut to L1K (default 128) on one panel and one
 *           block of rows, so the operands stay in L1 (512: the weights in L2): the kernel alone
 *   loop    the same calls over the whole K and the shape's whole weight footprint, in the
 *           driver's order (block() below): the kernel where its operands really are
 *   stream  the loop's weight loads alone (512-bit loads of the same bytes in the same order,
 *           no products): the weight stream from wherever it sits (L2, L3 or DRAM)
 *   epi     SwiGLU of the blocks' tiles + the int8 quantization of their rows: the epilogue
 * Shapes: per channel, groups of 32 ("/32"), A8W4 ("/i4"). Times are the thread's CPU time
 * (CLOCK_THREAD_CPUTIME_ID): on a shared machine the other tenants' time slices do not count,
 * their cache and memory traffic does. Rounds interleave the parts; medians and min-max over
 * REPS rounds. Groups of 32 take gemm_groups as the driver does (all of an expert's groups in
 * one call per micro-tile); OLD_FOLD=1 takes the per-group path it replaced (gemm_fold, or gemm
 * then fold, per group), for an A/B in one run.
 * usage: [L1K=128] [OLD_FOLD=1] vnni_kernel_loops [REPS [SHAPE]] (REPS default 7; SHAPE: only
 * the shapes whose name contains it)
 */
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

typedef struct shape {
    const char *name;
    int64_t rows, K, N, experts; /* rows per expert, weight columns (act + gate) per expert */
    int64_t gk;                  /* K group size of the weight scales (K: per channel) */
    int i4;                      /* A8W4: prepacked int4 steps (32 bytes a unit) */
} shape;

/* issue 23's rows: prefill (one expert's 512-row call), mid64, Qwen3 gate/up, decode; and
 * ggml's groups of 32; tg: ggml's generation, one row per expert at Qwen3's gate/up, with
 * enough experts (101 MB) that the weights come from DRAM, not the 32 MB L3 of the Zen 4 VM */
static const shape shapes[] = {
    {"prefill", 512, 7168, 4096, 1, 7168, 0},   {"mid64", 64, 2048, 1536, 8, 2048, 0},
    {"qwen3", 32, 2048, 1536, 32, 2048, 0},     {"decode", 4, 7168, 4096, 8, 7168, 0},
    {"prefill/32", 512, 7168, 4096, 1, 32, 0}, {"qwen3/32", 32, 2048, 1536, 32, 32, 0},
    {"decode/32", 4, 7168, 4096, 8, 32, 0},    {"prefill/i4", 512, 7168, 4096, 1, 7168, 1},
    {"decode/i4", 4, 7168, 4096, 8, 7168, 1},  {"decode/i4/32", 4, 7168, 4096, 8, 32, 1},
    {"tg/32", 1, 2048, 1536, 32, 32, 0},       {"tg/i4/32", 1, 2048, 1536, 64, 32, 1},
};
enum { GMAX = 7168 / 32 };

enum { MC = 48, KC = 512, PANEL = 128, HALF = 64, GROUPS_MAX_K = 128 };
static int use_groups = 1; /* OLD_FOLD=1: the per-group fold instead of gemm_groups */
/* weights as the driver reads them: prepacked int8 in place (gemm_pf), prepacked int4 in place
 * (gemm_i4: blocks of one micro-tile), int4 expanded into the scratch panel (gemm) */
enum { W_INT8, W_INT4, W_EXPANDED };

static double cpu_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef struct bufs {
    const qmoe_gemm_isa *isa;
    const qmoe_eltwise_isa *elt;
    uint8_t *w;  /* experts x panels x (2 halves x K/4 steps x 256 bytes; int4: 128 bytes) */
    uint8_t *wx; /* one int4 panel expanded to int8 steps (the driver's scratch panel) */
    int8_t *x;  /* rows x K */
    int32_t *acc, *xoff;
    float *f, *xs, *ws, *corr, *s;
    int8_t *q;
} bufs;

__attribute__((target("avx512f"))) static int read_bytes(const uint8_t *w, int64_t steps,
                                                         int64_t wstep, int i4)
{
    /* a side effect: calls with the same arguments (every micro-tile re-reads the same bytes)
     * must not be merged into one */
    __asm__ volatile("" ::: "memory");
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t i = 0; i < steps; i++, w += wstep) {
        a0 = _mm512_add_epi32(a0, _mm512_load_si512((const void *)w));
        a1 = _mm512_add_epi32(a1, _mm512_load_si512((const void *)(w + 64)));
        if (i4) continue; /* 4 units of 32 bytes a step */
        a2 = _mm512_add_epi32(a2, _mm512_load_si512((const void *)(w + 128)));
        a3 = _mm512_add_epi32(a3, _mm512_load_si512((const void *)(w + 192)));
    }
    __m512i s = _mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3));
    return _mm512_reduce_add_epi32(s);
}

/* One block of `rows` rows over one panel (both halves), the driver's calls in its order
 * (gemm_driver.c run_block): K groups of gk outer; per group, blocks of more than one
 * micro-tile (and 48 rows when a group spans several 512-k chunks) take gemm_fold per micro-tile,
 * the others gemm_pf per 512-k chunk over all micro-tiles, then fold. read: only the weight loads
 * of those calls, in their order (the stream alone). */
static int block(const bufs *b, const uint8_t *wp, const int8_t *x, int64_t K, int64_t gk,
                 int64_t rows, int64_t kmax, int kind, int read)
{
    const qmoe_gemm_isa *isa = b->isa;
    int i4 = kind == W_INT4;
    int64_t wstep = 4 * (i4 ? QMOE_PK_STEP / 2 : QMOE_PK_STEP), blk = K / 4 * wstep;
    int64_t k = K < kmax ? K : kmax, G = K / gk, gn = gk < k ? gk : k, groups = k / gn;
    int fused = !i4 && rows > isa->mr && (gk <= KC || rows >= MC), sink = 0;
    const float *xs = kind == W_INT8 ? b->xs : NULL; /* A8W4 folds without xScale (the driver) */
    if (use_groups && isa->gemm_groups && G > 1 && gk <= GROUPS_MAX_K) {
        int64_t per = KC / gk; /* chunks of groups of at most KC k, as groups_block */
        for (int64_t g0 = 0; g0 < groups; g0 += per) {
            int64_t ng = groups - g0 < per ? groups - g0 : per;
            for (int64_t r = 0; r < rows; r += isa->mr) {
                int mr = (int)(rows - r < isa->mr ? rows - r : isa->mr);
                for (int h = 0; h < 2; h++) {
                    const uint8_t *w = wp + h * blk + g0 * gn / 4 * wstep;
                    if (read)
                        sink += read_bytes(w, ng * gn / 4, wstep, i4);
                    else
                        isa->gemm_groups(mr, 4, i4, NULL, ng, gn / 4, x + r * K + g0 * gn, K, w, wstep,
                                         b->xoff + r * G + g0, G, xs ? xs + r : NULL,
                                         b->ws + g0 * PANEL + h * HALF, 0, PANEL, NULL, 1, 0,
                                         b->f + r * PANEL + h * HALF, PANEL, g0 == 0);
                }
            }
        }
        return sink;
    }
    void (*gemm)(int, int, int64_t, const int8_t *, int64_t, const uint8_t *, int64_t, int32_t *,
                 int64_t, int) = i4 ? isa->gemm_i4 : isa->gemm;
    for (int64_t g = 0; g < groups; g++) {
        int64_t pos = g * gk;
        if (fused) {
            for (int64_t r = 0; r < rows; r += isa->mr) {
                int mr = (int)(rows - r < isa->mr ? rows - r : isa->mr);
                for (int h = 0; h < 2; h++) {
                    const uint8_t *w = wp + h * blk + pos / 4 * wstep;
                    if (read)
                        sink += read_bytes(w, gn / 4, wstep, 0);
                    else
                        isa->gemm_fold(mr, 4, gn / 4, x + r * K + pos, K, w, wstep,
                                       b->xoff + r * G + g, G, xs ? xs + r : NULL,
                                       b->ws + g * PANEL + h * HALF, b->f + r * PANEL + h * HALF,
                                       PANEL, g == 0);
                }
            }
            continue;
        }
        for (int64_t a = 0; a < gn; a += KC) {
            int64_t n = gn - a < KC ? gn - a : KC;
            for (int64_t r = 0; r < rows; r += isa->mr) {
                int mr = (int)(rows - r < isa->mr ? rows - r : isa->mr);
                for (int h = 0; h < 2; h++) {
                    const uint8_t *w = wp + h * blk + (pos + a) / 4 * wstep;
                    /* gemm_pf's prefetch as the driver asks for it (tile_chunk) */
                    int64_t next = pos + a + n < K ? n / 4 * wstep : 0;
                    int64_t ahead = r == 0 ? QMOE_PF_AHEAD : r == isa->mr ? next : 0;
                    if (read)
                        sink += read_bytes(w, n / 4, wstep, i4);
                    else if (kind == W_INT8)
                        isa->gemm_pf(mr, 4, n / 4, x + r * K + pos + a, K, w, wstep, ahead,
                                     b->acc + r * PANEL + h * HALF, PANEL, a != 0);
                    else
                        gemm(mr, 4, n / 4, x + r * K + pos + a, K, w, wstep,
                             b->acc + r * PANEL + h * HALF, PANEL, a != 0);
                }
            }
        }
        if (!read)
            for (int h = 0; h < 2; h++)
                isa->fold(rows, HALF, b->acc + h * HALF, PANEL, b->xoff + g, G, xs,
                          b->ws + g * PANEL + h * HALF, b->f + h * HALF, PANEL, g == 0);
    }
    return sink;
}

/* The driver's order over an expert: panels outer, blocks of MC rows inner, each block with its
 * own x rows. K cut to kmax (the L1 case) reuses the first panel and rows, so its operands stay
 * in L1. A8W4 blocks of more than one micro-tile expand each panel's int4 steps into the
 * scratch panel first (per call, as prepacked_panel does; the L1 case reuses one expansion). */
static double loop(const bufs *b, const shape *s, int64_t kmax, int read, int64_t *ops, int *sink)
{
    const qmoe_gemm_isa *isa = b->isa;
    int64_t panels = s->N / PANEL, pb = PANEL * s->K / (s->i4 ? 2 : 1);
    int64_t k = s->K < kmax ? s->K : kmax;
    int expand = s->i4 && s->rows > isa->mr, l1 = k < s->K;
    int kind = expand ? W_EXPANDED : s->i4 ? W_INT4 : W_INT8;
    double t0 = cpu_s();
    for (int64_t e = 0; e < s->experts; e++)
        for (int64_t p = 0; p < panels; p++) {
            const uint8_t *wp = b->w + (l1 ? 0 : (e * panels + p) * pb);
            if (expand && !l1) {
                if (read) *sink += read_bytes(wp, 2 * (s->K / 4), 4 * QMOE_PK_STEP / 2, 1);
                else isa->expand_i4(wp, 2 * (s->K / 4) * 4, b->wx);
            }
            for (int64_t m = 0; m < s->rows; m += MC)
                *sink += block(b, expand ? b->wx : wp, b->x + (l1 ? 0 : m * s->K), s->K, s->gk,
                               s->rows - m < MC ? s->rows - m : MC, kmax, kind, read);
        }
    *ops = 2 * s->experts * s->rows * k * s->N;
    return cpu_s() - t0;
}

/* SwiGLU of every block's tile and the quantization of the rows' outputs (n2 = N/2 a row). */
static double epilogue(const bufs *b, const shape *s)
{
    const qmoe_eltwise_isa *isa = b->elt;
    int64_t panels = s->N / PANEL, n2 = s->N / 2;
    double t0 = cpu_s();
    for (int64_t e = 0; e < s->experts; e++) {
        for (int64_t p = 0; p < panels; p++)
            for (int64_t m = 0; m < s->rows; m += MC) {
                int64_t rows = s->rows - m < MC ? s->rows - m : MC;
                isa->swiglu(rows, HALF, b->f, PANEL, HALF, b->corr, NULL, 0.0f,
                            b->s + m * n2 + p * HALF, n2);
            }
        for (int64_t r = 0; r < s->rows; r++)
            isa->quantize_row(b->s + r * n2, n2, b->q + r * n2, 1, b->xs + r);
    }
    return cpu_s() - t0;
}

static double probe(const qmoe_gemm_isa *isa, int64_t *ops)
{
    double t0 = cpu_s();
    *ops = (int64_t)isa->peak_loop(1 << 20);
    return cpu_s() - t0;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void *big(size_t bytes)
{
    void *p = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    if (!p) {
        fprintf(stderr, "vnni_kernel_loops: out of memory (%zu bytes)\n", bytes);
        exit(1);
    }
    return p;
}

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 7;
    if (reps < 1 || reps > 99) reps = 7;
    if (getenv("OLD_FOLD")) use_groups = atoi(getenv("OLD_FOLD")) == 0;
    /* K of the L1 case (L1K, default 128: 16 KB of a panel's weights with the rows' x) */
    int64_t l1k = getenv("L1K") ? atoll(getenv("L1K")) : 128;
    if (l1k < 16 || l1k > 7168 || l1k % 16) l1k = 128;
    const qmoe_kernel_entry *kern = qmoe_kernel_lookup(QMOE_KERNEL_AVX512_VNNI);
    if (!kern || !kern->gemm || !kern->eltwise) {
        fprintf(stderr, "vnni_kernel_loops: this CPU has no AVX-512 VNNI\n");
        return 77;
    }
    bufs b;
    memset(&b, 0, sizeof b);
    b.isa = kern->gemm;
    b.elt = kern->eltwise;
    int64_t wmax = 0, rmax = 512, kmax = 7168, nmax = 4096;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        if (shapes[i].experts * shapes[i].K * shapes[i].N > wmax)
            wmax = shapes[i].experts * shapes[i].K * shapes[i].N;
    b.w = big((size_t)wmax);
    for (int64_t i = 0; i < wmax; i++) b.w[i] = (uint8_t)(i * 2654435761u >> 13);
    b.wx = big((size_t)(PANEL * kmax));
    b.isa->expand_i4(b.w, 2 * (kmax / 4) * 4, b.wx); /* the L1 case's panel, expanded once */
    b.x = big((size_t)(rmax * kmax));
    for (int64_t i = 0; i < rmax * kmax; i++) b.x[i] = (int8_t)(i * 40503u >> 7);
    b.acc = big(sizeof(int32_t) * MC * PANEL);
    b.xoff = big(sizeof(int32_t) * rmax * GMAX);
    b.f = big(sizeof(float) * MC * PANEL);
    b.xs = big(sizeof(float) * rmax);
    b.ws = big(sizeof(float) * PANEL * GMAX);
    b.corr = big(sizeof(float) * PANEL);
    b.s = big(sizeof(float) * (size_t)(rmax * nmax / 2));
    b.q = big((size_t)(rmax * nmax / 2));
    memset(b.xoff, 0, sizeof(int32_t) * rmax * GMAX);
    for (int64_t i = 0; i < rmax; i++) b.xs[i] = 0.01f;
    for (int64_t i = 0; i < PANEL * GMAX; i++) b.ws[i] = 0.001f;
    for (int64_t i = 0; i < PANEL; i++) b.corr[i] = 0.0f;
    memset(b.f, 0, sizeof(float) * MC * PANEL);
    int sink = 0;
    printf("part    shape      median ms  (min-max)       GOPS or GB/s   vs peak probe (median)\n");
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const shape *s = &shapes[i];
        if (argc > 2 && !strstr(s->name, argv[2])) continue;
        int64_t wbytes = s->experts * s->K * s->N / (s->i4 ? 2 : 1), ops_l1 = 0, ops_loop = 0,
                ops_pk = 0;
        /* the loop's weight reads: each micro-tile of 6 rows reads the panel's bytes once */
        int64_t tiles = 0;
        for (int64_t m = 0; m < s->rows; m += MC) {
            int64_t rows = s->rows - m < MC ? s->rows - m : MC;
            tiles += (rows + b.isa->mr - 1) / b.isa->mr;
        }
        int64_t rbytes = wbytes * tiles;
        if (s->i4 && s->rows > b.isa->mr) rbytes = wbytes + 2 * wbytes * tiles; /* + expanded */
        double t[5][99];
        int64_t dummy;
        loop(&b, s, l1k, 0, &dummy, &sink); /* warm */
        for (int r = 0; r < reps; r++) {
            t[0][r] = probe(b.isa, &ops_pk);
            t[1][r] = loop(&b, s, l1k, 0, &ops_l1, &sink);
            t[2][r] = loop(&b, s, s->K, 0, &ops_loop, &sink);
            t[3][r] = loop(&b, s, s->K, 1, &dummy, &sink);
            t[4][r] = epilogue(&b, s);
        }
        double med[5], lo[5], hi[5];
        for (int k = 0; k < 5; k++) {
            qsort(t[k], (size_t)reps, sizeof(double), cmp);
            med[k] = t[k][reps / 2], lo[k] = t[k][0], hi[k] = t[k][reps - 1];
        }
        double pk = (double)ops_pk / med[0] * 1e-9;
        const char *part[5] = {"peak", "l1", "loop", "stream", "epi"};
        for (int k = 0; k < 5; k++) {
            double v = 0;
            const char *unit = "GOPS";
            if (k == 0) v = pk;
            if (k == 1) v = (double)ops_l1 / med[1] * 1e-9;
            if (k == 2) v = (double)ops_loop / med[2] * 1e-9;
            if (k == 3) v = (double)rbytes / med[3] * 1e-9, unit = "GB/s";
            printf("%-7s %-10s %9.3f  (%.3f-%.3f)  ", part[k], s->name, med[k] * 1e3, lo[k] * 1e3,
                   hi[k] * 1e3);
            if (k < 3)
                printf("%8.1f %s   %5.1f%%\n", v, unit, 100 * v / pk);
            else if (k == 3) /* the loop reads the same bytes in its own time */
                printf("%8.1f %s   %5.1f%% of the loop's time (%.1f MB read, %.1f MB distinct)\n",
                       v, unit, 100 * med[3] / med[2], (double)rbytes * 1e-6,
                       (double)wbytes * 1e-6);
            else
                printf("%8s        %5.1f%% of the loop's time\n", "", 100 * med[4] / med[2]);
        }
    }
    return sink == 42; /* keeps the stream's loads */
}
