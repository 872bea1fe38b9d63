/* Dispatch -> a per-row function of the expert (in double) -> combine, on P ranks, against one
 * process: every row must arrive intact at its expert's rank, grouped by (local expert, source
 * rank, token, k), and the combined outputs must be bit-identical to qmoe_moe_finalize_routing
 * run in one process over the same expert rows. Routings: random, experts with no tokens, ranks
 * with no tokens, all tokens to one rank, top-k spanning ranks, explicit expert maps. */
#include <stdio.h>

#include "core/halfconv.h"
#include "mpi_case.h"
#include "qmoe/moe_ops.h"

static int P, me;

/* The "expert": row * (0.75 + e / 8), computed in double, rounded once to y's dtype. */
static void expert_row(int64_t e, const unsigned char *xrow, float xscale, const mpi_case *c,
                       qmoe_dtype y_dtype, unsigned char *yrow)
{
    double m = 0.75 + (double)e / 8.0;
    for (int64_t h = 0; h < c->H; h++) {
        double v;
        if (c->x_dtype == QMOE_DTYPE_INT8)
            v = (double)((const int8_t *)xrow)[h] * (double)xscale;
        else if (c->x_dtype == QMOE_DTYPE_FLOAT32) {
            float f;
            memcpy(&f, xrow + h * 4, 4);
            v = f;
        } else {
            uint16_t u;
            memcpy(&u, xrow + h * 2, 2);
            v = mc_bf16_to_f32(u);
        }
        float y = (float)(v * m);
        if (y_dtype == QMOE_DTYPE_FLOAT32)
            memcpy(yrow + h * 4, &y, 4);
        else if (y_dtype == QMOE_DTYPE_FLOAT16) {
            uint16_t u = qmoe_f32_to_f16(y);
            memcpy(yrow + h * 2, &u, 2);
        } else {
            uint16_t u = mc_f32_to_bf16(y);
            memcpy(yrow + h * 2, &u, 2);
        }
    }
}

enum { TOK_EVEN, TOK_ONE_RANK, TOK_RANDOM };
enum { ROUTE_RANDOM, ROUTE_SPARSE, ROUTE_ONE_RANK, ROUTE_SPAN };

static void build(mpi_case *c, uint64_t seed, int64_t E, int64_t H, int64_t K, int64_t N,
                  qmoe_dtype xdt, int tok, int route, int explicit_map)
{
    qt_rng r = {seed};
    memset(c, 0, sizeof *c);
    c->P = P;
    c->E = E, c->H = H, c->K = K, c->N = N, c->x_dtype = xdt;
    c->first = calloc((size_t)P + 1, sizeof *c->first);
    for (int q = 0; q < P; q++) {
        int64_t n = tok == TOK_EVEN       ? N / P + (q < N % P)
                    : tok == TOK_ONE_RANK ? (q == P - 1 ? N : 0)
                                          : 0;
        c->first[q + 1] = c->first[q] + n;
    }
    if (tok == TOK_RANDOM) { /* random cut points, some ranks may get none */
        for (int q = 1; q < P; q++) c->first[q] = qt_range(&r, c->first[q - 1], N);
        c->first[P] = N;
    }
    if (explicit_map) {
        c->map = malloc((size_t)E * sizeof *c->map);
        for (int64_t e = 0; e < E; e++) c->map[e] = (int32_t)qt_range(&r, 0, P - 1);
    }
    size_t es = mc_size(xdt);
    c->x = malloc((size_t)(N * H) * es + 1);
    c->x_scale = malloc((size_t)N * sizeof(float) + 1);
    c->ids = malloc((size_t)(N * K) * sizeof(int32_t) + 1);
    c->weights = malloc((size_t)(N * K) * sizeof(float) + 1);
    for (int64_t i = 0; i < N * H; i++) {
        float v = qt_uniform(&r, -2.0f, 2.0f);
        if (xdt == QMOE_DTYPE_INT8)
            ((int8_t *)c->x)[i] = (int8_t)qt_range(&r, -127, 127);
        else if (xdt == QMOE_DTYPE_FLOAT32)
            ((float *)(void *)c->x)[i] = v;
        else
            ((uint16_t *)(void *)c->x)[i] = mc_f32_to_bf16(v);
    }
    for (int64_t t = 0; t < N; t++) c->x_scale[t] = qt_uniform(&r, 0.001f, 0.05f);
    for (int64_t t = 0; t < N; t++)
        for (int64_t j = 0; j < K; j++) {
            int64_t e;
            switch (route) {
            case ROUTE_SPARSE: e = 2 * qt_range(&r, 0, (E - 1) / 2); break; /* odd experts idle */
            case ROUTE_ONE_RANK: e = E - 1 - qt_range(&r, 0, E / P > 0 ? E / P - 1 : 0); break;
            case ROUTE_SPAN: /* choice j in the j-th block of E/K experts: spans every rank */
                e = (j * E) / K + qt_range(&r, 0, E / K - 1);
                break;
            default: e = qt_range(&r, 0, E - 1); break;
            }
            c->ids[t * K + j] = (int32_t)e;
            c->weights[t * K + j] = qt_uniform(&r, 0.0f, 1.0f);
        }
}

