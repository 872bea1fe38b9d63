/*
 * The edge-row sweep (tests/test_edge_rows.h) against every kernel of the registry the CPU runs
 * (reference, portable, avx2, avx_vnni, avx512_vnni, amx_int8; the others are named as skipped),
 * each in blocks of every shape the driver may use: a whole expert at once (the AMX tile path
 * from 16 rows), 16-row blocks, 3-row blocks of 16 columns (the in-place NZ path), single rows
 * of 5 columns. Every run must give the expected bits of output and outputScale, which are the
 * spec's, so all kernels also agree with each other bit for bit. Also: the 256-bit and 512-bit
 * SwiGLU epilogues give the same S bits for activations across the whole float range (their
 * exp differs only in how 2^n is applied, which rounds once either way), and every SwiGLU
 * epilogue clamps (swiglu_limit) exactly as the reference kernel does.
 */
#include <stdio.h>

#include "core/gmm_access.h"
#include "core/gmm_params.h"
#include "kernels/cpu_features.h"
#include "kernels/gmm_fast.h"
#include "kernels/kernel.h"
#include "kernels/swiglu_quant.h"
#include "qmoe/qmoe.h"
#include "support/oracle.h"
#include "support/kernels.h"
#include "support/testlib.h"
#include "test_edge_rows.h"

/* Every kernel the library names, the reference first (tests/support/testlib.h). */
static int kernel_ids[QT_MAX_KERNELS];
static int NKERNELS;

/* The plan of case c over weight storage wst (the oracle's packer). */
static void params_for(const edge_case *c, const uint8_t *wst, qmoe_gmm_params *p)
{
    memset(p, 0, sizeof *p);
    p->M = c->M, p->K = c->K, p->N = c->N, p->N2 = c->N / 2;
    int64_t G = c->G ? c->G : 1;
    p->E = c->E, p->E_groups = c->E, p->G = G, p->group_k = c->K / G, p->per_group = c->G > 0;
    p->mode = c->a8w4 ? QMOE_MODE_A8W4 : QMOE_MODE_A8W8;
    p->x = c->x, p->x_s[0] = c->K, p->x_s[1] = 1;
    p->w = wst;
    int64_t K = c->K, N = c->N;
    if (c->nz) {
        int64_t cols = c->a8w4 ? 64 : 32, s[5] = {K * N, K * cols, 16 * cols, cols, 1};
        memcpy(p->w_s, s, sizeof s);
        p->w_layout = c->a8w4 ? QMOE_W_INT4_NZ : QMOE_W_INT8_NZ;
    } else {
        p->w_s[0] = K * N, p->w_s[1] = N, p->w_s[2] = 1;
        p->w_layout = c->a8w4 ? QMOE_W_INT4_ND : QMOE_W_INT8_ND;
    }
    p->ws = c->ws, p->ws_type = QMOE_SCALE_F32;
    p->ws_s[0] = G * N, p->ws_s[1] = c->G ? N : 0, p->ws_s[2] = 1;
    if (c->a8w4) p->bias = c->bias, p->bias_s[0] = N, p->bias_s[1] = 1;
    p->xs = c->xs, p->xs_s = 1;
    p->gl = c->ends, p->gl_s = 1;
    p->out_s[0] = p->N2, p->out_s[1] = 1, p->out_scale_s = 1;
}

/* Runs every expert through kernel k in blocks of rb rows x cb columns. */
static void run_kernel(const qmoe_kernel_entry *k, qmoe_gmm_params *p, int64_t rb, int64_t cb,
                       int8_t *out, float *scale)
{
    int64_t M = p->M, N2 = p->N2;
    float *S = edge_alloc(sizeof(float) * (size_t)(M * N2 + 1));
    uint64_t bytes = qmoe_swiglu_quant_scratch_bytes(k, p, rb, cb);
    void *scratch = aligned_alloc(64, (bytes + 64) & ~(uint64_t)63);
    if (!scratch) abort();
    qmoe_thread_ctx ctx = {.thread = 0, .nthreads = 1, .scratch = scratch, .scratch_bytes = bytes};
    for (int64_t e = 0, m0 = 0; e < p->E_groups; m0 = p->gl[e], e++)
        for (int64_t m = m0; m < p->gl[e]; m += rb) {
            int64_t me = m + rb < p->gl[e] ? m + rb : p->gl[e];
            for (int64_t j = 0; j < N2; j += cb) {
                int64_t je = j + cb < N2 ? j + cb : N2;
                qmoe_swiglu_quant_block(k, p, &ctx, e, m, me, j, je, S + m * N2 + j, N2);
            }
        }
    p->out = out, p->out_scale = scale;
    qmoe_swiglu_quant_rows(k, p, S, N2, 0, M);
    free(scratch);
    free(S);
}

