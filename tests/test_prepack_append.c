/*
 * Prepacked weights built a slice of experts at a time (options.experts, qmoe_weights_append),
 * through the public API, against the same weights prepacked whole: for int8 / int4 weights in ND
 * and NZ layouts, float32 / float16 / bfloat16 scales, per channel and per group, the unpacked
 * integers and scales (qmoe_weights_unpack_scales, in the dtype given) are the source's, and the
 * operator's outputs are bit-identical to the whole object's.
 * Refused, with QMOE_ERR_PARAM_INVALID / NULLPTR and the object left as it was (the slice after
 * still gives identical results): using an object before every expert is in, a slice of more
 * experts than are left, other K or N, other scale dtype or groups, a missing bias (NULLPTR, as
 * phase one), experts fewer than the first slice's. Weight storages come from the test oracle's packer, not from src/.
 */
#include <stdlib.h>
#include <string.h>

#include "qmoe/qmoe.h"
#include "qmoe/weights.h"
#include "support/oracle.h"
#include "support/testlib.h"

enum { E = 5, M = 23 };

typedef struct src {
    oracle_wlayout lay;
    int a8w4, per_group;
    qmoe_dtype wsdt;
    int64_t K, N, G;
    int8_t *w;     /* logical [E][K][N] */
    uint8_t *wst;  /* the layout's storage */
    uint8_t *ws;   /* [E][G][N] of wsdt */
    float *bias;   /* [E][N] */
} src;

static qmoe_tensor *mk(const int64_t *shape, int nd, qmoe_dtype dt, qmoe_format f, void *data)
{
    qmoe_tensor *t = NULL;
    CHECK(qmoe_tensor_create(shape, nd, NULL, dt, f, data, &t) == QMOE_OK);
    return t;
}

static size_t ws_elem(qmoe_dtype dt) { return dt == QMOE_DTYPE_FLOAT32 ? 4 : 2; }

/* Tensors of experts [e0, e0 + ne) of s (scale dtype `wsdt`, groups G): views into its storage. */
static void slice(const src *s, int64_t e0, int64_t ne, qmoe_dtype wsdt, int64_t G, qmoe_tensor **tw,
                  qmoe_tensor **tws, qmoe_tensor **tb)
{
    const int64_t K = s->K, N = s->N;
    uint8_t *w = s->wst + e0 * oracle_weight_bytes(s->lay, 1, K, N);
    switch (s->lay) {
    case ORACLE_W_INT8_NZ: {
        int64_t d[5] = {ne, N / 32, K / 16, 16, 32};
        *tw = mk(d, 5, QMOE_DTYPE_INT8, QMOE_FORMAT_FRACTAL_NZ, w);
    } break;
    case ORACLE_W_INT4_NZ: {
        int64_t d[5] = {ne, N / 64, K / 16, 16, 64};
        *tw = mk(d, 5, QMOE_DTYPE_INT4, QMOE_FORMAT_FRACTAL_NZ, w);
    } break;
    default: {
        int64_t d[3] = {ne, K, N};
        *tw = mk(d, 3, s->a8w4 ? QMOE_DTYPE_INT4 : QMOE_DTYPE_INT8, QMOE_FORMAT_ND, w);
    }
    }
    uint8_t *ws = s->ws + (size_t)(e0 * G * N) * ws_elem(wsdt);
    int64_t d3[3] = {ne, G, N}, d2[2] = {ne, N};
    *tws = s->per_group ? mk(d3, 3, wsdt, QMOE_FORMAT_ND, ws) : mk(d2, 2, wsdt, QMOE_FORMAT_ND, ws);
    *tb = s->a8w4 ? mk(d2, 2, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, s->bias + e0 * N) : NULL;
}

static void drop(qmoe_tensor *a, qmoe_tensor *b, qmoe_tensor *c)
{
    qmoe_tensor_destroy(a);
    qmoe_tensor_destroy(b);
    qmoe_tensor_destroy(c);
}

