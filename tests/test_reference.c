/*
 * The reference kernel, through the public two-phase API, against support/oracle.c (the
 * simplified formula in double precision, with the bias correction that makes an opaque bias
 * give the vendor formula). A randomized sweep with fixed seeds, shapes at the spec's limits,
 * and a case whose outputs are determined exactly by integer arithmetic.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "qmoe/qmoe.h"
#include "support/oracle.h"
#include "support/testlib.h"

enum { WS_F32, WS_F16, WS_BF16, WS_U64, WS_I64 }; /* 64-bit: float32 bits in the low word */
enum { X_CONTIG, X_PADDED, X_TRANSPOSED };

typedef struct tcase {
    int64_t M, K, N, E, E_groups, G; /* G = 0: per-channel */
    int a8w4, count_list, ws_type, x_mode, opaque_bias, exact;
    int out_mode;   /* 0 contiguous, 1 padded rows (padding stays untouched), 2 column-major */
    int strided;    /* xScale, groupList with stride 2; weightScale, bias and an int8 ND weight
                     * stored transposed */
    int force_nz;   /* NZ weight declared ND, read as NZ through force_weight_nz (vendor entry) */
    int nonfinite;  /* xScale of row 0 NaN, of row 1 +inf: those rows get a non-finite scale, 0s */
    oracle_wlayout layout;
    uint64_t seed;
} tcase;

/* Totals over every case, for the acceptance criteria. */
static int64_t total_elems, identical_elems, off_by_more, rows_checked, scale_bad, exact_bad;
/* noisy_rows: rows whose int8 result float32 cannot determine (see oracle.h) */
static int64_t noisy_rows, zero_rows, scale_past_1e6, nonfinite_rows;
static double worst_scale_rel;

#define SENTINEL_BYTE 0x6B

static int a8w4_layout(oracle_wlayout l) { return l != ORACLE_W_INT8_ND && l != ORACLE_W_INT8_NZ; }

/* Weight tensor over the packed storage in the layout's own shape. */
static qmoe_tensor *weight_tensor(const tcase *c, void *data)
{
    const int64_t *nd_strides = c->strided ? (int64_t[]){c->K * c->N, 1, c->K} : NULL;
    qmoe_format nz = c->force_nz ? QMOE_FORMAT_ND : QMOE_FORMAT_FRACTAL_NZ;
    int64_t E = c->E, K = c->K, N = c->N;
    qmoe_tensor *t = NULL;
    qmoe_status st;
    switch (c->layout) {
    case ORACLE_W_INT8_ND:
        st = qmoe_tensor_create((int64_t[]){E, K, N}, 3, nd_strides, QMOE_DTYPE_INT8,
                                QMOE_FORMAT_ND, data, &t);
        break;
    case ORACLE_W_INT8_NZ:
        st = qmoe_tensor_create((int64_t[]){E, N / 32, K / 16, 16, 32}, 5, NULL, QMOE_DTYPE_INT8,
                                nz, data, &t);
        break;
    case ORACLE_W_INT4_ND:
        st = qmoe_tensor_create((int64_t[]){E, K, N}, 3, NULL, QMOE_DTYPE_INT4, QMOE_FORMAT_ND,
                                data, &t);
        break;
    case ORACLE_W_INT4_NZ:
        st = qmoe_tensor_create((int64_t[]){E, N / 64, K / 16, 16, 64}, 5, NULL, QMOE_DTYPE_INT4,
                                nz, data, &t);
        break;
    case ORACLE_W_INT32_ND:
        st = qmoe_tensor_create((int64_t[]){E, K, N / 8}, 3, NULL, QMOE_DTYPE_INT32, QMOE_FORMAT_ND,
                                data, &t);
        break;
    default:
        st = qmoe_tensor_create((int64_t[]){E, N / 64, K / 16, 16, 8}, 5, NULL, QMOE_DTYPE_INT32,
                                nz, data, &t);
        break;
    }
    CHECK_MSG(st == QMOE_OK, "weight tensor: %s", qmoe_last_error());
    return t;
}

