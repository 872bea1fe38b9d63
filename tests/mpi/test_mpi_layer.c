/* qmoe_ep_layer_forward: every rank builds the whole problem (float weights, all tokens) and the
 * whole layer, runs qmoe_moe_layer_forward on all tokens in one process (the reference), then
 * the sharded forward on its own tokens with a shard of its own experts; the bytes must match.
 * Then bad input on one rank: the same status everywhere, out untouched, the context usable. */
#include <math.h>
#include <stdio.h>

#include "core/halfconv.h"
#include "mpi_case.h"
#include "qmoe/moe_layer.h"

static int P, me;

enum { TOK_EVEN, TOK_RANDOM, TOK_ONE_RANK, TOK_GAP };
enum { ROUTE_RANDOM, ROUTE_SPARSE, ROUTE_ONE_RANK };
enum { G_SOFTMAX, G_NORENORM, G_SIGMOID };

typedef struct lcase {
    const char *name;
    int64_t E, H, I, K, N;
    qmoe_dtype hd;
    qmoe_quant_mode mode;
    int64_t group_size;
    int gating, shared, tok, route, map, whole;
} lcase;

/* The whole problem, the same on every rank. */
typedef struct problem {
    const lcase *c;
    float *gate, *up, *down, *sg, *su, *sd, *bias; /* [E, I, H], [E, I, H], [E, H, I], shared */
    unsigned char *hidden;                         /* [N, H] of hd */
    float *logits;                                 /* [N, E] */
    int32_t *map;                                  /* [E] or NULL */
    int64_t first[5];                              /* rank r's tokens [first[r], first[r+1]) */
    const void **pg, **pu, **pd;                   /* per-expert pointers */
} problem;

static size_t hsize(qmoe_dtype d) { return d == QMOE_DTYPE_FLOAT32 ? 4 : 2; }

static void put(qmoe_dtype d, unsigned char *at, float v)
{
    if (d == QMOE_DTYPE_FLOAT32) {
        memcpy(at, &v, 4);
    } else {
        uint16_t u = d == QMOE_DTYPE_BFLOAT16 ? mc_f32_to_bf16(v) : qmoe_f32_to_f16(v);
        memcpy(at, &u, 2);
    }
}

static int owner(const problem *p, int64_t e)
{
    return p->map ? p->map[e] : (int)(e * P / p->c->E);
}

static float *rand_floats(qt_rng *r, int64_t n, float amp)
{
    float *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = qt_uniform(r, -amp, amp);
    return v;
}

static void build(problem *p, const lcase *c, uint64_t seed)
{
    qt_rng r = {seed};
    int64_t E = c->E, H = c->H, I = c->I, N = c->N, Is = c->shared * I;
    memset(p, 0, sizeof *p);
    p->c = c;
    p->gate = rand_floats(&r, E * I * H, 1.0f / sqrtf((float)H));
    p->up = rand_floats(&r, E * I * H, 1.0f / sqrtf((float)H));
    p->down = rand_floats(&r, E * H * I, 1.0f / sqrtf((float)I));
    if (Is) {
        p->sg = rand_floats(&r, Is * H, 1.0f / sqrtf((float)H));
        p->su = rand_floats(&r, Is * H, 1.0f / sqrtf((float)H));
        p->sd = rand_floats(&r, H * Is, 1.0f / sqrtf((float)Is));
    }
    if (c->gating == G_SIGMOID) p->bias = rand_floats(&r, E, 0.1f);
    p->pg = malloc((size_t)E * sizeof *p->pg);
    p->pu = malloc((size_t)E * sizeof *p->pu);
    p->pd = malloc((size_t)E * sizeof *p->pd);
    for (int64_t e = 0; e < E; e++) {
        p->pg[e] = p->gate + e * I * H;
        p->pu[e] = p->up + e * I * H;
        p->pd[e] = p->down + e * H * I;
    }
    if (c->map) { /* interleaved, backwards: not the contiguous default */
        p->map = malloc((size_t)E * sizeof *p->map);
        for (int64_t e = 0; e < E; e++) p->map[e] = (int32_t)((E - 1 - e) % P);
    }
    p->hidden = malloc((size_t)(N * H) * hsize(c->hd) + 1);
    for (int64_t i = 0; i < N * H; i++)
        put(c->hd, p->hidden + (size_t)i * hsize(c->hd), qt_uniform(&r, -1.0f, 1.0f));
    p->logits = malloc((size_t)(N * E) * sizeof(float) + 1);
    for (int64_t t = 0; t < N; t++)
        for (int64_t e = 0; e < E; e++) {
            float v = qt_uniform(&r, -2.0f, 2.0f);
            if (c->route == ROUTE_SPARSE) v += e < c->K ? 20.0f : -20.0f; /* other experts idle */
            if (c->route == ROUTE_ONE_RANK) v += owner(p, e) == 0 ? 20.0f : -20.0f;
            p->logits[t * E + e] = v;
        }
    /* token split */
    int64_t cut[5] = {0};
    for (int q = 0; q <= P; q++) cut[q] = N * q / P;
    if (c->tok == TOK_RANDOM) {
        for (int q = 1; q < P; q++) cut[q] = qt_range(&r, cut[q - 1], N);
    } else if (c->tok == TOK_ONE_RANK) {
        for (int q = 1; q < P; q++) cut[q] = 0; /* all tokens on the last rank */
    } else if (c->tok == TOK_GAP && P > 1) { /* rank 1 has none */
        cut[1] = P == 2 ? N : N / 2;
        for (int q = 2; q < P; q++) cut[q] = N / 2 + (N - N / 2) * (q - 2) / (P - 2);
    }
    cut[P] = N;
    memcpy(p->first, cut, sizeof cut);
}

