/*
 * Hostile inputs at execution: groupList values that are decreasing, negative or past M (an
 * error with both outputs byte-identical to before), NaN/Inf in xScale, weightScale and bias (the
 * spec's defined result: that row's scale non-finite as computed, its output row 0, other rows
 * unchanged), zero-sized dimensions (success; nothing written, or the spec's defined zeros), and
 * outputs that share memory with inputs (refused at phase one: no in-place execution), and the
 * edge-row sweep of test_edge_rows.h (zero, underflowing, subnormal, non-finite and saturating
 * rows, huge K, the cases) through the public API: the spec's bits from every kernel.
 * Every case runs with every kernel this CPU offers.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qmoe/qmoe.h"
#include "qmoe/runtime.h"
#include "support/oracle.h"
#include "support/kernels.h"
#include "support/testlib.h"
#include "test_edge_rows.h"

enum { SENTINEL = 0x5A };

typedef struct hcase {
    int64_t M, K, N, E, Eg;
    int a8w4, count_list;
    int8_t *x;
    uint8_t *w; /* int8 ND [E,K,N], or int4 ND packed two per byte */
    float *ws, *bias, *xs;
    int64_t gl[8];
    int8_t *out;
    float *outs;
} hcase;

static void *zalloc(size_t n)
{
    void *p = calloc(n ? n : 1, 1);
    if (!p) abort();
    return p;
}

static hcase make_case(int64_t M, int64_t K, int64_t N, int64_t E, int a8w4, uint64_t seed)
{
    qt_rng r = {seed};
    hcase c = {.M = M, .K = K, .N = N, .E = E, .Eg = E, .a8w4 = a8w4};
    c.x = zalloc((size_t)(M * K));
    for (int64_t i = 0; i < M * K; i++) c.x[i] = (int8_t)qt_range(&r, -128, 127);
    int8_t *wl = zalloc((size_t)(E * K * N));
    for (int64_t i = 0; i < E * K * N; i++)
        wl[i] = (int8_t)(a8w4 ? qt_range(&r, -8, 7) : qt_range(&r, -128, 127));
    c.ws = zalloc((size_t)(E * N) * sizeof(float));
    for (int64_t i = 0; i < E * N; i++) c.ws[i] = qt_uniform(&r, 0.001f, 0.01f);
    if (a8w4) {
        c.w = zalloc((size_t)(E * K * N + 1) / 2);
        CHECK(qmoe_layout_int4_pack(wl, E * K * N, c.w) == QMOE_OK);
        c.bias = zalloc((size_t)(E * N) * sizeof(float));
        CHECK(qmoe_layout_weight_assist_matrix(wl, E, K, N, c.ws, 0, c.bias) == QMOE_OK);
    } else {
        c.w = zalloc((size_t)(E * K * N));
        memcpy(c.w, wl, (size_t)(E * K * N));
    }
    free(wl);
    c.xs = zalloc((size_t)M * sizeof(float));
    for (int64_t m = 0; m < M; m++) c.xs[m] = qt_uniform(&r, 0.01f, 0.05f);
    for (int64_t e = 0; e < E && e < 8; e++) c.gl[e] = M * (e + 1) / E; /* cumulative, ends at M */
    c.out = zalloc((size_t)(M * N / 2));
    c.outs = zalloc((size_t)M * sizeof(float));
    return c;
}

static void free_case(hcase *c)
{
    free(c->x);
    free(c->w);
    free(c->ws);
    free(c->bias);
    free(c->xs);
    free(c->out);
    free(c->outs);
}

static void fill_sentinel(hcase *c)
{
    memset(c->out, SENTINEL, (size_t)(c->M * c->N / 2));
    memset(c->outs, SENTINEL, (size_t)c->M * sizeof(float));
}

/* How run_case executes: on a stream (synchronized), and with a workspace smaller than asked. */
static qmoe_stream *run_stream;
static int short_workspace, null_workspace, expect_refusal;
static uint64_t last_size; /* the workspace size phase one asked for in the last run_case */

