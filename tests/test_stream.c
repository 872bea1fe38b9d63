/*
 * Streams: two threads each enqueue many operators onto their own stream; the streams share a
 * device (stream A runs on device 0, stream B on the group {device 1, device 0}). Each thread
 * alternates two operators with different inputs that write the same outputs, destroying each
 * executor right after enqueueing it; in-order execution leaves the last one's result. Every
 * operator runs (device counters), synchronize waits for all of them, and destroying a stream
 * with work in flight waits for that work. groupList is read when the operator runs: an init
 * routing queued before the fused operator writes it (one device and a group of two), and a bad
 * one fails the operator at qmoe_stream_synchronize() with nothing written.
 */
#include <pthread.h>

#include "qmoe/moe_ops.h"
#include "test_runtime_case.h"

enum { OPS = 24 };

typedef struct lane {
    qmoe_stream *s;
    int devices;
    rt_case a, b; /* same shapes and outputs, different inputs */
    int8_t *ea, *eb;
    float *esa, *esb;
    qmoe_status enqueue_status;
} lane;

/* Points case b's output tensors at case a's outputs. */
static void share_outputs(rt_case *a, rt_case *b)
{
    qmoe_tensor_destroy(b->t[6]);
    qmoe_tensor_destroy(b->t[7]);
    CHECK(!qmoe_tensor_create((int64_t[]){a->M, a->N2}, 2, NULL, QMOE_DTYPE_INT8, QMOE_FORMAT_ND,
                              a->out, &b->t[6]));
    CHECK(!qmoe_tensor_create((int64_t[]){a->M}, 1, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND,
                              a->out_scale, &b->t[7]));
}

static void lane_init(lane *l, qt_rng *r, qmoe_stream *s, int devices)
{
    l->s = s;
    l->devices = devices;
    rt_case_init(&l->a, r, 160, 20, 96, 4, 150, 0, 0, 0);
    rt_case_init(&l->b, r, 160, 20, 96, 4, 150, 0, 0, 0);
    memcpy(l->b.gl, l->a.gl, 4 * sizeof(int64_t));
    size_t n = (size_t)(l->a.M * l->a.N2), ns = (size_t)l->a.M * sizeof(float);
    l->ea = rt_alloc(n), l->eb = rt_alloc(n), l->esa = rt_alloc(ns), l->esb = rt_alloc(ns);
    rt_expected(&l->a, QMOE_KERNEL_REFERENCE, l->ea, l->esa);
    rt_expected(&l->b, QMOE_KERNEL_REFERENCE, l->eb, l->esb);
    CHECK(memcmp(l->ea, l->eb, n) != 0); /* the two operators are told apart by their output */
    share_outputs(&l->a, &l->b);
    rt_case_reset_outputs(&l->a);
}

static void *lane_main(void *arg)
{
    lane *l = arg;
    for (int i = 0; i < OPS && !l->enqueue_status; i++) {
        rt_case *c = i % 2 ? &l->b : &l->a;
        qmoe_grouped_matmul_swiglu_quant_executor *ex = NULL;
        uint64_t wsb = 0;
        qmoe_status st = rt_case_plan(c, 2, l->devices, QMOE_KERNEL_REFERENCE, &ex, &wsb);
        if (!st && wsb) st = QMOE_ERR_INNER; /* these shapes need no workspace */
        if (!st) st = qmoe_grouped_matmul_swiglu_quant(NULL, 0, ex, l->s);
        qmoe_grouped_matmul_swiglu_quant_executor_destroy(ex);
        l->enqueue_status = st;
    }
    return NULL;
}

static void lane_free(lane *l)
{
    free(l->ea), free(l->eb), free(l->esa), free(l->esb);
    rt_case_free(&l->a);
    rt_case_free(&l->b);
}

/* A queued operator that keeps the stream busy for a while (a few milliseconds at least), so the
 * operators queued behind it have not run when their successors are submitted. Returns its
 * workspace, to free after synchronizing. */