/* One scale value: its stored bits (8 bytes reserved per element) and its exact value. */
static double make_scale(qt_rng *r, int type, int power_of_two, uint8_t *dst)
{
    double v;
    if (power_of_two) {
        int p = (int)qt_range(r, -2, -1);
        v = ldexp(1.0, p);
        switch (type) {
        case WS_F16: { uint16_t b = (uint16_t)((15 + p) << 10); memcpy(dst, &b, 2); break; }
        case WS_BF16: { uint16_t b = (uint16_t)((127 + p) << 7); memcpy(dst, &b, 2); break; }
        default: {
            float f = (float)v;
            uint64_t word = 0;
            memcpy(&word, &f, 4);
            if (type >= WS_U64) word |= (uint64_t)0xDEADBEEFu << 32; /* high word ignored */
            memcpy(dst, &word, type >= WS_U64 ? 8 : 4);
        }
        }
        return v;
    }
    switch (type) {
    case WS_F16: {
        /* a normal half in [2^-10, 2^-4) with random mantissa */
        uint16_t b =
            (uint16_t)(((uint16_t)qt_range(r, 5, 10) << 10) | (uint16_t)qt_range(r, 0, 1023));
        memcpy(dst, &b, 2);
        return oracle_f16_to_double(b);
    }
    case WS_BF16: {
        float f = qt_uniform(r, 0.0005f, 0.03f);
        uint32_t bits;
        memcpy(&bits, &f, 4);
        uint16_t b = (uint16_t)(bits >> 16);
        memcpy(dst, &b, 2);
        return oracle_bf16_to_double(b);
    }
    default: {
        float f = qt_uniform(r, 0.0005f, 0.03f);
        uint64_t word = 0;
        memcpy(&word, &f, 4);
        if (type >= WS_U64) word |= qt_next(r) << 32;
        memcpy(dst, &word, type >= WS_U64 ? 8 : 4);
        return f;
    }
    }
}

static qmoe_dtype scale_dtype(int type)
{
    return type == WS_F16 ? QMOE_DTYPE_FLOAT16 : type == WS_BF16 ? QMOE_DTYPE_BFLOAT16
                         : type == WS_U64 ? QMOE_DTYPE_UINT64
                         : type == WS_I64 ? QMOE_DTYPE_INT64 : QMOE_DTYPE_FLOAT32;
}

/* Group ends: E_groups entries, some empty, the last at most M (tail rows stay unowned). */
static void make_groups(qt_rng *r, const tcase *c, int64_t *ends)
{
    int64_t last = c->M - qt_range(r, 0, c->M / 3);
    if (c->exact || qt_range(r, 0, 3) == 0) last = c->M;
    for (int64_t e = 0; e < c->E_groups; e++) ends[e] = qt_range(r, 0, last);
    for (int64_t e = 1; e < c->E_groups; e++) /* sort */
        for (int64_t f = e; f > 0 && ends[f] < ends[f - 1]; f--) {
            int64_t t = ends[f]; ends[f] = ends[f - 1]; ends[f - 1] = t;
        }
    if (c->E_groups) ends[c->E_groups - 1] = last;
}