/* Rows whose output or scale bits differ from the expectation; prints the first. */
static int64_t compare(const edge_case *c, const char *kname, const char *how, const int8_t *out,
                       const float *scale)
{
    int64_t N2 = c->N / 2, bad = 0;
    for (int64_t m = 0; m < c->M; m++) {
        int same = !memcmp(&scale[m], &c->scale[m], sizeof(float)) &&
                   !memcmp(out + m * N2, c->q + m * N2, (size_t)N2);
        if (!same && bad++ == 0) {
            int64_t j = 0;
            while (j < N2 && out[m * N2 + j] == c->q[m * N2 + j]) j++;
            fprintf(stderr, "%s: %s (%s): row %lld: scale %a, expected %a", c->name, kname, how,
                    (long long)m, (double)scale[m], (double)c->scale[m]);
            if (j < N2)
                fprintf(stderr, "; output[%lld] %d, expected %d", (long long)j, out[m * N2 + j],
                        c->q[m * N2 + j]);
            fputc('\n', stderr);
        }
    }
    return bad;
}

/* AVX2 and AVX-512 SwiGLU on the same f: a over +-[2^-30, 2^7] and past exp's range, the gate
 * random; every S bit equal. */
static void check_swiglu_bits(void)
{
    const qmoe_kernel_entry *k2 = qmoe_kernel_lookup(QMOE_KERNEL_AVX2);
    const qmoe_kernel_entry *k5 = qmoe_kernel_lookup(QMOE_KERNEL_AVX512_VNNI);
    const qmoe_eltwise_isa *v2 = k2 ? k2->eltwise : NULL, *v5 = k5 ? k5->eltwise : NULL;
    if (!v2 || !v5 || !qmoe_cpu_runs_kernel(QMOE_KERNEL_AVX2) ||
        !qmoe_cpu_runs_kernel(QMOE_KERNEL_AVX512_VNNI)) {
        printf("test_edge_rows: AVX2 vs AVX-512 SwiGLU bits skipped: this CPU lacks one\n");
        return;
    }
    /* the driver's panel layout: halves of whole 16-column units (vector code reads them
     * whole), the gate half after the activated one; 61 used columns leave a tail */
    enum { ROWS = 64, NC = 61, HALF = 64, LD = 2 * HALF };
    static float f[ROWS * LD], corr[LD], xs[ROWS], s2[ROWS * NC], s5[ROWS * NC];
    qt_rng r = {99};
    for (int i = 0; i < ROWS * LD; i++) {
        float mag = ldexpf(1.0f, (int)qt_range(&r, -30, 7)) * qt_uniform(&r, 1.0f, 2.0f);
        f[i] = qt_range(&r, 0, 1) ? mag : -mag;
    }
    for (int i = 0; i < LD; i++) corr[i] = i % 3 ? 0.0f : qt_uniform(&r, -1.0f, 1.0f);
    for (int i = 0; i < ROWS; i++) xs[i] = i % 4 == 3 ? 1e30f : qt_uniform(&r, 0.5f, 2.0f);
    int64_t bad = 0;
    for (int with_xs = 0; with_xs < 2; with_xs++) {
        v2->swiglu(ROWS, NC, f, LD, HALF, corr, with_xs ? xs : NULL, 0.0f, s2, NC);
        v5->swiglu(ROWS, NC, f, LD, HALF, corr, with_xs ? xs : NULL, 0.0f, s5, NC);
        for (int i = 0; i < ROWS * NC; i++) bad += memcmp(&s2[i], &s5[i], sizeof(float)) != 0;
    }
    CHECK_MSG(bad == 0, "%lld S values differ between the AVX2 and AVX-512 epilogues",
              (long long)bad);
}

/* The swiglu_limit clamp of every SwiGLU epilogue this CPU runs (portable, AVX2, AVX-512) is the
 * reference kernel's: swiglu with a limit gives the bits of swiglu without one on inputs clamped
 * beforehand by qmoe_swiglu_clamp (the function the reference kernel calls), in scalar code
 * here. Activations and gates span both sides of the limit, hit it exactly and one ulp off, and
 * include NaN and infinities; with and without the x-scale factor (A8W4 / A8W8). */