static void *queue_busy_work(rt_case *h, qmoe_stream *s)
{
    qmoe_grouped_matmul_swiglu_quant_executor *ex = NULL;
    uint64_t wsb = 0;
    CHECK(rt_case_plan(h, 2, 1, QMOE_KERNEL_AUTO, &ex, &wsb) == QMOE_OK);
    void *ws = wsb ? rt_alloc((size_t)wsb) : NULL;
    CHECK(qmoe_grouped_matmul_swiglu_quant(ws, wsb, ex, s) == QMOE_OK);
    qmoe_grouped_matmul_swiglu_quant_executor_destroy(ex);
    return ws;
}

/* Init routing (top-1, cumsum tokens) queued before the fused operator writes its groupList: the
 * buffer holds garbage that would be refused (0x5A5A... is past M) until init routing has run.
 * The fused operator, planned for `devices` devices, must read the values init routing wrote. */
static void check_group_list_written_on_stream(qmoe_stream *s, int devices, uint64_t seed)
{
    enum { M = 96, K = 32, N = 64, E = 6, ROWS = 90, H = 8 };
    qt_rng r = {seed};
    rt_case c, busy;
    rt_case_init(&c, &r, M, K, N, E, ROWS, 0, 0, 0);
    rt_case_init(&busy, &r, 512, 1024, 1024, 2, 512, 0, 0, 0);
    int8_t *eo = rt_alloc((size_t)(M * N / 2));
    float *es = rt_alloc(M * sizeof(float));
    rt_expected(&c, QMOE_KERNEL_REFERENCE, eo, es);
    int64_t want[E];
    memcpy(want, c.gl, sizeof want);
    /* ROWS tokens, want[e] - want[e - 1] of them routed to expert e, in shuffled order */
    static int32_t ids[ROWS], row_idx[ROWS];
    static float x[ROWS * H], xe[ROWS * H];
    for (int64_t e = 0, t = 0; e < E; e++)
        for (; t < want[e]; t++) ids[t] = (int32_t)e;
    for (int64_t t = ROWS - 1; t > 0; t--) {
        int64_t u = qt_range(&r, 0, t);
        int32_t v = ids[t];
        ids[t] = ids[u];
        ids[u] = v;
    }
    for (int i = 0; i < ROWS * H; i++) x[i] = qt_uniform(&r, -1.0f, 1.0f);
    memset(c.gl, 0x5A, sizeof want);
    qmoe_tensor *tx = NULL, *tid = NULL, *txe = NULL, *tri = NULL;
    CHECK(!qmoe_tensor_create((int64_t[]){ROWS, H}, 2, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, x,
                              &tx));
    CHECK(!qmoe_tensor_create((int64_t[]){ROWS, 1}, 2, NULL, QMOE_DTYPE_INT32, QMOE_FORMAT_ND, ids,
                              &tid));
    CHECK(!qmoe_tensor_create((int64_t[]){ROWS, H}, 2, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, xe,
                              &txe));
    CHECK(!qmoe_tensor_create((int64_t[]){ROWS}, 1, NULL, QMOE_DTYPE_INT32, QMOE_FORMAT_ND, row_idx,
                              &tri));
    qmoe_moe_routing_attrs ra = {.expert_num = E, .tokens_mode = QMOE_MOE_TOKENS_CUMSUM,
                                 .quant_mode = QMOE_MOE_QUANT_NONE};
    qmoe_moe_executor *ir = NULL;
    uint64_t irb = 0, gmb = 0;
    CHECK_MSG(qmoe_moe_init_routing_workspace_size(tx, tid, NULL, NULL, &ra, txe, tri, c.t[5], NULL,
                                                   NULL, &irb, &ir) == QMOE_OK,
              "%s", qmoe_last_error());
    qmoe_grouped_matmul_swiglu_quant_executor *ex = NULL;
    CHECK(rt_case_plan(&c, 2, devices, QMOE_KERNEL_REFERENCE, &ex, &gmb) == QMOE_OK);
    void *irw = irb ? rt_alloc((size_t)irb) : NULL, *gmw = gmb ? rt_alloc((size_t)gmb) : NULL;

    void *busy_ws = queue_busy_work(&busy, s);
    CHECK(qmoe_moe_init_routing(irw, irb, ir, s) == QMOE_OK);
    CHECK_MSG(qmoe_grouped_matmul_swiglu_quant(gmw, gmb, ex, s) == QMOE_OK, "%s", qmoe_last_error());
    qmoe_grouped_matmul_swiglu_quant_executor_destroy(ex);
    CHECK_MSG(qmoe_stream_synchronize(s) == QMOE_OK, "%s", qmoe_last_error());
    CHECK(!memcmp(c.gl, want, sizeof want)); /* init routing wrote the cumsum */
    CHECK_MSG(rt_same_outputs(&c, eo, es), "%d devices: outputs differ from the reference",
              devices);

    free(busy_ws), free(irw), free(gmw), free(eo), free(es);
    qmoe_moe_executor_destroy(ir);
    qmoe_tensor_destroy(tx), qmoe_tensor_destroy(tid), qmoe_tensor_destroy(txe);
    qmoe_tensor_destroy(tri);
    rt_case_free(&busy);
    rt_case_free(&c);
}