static void run_case(const tcase *c)
{
    qt_rng r = {c->seed};
    int64_t M = c->M, K = c->K, N = c->N, E = c->E, N2 = N / 2, G = c->G ? c->G : 1;
    int8_t *w = malloc((size_t)(E * K * N) + 1);
    for (int64_t i = 0; i < E * K * N; i++) {
        if (!c->exact) w[i] = (int8_t)(c->a8w4 ? qt_range(&r, -8, 7) : qt_range(&r, -128, 127));
        else /* act half positive, gate half small and signed */
            w[i] = (int8_t)(i % N < N2 ? qt_range(&r, 1, 2) : qt_range(&r, -1, 1));
    }
    uint8_t *wstore = malloc((size_t)oracle_weight_bytes(c->layout, E, K, N) + 4);
    oracle_pack_weight(c->layout, w, E, K, N, wstore);
    if (c->strided && c->layout == ORACLE_W_INT8_ND) /* each expert's [K, N] column-major */
        for (int64_t e = 0; e < E; e++)
            for (int64_t k = 0; k < K; k++)
                for (int64_t n = 0; n < N; n++)
                    wstore[e * K * N + n * K + k] = (uint8_t)w[(e * K + k) * N + n];

    /* x: logical [M][K] stored contiguous, with padded rows, or transposed (column-major) */
    int64_t xs0 = K, xs1 = 1, xbytes = M * K;
    if (c->x_mode == X_PADDED) xs0 = K + 7, xbytes = M * (K + 7);
    if (c->x_mode == X_TRANSPOSED) xs0 = 1, xs1 = M;
    int8_t *x = malloc((size_t)xbytes + 1);
    memset(x, 0x55, (size_t)xbytes + 1); /* padding holds junk that must not be read */
    double *xs_d = malloc(sizeof(double) * (size_t)(M + 1));
    int64_t xs_st = c->strided ? 2 : 1;
    float *xs = malloc(sizeof(float) * (size_t)(2 * M + 1));
    for (int64_t m = 0; m < M; m++) {
        int zero_row = !c->exact && qt_range(&r, 0, 9) == 0;
        for (int64_t k = 0; k < K; k++) {
            int v = c->exact ? (int)qt_range(&r, 16, 31) : (int)qt_range(&r, -128, 127);
            x[m * xs0 + k * xs1] = (int8_t)(zero_row ? 0 : v);
        }
        xs_d[m] = c->exact ? 1.0f : qt_range(&r, 0, 11) == 0 ? 0.0f : qt_uniform(&r, 0.002f, 0.05f);
        xs[m * xs_st] = (float)xs_d[m];
    }
    if (c->nonfinite) { /* the oracle sees 0 there; those rows are checked apart */
        xs[0] = NAN, xs[xs_st] = INFINITY;
        xs_d[0] = xs_d[1] = 0.0;
    }

    uint8_t *ws = malloc((size_t)(8 * E * G * N));
    double *ws_d = malloc(sizeof(double) * (size_t)(E * G * N));
    int elem = c->ws_type >= WS_U64 ? 8 : c->ws_type == WS_F32 ? 4 : 2;
    /* logical [E][G][N]; stored transposed ([N][G][E]) when strided */
    int64_t ws_st[3] = {G * N, N, 1};
    if (c->strided) ws_st[0] = 1, ws_st[1] = E, ws_st[2] = E * G;
    for (int64_t e = 0; e < E; e++)
        for (int64_t g = 0; g < G; g++)
            for (int64_t n = 0; n < N; n++)
                ws_d[(e * G + g) * N + n] =
                    make_scale(&r, c->ws_type, c->exact,
                               ws + elem * (e * ws_st[0] + g * ws_st[1] + n * ws_st[2]));

    float *bias = malloc(sizeof(float) * (size_t)(E * N + 1));
    double *bias_d = malloc(sizeof(double) * (size_t)(E * N + 1));
    for (int64_t e = 0; e < E; e++)
        for (int64_t n = 0; n < N; n++) {
            double b = 0.0;
            for (int64_t k = 0; k < K; k++)
                b += 8.0 * w[(e * K + k) * N + n] * ws_d[(e * G + k / (K / G)) * N + n];
            if (c->opaque_bias) b = qt_uniform(&r, -3.0f, 3.0f);
            bias_d[e * N + n] = (float)b;
            bias[c->strided ? n * E + e : e * N + n] = (float)b;
        }

    int64_t *ends = malloc(sizeof(int64_t) * (size_t)(c->E_groups + 1));
    int64_t *gl = malloc(sizeof(int64_t) * (size_t)(c->E_groups + 1));
    int64_t gl_st = c->strided ? 2 : 1;
    int64_t *gl_store = malloc(sizeof(int64_t) * (size_t)(2 * c->E_groups + 1));
    make_groups(&r, c, ends);
    for (int64_t e = 0; e < c->E_groups; e++) {
        gl[e] = c->count_list ? ends[e] - (e ? ends[e - 1] : 0) : ends[e];
        gl_store[e * gl_st] = gl[e];
    }

    /* output element (m, j) at out[m * os0 + j * os1]; padded rows leave 3 bytes per row */
    int64_t os0 = c->out_mode == 1 ? N2 + 3 : c->out_mode == 2 ? 1 : N2;
    int64_t os1 = c->out_mode == 2 ? M : 1, pad = c->out_mode == 1 ? 3 : 0;
    size_t out_bytes = (size_t)(M * (N2 + 3)) + 1;
    int8_t *out = malloc(out_bytes);
    float *oscale = malloc(sizeof(float) * (size_t)(M + 1));
    memset(out, SENTINEL_BYTE, out_bytes);
    memset(oscale, SENTINEL_BYTE, sizeof(float) * (size_t)(M + 1));

    qmoe_tensor *tx = NULL, *tw = weight_tensor(c, wstore), *tb = NULL, *tws = NULL, *txs = NULL,
                *tgl = NULL, *tout = NULL, *tos = NULL;
    CHECK(qmoe_tensor_create((int64_t[]){M, K}, 2, (int64_t[]){xs0, xs1}, QMOE_DTYPE_INT8,
                             QMOE_FORMAT_ND, x, &tx) == QMOE_OK);
    if (c->a8w4)
        CHECK(qmoe_tensor_create((int64_t[]){E, N}, 2, c->strided ? (int64_t[]){1, E} : NULL,
                                 QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, bias, &tb) == QMOE_OK);
    if (c->G)
        CHECK(qmoe_tensor_create((int64_t[]){E, G, N}, 3, ws_st, scale_dtype(c->ws_type),
                                 QMOE_FORMAT_ND, ws, &tws) == QMOE_OK);
    else
        CHECK(qmoe_tensor_create((int64_t[]){E, N}, 2, (int64_t[]){ws_st[0], ws_st[2]},
                                 scale_dtype(c->ws_type), QMOE_FORMAT_ND, ws, &tws) == QMOE_OK);
    CHECK(qmoe_tensor_create((int64_t[]){M}, 1, (int64_t[]){xs_st}, QMOE_DTYPE_FLOAT32,
                             QMOE_FORMAT_ND, xs, &txs) == 0);
    CHECK(qmoe_tensor_create((int64_t[]){c->E_groups}, 1, (int64_t[]){gl_st}, QMOE_DTYPE_INT64,
                             QMOE_FORMAT_ND, gl_store, &tgl) == 0);
    CHECK(qmoe_tensor_create((int64_t[]){M, N2}, 2, (int64_t[]){os0, os1}, QMOE_DTYPE_INT8,
                             QMOE_FORMAT_ND, out, &tout) == 0);
    CHECK(qmoe_tensor_create((int64_t[]){M}, 1, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, oscale,
                             &tos) == 0);

    qmoe_grouped_matmul_swiglu_quant_options opt = {.group_list_type = c->count_list ? QMOE_GROUP_LIST_COUNT
                                                            : QMOE_GROUP_LIST_CUMSUM,
                           .kernel = QMOE_KERNEL_REFERENCE, .threads = 1,
                           .force_weight_nz = c->force_nz};
    uint64_t wsize = 0;
    qmoe_grouped_matmul_swiglu_quant_executor *ex = NULL;
    qmoe_status st = qmoe_grouped_matmul_swiglu_quant_workspace_size(tx, tw, tb, NULL, tws, txs, tgl, tout,
                                                          tos, NULL, &opt, &wsize, &ex);
    CHECK_MSG(st == QMOE_OK, "seed %llu: plan: %s", (unsigned long long)c->seed, qmoe_last_error());
    if (st == QMOE_OK) {
        CHECK(qmoe_grouped_matmul_swiglu_quant_executor_kernel(ex) == QMOE_KERNEL_REFERENCE);
        void *work = malloc(wsize + 1);
        st = qmoe_grouped_matmul_swiglu_quant(work, wsize, ex, NULL);
        CHECK_MSG(st == QMOE_OK, "seed %llu: run: %s", (unsigned long long)c->seed,
                  qmoe_last_error());
        free(work);
        qmoe_grouped_matmul_swiglu_quant_executor_destroy(ex);
    }
    if (c->seed % 8 == 0) { /* deterministic: the same bytes with 3 threads */
        int8_t *out3 = malloc(out_bytes);
        float *oscale3 = malloc(sizeof(float) * (size_t)(M + 1));
        memset(out3, SENTINEL_BYTE, out_bytes);
        memset(oscale3, SENTINEL_BYTE, sizeof(float) * (size_t)(M + 1));
        qmoe_tensor *tout3 = NULL, *tos3 = NULL;
        CHECK(qmoe_tensor_create((int64_t[]){M, N2}, 2, (int64_t[]){os0, os1}, QMOE_DTYPE_INT8,
                                 QMOE_FORMAT_ND, out3, &tout3) == 0);
        CHECK(qmoe_tensor_create((int64_t[]){M}, 1, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND,
                                 oscale3, &tos3) == 0);
        opt.threads = 3;
        ex = NULL;
        CHECK(qmoe_grouped_matmul_swiglu_quant_workspace_size(tx, tw, tb, NULL, tws, txs, tgl, tout3, tos3,
                                                   NULL, &opt, &wsize, &ex) == QMOE_OK);
        void *work = malloc(wsize + 1);
        CHECK(ex && qmoe_grouped_matmul_swiglu_quant(work, wsize, ex, NULL) == QMOE_OK);
        CHECK_MSG(memcmp(out3, out, out_bytes) == 0 &&
                      memcmp(oscale3, oscale, sizeof(float) * (size_t)(M + 1)) == 0,
                  "seed %llu: 3 threads gave other bytes", (unsigned long long)c->seed);
        free(work);
        qmoe_grouped_matmul_swiglu_quant_executor_destroy(ex);
        qmoe_tensor_destroy(tout3), qmoe_tensor_destroy(tos3);
        free(out3), free(oscale3);
    }

    oracle_case oc = {.M = M, .K = K, .N = N, .E = E, .E_groups = c->E_groups, .G = G,
                      .a8w4 = c->a8w4, .x = x, .x_s0 = xs0, .x_s1 = xs1, .w = w, .ws = ws_d,
                      .bias = bias_d, .xs = xs_d, .gl = gl, .count_list = c->count_list};
    double *S = malloc(sizeof(double) * (size_t)(M * N2) + 8),
           *sc = malloc(sizeof(double) * (size_t)(M + 1));
    int8_t *q = malloc((size_t)(M * N2) + 1);
    uint8_t *written = malloc((size_t)M + 1);
    double *noise = malloc(sizeof(double) * (size_t)(M + 1));
    oracle_run(&oc, S, sc, q, written, noise);

    int64_t case_diff = 0;
    for (int64_t m = 0; m < M; m++) {
        if (!written[m]) {
            uint8_t expect[4] = {SENTINEL_BYTE, SENTINEL_BYTE, SENTINEL_BYTE, SENTINEL_BYTE};
            int untouched = memcmp(&oscale[m], expect, 4) == 0;
            for (int64_t j = 0; j < N2 + pad; j++)
                untouched &= (uint8_t)out[m * os0 + j * os1] == SENTINEL_BYTE;
            CHECK_MSG(untouched, "seed %llu: row %lld past the last group was written",
                      (unsigned long long)c->seed, (long long)m);
            continue;
        }
        double want = sc[m], got = oscale[m];
        if (c->nonfinite && m < 2) {
            /* the caller's non-finite data: scale non-finite as computed, output row 0 */
            int zeros = !isfinite(oscale[m]);
            for (int64_t j = 0; j < N2; j++) zeros &= out[m * os0 + j * os1] == 0;
            CHECK_MSG(zeros, "seed %llu: non-finite row %lld: scale %g",
                      (unsigned long long)c->seed, (long long)m, got);
            nonfinite_rows++;
            continue;
        }
        int pad_ok = 1;
        for (int64_t j = N2; j < N2 + pad; j++)
            pad_ok &= (uint8_t)out[m * os0 + j] == SENTINEL_BYTE;
        CHECK_MSG(pad_ok, "seed %llu: row %lld: padding written", (unsigned long long)c->seed,
                  (long long)m);
        if (want == 0.0) {
            /* the all-zero row: scale 0 and zeros, exactly */
            int zeros = got == 0.0;
            for (int64_t j = 0; j < N2; j++) zeros &= out[m * os0 + j * os1] == 0;
            CHECK_MSG(zeros, "seed %llu: zero row %lld: scale %g", (unsigned long long)c->seed,
                      (long long)m, got);
            zero_rows++;
        }
        if (127.0 * want < 600.0 * noise[m]) {
            /* S*127/amax is determined to +-0.5 (so int8 to +-1) only when amax > ~508 * the
             * noise in S; below that, cancellation leaves the row to float32 rounding and only
             * the scale's size is determined (e.g. a zero x row with the caller-built bias) */
            noisy_rows++;
            CHECK_MSG(fabs(127.0 * got - 127.0 * want) <= 2.0 * noise[m],
                      "seed %llu: row %lld: amax %g, oracle %g +- %g", (unsigned long long)c->seed,
                      (long long)m, 127.0 * got, 127.0 * want, noise[m]);
            continue;
        }
        rows_checked++;
        double rel = want == 0.0 ? (got == 0.0 ? 0.0 : INFINITY) : fabs(got - want) / want;
        if (rel > worst_scale_rel) worst_scale_rel = rel;
        if (c->exact) {
            /* S is exact in float, so the scale is amax/127 correctly rounded to float */
            if ((float)want != oscale[m]) {
                exact_bad++;
                fprintf(stderr, "seed %llu row %lld: scale %.9g, exactly %.9g\n",
                        (unsigned long long)c->seed, (long long)m, got, want);
            }
        }
        /* the spec's 1e-6, or float32's own error bound where cancellation makes that larger */
        if (rel > 1e-6) {
            scale_past_1e6++;
            if (fabs(got - want) > 2.0 * noise[m] / 127.0) scale_bad++;
        }
        for (int64_t j = 0; j < N2; j++) {
            int d = abs(out[m * os0 + j * os1] - q[m * N2 + j]);
            total_elems++;
            identical_elems += d == 0;
            off_by_more += d > 1;
            case_diff += d > 1;
            if (c->exact && d != 0 && want != 0.0) {
                /* away from a rounding tie the int8 value is determined exactly */
                double t = S[m * N2 + j] / want;
                if (fabs(t - floor(t) - 0.5) > 1e-3) exact_bad++;
            }
        }
    }
    CHECK_MSG(case_diff == 0, "seed %llu: %lld outputs off by more than 1 (M=%lld K=%lld N=%lld "
              "layout=%d ws=%d G=%lld a8w4=%d opaque=%d)", (unsigned long long)c->seed,
              (long long)case_diff, (long long)M, (long long)K, (long long)N, c->layout,
              c->ws_type, (long long)c->G, c->a8w4, c->opaque_bias);

    qmoe_tensor_destroy(tx), qmoe_tensor_destroy(tw), qmoe_tensor_destroy(tb);
    qmoe_tensor_destroy(tws), qmoe_tensor_destroy(txs), qmoe_tensor_destroy(tgl);
    qmoe_tensor_destroy(tout), qmoe_tensor_destroy(tos);
    free(w), free(wstore), free(x), free(xs), free(xs_d), free(ws), free(ws_d), free(bias);
    free(bias_d), free(ends), free(gl), free(gl_store), free(out), free(oscale), free(S), free(sc),
        free(q);
    free(written), free(noise);
}

