/* Bad input on one rank: every rank returns the same status, writes nothing, and the context
 * still works afterwards (no rank is left inside a collective). */
#include <stddef.h>
#include <stdio.h>

#include "mpi_case.h"

static int P, me;

#define E 8
#define H 4
#define K 2
#define T 3
#define CAP (P * T * K)

typedef struct bufs {
    int8_t x[T * H];
    float xs[T];
    int32_t ids[T * K];
    int8_t rx[4 * T * K * H];
    float rs[4 * T * K];
    int64_t groups[E], rows;
} bufs;

static void fill(bufs *b)
{
    for (int i = 0; i < T * H; i++) b->x[i] = (int8_t)(i - 5 + me);
    for (int t = 0; t < T; t++) b->xs[t] = 0.5f;
    for (int i = 0; i < T * K; i++) b->ids[i] = (int32_t)((i + me) % E);
    memset(b->rx, 0x5A, sizeof b->rx);
    memset(b->rs, 0x5A, sizeof b->rs);
    memset(b->groups, 0x5A, sizeof b->groups);
    b->rows = -7;
}

static int untouched(const bufs *b)
{
    bufs ref;
    memset(ref.rx, 0x5A, sizeof ref.rx);
    memset(ref.rs, 0x5A, sizeof ref.rs);
    memset(ref.groups, 0x5A, sizeof ref.groups);
    return !memcmp(b->rx, ref.rx, sizeof ref.rx) && !memcmp(b->rs, ref.rs, sizeof ref.rs) &&
           !memcmp(b->groups, ref.groups, sizeof ref.groups) && b->rows == -7;
}

static void agreed(const char *what, qmoe_status st, qmoe_status want)
{
    mc_agreed(what, st, want, me);
}

static qmoe_ep *make(int64_t hidden, const int32_t *map)
{
    qmoe_ep_config cfg = QMOE_EP_CONFIG_INIT;
    cfg.num_experts = E, cfg.hidden = hidden, cfg.top_k = K, cfg.x_dtype = QMOE_DTYPE_INT8;
    cfg.expert_rank = map;
    qmoe_ep *ep = NULL;
    qmoe_status st = qmoe_ep_create(MPI_COMM_WORLD, &cfg, &ep);
    CHECK_MSG(st == QMOE_OK, "create: %s", qmoe_mpi_last_error());
    return ep;
}

