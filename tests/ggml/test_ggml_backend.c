/* libggml-qmoe.so through ggml's own API, as llama.cpp uses it: loaded with ggml_backend_load,
 * one ACCEL device QMOE; q8_0 / q4_0 decoding equals ggml's dequantization exactly; MUL_MAT_ID and
 * MUL_MAT on the device equal an independent double-precision reference of the documented
 * numerics (per-token int8 activations, exact integer dots, the blocks' scales); the weight bytes
 * read back are the ones set; a bad expert id fails the graph with dst untouched. */
#include <dlfcn.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml.h"
#include "qmoe_ggml.h"
#include "support/testlib.h"

static qt_rng rng = {20261201};

/* Random blocks: a scale in +-[0.001, 0.1] and random integers (all 256 byte values). */
static void random_blocks(enum ggml_type type, uint8_t *p, int64_t nblocks)
{
    size_t bs = ggml_type_size(type);
    for (int64_t i = 0; i < nblocks; i++, p += bs) {
        float d = qt_uniform(&rng, 0.001f, 0.1f) * (qt_range(&rng, 0, 1) ? 1.0f : -1.0f);
        ggml_fp16_t h = ggml_fp32_to_fp16(d);
        memcpy(p, &h, 2);
        for (size_t j = 2; j < bs; j++) p[j] = (uint8_t)qt_range(&rng, 0, 255);
    }
}

static void test_decode(enum ggml_type type)
{
    enum { K = 256 };
    uint8_t row[K / 32 * 34];
    int8_t q[K];
    float d[K / 32], ref[K];
    const struct ggml_type_traits *tr = ggml_get_type_traits(type);
    for (int rep = 0; rep < 50; rep++) {
        random_blocks(type, row, K / 32);
        qg_decode_row(type, row, K, q, d);
        tr->to_float(row, ref, K);
        int same = 1;
        for (int k = 0; k < K; k++) same &= (float)q[k] * d[k / 32] == ref[k];
        CHECK_MSG(same, "%s: decoded value differs from ggml's dequantization", ggml_type_name(type));
        if (type == GGML_TYPE_Q4_0) {
            int in = 1;
            for (int k = 0; k < K; k++) in &= q[k] >= -8 && q[k] <= 7;
            CHECK(in);
        }
    }
}

/* qmoe's per-token quantization, in double: scale = max|x| / 127, q = round half even. */
static void quant_row(const float *x, int64_t K, double *q, double *s)
{
    float m = 0;
    for (int64_t k = 0; k < K; k++) m = fmaxf(m, fabsf(x[k]));
    *s = (double)(m / 127.0f);
    for (int64_t k = 0; k < K; k++) q[k] = m == 0 ? 0 : nearbyint((double)(x[k] / (m / 127.0f)));
}

/* out = sum over blocks of (sum q_w q_x) * d_block * s_x, in double. */
static double ref_dot(enum ggml_type type, const uint8_t *wrow, const float *x, int64_t K)
{
    int8_t *q = malloc((size_t)K);
    float *d = malloc((size_t)K / 32 * sizeof(float));
    double *qx = malloc((size_t)K * sizeof(double)), s, acc = 0;
    qg_decode_row(type, wrow, K, q, d);
    quant_row(x, K, qx, &s);
    for (int64_t g = 0; g < K / 32; g++) {
        double a = 0;
        for (int64_t k = g * 32; k < g * 32 + 32; k++) a += q[k] * qx[k];
        acc += a * d[g];
    }
    free(q);
    free(d);
    free(qx);
    return acc * s;
}

typedef struct {
    struct ggml_context *ctx;
    ggml_backend_buffer_t buf;
    struct ggml_cgraph *gf;
} graph;