/* A random case; N and K obey the layout's alignment. */
static tcase random_case(qt_rng *r, uint64_t seed)
{
    tcase c = {0};
    c.seed = seed;
    c.layout = (oracle_wlayout)qt_range(r, 0, 5);
    c.a8w4 = a8w4_layout(c.layout);
    int nz = c.layout == ORACLE_W_INT8_NZ || c.layout == ORACLE_W_INT4_NZ ||
             c.layout == ORACLE_W_INT32_NZ;
    int64_t n_align = c.layout == ORACLE_W_INT8_NZ    ? 32
                      : nz                            ? 64
                      : c.layout == ORACLE_W_INT32_ND ? 8
                                                      : 2;
    c.N = n_align * qt_range(r, 1, 256 / n_align);
    c.K = nz ? 16 * qt_range(r, 1, 12) : qt_range(r, 1, 200);
    c.M = qt_range(r, 1, 24);
    c.E = qt_range(r, 1, 6);
    c.E_groups = qt_range(r, 0, c.E);
    if (qt_range(r, 0, 1)) {
        /* per-group: G among the divisors of K */
        int64_t divs[64], nd = 0;
        for (int64_t g = 1; g <= c.K && nd < 64; g++)
            if (c.K % g == 0) divs[nd++] = g;
        c.G = divs[qt_range(r, 0, nd - 1)];
    }
    c.ws_type = (int)qt_range(r, 0, c.a8w4 ? 4 : 2);
    c.force_nz = nz && qt_range(r, 0, 3) == 0;
    c.nonfinite = c.M >= 2 && qt_range(r, 0, 15) == 0;
    c.count_list = (int)qt_range(r, 0, 1);
    c.x_mode = (int)qt_range(r, 0, 2);
    c.opaque_bias = c.a8w4 && qt_range(r, 0, 1);
    c.out_mode = (int)qt_range(r, 0, 5) % 3 == 0 ? (int)qt_range(r, 1, 2) : 0;
    c.strided = qt_range(r, 0, 3) == 0;
    return c;
}