static void check_swiglu_clamp_bits(void)
{
    enum { ROWS = 24, NC = 45, HALF = 48, LD = 2 * HALF };
    static float f[ROWS * LD], corr[LD], xs[ROWS], fc[ROWS * LD], zero[LD], s1[ROWS * NC],
        s2[ROWS * NC];
    const float L = 3.5f;
    qt_rng r = {0xc1a4};
    for (int i = 0; i < ROWS * LD; i++) {
        float v = qt_uniform(&r, -12.0f, 12.0f);
        switch (qt_range(&r, 0, 15)) {
        case 0: v = L; break;
        case 1: v = -L; break;
        case 2: v = nextafterf(L, 100.0f); break;
        case 3: v = nextafterf(-L, -100.0f); break;
        case 4: v = NAN; break;
        case 5: v = qt_range(&r, 0, 1) ? INFINITY : -INFINITY; break;
        case 6: v = qt_range(&r, 0, 1) ? 0.0f : -0.0f; break;
        default: break;
        }
        f[i] = v;
    }
    for (int i = 0; i < LD; i++) {
        corr[i] = i % 3 ? -0.0f : qt_uniform(&r, -0.5f, 0.5f);
        zero[i] = -0.0f; /* v + -0 is v for every v, -0 included */
    }
    for (int i = 0; i < ROWS; i++) xs[i] = i % 5 == 4 ? 1.0f : qt_uniform(&r, 0.25f, 2.0f);
    /* every table of this build (ids past the x86 ones: other architectures'), each epilogue
     * once */
    void (*seen[16])(int64_t, int64_t, const float *, int64_t, int64_t, const float *,
                     const float *, float, float *, int64_t);
    int tables = 0;
    for (int32_t id = QMOE_KERNEL_PORTABLE; id < 16; id++) {
        const qmoe_kernel_entry *k = qmoe_kernel_lookup(id);
        const qmoe_eltwise_isa *isa = k ? k->eltwise : NULL;
        if (!isa) continue;
        int dup = 0;
        for (int i = 0; i < tables; i++) dup |= seen[i] == isa->swiglu;
        if (dup) continue;
        seen[tables++] = isa->swiglu;
        int64_t bad = 0, clamped = 0, nan_values = 0;
        for (int with_xs = 0; with_xs < 2; with_xs++) {
            for (int m = 0; m < ROWS; m++)
                for (int j = 0; j < NC; j++) {
                    float a = f[m * LD + j] + corr[j], g = f[m * LD + HALF + j] + corr[HALF + j];
                    if (with_xs) a *= xs[m], g *= xs[m];
                    float a0 = a, g0 = g;
                    qmoe_swiglu_clamp(L, &a, &g);
                    clamped += memcmp(&a, &a0, sizeof a) || memcmp(&g, &g0, sizeof g);
                    fc[m * LD + j] = a;
                    fc[m * LD + HALF + j] = g;
                }
            isa->swiglu(ROWS, NC, f, LD, HALF, corr, with_xs ? xs : NULL, L, s1, NC);
            isa->swiglu(ROWS, NC, fc, LD, HALF, zero, NULL, 0.0f, s2, NC);
            for (int i = 0; i < ROWS * NC; i++) {
                /* a NaN's sign and payload are the compiler's choice of operand order */
                bad += isnan(s1[i]) ? !isnan(s2[i]) : memcmp(&s1[i], &s2[i], sizeof(float)) != 0;
                nan_values += isnan(s1[i]);
            }
        }
        CHECK_MSG(bad == 0, "%s: %lld clamped S values differ from SwiGLU of the clamped inputs",
                  isa->name, (long long)bad);
        /* the data does what it claims: many values clamped, NaN passing through */
        CHECK_MSG(clamped > ROWS * NC / 2 && nan_values > 0, "%s: %lld clamped, %lld NaN",
                  isa->name, (long long)clamped, (long long)nan_values);
    }
    CHECK(tables >= 1); /* portable at least */
}