static graph make_graph(struct ggml_tensor **out, enum ggml_op op, enum ggml_type type,
                        enum ggml_type btype, int64_t K,
                        int64_t N, int64_t E, int64_t B1, int64_t T, int64_t n_used,
                        struct ggml_tensor **as, struct ggml_tensor **b, struct ggml_tensor **ids)
{
    struct ggml_init_params ip = {ggml_tensor_overhead() * 8 + ggml_graph_overhead(), NULL, true};
    graph g = {ggml_init(ip), NULL, NULL};
    *as = ggml_new_tensor_3d(g.ctx, type, K, N, E);
    if (op == GGML_OP_MUL_MAT_ID) {
        *b = ggml_new_tensor_3d(g.ctx, btype, K, B1, T);
        *ids = ggml_new_tensor_2d(g.ctx, GGML_TYPE_I32, n_used, T);
        *out = ggml_mul_mat_id(g.ctx, *as, *b, *ids);
    } else {
        *b = ggml_new_tensor_3d(g.ctx, btype, K, B1, E);
        *ids = NULL;
        *out = ggml_mul_mat(g.ctx, *as, *b);
    }
    g.gf = ggml_new_graph(g.ctx);
    ggml_build_forward_expand(g.gf, *out);
    return g;
}

static void free_graph(graph *g)
{
    ggml_backend_buffer_free(g->buf);
    ggml_free(g->ctx);
}

/* One MUL_MAT_ID (or MUL_MAT) on the device against the reference; bad_id puts an id out of
 * range, which must fail the graph and leave dst as it was. */