static void test_sweep(void)
{
    qt_rng r = {2026};
    for (uint64_t i = 0; i < 1200; i++) {
        tcase c = random_case(&r, 1000 + i);
        run_case(&c);
    }
}

static void test_limits(void)
{
    /* K = 19968 (A8W4, NZ), N = 10240, K = 65520 (A8W8, one row) */
    tcase k_a8w4 = {.M = 3, .K = 19968, .N = 64, .E = 2, .E_groups = 2, .a8w4 = 1,
                    .layout = ORACLE_W_INT32_NZ, .ws_type = WS_F32, .seed = 7};
    run_case(&k_a8w4);
    k_a8w4.G = 16, k_a8w4.layout = ORACLE_W_INT4_NZ, k_a8w4.opaque_bias = 1, k_a8w4.seed = 8;
    run_case(&k_a8w4);
    tcase wide = {.M = 3, .K = 32, .N = 10240, .E = 1, .E_groups = 1, .a8w4 = 1,
                  .layout = ORACLE_W_INT4_NZ, .ws_type = WS_U64, .seed = 9};
    run_case(&wide);
    wide.a8w4 = 0, wide.layout = ORACLE_W_INT8_NZ, wide.ws_type = WS_BF16, wide.seed = 10;
    run_case(&wide);
    tcase deep = {.M = 1, .K = 65520, .N = 64, .E = 1, .E_groups = 1,
                  .layout = ORACLE_W_INT8_NZ, .ws_type = WS_F16, .seed = 11};
    run_case(&deep);
}