int main(void)
{
    check_swiglu_bits();
    check_swiglu_clamp_bits();
    NKERNELS = qt_kernels(QMOE_KERNEL_REFERENCE, kernel_ids, QT_MAX_KERNELS);
    CHECK(NKERNELS >= 3);
    int ran[QT_MAX_KERNELS] = {0};
    for (int i = 0; i < NKERNELS; i++) {
        const qmoe_kernel_entry *k = qmoe_kernel_lookup(kernel_ids[i]);
        if (!k) {
            /* only an instruction set this CPU lacks may be missing */
            CHECK(!qmoe_cpu_runs_kernel(kernel_ids[i]));
            printf("test_edge_rows: %s skipped: this CPU cannot run it\n",
                   qmoe_kernel_name((qmoe_kernel)kernel_ids[i]));
        }
    }
    int64_t rows = 0, kinds[4] = {0}; /* zero, subnormal scale, non-finite, saturating rows */
    edge_case c;
    for (int id = 0; edge_make(&c, id); id++) {
        oracle_wlayout lay = c.a8w4 ? (c.nz ? ORACLE_W_INT4_NZ : ORACLE_W_INT4_ND)
                                    : (c.nz ? ORACLE_W_INT8_NZ : ORACLE_W_INT8_ND);
        uint8_t *wst = edge_alloc((size_t)oracle_weight_bytes(lay, c.E, c.K, c.N) + 64);
        oracle_pack_weight(lay, c.w, c.E, c.K, c.N, wst);
        qmoe_gmm_params p;
        params_for(&c, wst, &p);
        int64_t N2 = c.N / 2;
        int8_t *out = edge_alloc((size_t)(c.M * N2 + 1));
        float *scale = edge_alloc(sizeof(float) * (size_t)(c.M + 1));
        const struct { int64_t rb, cb; const char *how; } blocks[] = {
            {c.M, N2, "whole experts"}, {16, N2, "16-row blocks"}, {3, 16, "3 rows x 16 columns"},
            {1, 5, "1 row x 5 columns"}};
        for (int i = 0; i < NKERNELS; i++) {
            const qmoe_kernel_entry *k = qmoe_kernel_lookup(kernel_ids[i]);
            if (!k) continue;
            ran[i] = 1;
            /* the reference kernel is slow on huge K and has no blocking of its own */
            size_t nb = k->id == QMOE_KERNEL_REFERENCE || c.K > 4096 ? 2 : 4;
            for (size_t b = 0; b < nb; b++) {
                memset(out, 0x5A, (size_t)(c.M * N2));
                memset(scale, 0x5A, sizeof(float) * (size_t)c.M);
                run_kernel(k, &p, blocks[b].rb, blocks[b].cb, out, scale);
                int64_t bad = compare(&c, k->name, blocks[b].how, out, scale);
                CHECK_MSG(bad == 0, "%s: %s (%s): %lld rows differ from the spec's bits", c.name,
                          k->name, blocks[b].how, (long long)bad);
            }
        }
        for (int64_t m = 0; m < c.M; m++) {
            float s = c.scale[m];
            int sat = 0;
            for (int64_t j = 0; j < N2; j++) sat |= c.q[m * N2 + j] == 127 || c.q[m * N2 + j] == -127;
            kinds[0] += s == 0.0f;
            kinds[1] += s != 0.0f && fabsf(s) < 0x1p-126f;
            kinds[2] += !isfinite(s);
            kinds[3] += sat;
        }
        rows += c.M;
        free(wst), free(out), free(scale);
        edge_free(&c);
    }
    /* the sweep covers what it claims */
    CHECK_MSG(kinds[0] >= 20 && kinds[1] >= 10 && kinds[2] >= 15 && kinds[3] >= 40,
              "zero %lld, subnormal %lld, non-finite %lld, saturating %lld rows",
              (long long)kinds[0], (long long)kinds[1], (long long)kinds[2], (long long)kinds[3]);
    CHECK(ran[0] && ran[1]); /* reference and portable run everywhere */
    printf("test_edge_rows: %lld rows per kernel (%lld zero, %lld subnormal-scale, %lld non-finite, "
           "%lld saturating); kernels:",
           (long long)rows, (long long)kinds[0], (long long)kinds[1], (long long)kinds[2],
           (long long)kinds[3]);
    for (int i = 0; i < NKERNELS; i++)
        if (ran[i]) printf(" %s", qmoe_kernel_name((qmoe_kernel)kernel_ids[i]));
    printf("\n");
    return qt_finish("test_edge_rows");
}