static void free_problem(problem *p)
{
    free(p->gate), free(p->up), free(p->down), free(p->sg), free(p->su), free(p->sd);
    free(p->bias), free(p->hidden), free(p->logits), free(p->map);
    free(p->pg), free(p->pu), free(p->pd);
}

static qmoe_moe_layer_config config_of(const problem *p)
{
    const lcase *c = p->c;
    qmoe_moe_layer_config cfg = QMOE_MOE_LAYER_CONFIG_INIT;
    cfg.hidden_size = c->H, cfg.intermediate_size = c->I, cfg.num_experts = c->E, cfg.top_k = c->K;
    cfg.mode = c->mode, cfg.group_size = c->group_size, cfg.threads = 1;
    cfg.renormalize = c->gating != G_NORENORM;
    if (c->gating == G_SIGMOID) {
        cfg.gating = QMOE_MOE_GATING_SIGMOID;
        cfg.group_count = 4, cfg.k_group = 2, cfg.routed_scaling_factor = 2.5;
        cfg.correction_bias = p->bias;
    }
    if (c->shared) {
        cfg.shared_intermediate_size = c->shared * c->I;
        cfg.shared_gate = p->sg, cfg.shared_up = p->su, cfg.shared_down = p->sd;
    }
    return cfg;
}

/* Set per case: the last rank asks for MPI messages only, so every rank uses them (agreed);
 * otherwise the ranks (all on this machine) read rows in place from shared memory. */
static int messages_only;

static qmoe_ep *make_ep(const problem *p)
{
    qmoe_ep_config ec = QMOE_EP_CONFIG_INIT;
    ec.messages_only = messages_only && me == P - 1;
    ec.num_experts = p->c->E, ec.hidden = p->c->H, ec.top_k = p->c->K;
    ec.x_dtype = QMOE_DTYPE_INT8, ec.expert_rank = p->map;
    qmoe_ep *ep = NULL;
    qmoe_status st = qmoe_ep_create(MPI_COMM_WORLD, &ec, &ep);
    CHECK_MSG(st == QMOE_OK, "ep create: %s", qmoe_mpi_last_error());
    return ep;
}

