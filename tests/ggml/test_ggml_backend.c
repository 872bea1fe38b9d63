/* libggml-qmoe.so through ggml's own API, as llama.cpp uses it: loaded with ggml_backend_load,
 * one ACCEL device QMOE; decoding of every taken type (q8_0, q4_0, mxfp4, q6_K, q4_K, q5_K) equals
 * ggml's dequantization exactly and encodes back to the same bytes; MUL_MAT_ID and
 * MUL_MAT on the device equal an independent double-precision reference of the documented
 * numerics (per-token int8 activations, exact integer dots, the blocks' scales); the weight bytes
 * read back are the ones set; a weight set from a read-only shared file mapping (llama.cpp's mmap)
 * drops the mapping's pages, from any other memory keeps them; a bad expert id fails the graph
 * with dst untouched. */
#define _DEFAULT_SOURCE /* mincore, mkstemp */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <unistd.h>
#include <math.h>
#include <stdlib.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml.h"
#include "qmoe_ggml.h"
#include "support/testlib.h"

static qt_rng rng = {20261201};

static const enum ggml_type taken[] = {GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_MXFP4,
                                       GGML_TYPE_Q6_K, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K};
#define NTAKEN ((int)(sizeof taken / sizeof taken[0]))

static void put_half(uint8_t *p, float v)
{
    ggml_fp16_t h = ggml_fp32_to_fp16(v);
    memcpy(p, &h, 2);
}

/* Random blocks: all bytes random (every integer code, every 6-bit scale and min) but the
 * scales: fp16 ones in +-[0.001, 0.1] (dmin positive, as ggml writes it), e8m0 ones near 2^-5. */
static void random_blocks(enum ggml_type type, uint8_t *p, int64_t nblocks)
{
    size_t bs = ggml_type_size(type);
    for (int64_t i = 0; i < nblocks; i++, p += bs) {
        for (size_t j = 0; j < bs; j++) p[j] = (uint8_t)qt_range(&rng, 0, 255);
        float d = qt_uniform(&rng, 0.001f, 0.1f) * (qt_range(&rng, 0, 1) ? 1.0f : -1.0f);
        switch (type) {
        case GGML_TYPE_MXFP4: p[0] = (uint8_t)qt_range(&rng, 118, 126); break;
        case GGML_TYPE_Q6_K: put_half(p + 208, d); break;
        case GGML_TYPE_Q4_K:
        case GGML_TYPE_Q5_K:
            put_half(p, fabsf(d) / 16);
            put_half(p + 2, qt_uniform(&rng, 0.001f, 0.1f) / 16);
            break;
        default: put_half(p, d); break;
        }
    }
}

/* The values of a row of K as the backend decodes them, in double: q s for the formats without a
 * min, s_j q - dmin m_j for q4_K / q5_K (sub-block j), with side bytes for dmin and m_j
 * (unpacked once a 256-value block: the references call this for every output). */
static void decoded(const qg_format *f, const int8_t *q, const float *s, const uint8_t *side, int64_t K,
                    double *v)
{
    uint8_t sc[8], m[8];
    double dmin = 0;
    for (int64_t k = 0; k < K; k++) {
        v[k] = (double)q[k] * s[k / f->gs];
        if (!f->mins) continue;
        if (k % 256 == 0) {
            const uint8_t *sb = side + (k / 256) * 16;
            uint16_t h;
            memcpy(&h, sb + 2, 2);
            dmin = qg_half(h);
            qg_kq_unpack(sb + 4, sc, m);
        }
        v[k] -= dmin * m[(k % 256) / 32];
    }
}

/* Decoding equals ggml's to_float bit for bit (the formats without a min: q * s exactly; q4_K /
 * q5_K: ggml's one rounding of d sc q - dmin m); encoding the integers and side bytes, with
 * mxfp4's -0 marks put back, gives the row back (without them, only where it held no -0); the
 * marks are the row's nibbles equal to 8, counted by an independent scan of its bytes; the
 * integers are in the range their qmoe dtype holds. */
static void test_decode(enum ggml_type type)
{
    enum { K = 512 };
    const qg_format *f = qg_format_of(type);
    CHECK(f != NULL);
    if (!f) return;
    uint8_t row[K / 32 * 34], back[K / 32 * 34], side[K / 32 * 34];
    int8_t q[K];
    float s[K / 16], ref[K];
    double v[K];
    const struct ggml_type_traits *tr = ggml_get_type_traits(type);
    int negzero = 0;
    for (int rep = 0; rep < 50; rep++) {
        random_blocks(type, row, K / f->blk);
        qg_decode_row(type, row, K, q, s, side);
        tr->to_float(row, ref, K);
        int same = 1, in = 1;
        const int8_t *cb = qg_codebook(type);
        decoded(f, q, s, side, K, v);
        for (int k = 0; k < K; k++) {
            same &= (float)v[k] == ref[k];
            int coded = !cb;
            for (int c = 0; cb && c < 16; c++) coded |= cb[c] == q[k];
            in &= (f->int4 ? q[k] >= -8 && q[k] <= 7 : 1) && coded;
        }
        CHECK_MSG(same, "%s: decoded value differs from ggml's dequantization", ggml_type_name(type));
        CHECK_MSG(in, "%s: an integer outside int4 or outside its codebook", ggml_type_name(type));
        qg_encode_row(type, q, side, K, back);
        uint8_t bits[K / 8] = {0};
        int64_t nz = qg_row_negative_zeros(type, row, K, bits), eights = 0;
        if (type == GGML_TYPE_MXFP4)
            for (int i = 0; i < K / 32; i++)
                for (int j = 1; j < 17; j++) eights += ((row[i * 17 + j] & 0x0F) == 8) + (row[i * 17 + j] >> 4 == 8);
        CHECK_MSG(nz == eights, "%s: %lld -0 marks for %lld codes 8", ggml_type_name(type), (long long)nz,
                  (long long)eights);
        negzero += nz > 0;
        if (!nz)
            CHECK_MSG(memcmp(row, back, ggml_row_size(type, K)) == 0, "%s: encode(decode(row)) is not the row",
                      ggml_type_name(type));
        qg_row_put_negative_zeros(type, bits, K, back);
        CHECK_MSG(memcmp(row, back, ggml_row_size(type, K)) == 0,
                  "%s: encode(decode(row)) with the -0 marks is not the row", ggml_type_name(type));
    }
    /* random mxfp4 codes hold -0 (code 8); the others never report it */
    CHECK(type == GGML_TYPE_MXFP4 ? negzero > 0 : negzero == 0);
}

/* qg_half equals ggml's fp16 conversion on every non-NaN half (NaN: still a NaN). */
static void test_half(void)
{
    int same = 1;
    for (uint32_t h = 0; h < 65536; h++) {
        float a = qg_half((uint16_t)h), b = ggml_fp16_to_fp32((ggml_fp16_t)h);
        same &= isnan(b) ? isnan(a) : memcmp(&a, &b, sizeof a) == 0;
    }
    CHECK_MSG(same, "qg_half differs from ggml_fp16_to_fp32");
}

/* qmoe's per-token quantization, in double: scale = max|x| / 127, q = round half even. */
static void quant_row(const float *x, int64_t K, double *q, double *s)
{
    float m = 0;
    for (int64_t k = 0; k < K; k++) m = fmaxf(m, fabsf(x[k]));
    *s = (double)(m / 127.0f);
    for (int64_t k = 0; k < K; k++) q[k] = m == 0 ? 0 : nearbyint((double)(x[k] / (m / 127.0f)));
}

/* Activations [rows, K] quantized per row (quant_row), each row once: the references take every
 * output of a row from it. */
typedef struct {
    double *q, *s;
    int64_t K;
} ref_x;

static ref_x ref_x_make(const float *x, int64_t rows, int64_t K)
{
    ref_x a = {malloc((size_t)(rows * K) * sizeof(double)), malloc((size_t)rows * sizeof(double)), K};
    for (int64_t r = 0; r < rows; r++) quant_row(x + r * K, K, a.q + r * K, a.s + r);
    return a;
}

static void ref_x_free(ref_x *a)
{
    free(a->q);
    free(a->s);
}

/* A weight's rows of K as the backend decodes them (decoded()), each row decoded on first use
 * and kept: the references read a row for every activation row routed to it. */
typedef struct {
    enum ggml_type type;
    const uint8_t *w;
    size_t rowb;
    int64_t K;
    double *v;
    uint8_t *done;
} ref_w;