static void test_exact(void)
{
    /* Scales 2^-1 or 2^-2, x in [16, 31], K = 32: the activated half is an integer multiple of
     * 1/4 in [128, 2^11) (so Swish(a) == a in float: e^-128 underflows), the gate half a
     * multiple of 1/4 below 2^10, their product fits float's 24 bits: S is exact, and any error
     * in the integer accumulation shows up in the scale or the int8 values. */
    for (int l = 0; l < 6; l++)
        for (int g = 0; g < 2; g++) {
            tcase c = {.M = 6, .K = 32, .N = 128, .E = 2, .E_groups = 2, .G = g ? 4 : 0,
                       .layout = (oracle_wlayout)l, .a8w4 = a8w4_layout((oracle_wlayout)l),
                       .ws_type = (l + g) % 3, .exact = 1, .seed = 100 + (uint64_t)(2 * l + g)};
            run_case(&c);
        }
    CHECK_MSG(exact_bad == 0, "%lld exactly determined values differ", (long long)exact_bad);
}

static qmoe_tensor *plain(qmoe_dtype dtype, void *data, int ndim, const int64_t *shape)
{
    qmoe_tensor *t = NULL;
    CHECK(qmoe_tensor_create(shape, ndim, NULL, dtype, QMOE_FORMAT_ND, data, &t) == QMOE_OK);
    return t;
}