/* Plans and runs the case with `kernel`. *planned is 0 when this CPU lacks the kernel. */
static qmoe_status run_case(hcase *c, qmoe_kernel kernel, int *planned)
{
    qmoe_tensor *x, *w, *bias = NULL, *ws, *xs, *gl, *out, *outs;
    int64_t E = c->E, K = c->K, N = c->N, M = c->M;
    CHECK(qmoe_tensor_create((int64_t[]){M, K}, 2, NULL, QMOE_DTYPE_INT8, QMOE_FORMAT_ND, c->x, &x) == 0);
    CHECK(qmoe_tensor_create((int64_t[]){E, K, N}, 3, NULL, c->a8w4 ? QMOE_DTYPE_INT4 : QMOE_DTYPE_INT8,
                             QMOE_FORMAT_ND, c->w, &w) == 0);
    if (c->a8w4)
        CHECK(qmoe_tensor_create((int64_t[]){E, N}, 2, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND,
                                 c->bias, &bias) == 0);
    CHECK(qmoe_tensor_create((int64_t[]){E, N}, 2, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, c->ws, &ws) == 0);
    CHECK(qmoe_tensor_create((int64_t[]){M}, 1, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, c->xs, &xs) == 0);
    CHECK(qmoe_tensor_create((int64_t[]){c->Eg}, 1, NULL, QMOE_DTYPE_INT64, QMOE_FORMAT_ND, c->gl, &gl) == 0);
    CHECK(qmoe_tensor_create((int64_t[]){M, N / 2}, 2, NULL, QMOE_DTYPE_INT8, QMOE_FORMAT_ND, c->out, &out) == 0);
    CHECK(qmoe_tensor_create((int64_t[]){M}, 1, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, c->outs, &outs) == 0);
    qmoe_grouped_matmul_swiglu_quant_options o = {.kernel = kernel,
                         .group_list_type = c->count_list ? QMOE_GROUP_LIST_COUNT : QMOE_GROUP_LIST_CUMSUM};
    uint64_t size = 0;
    qmoe_grouped_matmul_swiglu_quant_executor *ex = NULL;
    qmoe_status st = qmoe_grouped_matmul_swiglu_quant_workspace_size(x, w, bias, NULL, ws, xs, gl, out, outs,
                                                          NULL, &o, &size, &ex);
    qmoe_tensor *all[] = {x, w, bias, ws, xs, gl, out, outs};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) qmoe_tensor_destroy(all[i]);
    *planned = st == QMOE_OK;
    if (st != QMOE_OK) {
        /* Only an instruction set this CPU lacks may be refused on a valid case. */
        CHECK_MSG(expect_refusal || (kernel != QMOE_KERNEL_REFERENCE &&
                                     kernel != QMOE_KERNEL_AUTO && st == QMOE_ERR_PARAM_INVALID),
                  "kernel %s: %s", qmoe_kernel_name(kernel), qmoe_last_error());
        return st;
    }
    void *work = size ? malloc(size) : NULL;
    last_size = size;
    uint64_t give = short_workspace && size ? size - 1 : size;
    st = qmoe_grouped_matmul_swiglu_quant(null_workspace ? NULL : work, give, ex, run_stream);
    if (st == QMOE_OK && run_stream) st = qmoe_stream_synchronize(run_stream);
    free(work);
    qmoe_grouped_matmul_swiglu_quant_executor_destroy(ex);
    return st;
}

/* AUTO and every kernel the library names (tests/support/testlib.h), filled by main. */
static qmoe_kernel kernels[QT_MAX_KERNELS];
static size_t NKERNELS;

static int untouched(const hcase *c)
{
    for (int64_t i = 0; i < c->M * c->N / 2; i++)
        if ((uint8_t)c->out[i] != SENTINEL) return 0;
    const uint8_t *s = (const uint8_t *)c->outs;
    for (size_t i = 0; i < (size_t)c->M * sizeof(float); i++)
        if (s[i] != SENTINEL) return 0;
    return 1;
}