static void src_make(src *s, qt_rng *r, oracle_wlayout lay, qmoe_dtype wsdt, int per_group)
{
    memset(s, 0, sizeof *s);
    s->lay = lay;
    s->a8w4 = lay == ORACLE_W_INT4_ND || lay == ORACLE_W_INT4_NZ;
    s->wsdt = wsdt;
    s->per_group = per_group;
    s->K = 64 * qt_range(r, 1, 3);
    s->N = 64 * qt_range(r, 1, 3);
    s->G = per_group ? s->K / 32 : 1;
    const int64_t n = E * s->K * s->N, ns = E * s->G * s->N;
    s->w = malloc((size_t)n);
    for (int64_t i = 0; i < n; i++)
        s->w[i] = (int8_t)(s->a8w4 ? qt_range(r, -8, 7) : qt_range(r, -128, 127));
    s->wst = calloc(1, (size_t)oracle_weight_bytes(lay, E, s->K, s->N) + 64);
    oracle_pack_weight(lay, s->w, E, s->K, s->N, s->wst);
    s->ws = malloc((size_t)ns * 4);
    for (int64_t i = 0; i < ns; i++) {
        float f = qt_uniform(r, 0.001f, 0.02f);
        uint32_t b;
        memcpy(&b, &f, 4);
        if (wsdt == QMOE_DTYPE_FLOAT32) memcpy(s->ws + 4 * i, &f, 4);
        else if (wsdt == QMOE_DTYPE_BFLOAT16) ((uint16_t *)(void *)s->ws)[i] = (uint16_t)(b >> 16);
        else ((uint16_t *)(void *)s->ws)[i] = (uint16_t)(0x1800u + (b & 0x3FFu)); /* ~2^-9 */
    }
    s->bias = malloc(sizeof(float) * (size_t)(E * s->N));
    for (int64_t i = 0; i < E * s->N; i++) s->bias[i] = qt_uniform(r, -1.0f, 1.0f);
}

static void src_free(src *s)
{
    free(s->w);
    free(s->wst);
    free(s->ws);
    free(s->bias);
}

/* The operator on `pw` (a view of it) over fixed activations; QMOE_OK or phase one's status.
 * q / scale start as a sentinel. */
static qmoe_status run(const src *s, const qmoe_weights *pw, const int8_t *x, const float *xs,
                       const int64_t *gl, int8_t *q, float *scale)
{
    const int64_t K = s->K, N2 = s->N / 2, e = E;
    memset(q, 0x5A, (size_t)(M * N2));
    memset(scale, 0x5A, sizeof(float) * M);
    int64_t xd[2] = {M, K}, od[2] = {M, N2}, m = M;
    qmoe_tensor *tx = mk(xd, 2, QMOE_DTYPE_INT8, QMOE_FORMAT_ND, (void *)(uintptr_t)x);
    qmoe_tensor *txs = mk(&m, 1, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, (void *)(uintptr_t)xs);
    qmoe_tensor *tgl = mk(&e, 1, QMOE_DTYPE_INT64, QMOE_FORMAT_ND, (void *)(uintptr_t)gl);
    qmoe_tensor *to = mk(od, 2, QMOE_DTYPE_INT8, QMOE_FORMAT_ND, q);
    qmoe_tensor *tos = mk(&m, 1, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, scale);
    qmoe_tensor *view = NULL;
    qmoe_status st = qmoe_weights_tensor(pw, &view);
    uint64_t wsb = 0;
    qmoe_grouped_matmul_swiglu_quant_executor *ex = NULL;
    if (!st)
        st = qmoe_grouped_matmul_swiglu_quant_workspace_size(tx, view, NULL, NULL, NULL, txs, tgl, to,
                                                             tos, NULL, NULL, &wsb, &ex);
    if (!st) {
        void *wsp = wsb ? aligned_alloc(64, (wsb + 63) / 64 * 64) : NULL;
        st = qmoe_grouped_matmul_swiglu_quant(wsp, wsb, ex, NULL);
        free(wsp);
        qmoe_grouped_matmul_swiglu_quant_executor_destroy(ex);
    }
    qmoe_tensor_destroy(view);
    drop(tx, txs, tgl);
    drop(to, tos, NULL);
    return st;
}

static int all_sentinel(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != 0x5A) return 0;
    return 1;
}