/* A row whose amax is a subnormal float below 127 * 2^-150: its scale amax/127 rounds to 0 in
 * float32, so the row must come out as the zero row (scale 0, output 0), not S / 0. */
static void test_underflowing_scale(void)
{
    int8_t x[1] = {1}, w[4] = {1, 0, 1, 1}; /* K = 1, N = 4: act (1, 0), gate (1, 1) */
    float ws[4] = {1e-11f, 1e-11f, 1e-11f, 1e-11f}, xs[1] = {1.4e-11f};
    int64_t gl[1] = {1};
    int8_t out[2] = {55, 55};
    float oscale[1] = {55.0f};
    qmoe_tensor *tx = plain(QMOE_DTYPE_INT8, x, 2, (int64_t[]){1, 1});
    qmoe_tensor *tw = plain(QMOE_DTYPE_INT8, w, 3, (int64_t[]){1, 1, 4});
    qmoe_tensor *tws = plain(QMOE_DTYPE_FLOAT32, ws, 2, (int64_t[]){1, 4});
    qmoe_tensor *txs = plain(QMOE_DTYPE_FLOAT32, xs, 1, (int64_t[]){1});
    qmoe_tensor *tgl = plain(QMOE_DTYPE_INT64, gl, 1, (int64_t[]){1});
    qmoe_tensor *tout = plain(QMOE_DTYPE_INT8, out, 2, (int64_t[]){1, 2});
    qmoe_tensor *tos = plain(QMOE_DTYPE_FLOAT32, oscale, 1, (int64_t[]){1});
    qmoe_grouped_matmul_swiglu_quant_options opt = {.kernel = QMOE_KERNEL_REFERENCE, .threads = 1};
    uint64_t size = 0;
    qmoe_grouped_matmul_swiglu_quant_executor *ex = NULL;
    CHECK(qmoe_grouped_matmul_swiglu_quant_workspace_size(tx, tw, NULL, NULL, tws, txs, tgl, tout, tos, NULL,
                                               &opt, &size, &ex) == QMOE_OK);
    void *work = malloc(size + 1);
    CHECK(ex && qmoe_grouped_matmul_swiglu_quant(work, size, ex, NULL) == QMOE_OK);
    /* the premise: S[0] = Swish(a) * a with a = xs * ws is a nonzero float, S[0] / 127 is not */
    volatile float a = xs[0] * ws[0];
    float s0 = a / (1.0f + expf(-a)) * a;
    CHECK(s0 > 0.0f && s0 / 127.0f == 0.0f);
    CHECK_MSG(oscale[0] == 0.0f && out[0] == 0 && out[1] == 0, "scale %g, out %d %d",
              (double)oscale[0], out[0], out[1]);
    free(work);
    qmoe_grouped_matmul_swiglu_quant_executor_destroy(ex);
    qmoe_tensor_destroy(tx), qmoe_tensor_destroy(tw), qmoe_tensor_destroy(tws);
    qmoe_tensor_destroy(txs), qmoe_tensor_destroy(tgl), qmoe_tensor_destroy(tout);
    qmoe_tensor_destroy(tos);
}

int main(void)
{
    test_underflowing_scale();
    test_exact();
    test_sweep();
    test_limits();
    double identical = total_elems ? (double)identical_elems / (double)total_elems : 0.0;
    printf("reference vs oracle: %lld rows (+%lld within float32 noise), %lld outputs, %.5f%% "
           "identical, %lld off by > 1, worst outputScale relative error %.3g\n",
           (long long)rows_checked, (long long)noisy_rows, (long long)total_elems,
           100.0 * identical, (long long)off_by_more, worst_scale_rel);
    CHECK(total_elems > 100000);
    CHECK(zero_rows > 20); /* the sweep did exercise the all-zero row */
    CHECK(nonfinite_rows > 10);
    printf("all-zero rows checked: %lld; scales past 1e-6 relative (within the float32 bound): "
           "%lld\n", (long long)zero_rows, (long long)scale_past_1e6);
    CHECK(off_by_more == 0);
    CHECK(identical >= 0.999);
    CHECK_MSG(scale_bad == 0, "%lld scales beyond the relative tolerance", (long long)scale_bad);
    return qt_finish("test_reference");
}