/* A bad groupList (its last end past M) queued behind other work: the launch succeeds, the
 * stream's next synchronize reports QMOE_ERR_PARAM_INVALID naming groupList (message and
 * structured info), nothing was written, and the stream goes on; with a NULL stream the call
 * itself reports it. */
static void check_bad_group_list_at_synchronize(qmoe_stream *s, int devices, uint64_t seed)
{
    qt_rng r = {seed};
    rt_case c, busy;
    rt_case_init(&c, &r, 80, 32, 64, 4, 70, 0, 0, 0);
    rt_case_init(&busy, &r, 512, 1024, 1024, 2, 512, 0, 0, 0);
    int64_t good = c.gl[3];
    for (int sync = 0; sync < 2; sync++) {
        qmoe_stream *run_on = sync ? NULL : s;
        c.gl[3] = c.M + 1;
        qmoe_grouped_matmul_swiglu_quant_executor *ex = NULL;
        uint64_t wsb = 0;
        CHECK(rt_case_plan(&c, 2, devices, QMOE_KERNEL_AUTO, &ex, &wsb) == QMOE_OK);
        void *ws = wsb ? rt_alloc((size_t)wsb) : NULL;
        rt_case_reset_outputs(&c);
        void *busy_ws = sync ? NULL : queue_busy_work(&busy, s);
        qmoe_status st = qmoe_grouped_matmul_swiglu_quant(ws, wsb, ex, run_on);
        qmoe_grouped_matmul_swiglu_quant_executor_destroy(ex);
        if (!sync) {
            CHECK(st == QMOE_OK); /* queued: groupList is not read at the launch */
            st = qmoe_stream_synchronize(s);
        }
        const qmoe_error_info *info = qmoe_last_error_info();
        CHECK_MSG(st == QMOE_ERR_PARAM_INVALID && strstr(qmoe_last_error(), "groupList[3]"),
                  "%s, %d devices: %d %s", sync ? "synchronous" : "queued", devices, (int)st,
                  qmoe_last_error());
        CHECK(info->status == QMOE_ERR_PARAM_INVALID && info->rule == QMOE_RULE_VALUE &&
              !strcmp(info->arg, "groupList"));
        int untouched = 1;
        for (int64_t i = 0; i < c.M * c.N2; i++) untouched &= (uint8_t)c.out[i] == RT_SENTINEL;
        for (size_t i = 0; i < (size_t)c.M * sizeof(float); i++)
            untouched &= ((uint8_t *)c.out_scale)[i] == RT_SENTINEL;
        CHECK_MSG(untouched, "%d devices: a refused operator wrote its outputs", devices);
        CHECK(qmoe_stream_synchronize(s) == QMOE_OK); /* reported once */
        free(ws), free(busy_ws);
    }
    /* the stream runs the next operator as usual */
    c.gl[3] = good;
    int8_t *eo = rt_alloc((size_t)(c.M * c.N2));
    float *es = rt_alloc((size_t)c.M * sizeof(float));
    rt_expected(&c, QMOE_KERNEL_AUTO, eo, es);
    CHECK(rt_case_run(&c, 2, devices, QMOE_KERNEL_AUTO, s) == QMOE_OK);
    CHECK(rt_same_outputs(&c, eo, es));
    free(eo), free(es);
    rt_case_free(&busy);
    rt_case_free(&c);
}