/* A bad groupList: PARAM_INVALID, a message, and both outputs exactly as they were. */
static void expect_rejected(hcase *c, const char *what)
{
    for (size_t k = 0; k < NKERNELS; k++) {
        int planned;
        fill_sentinel(c);
        qmoe_status st = run_case(c, kernels[k], &planned);
        if (!planned) continue;
        CHECK_MSG(st == QMOE_ERR_PARAM_INVALID, "%s (%s): status %d", what,
                  qmoe_kernel_name(kernels[k]), (int)st);
        CHECK_MSG(qmoe_last_error()[0] != '\0', "%s: no message", what);
        CHECK_MSG(untouched(c), "%s (%s): outputs were written", what, qmoe_kernel_name(kernels[k]));
    }
}

static void test_group_list(void)
{
    hcase c = make_case(12, 16, 8, 4, 0, 1);
    const int64_t saved[4] = {c.gl[0], c.gl[1], c.gl[2], c.gl[3]};
#define SET_GL(a, b, cc, d) (c.gl[0] = (a), c.gl[1] = (b), c.gl[2] = (cc), c.gl[3] = (d))
    SET_GL(3, 6, 5, 12);
    expect_rejected(&c, "cumsum decreasing");
    SET_GL(3, 6, 9, 2);
    expect_rejected(&c, "cumsum decreasing at the end");
    SET_GL(-1, 6, 9, 12);
    expect_rejected(&c, "cumsum negative first");
    SET_GL(3, 6, 9, INT64_MIN);
    expect_rejected(&c, "cumsum INT64_MIN");
    SET_GL(3, 6, 9, 13);
    expect_rejected(&c, "cumsum past M by one");
    SET_GL(3, 6, INT64_MAX, INT64_MAX);
    expect_rejected(&c, "cumsum INT64_MAX");
    c.count_list = 1;
    SET_GL(3, 3, 3, 4);
    expect_rejected(&c, "counts adding up past M");
    SET_GL(3, -1, 3, 3);
    expect_rejected(&c, "count negative");
    SET_GL(INT64_MAX, INT64_MAX, 0, 0);
    expect_rejected(&c, "counts overflowing int64");
    SET_GL(0, 0, 0, 13);
    expect_rejected(&c, "last count past M");
    c.count_list = 0;
    SET_GL(saved[0], saved[1], saved[2], saved[3]);
    /* The same executor-free path accepts the valid list and writes every row. */
    int planned;
    fill_sentinel(&c);
    CHECK(run_case(&c, QMOE_KERNEL_REFERENCE, &planned) == QMOE_OK);
    CHECK(!untouched(&c));
#undef SET_GL
    free_case(&c);
}

/* Runs the case with `kernel` into fresh sentinel-filled outputs; copies them out. */
static int run_into(hcase *c, qmoe_kernel kernel, int8_t *out, float *outs)
{
    int planned;
    fill_sentinel(c);
    qmoe_status st = run_case(c, kernel, &planned);
    if (!planned) return 0;
    CHECK_MSG(st == QMOE_OK, "kernel %s: %s", qmoe_kernel_name(kernel), qmoe_last_error());
    memcpy(out, c->out, (size_t)(c->M * c->N / 2));
    memcpy(outs, c->outs, (size_t)c->M * sizeof(float));
    return 1;
}

/* Expert of row m under the case's (cumulative) groupList. */
static int64_t expert_of(const hcase *c, int64_t m)
{
    int64_t e = 0;
    while (e < c->Eg && m >= c->gl[e]) e++;
    return e;
}

/* Poisons one value with `bad`, then checks: poisoned rows get a non-finite scale (NaN where
 * `nan_expected`) and an all-zero output row; every other row is bit-identical to the clean run. */