static ref_w ref_w_make(enum ggml_type type, const uint8_t *w, int64_t rows, int64_t K)
{
    ref_w m = {type, w, ggml_row_size(type, K), K, malloc((size_t)(rows * K) * sizeof(double)),
               calloc((size_t)rows, 1)};
    return m;
}

static const double *ref_w_row(ref_w *m, int64_t r)
{
    double *v = m->v + r * m->K;
    if (!m->done[r]) {
        int8_t *q = malloc((size_t)m->K);
        float *sc = malloc((size_t)m->K / 16 * sizeof(float));
        uint8_t *side = malloc((size_t)m->K / 16 * 18);
        qg_decode_row(m->type, m->w + (size_t)r * m->rowb, m->K, q, sc, side);
        decoded(qg_format_of(m->type), q, sc, side, m->K, v);
        free(q);
        free(sc);
        free(side);
        m->done[r] = 1;
    }
    return v;
}

static void ref_w_free(ref_w *m)
{
    free(m->v);
    free(m->done);
}

/* out = s_x * sum_k q_x[k] * value[k], in double (exact): activation row xr of a, weight row wr of m */
static double ref_dot(const ref_x *a, int64_t xr, ref_w *m, int64_t wr)
{
    const double *q = a->q + xr * a->K, *v = ref_w_row(m, wr);
    double acc = 0;
    for (int64_t k = 0; k < a->K; k++) acc += q[k] * v[k];
    return acc * a->s[xr];
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

/* Every tensor of ctx in one QMOE buffer used for weights (converted at their last write); NULL,
 * with ctx freed, when that fails. */
static ggml_backend_buffer_t weights_buffer(struct ggml_context *ctx, ggml_backend_buffer_type_t buft)
{
    ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors_from_buft(ctx, buft);
    CHECK(buf != NULL);
    if (!buf) {
        ggml_free(ctx);
        return NULL;
    }
    ggml_backend_buffer_set_usage(buf, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    return buf;
}

/* 1: run_case zeroes the weight's first QG_SLICE matrices. Their scales (0) fit float16, a later
 * slice's (the K-quants' products) do not: the conversion starts again with float32 scales. */
static int zero_lead;

/* One MUL_MAT_ID (or MUL_MAT) on the device against the reference; bad_id puts an id out of
 * range, which must fail the graph and leave dst as it was. */
static void run_case(ggml_backend_t be, ggml_backend_buffer_type_t buft, enum ggml_op op,
                     enum ggml_type type, enum ggml_type btype, int64_t K, int64_t N, int64_t E, int64_t B1, int64_t T,
                     int64_t n_used, int bad_id)
{
    struct ggml_tensor *as, *b, *ids, *out;
    graph g = make_graph(&out, op, type, btype, K, N, E, B1, T, n_used, &as, &b, &ids);
    g.buf = weights_buffer(g.ctx, buft);
    if (!g.buf) return;
    size_t wbytes = ggml_nbytes(as), bn = (size_t)ggml_nelements(b), on = (size_t)ggml_nelements(out);
    uint8_t *w = malloc(wbytes), *wback = malloc(wbytes);
    float *x = malloc(bn * sizeof(float)), *y = malloc(on * sizeof(float));
    random_blocks(type, w, (int64_t)(wbytes / ggml_type_size(type)));
    if (zero_lead) memset(w, 0, (size_t)QG_SLICE * as->nb[2]); /* the first slice's scales are 0 */
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
        int64_t rows = op == GGML_OP_MUL_MAT_ID ? n_used * T : B1 * E;
        ref_x ax = ref_x_make(x, (int64_t)bn / K, K);
        ref_w mw = ref_w_make(type, w, (int64_t)(wbytes / ggml_row_size(type, K)), K);
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
                double ref = ref_dot(&ax, xr, &mw, e * N + n);
                double d = y[r * N + n] - ref;
                err += d * d;
                norm += ref * ref;
            }
        }
        ref_x_free(&ax);
        ref_w_free(&mw);
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

/* Whole pages of [p, p + n) resident in memory, and how many whole pages there are. */
static int resident_pages(const void *p, size_t n, int *pages)
{
    size_t ps = (size_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = ((uintptr_t)p + ps - 1) / ps * ps, z = ((uintptr_t)p + n) / ps * ps;
    *pages = z > a ? (int)((z - a) / ps) : 0;
    if (z <= a) return 0;
    unsigned char *v = malloc((z - a) / ps);
    int r = 0;
    if (v && mincore((void *)a, z - a, v) == 0)
        for (size_t i = 0; i < (z - a) / ps; i++) r += v[i] & 1;
    free(v);
    return r;
}

/* The buffer keeps one copy: a weight loaded in pieces (out of order) is converted when its last
 * piece arrives and its pages are given back (none resident); get_tensor still returns its
 * bytes, regenerated; a later partial write keeps the bytes it does not cover; an mxfp4 weight
 * holding the code -0 (which its integers cannot tell from +0) too: the -0 codes come back from
 * the weight's marks. */
static void test_one_copy(ggml_backend_buffer_type_t buft, enum ggml_type type, int negzero)
{
    struct ggml_init_params ip = {ggml_tensor_overhead() * 4, NULL, true};
    struct ggml_context *ctx = ggml_init(ip);
    struct ggml_tensor *t = ggml_new_tensor_3d(ctx, type, 512, 64, 8);
    ggml_backend_buffer_t buf = weights_buffer(ctx, buft);
    if (!buf) return;
    size_t n = ggml_nbytes(t), a = n / 3 + 7, m = 2 * n / 3 + 1;
    uint8_t *w = malloc(n), *back = malloc(n), *fresh = malloc(300);
    random_blocks(type, w, (int64_t)(n / ggml_type_size(type)));
    if (type == GGML_TYPE_MXFP4) /* codes 8 (-0) become 0, but one when asked for */
        for (size_t i = 0; i < n; i += 17)
            for (int j = 1; j < 17; j++) {
                if ((w[i + j] & 0x0F) == 8) w[i + j] &= 0xF0;
                if ((w[i + j] >> 4) == 8) w[i + j] &= 0x0F;
            }
    if (negzero) w[17 * 40 + 5] = 0x38;
    int pages, res;
    ggml_backend_tensor_set(t, w + m, m, n - m);
    ggml_backend_tensor_set(t, w, 0, a);
    res = resident_pages(t->data, n, &pages);
    CHECK_MSG(pages > 10 && res > pages / 2, "%s: pieces written but not resident (%d of %d)",
              ggml_type_name(type), res, pages);
    ggml_backend_tensor_set(t, w + a, a, m - a);
    res = resident_pages(t->data, n, &pages);
    CHECK_MSG(res == 0, "%s%s: converted, but %d of %d pages still resident", ggml_type_name(type),
              negzero ? " with -0" : "", res, pages);
    memset(back, 0, n);
    ggml_backend_tensor_get(t, back, 0, n);
    CHECK_MSG(memcmp(w, back, n) == 0, "%s: get_tensor after conversion differs", ggml_type_name(type));
    memset(back, 0, n);
    ggml_backend_tensor_get(t, back, a, 1000); /* a range that starts inside a row */
    CHECK_MSG(memcmp(w + a, back, 1000) == 0, "%s: get_tensor of a part differs", ggml_type_name(type));
    /* a write over part of it: the weight goes, its other bytes stay */
    random_blocks(type, fresh, 1);
    memcpy(w + a, fresh, 10);
    ggml_backend_tensor_set(t, fresh, a, 10);
    memset(back, 0, n);
    ggml_backend_tensor_get(t, back, 0, n);
    CHECK_MSG(memcmp(w, back, n) == 0, "%s: bytes lost by a partial write", ggml_type_name(type));
    free(w);
    free(back);
    free(fresh);
    ggml_backend_buffer_free(buf);
    ggml_free(ctx);
}

/* The scaled formats keep no copy of their block scales: get_tensor rebuilds them from the
 * prepacked object's (float16 for q8_0 / q4_0, bfloat16 for mxfp4, float32 for a weight whose
 * scales do not all fit). Every special scale comes back as it was: infinities, NaNs with their
 * payload, -0, +0, subnormals, the largest half; e8m0 0, 1, 254 and 255 - in a later slice than
 * the first, so the conversion has started again with float32 scales when one does not fit.
 * The K-quants too, whose d (q6_K: and sc) or d and dmin (q4_K) the backend rebuilds from the
 * objects' scales where every block gives them back and keeps otherwise: a special d (dmin) in
 * a later slice, where d 0 or -0 with sc not 0 cannot give sc back. */
static void test_special_scales(ggml_backend_buffer_type_t buft, enum ggml_type type)
{
    struct ggml_init_params ip = {ggml_tensor_overhead() * 4, NULL, true};
    struct ggml_context *ctx = ggml_init(ip);
    struct ggml_tensor *t = ggml_new_tensor_3d(ctx, type, ggml_blck_size(type) == 256 ? 256 : 64, 8, 2 * QG_SLICE + 1);
    ggml_backend_buffer_t buf = weights_buffer(ctx, buft);
    if (!buf) return;
    size_t n = ggml_nbytes(t), bs = ggml_type_size(type);
    uint8_t *w = malloc(n), *back = calloc(1, n);
    random_blocks(type, w, (int64_t)(n / bs));
    uint8_t *later = w + (size_t)(QG_SLICE + 3) * t->nb[2];
    static const uint16_t halves[] = {0x7c00, 0xfc00, 0x7d23, 0xfe01, 0x8000, 0x0000, 0x0001, 0x83ff, 0x7bff};
    static const uint8_t e8m0[] = {0, 1, 254, 255};
    const size_t nh = sizeof halves / sizeof halves[0], d_at = type == GGML_TYPE_Q6_K ? 208 : 0;
    if (type == GGML_TYPE_MXFP4)
        for (size_t i = 0; i < sizeof e8m0; i++) later[i * bs] = e8m0[i];
    else
        for (size_t i = 0; i < nh; i++) memcpy(later + i * bs + d_at, &halves[i], 2);
    if (type == GGML_TYPE_Q4_K) /* dmin, in the blocks after */
        for (size_t i = 0; i < nh; i++) memcpy(later + (nh + i) * bs + 2, &halves[i], 2);
    ggml_backend_tensor_set(t, w, 0, n);
    ggml_backend_tensor_get(t, back, 0, n);
    CHECK_MSG(memcmp(w, back, n) == 0, "%s with special scales: get_tensor differs", ggml_type_name(type));
    free(w);
    free(back);
    ggml_backend_buffer_free(buf);
    ggml_free(ctx);
}

/* Resident kB of the mapping that starts at p (/proc/self/smaps); -1 when not found. mincore cannot
 * tell: for a file it reports the page cache, which keeps the pages a process dropped. */
static long mapping_rss_kb(const void *p)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) return -1;
    char line[512];
    long kb = -1;
    int in = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) { /* a mapping's first line */
            in = lo == (unsigned long)(uintptr_t)p;
        } else if (in && sscanf(line, "Rss: %ld kB", &kb) == 1) {
            break;
        }
    }
    fclose(f);
    return kb;
}