static void run_case(ggml_backend_t be, ggml_backend_buffer_type_t buft, enum ggml_op op,
                     enum ggml_type type, enum ggml_type btype, int64_t K, int64_t N, int64_t E, int64_t B1, int64_t T,
                     int64_t n_used, int bad_id)
{
    struct ggml_tensor *as, *b, *ids, *out;
    graph g = make_graph(&out, op, type, btype, K, N, E, B1, T, n_used, &as, &b, &ids);
    g.buf = ggml_backend_alloc_ctx_tensors_from_buft(g.ctx, buft);
    CHECK(g.buf != NULL);
    if (!g.buf) {
        ggml_free(g.ctx);
        return;
    }
    ggml_backend_buffer_set_usage(g.buf, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    size_t wbytes = ggml_nbytes(as), bn = (size_t)ggml_nelements(b), on = (size_t)ggml_nelements(out);
    uint8_t *w = malloc(wbytes), *wback = malloc(wbytes);
    float *x = malloc(bn * sizeof(float)), *y = malloc(on * sizeof(float));
    random_blocks(type, w, (int64_t)(wbytes / ggml_type_size(type)));
    for (size_t i = 0; i < bn; i++) x[i] = qt_uniform(&rng, -1.0f, 1.0f);
    ggml_backend_tensor_set(as, w, 0, wbytes);
    if (btype == GGML_TYPE_F16) { /* the reference reads the values the f16 activations hold */
        ggml_fp16_t *h = malloc(bn * sizeof *h);
        for (size_t i = 0; i < bn; i++) x[i] = ggml_fp16_to_fp32(h[i] = ggml_fp32_to_fp16(x[i]));
        ggml_backend_tensor_set(b, h, 0, bn * sizeof *h);
        free(h);
    } else if (btype == GGML_TYPE_BF16) {
        ggml_bf16_t *h = malloc(bn * sizeof *h);
        for (size_t i = 0; i < bn; i++) x[i] = ggml_bf16_to_fp32(h[i] = ggml_fp32_to_bf16(x[i]));
        ggml_backend_tensor_set(b, h, 0, bn * sizeof *h);
        free(h);
    } else {
        ggml_backend_tensor_set(b, x, 0, bn * sizeof(float));
    }
    int32_t *idv = NULL;
    if (ids) {
        idv = malloc((size_t)(n_used * T) * sizeof(int32_t));
        for (int64_t t = 0; t < T; t++)
            for (int64_t i = 0; i < n_used; i++) idv[t * n_used + i] = (int32_t)((t + i * 3) % E);
        if (bad_id) idv[n_used * T - 1] = (int32_t)E;
        ggml_backend_tensor_set(ids, idv, 0, (size_t)(n_used * T) * sizeof(int32_t));
    }
    for (size_t i = 0; i < on; i++) y[i] = -12345.0f;
    ggml_backend_tensor_set(out, y, 0, on * sizeof(float));
    enum ggml_status st = ggml_backend_graph_compute(be, g.gf);
    ggml_backend_tensor_get(out, y, 0, on * sizeof(float));
    ggml_backend_tensor_get(as, wback, 0, wbytes);
    CHECK_MSG(memcmp(w, wback, wbytes) == 0, "get_tensor does not return the weight's bytes");
    if (bad_id) {
        CHECK_MSG(st == GGML_STATUS_FAILED, "a bad expert id: status %d", (int)st);
        int untouched = 1;
        for (size_t i = 0; i < on; i++) untouched &= y[i] == -12345.0f;
        CHECK_MSG(untouched, "a failed graph wrote dst");
    } else {
        CHECK_MSG(st == GGML_STATUS_SUCCESS, "%s %s K=%lld N=%lld E=%lld: status %d", ggml_op_name(op),
                  ggml_type_name(type), (long long)K, (long long)N, (long long)E, (int)st);
        double err = 0, norm = 0;
        size_t rowb = ggml_row_size(type, K);
        int64_t rows = op == GGML_OP_MUL_MAT_ID ? n_used * T : B1 * E;
        for (int64_t r = 0; r < rows; r++) {
            int64_t e, xr;
            if (op == GGML_OP_MUL_MAT_ID) {
                int64_t i = r % n_used, t = r / n_used;
                e = idv[t * n_used + i];
                xr = t * B1 + i % B1;
            } else {
                e = r / B1;
                xr = r;
            }
            for (int64_t n = 0; n < N; n++) {
                double ref = ref_dot(type, w + (size_t)(e * N + n) * rowb, x + xr * K, K);
                double d = y[r * N + n] - ref;
                err += d * d;
                norm += ref * ref;
            }
        }
        /* float32 sums of exact integer dots: a few ulps off the double reference */
        CHECK_MSG(err <= 1e-10 * norm, "%s %s K=%lld N=%lld E=%lld: relative error %g",
                  ggml_op_name(op), ggml_type_name(type), (long long)K, (long long)N, (long long)E,
                  sqrt(err / (norm > 0 ? norm : 1)));
    }
    free(w);
    free(wback);
    free(x);
    free(y);
    free(idv);
    free_graph(&g);
}

/* supports_op as llama.cpp's loader asks it: a fake MUL_MAT_ID whose weight sits in a zero-byte
 * buffer of the type. Yes for q8_0 / q4_0 in a QMOE buffer whatever the batch; no for a weight in
 * another buffer (the CPU's) or of a type the backend does not convert. */
static void test_supports(ggml_backend_dev_t dev, ggml_backend_buffer_type_t buft)
{
    struct ggml_init_params ip = {ggml_tensor_overhead() * 64, NULL, true};
    struct ggml_context *ctx = ggml_init(ip);
    ggml_backend_buffer_t probe = ggml_backend_buft_alloc_buffer(buft, 0);
    ggml_backend_dev_t cpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    ggml_backend_buffer_t cpu_buf = cpu ? ggml_backend_buft_alloc_buffer(ggml_backend_dev_buffer_type(cpu), 0) : NULL;
    CHECK(probe != NULL);
    CHECK(cpu_buf != NULL);
    const enum ggml_type types[3] = {GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q4_K};
    for (int t = 0; t < 3; t++) {
        for (int64_t T = 1; T <= 4096; T *= 64) {
            struct ggml_tensor *as = ggml_new_tensor_3d(ctx, types[t], 256, 64, 8);
            struct ggml_tensor *b = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, 256, 2, T);
            struct ggml_tensor *ids = ggml_new_tensor_2d(ctx, GGML_TYPE_I32, 2, T);
            struct ggml_tensor *op = ggml_mul_mat_id(ctx, as, b, ids);
            as->buffer = probe;
            CHECK_MSG(ggml_backend_dev_supports_op(dev, op) == (t < 2), "%s, T = %lld",
                      ggml_type_name(types[t]), (long long)T);
            as->buffer = cpu_buf;
            CHECK(!ggml_backend_dev_supports_op(dev, op));
        }
    }
    ggml_backend_buffer_free(probe);
    if (cpu_buf) ggml_backend_buffer_free(cpu_buf);
    ggml_free(ctx);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s libggml-qmoe.so\n", argv[0]);
        return 2;
    }
    if (argc == 3 && strcmp(argv[1], "--refused") == 0) {
        /* run with QMOE_ISA=portable: no fast kernel, so the backend scores 0 and ggml refuses it */
        void *h = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
        CHECK(h != NULL);
        int (*score)(void) = NULL;
        if (h) *(void **)&score = dlsym(h, "ggml_backend_score");
        CHECK(score != NULL);
        if (score) CHECK(score() == 0);
        if (h) dlclose(h);
        CHECK(ggml_backend_load(argv[2]) == NULL);
        return qt_finish("ggml_backend_refused");
    }
    test_decode(GGML_TYPE_Q8_0);
    test_decode(GGML_TYPE_Q4_0);

    ggml_backend_reg_t reg = ggml_backend_load(argv[1]);
    CHECK_MSG(reg != NULL, "ggml_backend_load(%s) failed", argv[1]);
    if (!reg) return qt_finish("ggml_backend");
    CHECK(strcmp(ggml_backend_reg_name(reg), "QMOE") == 0);
    CHECK(ggml_backend_reg_dev_count(reg) == 1);
    ggml_backend_dev_t dev = ggml_backend_reg_dev_get(reg, 0);
    CHECK(strcmp(ggml_backend_dev_name(dev), "QMOE") == 0);
    CHECK(ggml_backend_dev_type(dev) == GGML_BACKEND_DEVICE_TYPE_ACCEL);
    CHECK(ggml_backend_dev_by_name("QMOE") == dev);
    CHECK(ggml_backend_reg_get_proc_address(reg, "ggml_backend_set_n_threads") != NULL);
    ggml_backend_t be = ggml_backend_dev_init(dev, NULL);
    CHECK(be != NULL);
    if (!be) return qt_finish("ggml_backend");
    ggml_backend_set_n_threads_t set_threads =
        (ggml_backend_set_n_threads_t)ggml_backend_reg_get_proc_address(reg, "ggml_backend_set_n_threads");
    if (set_threads) set_threads(be, 2);
    ggml_backend_buffer_type_t buft = ggml_backend_dev_buffer_type(dev);
    CHECK(!ggml_backend_buft_is_host(buft));
    test_supports(dev, buft);

    for (int t = 0; t < 2; t++) {
        enum ggml_type type = t ? GGML_TYPE_Q4_0 : GGML_TYPE_Q8_0;
        enum ggml_type f32 = GGML_TYPE_F32;
        run_case(be, buft, GGML_OP_MUL_MAT_ID, type, f32, 128, 64, 8, 2, 13, 2, 0); /* routed rows */
        run_case(be, buft, GGML_OP_MUL_MAT_ID, type, f32, 96, 5, 4, 1, 7, 3, 0);   /* odd N, broadcast b */
        run_case(be, buft, GGML_OP_MUL_MAT, type, f32, 64, 3, 1100, 2, 0, 0, 0);   /* > 1024 matrices */
        run_case(be, buft, GGML_OP_MUL_MAT, type, GGML_TYPE_F16, 64, 8, 3, 4, 0, 0, 0); /* f16 b */
        run_case(be, buft, GGML_OP_MUL_MAT_ID, type, GGML_TYPE_BF16, 64, 8, 4, 2, 5, 2, 0); /* bf16 */
        run_case(be, buft, GGML_OP_MUL_MAT_ID, type, f32, 64, 16, 4, 2, 3, 2, 1);  /* a bad id */
    }
    ggml_backend_free(be);
    return qt_finish("ggml_backend");
}