static void check_poison(hcase *c, float *where, float bad, const char *what, int row_only,
                         int64_t row_or_expert, int nan_expected)
{
    size_t ob = (size_t)(c->M * c->N / 2), sb = (size_t)c->M * sizeof(float);
    int8_t *clean = zalloc(ob), *got = zalloc(ob);
    float *clean_s = zalloc(sb), *got_s = zalloc(sb);
    for (size_t k = 0; k < NKERNELS; k++) {
        if (!run_into(c, kernels[k], clean, clean_s)) continue;
        float keep = *where;
        *where = bad;
        run_into(c, kernels[k], got, got_s);
        *where = keep;
        for (int64_t m = 0; m < c->M; m++) {
            int poisoned = row_only ? m == row_or_expert : expert_of(c, m) == row_or_expert;
            if (!poisoned) {
                CHECK_MSG(!memcmp(&got_s[m], &clean_s[m], sizeof(float)) &&
                              !memcmp(got + m * c->N / 2, clean + m * c->N / 2, (size_t)c->N / 2),
                          "%s (%s): clean row %lld changed", what, qmoe_kernel_name(kernels[k]),
                          (long long)m);
                continue;
            }
            CHECK_MSG(nan_expected ? isnan(got_s[m]) : !isfinite(got_s[m]),
                      "%s (%s): row %lld scale %g", what, qmoe_kernel_name(kernels[k]),
                      (long long)m, (double)got_s[m]);
            int zeros = 1;
            for (int64_t j = 0; j < c->N / 2; j++) zeros &= got[m * c->N / 2 + j] == 0;
            CHECK_MSG(zeros, "%s (%s): row %lld output not zero", what,
                      qmoe_kernel_name(kernels[k]), (long long)m);
        }
    }
    free(clean);
    free(got);
    free(clean_s);
    free(got_s);
}

static void test_non_finite(void)
{
    for (int a8w4 = 0; a8w4 <= 1; a8w4++) {
        hcase c = make_case(9, 32, 16, 3, a8w4, 7 + (uint64_t)a8w4); /* experts own rows 0-2, 3-5, 6-8 */
        check_poison(&c, &c.xs[4], NAN, "xScale NaN", 1, 4, 1);
        check_poison(&c, &c.xs[4], INFINITY, "xScale +Inf", 1, 4, 0);
        check_poison(&c, &c.xs[0], -INFINITY, "xScale -Inf", 1, 0, 0);
        /* column 2 is activated, column N/2 + 2 is its gate: both reach every row of the expert */
        check_poison(&c, &c.ws[1 * c.N + 2], NAN, "weightScale NaN (activated half)", 0, 1, 1);
        check_poison(&c, &c.ws[2 * c.N + c.N / 2 + 2], NAN, "weightScale NaN (gate half)", 0, 2, 1);
        check_poison(&c, &c.ws[0 * c.N + 3], INFINITY, "weightScale +Inf", 0, 0, 0);
        if (a8w4) {
            check_poison(&c, &c.bias[1 * c.N + 5], NAN, "bias NaN", 0, 1, 1);
            check_poison(&c, &c.bias[2 * c.N + c.N / 2], -INFINITY, "bias -Inf", 0, 2, 0);
        }
        free_case(&c);
    }
}

/* Zero-sized dimensions: success; rows not owned stay untouched; owned rows of an empty
 * reduction (K = 0) or an empty output row (N = 0) get the defined scale 0 and zeros. */