/* A weight set whole from a read-only shared mapping of a file (llama.cpp's mmap'd model): the
 * mapping's pages are dropped from the process once converted and still read the file's bytes;
 * the same bytes from a private file mapping or from anonymous memory keep their pages. */
static void test_file_source(ggml_backend_buffer_type_t buft, enum ggml_type type)
{
    struct ggml_init_params ip = {ggml_tensor_overhead() * 4, NULL, true};
    struct ggml_context *ctx = ggml_init(ip);
    struct ggml_tensor *t = ggml_new_tensor_3d(ctx, type, 512, 64, 8);
    ggml_backend_buffer_t buf = weights_buffer(ctx, buft);
    if (!buf) return;
    size_t n = ggml_nbytes(t);
    uint8_t *w = malloc(n), *back = malloc(n);
    random_blocks(type, w, (int64_t)(n / ggml_type_size(type)));
    char path[] = "/tmp/qmoe_ggml_sourceXXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0 && write(fd, w, n) == (ssize_t)n);
    for (int shared = 1; fd >= 0 && shared >= 0; shared--) {
        uint8_t *map = mmap(NULL, n, PROT_READ, shared ? MAP_SHARED : MAP_PRIVATE, fd, 0);
        CHECK(map != MAP_FAILED);
        if (map == MAP_FAILED) break;
        volatile uint8_t sum = 0;
        for (size_t i = 0; i < n; i += 4096) sum += map[i]; /* every page in */
        long before = mapping_rss_kb(map);
        ggml_backend_tensor_set(t, map, 0, n);
        long after = mapping_rss_kb(map);
        if (shared)
            CHECK_MSG(before >= (long)(n / 1024) - 4 && after <= 4,
                      "%s: a shared file mapping kept %ld of %ld kB after conversion", ggml_type_name(type),
                      after, before);
        else
            CHECK_MSG(after == before && before > 0, "%s: a private file mapping went %ld -> %ld kB",
                      ggml_type_name(type), before, after);
        CHECK_MSG(memcmp(map, w, n) == 0, "%s: the mapping reads other bytes", ggml_type_name(type));
        memset(back, 0, n);
        ggml_backend_tensor_get(t, back, 0, n);
        CHECK_MSG(memcmp(back, w, n) == 0, "%s: get_tensor differs", ggml_type_name(type));
        munmap(map, n);
    }
    if (fd >= 0) close(fd);
    unlink(path);
    int pages, res;
    ggml_backend_tensor_set(t, w, 0, n);
    res = resident_pages(w, n, &pages);
    CHECK_MSG(res == pages, "%s: anonymous source lost pages (%d of %d)", ggml_type_name(type), res, pages);
    free(w);
    free(back);
    ggml_backend_buffer_free(buf);
    ggml_free(ctx);
}

/* supports_op as llama.cpp's loader asks it: a fake MUL_MAT_ID whose weight sits in a zero-byte
 * buffer of the type. Yes for q8_0 / q4_K in a QMOE buffer whatever the batch; no for a weight in
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
    const enum ggml_type types[3] = {GGML_TYPE_Q8_0, GGML_TYPE_Q4_K, GGML_TYPE_Q5_0};
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
    /* a dense weight at the loader's probe: QMOE_GGML_DENSE=0 declines it, =1 takes it, and
     * unset (or another value) takes it where the device says its kernel is AVX-512 VNNI or AMX;
     * taken whatever the setting when it has no buffer yet or lives in a QMOE buffer with data
     * (never declined there) */
    const char *desc = ggml_backend_dev_description(dev);
    const int fast = strstr(desc, "kernel avx512_vnni") != NULL || strstr(desc, "kernel amx_int8") != NULL;
    const char *settings[] = {"0", "1", NULL, "yes"};
    for (int i = 0; i < 4; i++) {
        if (settings[i]) setenv("QMOE_GGML_DENSE", settings[i], 1);
        else unsetenv("QMOE_GGML_DENSE");
        const int want = i == 1 || (i > 1 && fast);
        struct ggml_tensor *a = ggml_new_tensor_2d(ctx, GGML_TYPE_Q8_0, 256, 64);
        struct ggml_tensor *b = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 256, 4);
        struct ggml_tensor *op = ggml_mul_mat(ctx, a, b);
        CHECK(ggml_backend_dev_supports_op(dev, op));
        a->buffer = probe;
        CHECK_MSG(ggml_backend_dev_supports_op(dev, op) == want, "QMOE_GGML_DENSE=%s on \"%s\"",
                  settings[i] ? settings[i] : "(unset)", desc);
        ggml_backend_buffer_t held = ggml_backend_buft_alloc_buffer(buft, 64 * 272);
        CHECK(held != NULL);
        a->buffer = held;
        if (held) CHECK(ggml_backend_dev_supports_op(dev, op));
        if (held) ggml_backend_buffer_free(held);
    }
    unsetenv("QMOE_GGML_DENSE");
    ggml_backend_buffer_free(probe);
    if (cpu_buf) ggml_backend_buffer_free(cpu_buf);
    ggml_free(ctx);
}

/* Computes gf on be, or (fuse 0) on a second QMOE backend made with QMOE_GGML_FUSE=0: the variable
 * is read when a backend is made. */
static enum ggml_status compute_fused(ggml_backend_t be, struct ggml_cgraph *gf, int fuse)
{
    ggml_backend_t run = be;
    if (!fuse) {
        setenv("QMOE_GGML_FUSE", "0", 1);
        run = ggml_backend_dev_init(ggml_backend_get_device(be), NULL);
        unsetenv("QMOE_GGML_FUSE");
        CHECK_MSG(run != NULL, "a second QMOE backend");
        if (!run) return GGML_STATUS_FAILED;
    }
    enum ggml_status st = ggml_backend_graph_compute(run, gf);
    if (run != be) ggml_backend_free(run);
    return st;
}