int main(void)
{
    qmoe_device *d[2];
    qmoe_device_options o = {.threads = 2};
    CHECK(qmoe_device_create(&o, &d[0]) == QMOE_OK);
    CHECK(qmoe_device_create(&o, &d[1]) == QMOE_OK);
    qmoe_stream *sa, *sb;
    CHECK(qmoe_stream_create(d[0], &sa) == QMOE_OK);
    CHECK(qmoe_stream_create_group((qmoe_device *[]){d[1], d[0]}, 2, &sb) == QMOE_OK);
    qt_rng r = {314};
    lane la, lb;
    lane_init(&la, &r, sa, 1);
    lane_init(&lb, &r, sb, 2);

    for (int round = 0; round < 3; round++) {
        uint64_t ops0 = qmoe_device_ops_run(d[0]), ops1 = qmoe_device_ops_run(d[1]);
        la.enqueue_status = lb.enqueue_status = QMOE_OK;
        rt_case_reset_outputs(&la.a);
        rt_case_reset_outputs(&lb.a);
        pthread_t ta, tb;
        pthread_create(&ta, NULL, lane_main, &la);
        pthread_create(&tb, NULL, lane_main, &lb);
        pthread_join(ta, NULL);
        pthread_join(tb, NULL);
        CHECK(la.enqueue_status == QMOE_OK && lb.enqueue_status == QMOE_OK);
        if (round < 2) {
            CHECK(qmoe_stream_synchronize(sa) == QMOE_OK);
            CHECK(qmoe_stream_synchronize(sb) == QMOE_OK);
        } else {
            qmoe_stream_destroy(sa); /* waits for the work in flight */
            qmoe_stream_destroy(sb);
        }
        /* the last operator of each lane (odd index: b) wrote last */
        CHECK(rt_same_outputs(&la.a, la.eb, la.esb));
        CHECK(rt_same_outputs(&lb.a, lb.eb, lb.esb));
        CHECK(qmoe_device_ops_run(d[0]) - ops0 == 2 * OPS); /* both streams' operators */
        CHECK(qmoe_device_ops_run(d[1]) - ops1 == OPS);
    }
    /* an odd count ends on a: the order is what decides */
    CHECK(qmoe_stream_create(d[0], &sa) == QMOE_OK);
    la.s = sa;
    for (int i = 0; i < 7; i++) {
        rt_case *c = i % 2 ? &la.b : &la.a;
        qmoe_grouped_matmul_swiglu_quant_executor *ex = NULL;
        uint64_t wsb = 0;
        CHECK(rt_case_plan(c, 2, 1, QMOE_KERNEL_REFERENCE, &ex, &wsb) == QMOE_OK);
        CHECK(qmoe_grouped_matmul_swiglu_quant(NULL, 0, ex, sa) == QMOE_OK);
        qmoe_grouped_matmul_swiglu_quant_executor_destroy(ex);
    }
    CHECK(qmoe_stream_synchronize(sa) == QMOE_OK);
    CHECK(rt_same_outputs(&la.a, la.ea, la.esa));
    qmoe_stream_destroy(sa);

    lane_free(&la);
    lane_free(&lb);

    CHECK(qmoe_stream_create(d[0], &sa) == QMOE_OK);
    CHECK(qmoe_stream_create_group((qmoe_device *[]){d[1], d[0]}, 2, &sb) == QMOE_OK);
    check_group_list_written_on_stream(sa, 1, 41);
    check_group_list_written_on_stream(sb, 2, 42);
    check_bad_group_list_at_synchronize(sa, 1, 43);
    check_bad_group_list_at_synchronize(sb, 2, 44);
    qmoe_stream_destroy(sa);
    qmoe_stream_destroy(sb);
    qmoe_device_destroy(d[0]);
    qmoe_device_destroy(d[1]);
    return qt_finish("test_stream");
}