/* This rank's shard of the layer (its experts only). */
static qmoe_moe_layer *make_shard(const problem *p, const qmoe_ep *ep, const qmoe_moe_layer_config *cfg)
{
    int64_t n = qmoe_ep_local_experts(ep);
    int32_t *ids = malloc((size_t)(n ? n : 1) * sizeof *ids);
    for (int64_t i = 0; i < n; i++) ids[i] = (int32_t)qmoe_ep_local_expert_id(ep, i);
    qmoe_moe_layer *L = NULL;
    qmoe_status st = qmoe_moe_layer_create_shard_from_float(cfg, n, ids, p->pg, p->pu, p->pd,
                                                           QMOE_DTYPE_FLOAT32, &L);
    CHECK_MSG(st == QMOE_OK, "shard: %s", qmoe_last_error());
    if (L) CHECK(qmoe_moe_layer_held_experts(L) == n);
    free(ids);
    return L;
}

static qmoe_tensor *tensor(int64_t rows, int64_t cols, qmoe_dtype d, void *data)
{
    int64_t s[2] = {rows, cols};
    qmoe_tensor *t = NULL;
    qmoe_status st = qmoe_tensor_create(s, 2, NULL, d, QMOE_FORMAT_ND, data, &t);
    CHECK_MSG(st == QMOE_OK, "tensor: %s", qmoe_last_error());
    return t;
}

/* The whole layer on all N tokens in one process. */
static unsigned char *reference(const problem *p, const qmoe_moe_layer *whole)
{
    const lcase *c = p->c;
    size_t hs = hsize(c->hd);
    unsigned char *out = malloc((size_t)(c->N * c->H) * hs + 1);
    if (c->N == 0) return out;
    uint64_t wsz = 0;
    qmoe_status st = qmoe_moe_layer_workspace_size(whole, c->N, c->hd, &wsz);
    void *ws = aligned_alloc(64, (size_t)((wsz + 64) & ~(uint64_t)63));
    qmoe_tensor *th = tensor(c->N, c->H, c->hd, p->hidden), *tl = tensor(c->N, c->E, QMOE_DTYPE_FLOAT32, p->logits),
                *to = tensor(c->N, c->H, c->hd, out);
    if (!st) st = qmoe_moe_layer_forward(whole, th, tl, to, ws, wsz, NULL);
    CHECK_MSG(st == QMOE_OK, "%s: reference forward: %s", c->name, qmoe_last_error());
    qmoe_tensor_destroy(th), qmoe_tensor_destroy(tl), qmoe_tensor_destroy(to);
    free(ws);
    return out;
}

static void run_case(const lcase *c, uint64_t seed)
{
    problem p;
    build(&p, c, seed);
    qmoe_moe_layer_config cfg = config_of(&p);
    qmoe_moe_layer *whole = NULL;
    qmoe_status st = qmoe_moe_layer_create_from_float(&cfg, p.pg, p.pu, p.pd, QMOE_DTYPE_FLOAT32, &whole);
    CHECK_MSG(st == QMOE_OK, "%s: whole layer: %s", c->name, qmoe_last_error());
    unsigned char *ref = reference(&p, whole);
    qmoe_ep *ep = make_ep(&p);
    qmoe_moe_layer *shard = c->whole ? NULL : make_shard(&p, ep, &cfg);
    int64_t t0 = p.first[me], T = p.first[me + 1] - t0;
    size_t hs = hsize(c->hd), row = (size_t)c->H * hs;
    unsigned char *out = malloc((size_t)T * row + 1);
    qmoe_tensor *th = tensor(T, c->H, c->hd, p.hidden + (size_t)t0 * row),
                *tl = tensor(T, c->E, QMOE_DTYPE_FLOAT32, p.logits + t0 * c->E),
                *to = tensor(T, c->H, c->hd, out);
    /* twice: the second call reuses the context's buffers */
    for (int round = 0; round < 2; round++) {
        memset(out, 0x5A, (size_t)T * row + 1);
        st = qmoe_ep_layer_forward(ep, c->whole ? whole : shard, th, tl, to);
        CHECK_MSG(st == QMOE_OK, "%s (seed %llu): rank %d: %s", c->name, (unsigned long long)seed, me,
                  qmoe_mpi_last_error());
        int64_t bad = 0;
        for (int64_t t = 0; t < T && st == QMOE_OK; t++)
            bad += memcmp(out + (size_t)t * row, ref + (size_t)(t0 + t) * row, row) != 0;
        CHECK_MSG(bad == 0, "%s (seed %llu, round %d): rank %d/%d: %lld of %lld tokens differ from one process",
                  c->name, (unsigned long long)seed, round, me, P, (long long)bad, (long long)T);
    }
    if (shard && T > 0) { /* a shard is refused by the single-process forward */
        uint64_t wsz = 0;
        CHECK(qmoe_moe_layer_workspace_size(shard, T, c->hd, &wsz) == QMOE_ERR_PARAM_INVALID);
    }
    qmoe_tensor_destroy(th), qmoe_tensor_destroy(tl), qmoe_tensor_destroy(to);
    free(out), free(ref);
    qmoe_moe_layer_destroy(shard), qmoe_moe_layer_destroy(whole);
    qmoe_ep_destroy(ep);
    free_problem(&p);
}