/* The element-wise nodes of ggml's fused FFN cases, on the outputs of taken matmuls: per token
 * and expert slot, gate g = MUL_MAT_ID(wg) + ADD_ID(bias_g[expert]), up u = MUL_MAT_ID(wu) + ADD
 * (one bias row for all), h = GLU kind(g, u), out = MUL(h, s[slot, token]) — against the same in
 * double (the matmuls' documented numerics, then ggml's formulas); and out2 = MUL(MUL_MAT_ID(wg),
 * s), the experts' weighting, which the matmul writes itself where fuse is 1 (its own output is
 * then never written). Also: where these nodes are taken (an input made here, SwiGLU anywhere),
 * and a bad ADD_ID id fails the graph without writing. */
static double glu_ref(enum ggml_glu_op kind, double g, double u, double alpha, double limit)
{
    switch (kind) {
    case GGML_GLU_OP_SWIGLU:
        return g / (1.0 + exp(-g)) * u;
    case GGML_GLU_OP_GEGLU:
        return 0.5 * g * (1.0 + tanh(0.7978845608028654 * g * (1.0 + 0.044715 * g * g))) * u;
    case GGML_GLU_OP_SWIGLU_CLAMP:
        g = fmin(g, limit), u = fmin(fmax(u, -limit), limit);
        return g / (1.0 + exp(-g)) * u;
    default: /* SWIGLU_OAI */
        g = fmin(g, limit), u = fmin(fmax(u, -limit), limit);
        return g / (1.0 + exp(-alpha * g)) * (u + 1.0);
    }
}

static void test_elementwise(ggml_backend_t be, ggml_backend_buffer_type_t buft, enum ggml_type type,
                             enum ggml_glu_op kind, int fuse)
{
    const int64_t K = qg_format_of(type)->blk == 256 ? 256 : 64, N = 40, E = 6, T = 5, U = 3;
    const size_t rk = ggml_row_size(type, K), wb = rk * (size_t)(N * E);
    uint8_t *w[2] = {malloc(wb), malloc(wb)};
    float x[5 * 256], bg[40 * 6], bu[40], sv[3 * 5], y[3 * 5 * 40], y2[3 * 5 * 40], mid[3 * 5 * 40];
    int32_t idv[3 * 5];
    double gr[3 * 5 * 40], ur[3 * 5 * 40], gmax = 0;
    for (int p = 0; p < 2; p++) random_blocks(type, w[p], (int64_t)(wb / ggml_type_size(type)));
    for (int64_t k = 0; k < T * K; k++) x[k] = qt_uniform(&rng, -1.0f, 1.0f);
    for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < U; i++) idv[t * U + i] = (int32_t)((2 * t + 5 * i) % E);
    ref_x ax = ref_x_make(x, T, K);
    ref_w mg = ref_w_make(type, w[0], N * E, K), mu = ref_w_make(type, w[1], N * E, K);
    for (int64_t r = 0; r < U * T; r++)
        for (int64_t n = 0; n < N; n++) {
            int64_t e = idv[r];
            gr[r * N + n] = ref_dot(&ax, r / U, &mg, e * N + n);
            ur[r * N + n] = ref_dot(&ax, r / U, &mu, e * N + n);
            gmax = fmax(gmax, fabs(gr[r * N + n]));
        }
    ref_x_free(&ax);
    ref_w_free(&mg);
    ref_w_free(&mu);
    for (int64_t i = 0; i < N * E; i++) bg[i] = qt_uniform(&rng, -0.2f, 0.2f) * (float)gmax;
    for (int64_t i = 0; i < N; i++) bu[i] = qt_uniform(&rng, -0.2f, 0.2f) * (float)gmax;
    for (int64_t i = 0; i < U * T; i++) sv[i] = qt_uniform(&rng, 0.1f, 1.0f);
    const float alpha = 1.702f, limit = (float)(0.5 * gmax); /* some values clamped, most not */

    struct ggml_init_params ip = {ggml_tensor_overhead() * 32 + 3 * ggml_graph_overhead(), NULL, true};
    struct ggml_context *ctx = ggml_init(ip);
    struct ggml_tensor *wg = ggml_new_tensor_3d(ctx, type, K, N, E), *wu = ggml_new_tensor_3d(ctx, type, K, N, E);
    struct ggml_tensor *b = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, K, 1, T);
    struct ggml_tensor *ids = ggml_new_tensor_2d(ctx, GGML_TYPE_I32, U, T);
    struct ggml_tensor *biasg = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, N, E);
    struct ggml_tensor *biasu = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, N, 1, 1);
    struct ggml_tensor *s = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, 1, U, T);
    struct ggml_tensor *g = ggml_add_id(ctx, ggml_mul_mat_id(ctx, wg, b, ids), biasg, ids);
    struct ggml_tensor *u = ggml_add(ctx, ggml_mul_mat_id(ctx, wu, b, ids), biasu);
    struct ggml_tensor *h = kind == GGML_GLU_OP_SWIGLU_OAI ? ggml_swiglu_oai(ctx, g, u, alpha, limit)
                            : kind == GGML_GLU_OP_SWIGLU_CLAMP ? ggml_swiglu_clamp(ctx, g, u, limit)
                                                               : ggml_glu_split(ctx, g, u, kind);
    struct ggml_tensor *out = ggml_mul(ctx, h, s);
    struct ggml_tensor *m2 = ggml_mul_mat_id(ctx, wg, b, ids), *out2 = ggml_mul(ctx, m2, s);
    struct ggml_tensor *plain = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, N, U, T);
    struct ggml_tensor *plain_mul = ggml_mul(ctx, plain, s), *plain_geglu = ggml_geglu_split(ctx, plain, plain);
    struct ggml_tensor *plain_swiglu = ggml_swiglu_split(ctx, plain, plain);
    struct ggml_tensor *bad_ids = ggml_new_tensor_2d(ctx, GGML_TYPE_I32, U, T);
    struct ggml_tensor *gbad = ggml_add_id(ctx, ggml_mul_mat_id(ctx, wg, b, ids), biasg, bad_ids);
    struct ggml_cgraph *gf = ggml_new_graph(ctx), *gf2 = ggml_new_graph(ctx), *gf3 = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, out);
    ggml_build_forward_expand(gf2, out2);
    ggml_build_forward_expand(gf3, gbad);
    ggml_backend_dev_t dev = ggml_backend_get_device(be);
    /* before any buffer (as test-backend-ops asks): taken where an input is made here */
    CHECK(ggml_backend_dev_supports_op(dev, out) && ggml_backend_dev_supports_op(dev, h) &&
          ggml_backend_dev_supports_op(dev, g) && ggml_backend_dev_supports_op(dev, u));
    CHECK_MSG(!ggml_backend_dev_supports_op(dev, plain_mul) && !ggml_backend_dev_supports_op(dev, plain_geglu),
              "a MUL / GeGLU of inputs made elsewhere is taken");
    CHECK(ggml_backend_dev_supports_op(dev, plain_swiglu));
    ggml_backend_buffer_t buf = weights_buffer(ctx, buft);
    if (!buf) {
        free(w[0]);
        free(w[1]);
        return;
    }
    ggml_backend_tensor_set(wg, w[0], 0, wb);
    ggml_backend_tensor_set(wu, w[1], 0, wb);
    ggml_backend_tensor_set(b, x, 0, sizeof(float) * (size_t)(T * K));
    ggml_backend_tensor_set(ids, idv, 0, sizeof idv);
    ggml_backend_tensor_set(biasg, bg, 0, sizeof bg);
    ggml_backend_tensor_set(biasu, bu, 0, sizeof bu);
    ggml_backend_tensor_set(s, sv, 0, sizeof sv);
    for (size_t i = 0; i < sizeof mid / sizeof mid[0]; i++) mid[i] = -12345.0f;
    ggml_backend_tensor_set(m2, mid, 0, sizeof mid);
    enum ggml_status st = compute_fused(be, gf, fuse), st2 = compute_fused(be, gf2, fuse);
    CHECK_MSG(st == GGML_STATUS_SUCCESS && st2 == GGML_STATUS_SUCCESS, "element-wise %s %s: status %d %d",
              ggml_type_name(type), ggml_glu_op_name(kind), (int)st, (int)st2);
    ggml_backend_tensor_get(out, y, 0, sizeof y);
    ggml_backend_tensor_get(out2, y2, 0, sizeof y2);
    ggml_backend_tensor_get(m2, mid, 0, sizeof mid);
    double e1 = 0, n1 = 0, e2 = 0, n2 = 0;
    int written = 0;
    for (int64_t r = 0; r < U * T; r++)
        for (int64_t n = 0; n < N; n++) {
            const int64_t at = r * N + n, e = idv[r];
            double o = glu_ref(kind, gr[at] + bg[e * N + n], ur[at] + bu[n], alpha, limit) * sv[r];
            double o2 = gr[at] * sv[r];
            e1 += (y[at] - o) * (y[at] - o), n1 += o * o;
            e2 += (y2[at] - o2) * (y2[at] - o2), n2 += o2 * o2;
            written |= mid[at] != -12345.0f;
        }
    /* float32 rounding of each step (GeGLU's tanh, expf) on exact dots: far below 1e-5 */
    CHECK_MSG(e1 <= 1e-10 * n1, "element-wise %s %s fuse %d: relative error %g", ggml_type_name(type),
              ggml_glu_op_name(kind), fuse, sqrt(e1 / (n1 > 0 ? n1 : 1)));
    CHECK_MSG(e2 <= 1e-10 * n2, "weighted experts %s fuse %d: relative error %g", ggml_type_name(type), fuse,
              sqrt(e2 / (n2 > 0 ? n2 : 1)));
    CHECK_MSG(written == !fuse, "weighted experts %s fuse %d: the matmul's own output %s", ggml_type_name(type),
              fuse, written ? "was written" : "was not written");
    /* a bad id in ADD_ID (its own ids; the matmul's are good): the graph fails, its output as it was */
    idv[U * T - 1] = (int32_t)E;
    ggml_backend_tensor_set(bad_ids, idv, 0, sizeof idv);
    ggml_backend_tensor_set(gbad, mid, 0, sizeof mid);
    ggml_backend_tensor_get(gbad, y, 0, sizeof y);
    CHECK_MSG(ggml_backend_graph_compute(be, gf3) == GGML_STATUS_FAILED, "ADD_ID with a bad id did not fail");
    ggml_backend_tensor_get(gbad, y2, 0, sizeof y2);
    CHECK_MSG(memcmp(y, y2, sizeof y) == 0, "a failed ADD_ID wrote its output");
    ggml_backend_buffer_free(buf);
    ggml_free(ctx);
    free(w[0]);
    free(w[1]);
}