/* Appends experts [e0, e0 + ne) of s; the status. */
static qmoe_status append(qmoe_weights *pw, const src *s, int64_t e0, int64_t ne, qmoe_dtype wsdt,
                          int64_t G, int with_bias)
{
    qmoe_tensor *tw, *tws, *tb;
    slice(s, e0, ne, wsdt, G, &tw, &tws, &tb);
    qmoe_status st = qmoe_weights_append(pw, tw, tws, with_bias ? tb : NULL);
    drop(tw, tws, tb);
    return st;
}

static void check_case(qt_rng *r, oracle_wlayout lay, qmoe_dtype wsdt, int per_group)
{
    src s;
    src_make(&s, r, lay, wsdt, per_group);
    const int64_t K = s.K, N2 = s.N / 2;
    int8_t *x = malloc((size_t)(M * K)), *qa = malloc((size_t)(M * N2)), *qb = malloc((size_t)(M * N2));
    float xs[M], sa[M], sb[M];
    int64_t gl[E] = {4, 4, 11, 19, M}; /* an empty expert, the rest uneven */
    for (int64_t i = 0; i < M * K; i++) x[i] = (int8_t)qt_range(r, -128, 127);
    for (int i = 0; i < M; i++) xs[i] = qt_uniform(r, 0.01f, 0.1f);

    qmoe_tensor *tw, *tws, *tb;
    slice(&s, 0, E, wsdt, s.G, &tw, &tws, &tb);
    qmoe_weights *whole = NULL, *part = NULL;
    CHECK(qmoe_weights_prepack(tw, tws, tb, NULL, &whole) == QMOE_OK);
    drop(tw, tws, tb);

    /* first slice: 2 experts of an object of E */
    slice(&s, 0, 2, wsdt, s.G, &tw, &tws, &tb);
    qmoe_weights_options o = QMOE_WEIGHTS_OPTIONS_INIT;
    o.experts = 1;
    qmoe_weights *keep = (qmoe_weights *)&o; /* any non-NULL value: must stay */
    part = keep;
    CHECK(qmoe_weights_prepack(tw, tws, tb, &o, &part) == QMOE_ERR_PARAM_INVALID && part == keep);
    o.experts = E;
    part = NULL;
    CHECK(qmoe_weights_prepack(tw, tws, tb, &o, &part) == QMOE_OK);
    drop(tw, tws, tb);
    if (!whole || !part) goto done;

    /* not usable before every expert is in; outputs untouched */
    CHECK(run(&s, part, x, xs, gl, qb, sb) == QMOE_ERR_PARAM_INVALID && qmoe_last_error()[0]);
    CHECK(all_sentinel((uint8_t *)qb, (size_t)(M * N2)) && all_sentinel((uint8_t *)sb, sizeof sb));
    int8_t *vals = malloc((size_t)(K * s.N));
    CHECK(qmoe_weights_unpack(part, 2, vals) == QMOE_ERR_PARAM_INVALID);
    CHECK(qmoe_weights_unpack_scales(part, 2, wsdt, vals) == QMOE_ERR_PARAM_INVALID);

    /* refused slices leave the object as it was */
    CHECK(append(part, &s, 2, 4, wsdt, s.G, 1) == QMOE_ERR_PARAM_INVALID); /* 3 are left */
    qmoe_dtype other = wsdt == QMOE_DTYPE_FLOAT32 ? QMOE_DTYPE_FLOAT16 : QMOE_DTYPE_FLOAT32;
    CHECK(append(part, &s, 2, 1, other, s.G, 1) == QMOE_ERR_PARAM_INVALID);
    if (per_group) CHECK(append(part, &s, 2, 1, wsdt, s.G / 2, 1) == QMOE_ERR_PARAM_INVALID);
    if (s.a8w4) CHECK(append(part, &s, 2, 1, wsdt, s.G, 0) == QMOE_ERR_PARAM_NULLPTR); /* as phase one */
    {
        src t;
        src_make(&t, r, lay, wsdt, per_group);
        if (t.K != s.K || t.N != s.N)
            CHECK(append(part, &t, 0, 1, wsdt, t.G, 1) == QMOE_ERR_PARAM_INVALID);
        src_free(&t);
    }
    CHECK(qmoe_weights_append(NULL, NULL, NULL, NULL) == QMOE_ERR_PARAM_NULLPTR);
    CHECK(qmoe_weights_append(part, NULL, NULL, NULL) == QMOE_ERR_PARAM_NULLPTR);

    /* the rest in two slices */
    CHECK(append(part, &s, 2, 2, wsdt, s.G, 1) == QMOE_OK);
    CHECK(append(part, &s, 4, 1, wsdt, s.G, 1) == QMOE_OK);
    CHECK(append(part, &s, 4, 1, wsdt, s.G, 1) == QMOE_ERR_PARAM_INVALID); /* none left */
    CHECK(qmoe_weights_bytes(part) == qmoe_weights_bytes(whole));

    for (int64_t e = 0; e < E; e++) {
        CHECK(qmoe_weights_unpack(part, e, vals) == QMOE_OK);
        int64_t bad = 0;
        for (int64_t i = 0; i < K * s.N; i++) bad += vals[i] != s.w[e * K * s.N + i];
        CHECK_MSG(bad == 0, "layout %d expert %lld: %lld integers differ", (int)lay, (long long)e,
                  (long long)bad);
    }
    /* the scales back, as given: from both objects, bit for bit; another dtype refused */
    const size_t es = ws_elem(wsdt), sn = (size_t)(s.G * s.N) * es;
    uint8_t *sv = malloc(sn);
    for (int64_t e = 0; e < E; e++)
        for (int o2 = 0; o2 < 2; o2++) {
            memset(sv, 0xA5, sn);
            CHECK(qmoe_weights_unpack_scales(o2 ? part : whole, e, wsdt, sv) == QMOE_OK);
            CHECK_MSG(!memcmp(sv, s.ws + (size_t)e * sn, sn), "layout %d ws dtype %d G=%lld expert %lld: "
                      "unpacked scales differ", (int)lay, (int)wsdt, (long long)s.G, (long long)e);
        }
    CHECK(qmoe_weights_unpack_scales(whole, 0, other, sv) == QMOE_ERR_PARAM_INVALID);
    CHECK(qmoe_weights_unpack_scales(whole, E, wsdt, sv) == QMOE_ERR_PARAM_INVALID);
    CHECK(qmoe_weights_unpack_scales(whole, 0, wsdt, NULL) == QMOE_ERR_PARAM_NULLPTR);
    CHECK(qmoe_weights_unpack_scales(NULL, 0, wsdt, sv) == QMOE_ERR_PARAM_NULLPTR);
    free(sv);
    qmoe_status a = run(&s, whole, x, xs, gl, qa, sa), b = run(&s, part, x, xs, gl, qb, sb);
    CHECK_MSG(a == QMOE_OK && b == QMOE_OK, "layout %d: %s", (int)lay, qmoe_last_error());
    CHECK_MSG(!memcmp(qa, qb, (size_t)(M * N2)) && !memcmp(sa, sb, sizeof sa),
              "layout %d ws dtype %d G=%lld: the appended object's output differs from the whole one's",
              (int)lay, (int)wsdt, (long long)s.G);
    free(vals);
done:
    qmoe_weights_destroy(whole);
    qmoe_weights_destroy(part);
    free(x);
    free(qa);
    free(qb);
    src_free(&s);
}

int main(void)
{
    qt_rng r = {0x5eed1234ull};
    static const oracle_wlayout lays[] = {ORACLE_W_INT8_ND, ORACLE_W_INT8_NZ, ORACLE_W_INT4_ND,
                                          ORACLE_W_INT4_NZ};
    static const qmoe_dtype dts[] = {QMOE_DTYPE_FLOAT32, QMOE_DTYPE_FLOAT16, QMOE_DTYPE_BFLOAT16};
    for (size_t l = 0; l < sizeof lays / sizeof lays[0]; l++)
        for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
            for (int pg = 0; pg < 2; pg++) check_case(&r, lays[l], dts[d], pg);
    return qt_finish("test_prepack_append");
}