/* Shards from quantized weights (qmoe_moe_layer_create_shard): each rank's experts cut out of
 * the whole layer's int8 tensors equal the whole layer made from them. */
static void quantized_shards(void)
{
    static const lcase c = {"quantized shards", 8, 32, 16, 2, 26, QMOE_DTYPE_FLOAT32, QMOE_QUANT_A8W8, 0,
                            G_SOFTMAX, 1, TOK_RANDOM, ROUTE_RANDOM, 0, 0};
    problem p;
    build(&p, &c, 4242);
    qmoe_moe_layer_config cfg = config_of(&p);
    cfg.shared_gate = cfg.shared_up = cfg.shared_down = NULL; /* trailing quantized experts */
    const int64_t E = c.E + c.shared, H = c.H, I = c.I;
    qt_rng r = {77};
    int8_t *w13 = malloc((size_t)(E * H * 2 * I)), *w2 = malloc((size_t)(E * I * H));
    float *s13 = malloc((size_t)(E * 2 * I) * 4), *s2 = malloc((size_t)(E * H) * 4);
    for (int64_t i = 0; i < E * H * 2 * I; i++) w13[i] = (int8_t)qt_range(&r, -127, 127);
    for (int64_t i = 0; i < E * I * H; i++) w2[i] = (int8_t)qt_range(&r, -127, 127);
    for (int64_t i = 0; i < E * 2 * I; i++) s13[i] = qt_uniform(&r, 1e-3f, 4e-3f);
    for (int64_t i = 0; i < E * H; i++) s2[i] = qt_uniform(&r, 1e-3f, 4e-3f);
    qmoe_ep *ep = make_ep(&p);
    int64_t n = qmoe_ep_local_experts(ep), m = c.shared;
    /* the rank's experts, then the shared chunks: rows of the whole tensors */
    int64_t *pick = malloc((size_t)(n + m) * sizeof *pick);
    int32_t *ids = malloc((size_t)(n + 1) * sizeof *ids);
    for (int64_t i = 0; i < n; i++) ids[i] = (int32_t)(pick[i] = qmoe_ep_local_expert_id(ep, i));
    for (int64_t k = 0; k < m; k++) pick[n + k] = c.E + k;
    int8_t *l13 = malloc((size_t)((n + m) * H * 2 * I)), *l2 = malloc((size_t)((n + m) * I * H));
    float *ls13 = malloc((size_t)((n + m) * 2 * I) * 4), *ls2 = malloc((size_t)((n + m) * H) * 4);
    for (int64_t i = 0; i < n + m; i++) {
        memcpy(l13 + i * H * 2 * I, w13 + pick[i] * H * 2 * I, (size_t)(H * 2 * I));
        memcpy(l2 + i * I * H, w2 + pick[i] * I * H, (size_t)(I * H));
        memcpy(ls13 + i * 2 * I, s13 + pick[i] * 2 * I, (size_t)(2 * I) * 4);
        memcpy(ls2 + i * H, s2 + pick[i] * H, (size_t)H * 4);
    }
    qmoe_tensor *t[8] = {0};
    int64_t a13[3] = {E, H, 2 * I}, a2[3] = {E, I, H}, b13[2] = {E, 2 * I}, b2[2] = {E, H};
    int64_t c13[3] = {n + m, H, 2 * I}, c2[3] = {n + m, I, H}, d13[2] = {n + m, 2 * I}, d2[2] = {n + m, H};
    qmoe_tensor_create(a13, 3, NULL, QMOE_DTYPE_INT8, QMOE_FORMAT_ND, w13, &t[0]);
    qmoe_tensor_create(b13, 2, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, s13, &t[1]);
    qmoe_tensor_create(a2, 3, NULL, QMOE_DTYPE_INT8, QMOE_FORMAT_ND, w2, &t[2]);
    qmoe_tensor_create(b2, 2, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, s2, &t[3]);
    qmoe_tensor_create(c13, 3, NULL, QMOE_DTYPE_INT8, QMOE_FORMAT_ND, l13, &t[4]);
    qmoe_tensor_create(d13, 2, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, ls13, &t[5]);
    qmoe_tensor_create(c2, 3, NULL, QMOE_DTYPE_INT8, QMOE_FORMAT_ND, l2, &t[6]);
    qmoe_tensor_create(d2, 2, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, ls2, &t[7]);
    qmoe_moe_layer *whole = NULL, *shard = NULL;
    qmoe_status st = qmoe_moe_layer_create(&cfg, t[0], t[1], NULL, t[2], t[3], &whole);
    CHECK_MSG(st == QMOE_OK, "quantized whole layer: %s", qmoe_last_error());
    st = qmoe_moe_layer_create_shard(&cfg, n, ids, t[4], t[5], NULL, t[6], t[7], &shard);
    CHECK_MSG(st == QMOE_OK, "quantized shard: %s", qmoe_last_error());
    unsigned char *ref = reference(&p, whole);
    int64_t t0 = p.first[me], T = p.first[me + 1] - t0;
    float *out = malloc((size_t)(T * H + 1) * 4);
    qmoe_tensor *th = tensor(T, H, c.hd, p.hidden + (size_t)t0 * H * 4),
                *tl = tensor(T, c.E, QMOE_DTYPE_FLOAT32, p.logits + t0 * c.E), *to = tensor(T, H, c.hd, out);
    st = qmoe_ep_layer_forward(ep, shard, th, tl, to);
    CHECK_MSG(st == QMOE_OK, "quantized shards: rank %d: %s", me, qmoe_mpi_last_error());
    if (st == QMOE_OK)
        CHECK_MSG(memcmp(out, ref + (size_t)t0 * H * 4, (size_t)(T * H) * 4) == 0,
                  "quantized shards: rank %d: outputs differ from the whole layer", me);
    qmoe_tensor_destroy(th), qmoe_tensor_destroy(tl), qmoe_tensor_destroy(to);
    for (int i = 0; i < 8; i++) qmoe_tensor_destroy(t[i]);
    qmoe_moe_layer_destroy(whole), qmoe_moe_layer_destroy(shard);
    qmoe_ep_destroy(ep);
    free(out), free(ref), free(pick), free(ids), free(w13), free(w2), free(s13), free(s2);
    free(l13), free(l2), free(ls13), free(ls2);
    free_problem(&p);
}