/* ggml's log, watched for the backend's word that a layer's gate and up were paired */
static int paired_seen;
static void watch_log(enum ggml_log_level level, const char *text, void *user)
{
    (void)level;
    (void)user;
    if (strstr(text, "gate and up paired")) paired_seen++;
}

/* Random activations x [T, K] into b, and token t's U experts (t * ta + i * ia) % E into ids. */
static void set_routed(struct ggml_tensor *b, struct ggml_tensor *ids, float *x, int32_t *idv, int64_t T,
                       int64_t K, int64_t U, int64_t E, int ta, int ia)
{
    for (int64_t k = 0; k < T * K; k++) x[k] = qt_uniform(&rng, -1.0f, 1.0f);
    for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < U; i++) idv[t * U + i] = (int32_t)((t * ta + i * ia) % E);
    ggml_backend_tensor_set(b, x, 0, sizeof(float) * (size_t)(T * K));
    ggml_backend_tensor_set(ids, idv, 0, sizeof(int32_t) * (size_t)(T * U));
}

/* The MoE FFN's documented numerics in double (x per-token int8, gate and up exact, h = silu(g) u,
 * h per-row int8 for the down projection) against the device's out y [U T, H] and, where hv is
 * not NULL, its h [U T, I]: the relative L2 error of out, and of h in *h_err (0 without hv).
 * w[0], w[1]: the bytes of the gate's and the up's rows, ge rows an expert, the up's from row uo
 * (separate tensors: ge = I, uo = 0; one gate | up tensor: ge = 2 I, uo = I); w[2]: the down
 * projection's [E, H, I]. */
static double ffn_error(enum ggml_type type, uint8_t *const w[3], int64_t ge, int64_t uo, const float *x,
                        const int32_t *idv, int64_t K, int64_t I, int64_t H, int64_t T, int64_t U,
                        const float *y, const float *hv, double *h_err)
{
    double eh = 0, nh = 0, eo = 0, no = 0;
    float *hr = malloc((size_t)I * sizeof(float));
    int64_t E = 0;
    for (int64_t r = 0; r < U * T; r++) E = idv[r] + 1 > E ? idv[r] + 1 : E;
    ref_x ax = ref_x_make(x, T, K);
    ref_w mg = ref_w_make(type, w[0], E * ge, K), mu = ref_w_make(type, w[1], E * ge, K);
    ref_w md = ref_w_make(type, w[2], E * H, I);
    for (int64_t r = 0; r < U * T; r++) {
        int64_t e = idv[r], t = r / U;
        for (int64_t n = 0; n < I; n++) {
            double gv = ref_dot(&ax, t, &mg, e * ge + n);
            double uv = ref_dot(&ax, t, &mu, e * ge + uo + n);
            double hd = gv / (1.0 + exp(-gv)) * uv;
            hr[n] = (float)hd;
            if (hv) {
                eh += (hv[r * I + n] - hd) * (hv[r * I + n] - hd);
                nh += hd * hd;
            }
        }
        ref_x ah = ref_x_make(hr, 1, I);
        for (int64_t n = 0; n < H; n++) {
            double ov = ref_dot(&ah, 0, &md, e * H + n);
            eo += (y[r * H + n] - ov) * (y[r * H + n] - ov);
            no += ov * ov;
        }
        ref_x_free(&ah);
    }
    ref_x_free(&ax);
    ref_w_free(&mg);
    ref_w_free(&mu);
    ref_w_free(&md);
    free(hr);
    *h_err = sqrt(eh / (nh > 0 ? nh : 1));
    return sqrt(eo / (no > 0 ? no : 1));
}

/* llama.cpp's MoE FFN {gate, up MUL_MAT_ID; GLU swiglu; down MUL_MAT_ID} on the device against
 * the documented numerics in double: x per-token int8, gate and up exact, h = silu(g) u, h per-row
 * int8 for the down projection. mode 0: the four nodes run as one and the three intermediates
 * are not written; 1: h is a graph output, so it is written (and checked) and the down node runs
 * on its own; 2: QMOE_GGML_FUSE=0 (on a backend made with it set), every node on its own.
 * named 0: the weights have no names; 1: llama.cpp's (blk.0.ffn_gate_exps.weight, ...), gate
 * written first, so the backend pairs gate and up into one object (the fused
 * GroupedMatmulSwigluQuant at mode 0) where the type allows (no min term, not mxfp4); 2: the same,
 * up written first; 3: only the gate named, its mate never comes (converted alone on first use);
 * 4: as 1, then the up written again with new bytes (the gate keeps the pair's object: the
 * nodes run one by one, each weight's own columns). Whatever the case, get_tensor gives every
 * weight's bytes back. */