static void test_zero_sizes(void)
{
    struct {
        int64_t M, K, N, E, Eg;
        const char *what;
    } cases[] = {
        {0, 16, 8, 2, 2, "M = 0"},  {5, 0, 8, 2, 2, "K = 0"},  {5, 16, 0, 2, 2, "N = 0"},
        {5, 16, 8, 0, 0, "E = 0"},  {5, 16, 8, 3, 0, "E' = 0"}, {0, 0, 0, 0, 0, "all zero"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int a8w4 = 0; a8w4 <= 1; a8w4++) {
            hcase c = make_case(cases[i].M, cases[i].K, cases[i].N, cases[i].E, a8w4, 100 + i);
            c.Eg = cases[i].Eg;
            int64_t owned = c.Eg ? c.gl[c.Eg - 1] : 0;
            for (size_t k = 0; k < NKERNELS; k++) {
                int planned;
                fill_sentinel(&c);
                qmoe_status st = run_case(&c, kernels[k], &planned);
                if (!planned) continue;
                CHECK_MSG(st == QMOE_OK, "%s%s (%s): %s", cases[i].what, a8w4 ? " A8W4" : "",
                          qmoe_kernel_name(kernels[k]), qmoe_last_error());
                for (int64_t m = 0; m < c.M; m++) {
                    uint32_t bits;
                    memcpy(&bits, &c.outs[m], sizeof bits);
                    if (m >= owned) {
                        CHECK_MSG(bits == 0x5A5A5A5Au, "%s: row %lld scale written", cases[i].what,
                                  (long long)m);
                        continue;
                    }
                    /* owned rows only exist here with K = 0 or N = 0: S is empty or all zero */
                    CHECK_MSG(c.outs[m] == 0.0f, "%s (%s): row %lld scale %g, expected 0",
                              cases[i].what, qmoe_kernel_name(kernels[k]), (long long)m,
                              (double)c.outs[m]);
                }
                for (int64_t m = 0; m < c.M; m++)
                    for (int64_t j = 0; j < c.N / 2; j++) {
                        int8_t v = c.out[m * c.N / 2 + j];
                        CHECK(m < owned ? v == 0 : (uint8_t)v == SENTINEL);
                    }
            }
            free_case(&c);
        }
}

/* The same groupList checks when the operator goes to a stream: the launch succeeds, the
 * operator reads groupList when it runs and the synchronize in run_case reports the error,
 * nothing written; and a workspace smaller than phase one asked for, or NULL. */
static void test_stream_and_workspace(void)
{
    qmoe_device *dev = NULL;
    qmoe_device_options o = {.threads = 2};
    CHECK(qmoe_device_create(&o, &dev) == QMOE_OK);
    CHECK(qmoe_stream_create(dev, &run_stream) == QMOE_OK);
    test_group_list();
    CHECK(qmoe_stream_synchronize(run_stream) == QMOE_OK); /* each error was reported once */
    qmoe_stream_destroy(run_stream);
    qmoe_device_destroy(dev);
    run_stream = NULL;

    hcase c = make_case(12, 16, 64, 2, 0, 3);
    int planned;
    short_workspace = 1;
    fill_sentinel(&c);
    qmoe_status st = run_case(&c, QMOE_KERNEL_REFERENCE, &planned);
    short_workspace = 0;
    /* A zero-byte workspace cannot be short; otherwise one byte short is refused. */
    CHECK(last_size ? st == QMOE_ERR_PARAM_INVALID && untouched(&c) : st == QMOE_OK);
    null_workspace = 1;
    fill_sentinel(&c);
    st = run_case(&c, QMOE_KERNEL_REFERENCE, &planned);
    null_workspace = 0;
    CHECK(last_size ? st == QMOE_ERR_PARAM_NULLPTR && untouched(&c) : st == QMOE_OK);
    CHECK(qmoe_grouped_matmul_swiglu_quant(NULL, 0, NULL, NULL) == QMOE_ERR_PARAM_NULLPTR);
    free_case(&c);
}

/* Outputs aliasing inputs: phase one refuses (PARAM_INVALID) and nothing is written; outputs
 * placed right after an input in one allocation (adjacent, not overlapping) are fine. */
static void test_aliasing(void)
{
    hcase c = make_case(12, 16, 32, 2, 0, 4); /* x [12,16] and output [12,16]: same byte size */
    int8_t *own_out = c.out;
    float *own_outs = c.outs;
    int8_t *x_before = zalloc((size_t)(c.M * c.K));
    float *xs_before = zalloc((size_t)c.M * sizeof(float));
    memcpy(x_before, c.x, (size_t)(c.M * c.K));
    memcpy(xs_before, c.xs, (size_t)c.M * sizeof(float));
    int planned;

    expect_refusal = 1;
    c.out = c.x + 1; /* output overlaps x */
    CHECK(run_case(&c, QMOE_KERNEL_REFERENCE, &planned) == QMOE_ERR_PARAM_INVALID);
    CHECK(strstr(qmoe_last_error(), "overlaps x") != NULL);
    c.out = own_out;
    c.outs = c.xs; /* outputScale is xScale */
    CHECK(run_case(&c, QMOE_KERNEL_REFERENCE, &planned) == QMOE_ERR_PARAM_INVALID);
    CHECK(strstr(qmoe_last_error(), "xScale") != NULL);
    c.outs = (float *)(void *)c.out; /* the two outputs overlap each other */
    CHECK(run_case(&c, QMOE_KERNEL_REFERENCE, &planned) == QMOE_ERR_PARAM_INVALID);
    c.outs = own_outs;
    expect_refusal = 0;
    CHECK(memcmp(x_before, c.x, (size_t)(c.M * c.K)) == 0);
    CHECK(memcmp(xs_before, c.xs, (size_t)c.M * sizeof(float)) == 0);

    /* Adjacent halves of one buffer do not overlap: accepted and computed. */
    size_t xbytes = (size_t)(c.M * c.K), obytes = (size_t)(c.M * c.N / 2);
    int8_t *both = zalloc(xbytes + obytes);
    memcpy(both, c.x, xbytes);
    int8_t *own_x = c.x;
    c.x = both;
    c.out = both + xbytes;
    CHECK(run_case(&c, QMOE_KERNEL_REFERENCE, &planned) == QMOE_OK);
    CHECK(memcmp(both, x_before, xbytes) == 0);
    c.x = own_x;
    c.out = own_out;
    free(both);
    free(x_before);
    free(xs_before);
    free_case(&c);
}

/* The edge rows through the public two-phase API with ND weights: every kernel this CPU runs
 * (AUTO included) writes exactly the spec's output and outputScale bits. */
static void test_edge_rows(void)
{
    edge_case c;
    int64_t rows = 0;
    for (int id = 0; edge_make(&c, id); id++) {
        int64_t M = c.M, K = c.K, N = c.N, E = c.E, N2 = N / 2;
        oracle_wlayout lay = c.a8w4 ? ORACLE_W_INT4_ND : ORACLE_W_INT8_ND;
        uint8_t *w = zalloc((size_t)oracle_weight_bytes(lay, E, K, N));
        oracle_pack_weight(lay, c.w, E, K, N, w);
        int8_t *out = zalloc((size_t)(M * N2));
        float *outs = zalloc(sizeof(float) * (size_t)M);
        qmoe_tensor *tx, *tw, *tb = NULL, *tws, *txs, *tgl, *tout, *tos;
        CHECK(qmoe_tensor_create((int64_t[]){M, K}, 2, NULL, QMOE_DTYPE_INT8, QMOE_FORMAT_ND, c.x, &tx) == 0);
        CHECK(qmoe_tensor_create((int64_t[]){E, K, N}, 3, NULL, c.a8w4 ? QMOE_DTYPE_INT4 : QMOE_DTYPE_INT8,
                                 QMOE_FORMAT_ND, w, &tw) == 0);
        if (c.a8w4)
            CHECK(qmoe_tensor_create((int64_t[]){E, N}, 2, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND,
                                     c.bias, &tb) == 0);
        if (c.G)
            CHECK(qmoe_tensor_create((int64_t[]){E, c.G, N}, 3, NULL, QMOE_DTYPE_FLOAT32,
                                     QMOE_FORMAT_ND, c.ws, &tws) == 0);
        else
            CHECK(qmoe_tensor_create((int64_t[]){E, N}, 2, NULL, QMOE_DTYPE_FLOAT32,
                                     QMOE_FORMAT_ND, c.ws, &tws) == 0);
        CHECK(qmoe_tensor_create((int64_t[]){M}, 1, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, c.xs, &txs) == 0);
        CHECK(qmoe_tensor_create((int64_t[]){E}, 1, NULL, QMOE_DTYPE_INT64, QMOE_FORMAT_ND, c.ends, &tgl) == 0);
        CHECK(qmoe_tensor_create((int64_t[]){M, N2}, 2, NULL, QMOE_DTYPE_INT8, QMOE_FORMAT_ND, out, &tout) == 0);
        CHECK(qmoe_tensor_create((int64_t[]){M}, 1, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, outs, &tos) == 0);
        for (size_t k = 0; k < NKERNELS; k++) {
            qmoe_grouped_matmul_swiglu_quant_options o = {.kernel = kernels[k], .threads = 2};
            uint64_t size = 0;
            qmoe_grouped_matmul_swiglu_quant_executor *ex = NULL;
            qmoe_status st = qmoe_grouped_matmul_swiglu_quant_workspace_size(tx, tw, tb, NULL, tws, txs, tgl,
                                                                  tout, tos, NULL, &o, &size, &ex);
            if (st != QMOE_OK) {
                CHECK_MSG(kernels[k] != QMOE_KERNEL_REFERENCE && kernels[k] != QMOE_KERNEL_AUTO &&
                              st == QMOE_ERR_PARAM_INVALID,
                          "%s (%s): %s", c.name, qmoe_kernel_name(kernels[k]), qmoe_last_error());
                if (id == 0) printf("test_hostile: edge rows: %s skipped: %s\n",
                                    qmoe_kernel_name(kernels[k]), qmoe_last_error());
                continue;
            }
            memset(out, SENTINEL, (size_t)(M * N2));
            memset(outs, SENTINEL, sizeof(float) * (size_t)M);
            void *work = size ? malloc(size) : NULL;
            st = qmoe_grouped_matmul_swiglu_quant(work, size, ex, NULL);
            CHECK_MSG(st == QMOE_OK, "%s (%s): %s", c.name, qmoe_kernel_name(kernels[k]),
                      qmoe_last_error());
            int64_t bad = 0;
            for (int64_t m = 0; m < M; m++) {
                int same = !memcmp(&outs[m], &c.scale[m], sizeof(float)) &&
                           !memcmp(out + m * N2, c.q + m * N2, (size_t)N2);
                if (!same && bad++ == 0)
                    fprintf(stderr, "%s (%s): row %lld: scale %a, expected %a\n", c.name,
                            qmoe_kernel_name(kernels[k]), (long long)m, (double)outs[m],
                            (double)c.scale[m]);
            }
            CHECK_MSG(bad == 0, "%s (%s): %lld rows differ from the spec's bits", c.name,
                      qmoe_kernel_name(kernels[k]), (long long)bad);
            free(work);
            qmoe_grouped_matmul_swiglu_quant_executor_destroy(ex);
        }
        qmoe_tensor *all[] = {tx, tw, tb, tws, txs, tgl, tout, tos};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) qmoe_tensor_destroy(all[i]);
        rows += M;
        free(w), free(out), free(outs);
        edge_free(&c);
    }
    printf("test_hostile: edge rows: %lld rows per kernel, spec bits from every kernel run\n",
           (long long)rows);
}

int main(void)
{
    int ids[QT_MAX_KERNELS];
    int n = qt_kernels(QMOE_KERNEL_REFERENCE, ids, QT_MAX_KERNELS - 1);
    kernels[NKERNELS++] = QMOE_KERNEL_AUTO;
    for (int i = 0; i < n; i++) kernels[NKERNELS++] = (qmoe_kernel)ids[i];
    test_edge_rows();
    test_aliasing();
    test_group_list();
    test_stream_and_workspace();
    test_non_finite();
    test_zero_sizes();
    return qt_finish("test_hostile");
}