/* A good dispatch + combine: weights 1 and the identity expert give back sum_k x. */
static void good_round(qmoe_ep *ep, const char *after)
{
    bufs b;
    fill(&b);
    qmoe_status st = qmoe_moe_dispatch(ep, T, b.x, b.xs, b.ids, CAP, b.rx, b.rs, b.groups, &b.rows);
    agreed(after, st, QMOE_OK);
    float *y = malloc((size_t)(b.rows > 0 ? b.rows : 1) * H * sizeof *y), out[T * H];
    for (int64_t g = 0; g < b.rows * H; g++) y[g] = (float)b.rx[g] * b.rs[g / H];
    st = qmoe_moe_combine(ep, QMOE_DTYPE_FLOAT32, y, b.rows, NULL, QMOE_DTYPE_FLOAT32, out);
    agreed(after, st, QMOE_OK);
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++)
            CHECK_MSG(out[t * H + h] == (float)K * ((float)b.x[t * H + h] * 0.5f),
                      "%s: out[%d][%d]", after, t, h);
    free(y);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    const int last = P - 1;

    /* config differing between ranks: hidden, then the map */
    qmoe_ep_config cfg = QMOE_EP_CONFIG_INIT;
    cfg.num_experts = E, cfg.hidden = me == last && P > 1 ? H + 1 : H, cfg.top_k = K;
    qmoe_ep *ep = NULL;
    qmoe_status st = qmoe_ep_create(MPI_COMM_WORLD, &cfg, &ep);
    agreed("hidden differs", st, P > 1 ? QMOE_ERR_PARAM_INVALID : QMOE_OK);
    CHECK(P > 1 ? ep == NULL : ep != NULL);
    qmoe_ep_destroy(ep);
    int32_t map[E];
    for (int e = 0; e < E; e++) map[e] = (int32_t)(me == last && e == 0 && P > 1 ? 1 : 0);
    ep = NULL;
    cfg.hidden = H;
    cfg.expert_rank = map;
    st = qmoe_ep_create(MPI_COMM_WORLD, &cfg, &ep);
    agreed("map differs", st, P > 1 ? QMOE_ERR_PARAM_INVALID : QMOE_OK);
    qmoe_ep_destroy(ep);
    /* bad locally on one rank: a rank outside [0, P) in its map */
    for (int e = 0; e < E; e++) map[e] = (int32_t)(me == last && e == 3 ? P : 0);
    ep = NULL;
    st = qmoe_ep_create(MPI_COMM_WORLD, &cfg, &ep);
    agreed("map out of range", st, QMOE_ERR_PARAM_INVALID);
    CHECK(ep == NULL);
    /* one error channel: libqmoe's structured last error is this face's error too */
    CHECK(qmoe_last_error_info()->status == QMOE_ERR_PARAM_INVALID &&
          !strcmp(qmoe_last_error(), qmoe_mpi_last_error()) && qmoe_last_error()[0] != '\0');
    /* threads out of range on one rank; threads differing between ranks is fine */
    cfg.expert_rank = NULL;
    cfg.threads = me == last ? 4097 : 1;
    st = qmoe_ep_create(MPI_COMM_WORLD, &cfg, &ep);
    agreed("threads out of range", st, QMOE_ERR_PARAM_INVALID);
    CHECK(ep == NULL);
    cfg.threads = me == last ? -1 : 2;
    st = qmoe_ep_create(MPI_COMM_WORLD, &cfg, &ep);
    agreed("negative threads", st, QMOE_ERR_PARAM_INVALID);
    cfg.threads = me + 1;
    st = qmoe_ep_create(MPI_COMM_WORLD, &cfg, &ep);
    agreed("threads differ between ranks", st, QMOE_OK);
    if (ep) good_round(ep, "threads differ between ranks");
    qmoe_ep_destroy(ep);
    /* a caller built before `threads` (its struct ends before it; the garbage is not read) */
    cfg.threads = -5;
    cfg.struct_size = (uint32_t)offsetof(qmoe_ep_config, threads);
    ep = NULL;
    st = qmoe_ep_create(MPI_COMM_WORLD, &cfg, &ep);
    agreed("the first config layout", st, QMOE_OK);
    qmoe_ep_destroy(ep);
    cfg.struct_size = (uint32_t)offsetof(qmoe_ep_config, threads) - 1;
    ep = NULL;
    st = qmoe_ep_create(MPI_COMM_WORLD, &cfg, &ep);
    agreed("struct_size too small", st, QMOE_ERR_PARAM_INVALID);
    CHECK(ep == NULL);

    ep = make(H, NULL);
    if (!ep) return qt_finish("test_mpi_errors");
    bufs b;
    /* the experts' output buffer before any dispatch: refused, *buffer untouched */
    void *eb = &b;
    st = qmoe_ep_expert_rows(ep, QMOE_DTYPE_FLOAT32, &eb);
    agreed("expert rows before dispatch", st, QMOE_ERR_PARAM_INVALID);
    CHECK(eb == (void *)&b);
    /* expert id out of range on the last rank only */
    fill(&b);
    if (me == last) b.ids[T * K - 1] = E;
    st = qmoe_moe_dispatch(ep, T, b.x, b.xs, b.ids, CAP, b.rx, b.rs, b.groups, &b.rows);
    agreed("expert id out of range", st, QMOE_ERR_PARAM_INVALID);
    CHECK(untouched(&b));
    if (me != last && P > 1) CHECK(strstr(qmoe_mpi_last_error(), "another rank") != NULL);
    /* negative id on rank 0 */
    fill(&b);
    if (me == 0) b.ids[0] = -1;
    st = qmoe_moe_dispatch(ep, T, b.x, b.xs, b.ids, CAP, b.rx, b.rs, b.groups, &b.rows);
    agreed("negative expert id", st, QMOE_ERR_PARAM_INVALID);
    CHECK(untouched(&b));
    /* NULL on one rank, invalid on another: everyone gets the larger code */
    fill(&b);
    st = qmoe_moe_dispatch(ep, T, me == 0 ? NULL : b.x, b.xs, b.ids, CAP, b.rx, b.rs, b.groups,
                           &b.rows);
    agreed("NULL x on rank 0", st, QMOE_ERR_PARAM_NULLPTR);
    CHECK(untouched(&b));
    if (P > 1) {
        fill(&b);
        st = qmoe_moe_dispatch(ep, me == last ? -1 : T, me == 0 ? NULL : b.x, b.xs, b.ids, CAP,
                               b.rx, b.rs, b.groups, &b.rows);
        agreed("NULL and negative tokens", st, QMOE_ERR_PARAM_INVALID);
        CHECK(untouched(&b));
    }
    /* more rows arrive than one rank's capacity: all ids to expert 0 (rank 0), capacity 1 */
    fill(&b);
    for (int i = 0; i < T * K; i++) b.ids[i] = 0;
    st = qmoe_moe_dispatch(ep, T, b.x, b.xs, b.ids, me == 0 ? P * T * K - 1 : CAP, b.rx, b.rs,
                           b.groups, &b.rows);
    agreed("capacity too small on rank 0", st, QMOE_ERR_PARAM_INVALID);
    CHECK(untouched(&b));
    /* combine before any good dispatch */
    float out[T * H], y[4 * T * K * H] = {0};
    memset(out, 0x5A, sizeof out);
    st = qmoe_moe_combine(ep, QMOE_DTYPE_FLOAT32, y, 0, NULL, QMOE_DTYPE_FLOAT32, out);
    agreed("combine before dispatch", st, QMOE_ERR_PARAM_INVALID);

    good_round(ep, "after the errors");
    /* combine with the wrong row count on one rank, then a bad dtype on another */
    fill(&b);
    st = qmoe_moe_dispatch(ep, T, b.x, b.xs, b.ids, CAP, b.rx, b.rs, b.groups, &b.rows);
    agreed("dispatch", st, QMOE_OK);
    float snap[T * H];
    memset(out, 0x5A, sizeof out);
    memcpy(snap, out, sizeof out);
    st = qmoe_moe_combine(ep, QMOE_DTYPE_FLOAT32, y, me == last ? b.rows + 1 : b.rows, NULL,
                          QMOE_DTYPE_FLOAT32, out);
    agreed("combine rows differ", st, QMOE_ERR_PARAM_INVALID);
    CHECK(!memcmp(out, snap, sizeof out));
    st = qmoe_moe_combine(ep, me == 0 ? QMOE_DTYPE_INT8 : QMOE_DTYPE_FLOAT32, y, b.rows, NULL,
                          QMOE_DTYPE_FLOAT32, out);
    agreed("combine int8 y", st, QMOE_ERR_PARAM_INVALID);
    CHECK(!memcmp(out, snap, sizeof out));
    /* the experts' output buffer: NULL on rank 0, an int8 dtype on the last rank */
    st = qmoe_ep_expert_rows(ep, QMOE_DTYPE_FLOAT32, me == 0 ? NULL : &eb);
    agreed("expert rows into NULL", st, QMOE_ERR_PARAM_NULLPTR);
    CHECK(eb == (void *)&b);
    st = qmoe_ep_expert_rows(ep, me == last ? QMOE_DTYPE_INT8 : QMOE_DTYPE_FLOAT32, &eb);
    agreed("expert rows of int8", st, QMOE_ERR_PARAM_INVALID);
    CHECK(eb == (void *)&b);
    good_round(ep, "after the combine errors");
    qmoe_ep_destroy(ep);

    return mc_finish("test_mpi_errors", me, P);
}