static void test_moe_ffn(ggml_backend_t be, ggml_backend_buffer_type_t buft, enum ggml_type type, int mode,
                         int named)
{
    const int64_t K = 256, I = qg_format_of(type)->blk == 256 ? 256 : 96, H = 48, E = 8, T = 5, U = 2;
    struct ggml_init_params ip = {ggml_tensor_overhead() * 16 + ggml_graph_overhead(), NULL, true};
    struct ggml_context *ctx = ggml_init(ip);
    struct ggml_tensor *wg = ggml_new_tensor_3d(ctx, type, K, I, E), *wu = ggml_new_tensor_3d(ctx, type, K, I, E);
    struct ggml_tensor *wd = ggml_new_tensor_3d(ctx, type, I, H, E);
    struct ggml_tensor *b = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, K, 1, T);
    struct ggml_tensor *ids = ggml_new_tensor_2d(ctx, GGML_TYPE_I32, U, T);
    struct ggml_tensor *up = ggml_mul_mat_id(ctx, wu, b, ids), *gate = ggml_mul_mat_id(ctx, wg, b, ids);
    struct ggml_tensor *h = ggml_swiglu_split(ctx, gate, up), *out = ggml_mul_mat_id(ctx, wd, h, ids);
    if (mode == 1) ggml_set_output(h);
    struct ggml_cgraph *gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, out);
    if (named) {
        ggml_set_name(wg, "blk.0.ffn_gate_exps.weight");
        if (named != 3) ggml_set_name(wu, "blk.0.ffn_up_exps.weight");
        ggml_set_name(wd, "blk.0.ffn_down_exps.weight");
    }
    ggml_backend_buffer_t buf = weights_buffer(ctx, buft);
    if (!buf) return;
    struct ggml_tensor *ws[3] = {wg, wu, wd};
    uint8_t *wv[3];
    paired_seen = 0;
    ggml_log_set(watch_log, NULL);
    for (int i = 0; i < 3; i++) {
        int j = named == 2 && i < 2 ? 1 - i : i;
        wv[j] = malloc(ggml_nbytes(ws[j]));
        random_blocks(type, wv[j], (int64_t)(ggml_nbytes(ws[j]) / ggml_type_size(type)));
        ggml_backend_tensor_set(ws[j], wv[j], 0, ggml_nbytes(ws[j]));
    }
    if (named == 4) {
        random_blocks(type, wv[1], (int64_t)(ggml_nbytes(wu) / ggml_type_size(type)));
        ggml_backend_tensor_set(wu, wv[1], 0, ggml_nbytes(wu));
    }
    ggml_log_set(NULL, NULL);
    const int pairs = named && named != 3 && type != GGML_TYPE_MXFP4 && !qg_format_of(type)->mins;
    CHECK_MSG(paired_seen == pairs, "MoE FFN %s named %d: paired %d times", ggml_type_name(type), named,
              paired_seen);
    float x[5 * 256], y[5 * 2 * 48], hv[5 * 2 * 256], sent[5 * 2 * 256];
    int32_t idv[5 * 2];
    set_routed(b, ids, x, idv, T, K, U, E, 5, 3);
    for (size_t k = 0; k < sizeof sent / sizeof sent[0]; k++) sent[k] = -12345.0f;
    struct ggml_tensor *mids[3] = {gate, up, h};
    for (int j = 0; j < 3; j++) ggml_backend_tensor_set(mids[j], sent, 0, ggml_nbytes(mids[j]));
    enum ggml_status st = compute_fused(be, gf, mode != 2);
    CHECK_MSG(st == GGML_STATUS_SUCCESS, "MoE FFN %s mode %d: status %d", ggml_type_name(type), mode, (int)st);
    ggml_backend_tensor_get(out, y, 0, ggml_nbytes(out));
    ggml_backend_tensor_get(h, hv, 0, ggml_nbytes(h));
    const int as_one = !(named == 4 && pairs); /* a rewritten pair runs node by node */
    for (int j = 0; j < 2 && mode < 2 && as_one; j++) { /* fused: gate and up never written */
        float g[5 * 2 * 256];
        ggml_backend_tensor_get(mids[j], g, 0, ggml_nbytes(mids[j]));
        CHECK_MSG(memcmp(g, sent, ggml_nbytes(mids[j])) == 0, "MoE FFN %s mode %d: %s was written",
                  ggml_type_name(type), mode, j ? "up" : "gate");
    }
    if (mode == 0 && as_one)
        CHECK_MSG(memcmp(hv, sent, ggml_nbytes(h)) == 0, "MoE FFN %s: h was written", ggml_type_name(type));
    double he, oe = ffn_error(type, wv, I, 0, x, idv, K, I, H, T, U, y, mode ? hv : NULL, &he);
    /* h: float32 rounding only; out: h's int8 rows may round a value the other way (a few units
     * of 1/127 of a row's largest value), so a looser bound */
    CHECK_MSG(!mode || he <= 1e-5, "MoE FFN %s mode %d: h relative error %g", ggml_type_name(type), mode, he);
    CHECK_MSG(oe <= 1e-3, "MoE FFN %s mode %d named %d: out relative error %g", ggml_type_name(type), mode,
              named, oe);
    for (int j = 0; j < 3; j++) {
        uint8_t *back = malloc(ggml_nbytes(ws[j]));
        ggml_backend_tensor_get(ws[j], back, 0, ggml_nbytes(ws[j]));
        CHECK_MSG(memcmp(back, wv[j], ggml_nbytes(ws[j])) == 0, "MoE FFN %s named %d: weight %d read back differs",
                  ggml_type_name(type), named, j);
        free(back);
    }
    for (int j = 0; j < 3; j++) free(wv[j]);
    ggml_backend_buffer_free(buf);
    ggml_free(ctx);
}

/* llama.cpp's merged gate | up (build_moe_ffn with ffn_gate_up_exps): gu = MUL_MAT_ID(wgu, x, ids),
 * gate and up two views of gu, h = GLU swiglu(gate, up), out = MUL_MAT_ID(wd, h, ids). Where the
 * weight's one object can feed the fused GroupedMatmulSwigluQuant (no min term; an int4 one only
 * when named ffn_gate_up_exps, whose assist matrix is made at load) the five nodes run as one and
 * gu is never written; otherwise node by node. Either way out equals the double reference. fuse 0:
 * on a backend made with QMOE_GGML_FUSE=0. */
static void test_moe_ffn_merged(ggml_backend_t be, ggml_backend_buffer_type_t buft, enum ggml_type type,
                                int named, int fuse)
{
    const qg_format *f = qg_format_of(type);
    const int64_t K = 256, I = f->blk == 256 ? 256 : 96, H = 48, E = 8, T = 5, U = 2;
    struct ggml_init_params ip = {ggml_tensor_overhead() * 16 + ggml_graph_overhead(), NULL, true};
    struct ggml_context *ctx = ggml_init(ip);
    struct ggml_tensor *wgu = ggml_new_tensor_3d(ctx, type, K, 2 * I, E), *wd = ggml_new_tensor_3d(ctx, type, I, H, E);
    struct ggml_tensor *b = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, K, 1, T);
    struct ggml_tensor *ids = ggml_new_tensor_2d(ctx, GGML_TYPE_I32, U, T);
    struct ggml_tensor *gu = ggml_mul_mat_id(ctx, wgu, b, ids);
    struct ggml_tensor *g = ggml_view_3d(ctx, gu, I, gu->ne[1], gu->ne[2], gu->nb[1], gu->nb[2], 0);
    struct ggml_tensor *u = ggml_view_3d(ctx, gu, I, gu->ne[1], gu->ne[2], gu->nb[1], gu->nb[2], (size_t)I * gu->nb[0]);
    struct ggml_tensor *h = ggml_swiglu_split(ctx, g, u), *out = ggml_mul_mat_id(ctx, wd, h, ids);
    if (named) ggml_set_name(wgu, "blk.3.ffn_gate_up_exps.weight");
    struct ggml_cgraph *gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, out);
    ggml_backend_buffer_t buf = weights_buffer(ctx, buft);
    if (!buf) return;
    struct ggml_tensor *ws[2] = {wgu, wd};
    uint8_t *wv[2];
    for (int j = 0; j < 2; j++) {
        wv[j] = malloc(ggml_nbytes(ws[j]));
        random_blocks(type, wv[j], (int64_t)(ggml_nbytes(ws[j]) / ggml_type_size(type)));
        ggml_backend_tensor_set(ws[j], wv[j], 0, ggml_nbytes(ws[j]));
    }
    float x[5 * 256], y[5 * 2 * 48], *sent = malloc(ggml_nbytes(gu)), *back = malloc(ggml_nbytes(gu));
    int32_t idv[5 * 2];
    set_routed(b, ids, x, idv, T, K, U, E, 3, 5);
    for (size_t k = 0; k < ggml_nbytes(gu) / sizeof(float); k++) sent[k] = -12345.0f;
    ggml_backend_tensor_set(gu, sent, 0, ggml_nbytes(gu));
    enum ggml_status st = compute_fused(be, gf, fuse);
    CHECK_MSG(st == GGML_STATUS_SUCCESS, "merged MoE FFN %s: status %d", ggml_type_name(type), (int)st);
    ggml_backend_tensor_get(out, y, 0, ggml_nbytes(out));
    ggml_backend_tensor_get(gu, back, 0, ggml_nbytes(gu));
    const int fused = fuse && !f->mins && (!f->int4 || named);
    CHECK_MSG((memcmp(back, sent, ggml_nbytes(gu)) == 0) == fused, "merged MoE FFN %s named %d fuse %d: gu %s",
              ggml_type_name(type), named, fuse, fused ? "written" : "not written");
    uint8_t *w3[3] = {wv[0], wv[0], wv[1]};
    double he, oe = ffn_error(type, w3, 2 * I, I, x, idv, K, I, H, T, U, y, NULL, &he);
    CHECK_MSG(oe <= 1e-3, "merged MoE FFN %s named %d fuse %d: out relative error %g", ggml_type_name(type),
              named, fuse, oe);
    for (int j = 0; j < 2; j++) free(wv[j]);
    free(sent);
    free(back);
    ggml_backend_buffer_free(buf);
    ggml_free(ctx);
}