static int owner_of(const mpi_case *c, int64_t e)
{
    return c->map ? c->map[e] : (int)(e * P / c->E);
}

/* messages_only: the last rank asks for MPI messages only, so every rank uses them (agreed);
 * otherwise the ranks (all on this machine) read rows home in place from shared memory.
 * expert_rows: the experts write into qmoe_ep_expert_rows' buffer (read in place by combine
 * with shared memory), else into a buffer of the test's own. */
static void run_case(const char *name, const mpi_case *c, qmoe_dtype ydt, int extra_capacity,
                     int threads, int messages_only, int expert_rows)
{
    qmoe_ep_config cfg = QMOE_EP_CONFIG_INIT;
    cfg.threads = threads;
    cfg.messages_only = messages_only && me == P - 1;
    cfg.num_experts = c->E, cfg.hidden = c->H, cfg.top_k = c->K, cfg.x_dtype = c->x_dtype;
    cfg.expert_rank = c->map;
    qmoe_ep *ep = NULL;
    qmoe_status st = qmoe_ep_create(MPI_COMM_WORLD, &cfg, &ep);
    CHECK_MSG(st == QMOE_OK, "%s: create: %s", name, qmoe_mpi_last_error());
    if (st != QMOE_OK) return;
    /* the tests' ranks all run on this machine */
    CHECK_MSG(qmoe_ep_shared_memory(ep) == !messages_only, "%s: shared memory %d, messages_only %d",
              name, qmoe_ep_shared_memory(ep), messages_only);
    const int64_t H = c->H, K = c->K, t0 = c->first[me], T = c->first[me + 1] - t0;
    const size_t xs = mc_size(c->x_dtype), ys = mc_size(ydt);

    /* What should arrive here: local experts ascending, then (source, token, k). */
    int64_t nloc = qmoe_ep_local_experts(ep), expect = 0;
    int64_t *exp_t = malloc((size_t)(c->N * K) * sizeof *exp_t + 1),
            *exp_group = calloc((size_t)nloc + 1, sizeof *exp_group);
    int64_t *exp_e = malloc((size_t)(c->N * K) * sizeof *exp_e + 1);
    for (int64_t l = 0, prev = -1; l < nloc; l++) {
        int64_t e = qmoe_ep_local_expert_id(ep, l);
        CHECK(owner_of(c, e) == me && e > prev);
        prev = e;
        for (int64_t t = 0; t < c->N; t++) /* global token order is (source rank, token) */
            for (int64_t j = 0; j < K; j++)
                if (c->ids[t * K + j] == e) {
                    exp_t[expect] = t;
                    exp_e[expect++] = e;
                    exp_group[l]++;
                }
    }
    int64_t cap = expect + extra_capacity;
    unsigned char *rx = malloc((size_t)cap * H * xs + 1);
    float *rs = malloc((size_t)cap * sizeof(float) + 1);
    int64_t *groups = malloc((size_t)nloc * sizeof *groups + 1), rows = -1;
    st = qmoe_moe_dispatch(ep, T, c->x + (size_t)(t0 * H) * xs, c->x_scale + t0, c->ids + t0 * K,
                           cap, rx, rs, groups, &rows);
    CHECK_MSG(st == QMOE_OK, "%s: dispatch: %s", name, qmoe_mpi_last_error());
    CHECK_MSG(rows == expect, "%s: rank %d got %lld rows, expected %lld", name, me, (long long)rows,
              (long long)expect);
    if (st == QMOE_OK && rows == expect) {
        int bad = 0;
        for (int64_t l = 0; l < nloc; l++) bad += groups[l] != exp_group[l];
        for (int64_t g = 0; g < rows; g++) {
            int64_t t = exp_t[g];
            bad +=
                memcmp(rx + (size_t)g * H * xs, c->x + (size_t)(t * H) * xs, (size_t)H * xs) != 0;
            if (c->x_dtype == QMOE_DTYPE_INT8) bad += rs[g] != c->x_scale[t];
        }
        CHECK_MSG(bad == 0, "%s: rank %d: %d received rows or groups differ", name, me, bad);
    }
    /* The experts, then combine. */
    unsigned char *y = NULL, *own_y = NULL;
    if (expert_rows) {
        void *b = NULL;
        st = qmoe_ep_expert_rows(ep, ydt, &b);
        CHECK_MSG(st == QMOE_OK && b && (uintptr_t)b % 64 == 0, "%s: expert rows: %s", name,
                  qmoe_mpi_last_error());
        y = b;
    }
    if (!y) y = own_y = malloc((size_t)(rows > 0 ? rows : 0) * H * ys + 1);
    for (int64_t g = 0; g < rows && rows == expect; g++)
        expert_row(exp_e[g], rx + (size_t)g * H * xs, rs[g], c, ydt, y + (size_t)g * H * ys);
    /* out is y's dtype, except float16 rows (combine writes float32 or bfloat16): float32 */
    qmoe_dtype odt = ydt == QMOE_DTYPE_FLOAT16 ? QMOE_DTYPE_FLOAT32 : ydt;
    const size_t os = mc_size(odt);
    unsigned char *out = malloc((size_t)(T * H) * os + 1), *ref = malloc((size_t)(T * H) * os + 1);
    st = qmoe_moe_combine(ep, ydt, y, rows, c->weights + t0 * K, odt, out);
    CHECK_MSG(st == QMOE_OK, "%s: combine: %s", name, qmoe_mpi_last_error());

    /* float16 rows: the sum written out (float32 from 0, choices in order), in one process. */
    if (T > 0 && ydt == QMOE_DTYPE_FLOAT16) {
        unsigned char *yr = malloc((size_t)H * 2);
        float *acc = malloc((size_t)H * sizeof *acc);
        for (int64_t t = 0; t < T; t++) {
            int64_t gt = t0 + t;
            for (int64_t h = 0; h < H; h++) acc[h] = 0.0f;
            for (int64_t j = 0; j < K; j++) {
                expert_row(c->ids[gt * K + j], c->x + (size_t)(gt * H) * xs, c->x_scale[gt], c, ydt,
                           yr);
                float w = c->weights[gt * K + j];
                for (int64_t h = 0; h < H; h++) {
                    uint16_t u;
                    memcpy(&u, yr + h * 2, 2);
                    acc[h] += w * qmoe_f16_to_f32(u);
                }
            }
            memcpy(ref + (size_t)(t * H) * 4, acc, (size_t)H * 4);
        }
        if (st == QMOE_OK)
            CHECK_MSG(memcmp(out, ref, (size_t)(T * H) * 4) == 0,
                      "%s: rank %d: combine differs from the single-process sum", name, me);
        free(yr);
        free(acc);
    }
    /* One process: the same expert rows in token order, summed by qmoe_moe_finalize_routing. */
    if (T > 0 && ydt != QMOE_DTYPE_FLOAT16) {
        unsigned char *ex = malloc((size_t)(T * K * H) * ys);
        int32_t *ri = malloc((size_t)(T * K) * sizeof *ri);
        for (int64_t t = 0; t < T; t++)
            for (int64_t j = 0; j < K; j++) {
                int64_t gt = t0 + t;
                expert_row(c->ids[gt * K + j], c->x + (size_t)(gt * H) * xs, c->x_scale[gt], c, ydt,
                           ex + (size_t)((t * K + j) * H) * ys);
                ri[t * K + j] = (int32_t)(t * K + j);
            }
        int64_t sx[2] = {T * K, H}, sr[1] = {T * K}, ss[2] = {T, K}, so[2] = {T, H};
        qmoe_tensor *tex = NULL, *tri = NULL, *tsc = NULL, *tout = NULL;
        qmoe_tensor_create(sx, 2, NULL, ydt, QMOE_FORMAT_ND, ex, &tex);
        qmoe_tensor_create(sr, 1, NULL, QMOE_DTYPE_INT32, QMOE_FORMAT_ND, ri, &tri);
        qmoe_tensor_create(ss, 2, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, c->weights + t0 * K,
                           &tsc);
        qmoe_tensor_create(so, 2, NULL, ydt, QMOE_FORMAT_ND, ref, &tout);
        qmoe_moe_options opt = QMOE_MOE_OPTIONS_INIT;
        opt.threads = 1;
        uint64_t ws = 0;
        qmoe_moe_executor *exe = NULL;
        qmoe_status fs = qmoe_moe_finalize_routing_workspace_size(tex, tri, NULL, NULL, NULL, tsc,
                                                                  NULL, 2, tout, &opt, &ws, &exe);
        void *wsp = malloc(ws + 1);
        if (fs == QMOE_OK) fs = qmoe_moe_finalize_routing(wsp, ws, exe, NULL);
        CHECK_MSG(fs == QMOE_OK, "%s: finalize reference: %s", name, qmoe_last_error());
        if (st == QMOE_OK && fs == QMOE_OK)
            CHECK_MSG(memcmp(out, ref, (size_t)(T * H) * ys) == 0,
                      "%s: rank %d: combine differs from the single-process finalize", name, me);
        qmoe_moe_executor_destroy(exe);
        free(wsp);
        qmoe_tensor_destroy(tex);
        qmoe_tensor_destroy(tri);
        qmoe_tensor_destroy(tsc);
        qmoe_tensor_destroy(tout);
        free(ex);
        free(ri);
    }
    free(out);
    free(ref);
    free(own_y);
    free(rx);
    free(rs);
    free(groups);
    free(exp_t);
    free(exp_e);
    free(exp_group);
    qmoe_ep_destroy(ep);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    static const struct {
        const char *name;
        int64_t E, H, K, N;
        qmoe_dtype x, y;
        int tok, route, map, extra, threads;
    } cases[] = {
        {"random int8", 16, 40, 4, 37, QMOE_DTYPE_INT8, QMOE_DTYPE_FLOAT32, TOK_EVEN, ROUTE_RANDOM,
         0, 0, 0},
        {"random bf16", 8, 24, 2, 29, QMOE_DTYPE_BFLOAT16, QMOE_DTYPE_BFLOAT16, TOK_RANDOM,
         ROUTE_RANDOM, 0, 3, 0},
        {"idle experts", 12, 16, 3, 21, QMOE_DTYPE_INT8, QMOE_DTYPE_BFLOAT16, TOK_EVEN,
         ROUTE_SPARSE, 0, 0, 0},
        {"tokens on one rank", 8, 32, 2, 19, QMOE_DTYPE_FLOAT32, QMOE_DTYPE_FLOAT32, TOK_ONE_RANK,
         ROUTE_RANDOM, 0, 1, 0},
        {"all to one rank", 8, 16, 2, 23, QMOE_DTYPE_INT8, QMOE_DTYPE_FLOAT32, TOK_RANDOM,
         ROUTE_ONE_RANK, 0, 0, 0},
        {"top-k spans ranks", 16, 24, 4, 17, QMOE_DTYPE_INT8, QMOE_DTYPE_FLOAT32, TOK_EVEN,
         ROUTE_SPAN, 0, 0, 0},
        {"explicit map", 10, 20, 3, 26, QMOE_DTYPE_INT8, QMOE_DTYPE_BFLOAT16, TOK_RANDOM,
         ROUTE_RANDOM, 1, 0, 0},
        {"fewer experts than ranks", 2, 8, 2, 9, QMOE_DTYPE_BFLOAT16, QMOE_DTYPE_FLOAT32, TOK_EVEN,
         ROUTE_RANDOM, 0, 0, 0},
        {"no tokens at all", 8, 8, 2, 0, QMOE_DTYPE_INT8, QMOE_DTYPE_FLOAT32, TOK_EVEN,
         ROUTE_RANDOM, 0, 0, 0},
        {"float16 rows back", 12, 20, 3, 25, QMOE_DTYPE_INT8, QMOE_DTYPE_FLOAT16, TOK_RANDOM,
         ROUTE_SPAN, 1, 2, 0},
        /* enough rows for combine's chunks (up to 16 per source) and its threads */
        {"chunks and threads", 3, 12, 2, 3000, QMOE_DTYPE_INT8, QMOE_DTYPE_FLOAT32, TOK_RANDOM,
         ROUTE_RANDOM, 0, 0, 3},
        {"chunks, bf16", 5, 8, 3, 1500, QMOE_DTYPE_BFLOAT16, QMOE_DTYPE_BFLOAT16, TOK_EVEN,
         ROUTE_SPAN, 1, 0, 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (uint64_t seed = 1; seed <= 3; seed++) {
            mpi_case c;
            build(&c, seed * 7919 + i, cases[i].E, cases[i].H, cases[i].K, cases[i].N, cases[i].x,
                  cases[i].tok, cases[i].route, cases[i].map);
            run_case(cases[i].name, &c, cases[i].y, cases[i].extra, cases[i].threads, seed == 2,
                     seed >= 2);
            mc_free(&c);
        }
    return mc_finish("test_mpi_dispatch", me, P);
}