/* ---------------------------------------------------------------- errors ---------------------- */

static void agreed(const char *what, qmoe_status st, qmoe_status want)
{
    mc_agreed(what, st, want, me);
}

static void errors(void)
{
    static const lcase c = {"errors", 8, 16, 8, 2, 24, QMOE_DTYPE_FLOAT32, QMOE_QUANT_A8W8, 0, G_SOFTMAX,
                            1, TOK_EVEN, ROUTE_RANDOM, 0, 0};
    problem p;
    build(&p, &c, 99);
    qmoe_moe_layer_config cfg = config_of(&p);
    qmoe_ep *ep = make_ep(&p);
    qmoe_moe_layer *shard = make_shard(&p, ep, &cfg);
    int64_t t0 = p.first[me], T = p.first[me + 1] - t0, H = c.H;
    float *out = malloc((size_t)(T * H + 1) * sizeof *out), *sentinel = malloc((size_t)(T * H + 1) * sizeof *out);
    memset(sentinel, 0x5A, (size_t)(T * H + 1) * sizeof *out);
    qmoe_tensor *th = tensor(T, H, c.hd, p.hidden + (size_t)t0 * H * 4),
                *tl = tensor(T, c.E, QMOE_DTYPE_FLOAT32, p.logits + t0 * c.E), *to = tensor(T, H, c.hd, out),
                *bad_out = tensor(T + 1, H, c.hd, out);
#define UNTOUCHED(what) \
    CHECK_MSG(!memcmp(out, sentinel, (size_t)(T * H + 1) * sizeof *out), "%s: rank %d wrote out", what, me)

    memcpy(out, sentinel, (size_t)(T * H + 1) * sizeof *out);
    qmoe_status st = qmoe_ep_layer_forward(ep, shard, th, tl, me == P - 1 ? bad_out : to);
    agreed("out of the wrong shape on the last rank", st, QMOE_ERR_PARAM_INVALID);
    UNTOUCHED("wrong shape");

    st = qmoe_ep_layer_forward(ep, shard, me == 0 ? NULL : th, tl, to);
    agreed("hidden NULL on rank 0", st, QMOE_ERR_PARAM_NULLPTR);
    UNTOUCHED("NULL hidden");

    if (P > 1) { /* rank 0's layer quantized otherwise: A8W4 */
        qmoe_moe_layer_config c4 = cfg;
        c4.mode = QMOE_QUANT_A8W4;
        qmoe_moe_layer *other = me == 0 ? make_shard(&p, ep, &c4) : shard;
        st = qmoe_ep_layer_forward(ep, other, th, tl, to);
        agreed("a layer configured otherwise on rank 0", st, QMOE_ERR_PARAM_INVALID);
        UNTOUCHED("configuration differs");
        if (me == 0) qmoe_moe_layer_destroy(other);
        /* rank 0's routed scaling one bit apart, then its clip search on: both change the
         * outputs, so both must be refused */
        for (int k = 0; k < 2; k++) {
            qmoe_moe_layer_config cs = cfg;
            if (k == 0) cs.routed_scaling_factor = nextafter(1.0, 2.0);
            else cs.mode = QMOE_QUANT_A8W4, cs.clip_search = me == 0; /* clip search is A8W4's */
            other = me == 0 || k ? make_shard(&p, ep, &cs) : shard;
            memcpy(out, sentinel, (size_t)(T * H + 1) * sizeof *out);
            st = qmoe_ep_layer_forward(ep, other, th, tl, to);
            agreed(k ? "clip search on rank 0 only" : "a scaling factor one bit apart on rank 0", st,
                   QMOE_ERR_PARAM_INVALID);
            UNTOUCHED(k ? "clip search differs" : "scaling differs");
            if (other != shard) qmoe_moe_layer_destroy(other);
            memcpy(out, sentinel, (size_t)(T * H + 1) * sizeof *out); /* for the cases below */
        }
    }
    { /* the last rank's shard lacks one of its experts */
        int64_t n = qmoe_ep_local_experts(ep);
        qmoe_moe_layer *less = shard;
        if (me == P - 1 && n > 1) {
            int32_t ids[8];
            for (int64_t i = 1; i < n; i++) ids[i - 1] = (int32_t)qmoe_ep_local_expert_id(ep, i);
            qmoe_status cs = qmoe_moe_layer_create_shard_from_float(&cfg, n - 1, ids, p.pg, p.pu, p.pd,
                                                                    QMOE_DTYPE_FLOAT32, &less);
            CHECK_MSG(cs == QMOE_OK, "smaller shard: %s", qmoe_last_error());
        }
        int any = me == P - 1 && n > 1, all = 0;
        MPI_Allreduce(&any, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        st = qmoe_ep_layer_forward(ep, less, th, tl, to);
        agreed("a shard without one of the rank's experts", st, all ? QMOE_ERR_PARAM_INVALID : QMOE_OK);
        if (all) UNTOUCHED("missing expert");
        if (less != shard) qmoe_moe_layer_destroy(less);
    }
    /* a shard's ids must ascend; the whole layer's forward refuses a shard */
    {
        int32_t ids[2] = {3, 1};
        qmoe_moe_layer *L = NULL;
        CHECK(qmoe_moe_layer_create_shard_from_float(&cfg, 2, ids, p.pg, p.pu, p.pd, QMOE_DTYPE_FLOAT32, &L) ==
              QMOE_ERR_PARAM_INVALID);
        CHECK(L == NULL);
    }
    /* still usable: a good call on every rank */
    st = qmoe_ep_layer_forward(ep, shard, th, tl, to);
    agreed("a good call after the errors", st, QMOE_OK);
#undef UNTOUCHED
    qmoe_tensor_destroy(th), qmoe_tensor_destroy(tl), qmoe_tensor_destroy(to), qmoe_tensor_destroy(bad_out);
    free(out), free(sentinel);
    qmoe_moe_layer_destroy(shard);
    qmoe_ep_destroy(ep);
    free_problem(&p);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    static const lcase cases[] = {
        /* name, E, H, I, K, N, hidden, mode, group size, gating, shared, tokens, routing, map, whole */
        {"random a8w8", 8, 32, 16, 2, 29, QMOE_DTYPE_FLOAT32, QMOE_QUANT_A8W8, 0, G_SOFTMAX, 0, TOK_EVEN,
         ROUTE_RANDOM, 0, 0},
        {"top-k spans ranks, bf16", 12, 32, 32, 4, 23, QMOE_DTYPE_BFLOAT16, QMOE_QUANT_A8W8, 0, G_SOFTMAX, 0,
         TOK_RANDOM, ROUTE_RANDOM, 0, 0},
        {"idle experts, no renorm", 8, 16, 16, 2, 17, QMOE_DTYPE_FLOAT32, QMOE_QUANT_A8W8, 0, G_NORENORM, 0,
         TOK_EVEN, ROUTE_SPARSE, 0, 0},
        {"a rank without tokens", 8, 32, 16, 2, 21, QMOE_DTYPE_FLOAT16, QMOE_QUANT_A8W8, 0, G_SOFTMAX, 0,
         TOK_GAP, ROUTE_RANDOM, 0, 0},
        {"all tokens on one rank", 8, 16, 16, 2, 19, QMOE_DTYPE_FLOAT32, QMOE_QUANT_A8W8, 0, G_SOFTMAX, 0,
         TOK_ONE_RANK, ROUTE_RANDOM, 0, 0},
        {"all rows to rank 0", 8, 16, 16, 2, 25, QMOE_DTYPE_FLOAT32, QMOE_QUANT_A8W8, 0, G_SOFTMAX, 0,
         TOK_RANDOM, ROUTE_ONE_RANK, 0, 0},
        {"sigmoid + shared expert, a8w4", 16, 64, 32, 4, 27, QMOE_DTYPE_BFLOAT16, QMOE_QUANT_A8W4, 32,
         G_SIGMOID, 2, TOK_RANDOM, ROUTE_RANDOM, 0, 0},
        {"shared expert, explicit map", 8, 32, 16, 3, 22, QMOE_DTYPE_FLOAT32, QMOE_QUANT_A8W8, 0, G_SOFTMAX,
         1, TOK_EVEN, ROUTE_RANDOM, 1, 0},
        {"whole layer on every rank", 8, 32, 16, 2, 18, QMOE_DTYPE_FLOAT16, QMOE_QUANT_A8W8, 0, G_SOFTMAX, 1,
         TOK_EVEN, ROUTE_RANDOM, 0, 1},
        {"fewer experts than ranks", 2, 16, 16, 1, 13, QMOE_DTYPE_FLOAT32, QMOE_QUANT_A8W8, 0, G_SOFTMAX, 0,
         TOK_EVEN, ROUTE_RANDOM, 0, 0},
        {"no tokens at all", 8, 16, 16, 2, 0, QMOE_DTYPE_FLOAT32, QMOE_QUANT_A8W8, 0, G_SOFTMAX, 1, TOK_EVEN,
         ROUTE_RANDOM, 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (uint64_t seed = 1; seed <= 2; seed++) {
            messages_only = seed == 2;
            run_case(&cases[i], seed * 7919 + i);
        }
    quantized_shards();
    errors();
    return mc_finish("test_mpi_layer", me, P);
}