/* llama.cpp writes a layer's weights in any order and in pieces, and a later write may replace a
 * weight whole or in part (a LoRA merge, a reload). Random sequences of such writes to one
 * layer's named gate, up and down weights (whole, in three pieces of any byte size in any
 * order, or a run of whole blocks rewritten), with the FFN computed between some of them:
 * every compute equals the reference of the bytes last written, and every weight reads back
 * those bytes. Pairs are made, lost to a rewrite, made again (the buffer's waiting, paired and
 * pending states in every order). */
static void test_load_orders(ggml_backend_t be, ggml_backend_buffer_type_t buft, enum ggml_type type,
                             int sequences)
{
    const int64_t K = 256, I = qg_format_of(type)->blk == 256 ? 256 : 96, H = 48, E = 8, T = 5, U = 2;
    const size_t bs = ggml_type_size(type);
    int computed = 0, bad_reads = 0, bad_out = 0, failed = 0;
    paired_seen = 0;
    ggml_log_set(watch_log, NULL);
    for (int sq = 0; sq < sequences; sq++) {
        struct ggml_init_params ip = {ggml_tensor_overhead() * 16 + ggml_graph_overhead(), NULL, true};
        struct ggml_context *ctx = ggml_init(ip);
        struct ggml_tensor *ws[3] = {ggml_new_tensor_3d(ctx, type, K, I, E), ggml_new_tensor_3d(ctx, type, K, I, E),
                                     ggml_new_tensor_3d(ctx, type, I, H, E)};
        ggml_set_name(ws[0], "blk.3.ffn_gate_exps.weight");
        ggml_set_name(ws[1], "blk.3.ffn_up_exps.weight");
        ggml_set_name(ws[2], "blk.3.ffn_down_exps.weight");
        struct ggml_tensor *b = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, K, 1, T);
        struct ggml_tensor *ids = ggml_new_tensor_2d(ctx, GGML_TYPE_I32, U, T);
        struct ggml_tensor *gate = ggml_mul_mat_id(ctx, ws[0], b, ids), *up = ggml_mul_mat_id(ctx, ws[1], b, ids);
        struct ggml_tensor *out = ggml_mul_mat_id(ctx, ws[2], ggml_swiglu_split(ctx, gate, up), ids);
        struct ggml_cgraph *gf = ggml_new_graph(ctx);
        ggml_build_forward_expand(gf, out);
        ggml_backend_buffer_t buf = weights_buffer(ctx, buft);
        if (!buf) break;
        uint8_t *wv[3], *fresh = NULL;
        int written[3] = {0, 0, 0};
        for (int j = 0; j < 3; j++) wv[j] = calloc(1, ggml_nbytes(ws[j]));
        const int steps = (int)qt_range(&rng, 3, 9);
        for (int step = 0;; step++) {
            int j = (int)qt_range(&rng, 0, 2), how = written[j] ? (int)qt_range(&rng, 0, 2) : (int)qt_range(&rng, 0, 1);
            if (step >= steps) { /* then each weight never written, whole, and a compute to end */
                for (j = 0; j < 3 && written[j]; j++) {}
                how = j < 3 ? 0 : 3;
                j = j < 3 ? j : 0;
            }
            size_t n = ggml_nbytes(ws[j]);
            if (how < 3) {
                fresh = malloc(n);
                random_blocks(type, fresh, (int64_t)(n / bs));
            }
            if (how == 0) { /* whole */
                memcpy(wv[j], fresh, n);
                ggml_backend_tensor_set(ws[j], fresh, 0, n);
            } else if (how == 1) { /* pieces at any byte, in any order */
                size_t cut[4] = {0, (size_t)qt_range(&rng, 1, (int64_t)n - 2), 0, n};
                cut[2] = (size_t)qt_range(&rng, (int64_t)cut[1] + 1, (int64_t)n - 1);
                int order[3] = {0, 1, 2};
                for (int i = 2; i > 0; i--) {
                    int r = (int)qt_range(&rng, 0, i), tmp = order[i];
                    order[i] = order[r];
                    order[r] = tmp;
                }
                for (int i = 0; i < 3; i++) {
                    size_t a = cut[order[i]], z = cut[order[i] + 1];
                    ggml_backend_tensor_set(ws[j], fresh + a, a, z - a);
                }
                memcpy(wv[j], fresh, n);
            } else if (how == 2) { /* a run of whole blocks of a written weight, rewritten */
                size_t nb = n / bs, a = (size_t)qt_range(&rng, 0, (int64_t)nb - 1);
                size_t z = (size_t)qt_range(&rng, (int64_t)a + 1, (int64_t)nb);
                memcpy(wv[j] + a * bs, fresh + a * bs, (z - a) * bs);
                ggml_backend_tensor_set(ws[j], fresh + a * bs, a * bs, (z - a) * bs);
            }
            if (how < 3) written[j] = 1;
            free(fresh);
            fresh = NULL;
            if (how != 3 && (!written[0] || !written[1] || !written[2] || qt_range(&rng, 0, 2))) continue;
            float x[5 * 256], y[5 * 2 * 48];
            int32_t idv[5 * 2];
            set_routed(b, ids, x, idv, T, K, U, E, (int)qt_range(&rng, 1, 7), (int)qt_range(&rng, 1, 7));
            if (ggml_backend_graph_compute(be, gf) == GGML_STATUS_SUCCESS) {
                ggml_backend_tensor_get(out, y, 0, ggml_nbytes(out));
                double he, oe = ffn_error(type, wv, I, 0, x, idv, K, I, H, T, U, y, NULL, &he);
                bad_out += !(oe <= 1e-3);
                computed++;
            } else {
                failed++;
            }
            if (how == 3) break;
        }
        for (int j = 0; j < 3; j++) {
            uint8_t *back = malloc(ggml_nbytes(ws[j]));
            ggml_backend_tensor_get(ws[j], back, 0, ggml_nbytes(ws[j]));
            bad_reads += memcmp(back, wv[j], ggml_nbytes(ws[j])) != 0;
            free(back);
            free(wv[j]);
        }
        ggml_backend_buffer_free(buf);
        ggml_free(ctx);
    }
    ggml_log_set(NULL, NULL);
    CHECK_MSG(computed >= sequences && !failed && !bad_out && !bad_reads,
              "load orders %s: %d computes, %d failed, %d off the reference, %d weights read back wrong",
              ggml_type_name(type), computed, failed, bad_out, bad_reads);
    /* the sequences did make pairs where the type pairs (and none where it does not) */
    const int pairable = type != GGML_TYPE_MXFP4 && !qg_format_of(type)->mins;
    CHECK_MSG(pairable ? paired_seen >= sequences / 10 : paired_seen == 0, "load orders %s: %d pairs made",
              ggml_type_name(type), paired_seen);
}

/* Two backend contexts (two llama.cpp contexts on one model) run MUL_MAT_ID on the same weight
 * at once, each cycling through more row counts than a weight keeps plans for: every result
 * equals the one computed alone (the weight's plan cache is shared; one context evicting a plan
 * must not pull it from under the other: AddressSanitizer reports that use after free). */
#define CC_T 6
typedef struct cc_side {
    ggml_backend_t be;
    struct ggml_context *ctx;
    ggml_backend_buffer_t buf;
    struct ggml_cgraph *gf[CC_T];
    struct ggml_tensor *out[CC_T];
    float *want[CC_T];
    int bad, is_long;
} cc_side;

/* The long side cycles its row counts CC_ROUNDS times; the short side keeps cycling until the
 * long side is done, so every long run has short runs making and evicting plans beside it. */
#define CC_ROUNDS 4
static atomic_int cc_long_done;

static void *cc_loop(void *arg)
{
    cc_side *c = arg;
    for (int it = 0; c->is_long ? it < CC_ROUNDS : it < CC_ROUNDS || !atomic_load(&cc_long_done); it++)
        for (int j = 0; j < CC_T; j++) {
            size_t n = ggml_nbytes(c->out[j]);
            float *y = malloc(n);
            if (ggml_backend_graph_compute(c->be, c->gf[j]) != GGML_STATUS_SUCCESS) c->bad++;
            ggml_backend_tensor_get(c->out[j], y, 0, n);
            c->bad += memcmp(y, c->want[j], n) != 0;
            free(y);
        }
    if (c->is_long) atomic_store(&cc_long_done, 1);
    return NULL;
}

static void test_two_contexts(ggml_backend_dev_t dev, ggml_backend_buffer_type_t buft)
{
    const int64_t K = 256, N = 256, E = 16, U = 4;
    struct ggml_init_params wp = {ggml_tensor_overhead(), NULL, true};
    struct ggml_context *wctx = ggml_init(wp);
    struct ggml_tensor *w = ggml_new_tensor_3d(wctx, GGML_TYPE_Q8_0, K, N, E);
    ggml_backend_buffer_t wbuf = weights_buffer(wctx, buft);
    if (!wbuf) return;
    uint8_t *wv = malloc(ggml_nbytes(w));
    random_blocks(GGML_TYPE_Q8_0, wv, (int64_t)(ggml_nbytes(w) / ggml_type_size(GGML_TYPE_Q8_0)));
    ggml_backend_tensor_set(w, wv, 0, ggml_nbytes(w));
    cc_side side[2];
    for (int s = 0; s < 2; s++) {
        cc_side *c = &side[s];
        memset(c, 0, sizeof *c);
        c->is_long = !s;
        c->be = ggml_backend_dev_init(dev, NULL);
        CHECK(c->be != NULL);
        struct ggml_init_params ip = {ggml_tensor_overhead() * 4 * CC_T + ggml_graph_overhead() * CC_T, NULL, true};
        c->ctx = ggml_init(ip);
        for (int j = 0; j < CC_T; j++) {
            /* one side long runs, the other many short ones: the short side makes and evicts
             * several plans while one long run executes */
            int64_t T = s ? 1 + j : 400 + j;
            struct ggml_tensor *b = ggml_new_tensor_3d(c->ctx, GGML_TYPE_F32, K, 1, T);
            struct ggml_tensor *ids = ggml_new_tensor_2d(c->ctx, GGML_TYPE_I32, U, T);
            ggml_set_name(b, "b");
            ggml_set_name(ids, "ids");
            c->out[j] = ggml_mul_mat_id(c->ctx, w, b, ids);
            c->gf[j] = ggml_new_graph(c->ctx);
            ggml_build_forward_expand(c->gf[j], c->out[j]);
        }
        c->buf = ggml_backend_alloc_ctx_tensors_from_buft(c->ctx, buft);
        CHECK(c->buf != NULL);
        for (int j = 0; j < CC_T && c->buf && c->be; j++) {
            struct ggml_tensor *b = c->out[j]->src[1], *ids = c->out[j]->src[2];
            int64_t T = b->ne[2];
            float *x = malloc((size_t)(K * T) * sizeof(float));
            int32_t *iv = malloc((size_t)(U * T) * sizeof(int32_t));
            for (int64_t k = 0; k < K * T; k++) x[k] = qt_uniform(&rng, -1.0f, 1.0f);
            for (int64_t k = 0; k < U * T; k++) iv[k] = (int32_t)((k * 5 + k / U) % E);
            ggml_backend_tensor_set(b, x, 0, (size_t)(K * T) * sizeof(float));
            ggml_backend_tensor_set(ids, iv, 0, (size_t)(U * T) * sizeof(int32_t));
            CHECK(ggml_backend_graph_compute(c->be, c->gf[j]) == GGML_STATUS_SUCCESS);
            c->want[j] = malloc(ggml_nbytes(c->out[j]));
            ggml_backend_tensor_get(c->out[j], c->want[j], 0, ggml_nbytes(c->out[j]));
            free(x);
            free(iv);
        }
    }
    if (side[0].buf && side[1].buf && side[0].be && side[1].be) {
        pthread_t th[2];
        atomic_store(&cc_long_done, 0);
        for (int s = 0; s < 2; s++) CHECK(pthread_create(&th[s], NULL, cc_loop, &side[s]) == 0);
        for (int s = 0; s < 2; s++) pthread_join(th[s], NULL);
        CHECK_MSG(side[0].bad + side[1].bad == 0, "two contexts at once: %d results differ from alone",
                  side[0].bad + side[1].bad);
    }
    for (int s = 0; s < 2; s++) {
        for (int j = 0; j < CC_T; j++) free(side[s].want[j]);
        ggml_backend_buffer_free(side[s].buf);
        ggml_free(side[s].ctx);
        ggml_backend_free(side[s].be);
    }
    ggml_backend_buffer_free(wbuf);
    ggml_free(wctx);
    free(wv);
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
    test_half();
    for (int t = 0; t < NTAKEN; t++) test_decode(taken[t]);

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

    for (int t = 0; t < NTAKEN; t++) test_one_copy(buft, taken[t], 0);
    test_one_copy(buft, GGML_TYPE_MXFP4, 1);
    test_special_scales(buft, GGML_TYPE_Q8_0);
    test_special_scales(buft, GGML_TYPE_Q4_0);
    test_special_scales(buft, GGML_TYPE_MXFP4);
    test_special_scales(buft, GGML_TYPE_Q6_K);
    test_special_scales(buft, GGML_TYPE_Q4_K);
    test_file_source(buft, GGML_TYPE_Q8_0);
    test_file_source(buft, GGML_TYPE_Q4_K);
    for (int t = 0; t < NTAKEN; t++) {
        enum ggml_type type = taken[t], f32 = GGML_TYPE_F32;
        int64_t k = qg_format_of(type)->blk == 256 ? 256 : 32; /* K in whole blocks */
        run_case(be, buft, GGML_OP_MUL_MAT_ID, type, f32, 4 * k, 64, 8, 2, 13, 2, 0); /* routed rows */
        run_case(be, buft, GGML_OP_MUL_MAT_ID, type, f32, 3 * k, 5, 4, 1, 7, 3, 0);   /* odd N, broadcast b */
        /* 256 routed rows of K 1024, N 256: the K-quants' min term shares its row work (sums,
         * then adds) over the threads from 256 KB of each */
        if (qg_format_of(type)->mins) run_case(be, buft, GGML_OP_MUL_MAT_ID, type, f32, 4 * k, 256, 8, 1, 64, 4, 0);
        run_case(be, buft, GGML_OP_MUL_MAT, type, f32, 2 * k, 3, 1100, 2, 0, 0, 0);   /* > 1024 matrices */
        run_case(be, buft, GGML_OP_MUL_MAT, type, GGML_TYPE_F16, 2 * k, 8, 3, 4, 0, 0, 0); /* f16 b */
        run_case(be, buft, GGML_OP_MUL_MAT_ID, type, GGML_TYPE_BF16, 2 * k, 8, 4, 2, 5, 2, 0); /* bf16 */
        run_case(be, buft, GGML_OP_MUL_MAT_ID, type, f32, 2 * k, 16, 4, 2, 3, 2, 1);  /* a bad id */
        zero_lead = 1; /* slices whose scales need different dtypes */
        run_case(be, buft, GGML_OP_MUL_MAT_ID, type, f32, 2 * k, 16, 3 * QG_SLICE - 3, 1, 9, 4, 0);
        zero_lead = 0;
        for (int named = 0; named < 5; named++)
            for (int mode = 0; mode < 3; mode++) test_moe_ffn(be, buft, type, mode, named);
        for (int named = 0; named < 2; named++)
            for (int fuse = 0; fuse < 2; fuse++) test_moe_ffn_merged(be, buft, type, named, fuse);
        const enum ggml_glu_op kinds[4] = {GGML_GLU_OP_SWIGLU, GGML_GLU_OP_GEGLU, GGML_GLU_OP_SWIGLU_CLAMP,
                                           GGML_GLU_OP_SWIGLU_OAI};
        for (int g = 0; g < 4; g++)
            for (int fuse = 0; fuse < 2; fuse++) test_elementwise(be, buft, type, kinds[g], fuse);
    }
    /* QMOE_LOAD_ORDERS: sequences a type (40); the TSan run takes fewer (its threads are not
     * what these sequences test, and each costs it 20x the time) */
    const char *lo = getenv("QMOE_LOAD_ORDERS");
    int orders = lo && atoi(lo) > 0 ? atoi(lo) : 40;
    for (int t = 0; t < NTAKEN; t++) test_load_orders(be, buft, taken[t], orders);
    test_two_contexts(dev, buft);
    ggml_backend_free(be);
    return qt_finish("ggml_backend");
}
