/*
 * The public face's contracts that are not numerics: options structs that grow (struct_size),
 * the structured error info (which argument, which rule) at validation sites of both phases, and
 * one version everywhere. Expected values come from the header's documentation, not from runs.
 */
#include <stdio.h>
#include <string.h>

#include "qmoe/qmoe.h"
#include "qmoe/runtime.h"
#include "test_runtime_case.h"

static qmoe_status plan_with(rt_case *c, const qmoe_grouped_matmul_swiglu_quant_options *o, qmoe_grouped_matmul_swiglu_quant_executor **ex)
{
    uint64_t wsb = 0;
    return qmoe_grouped_matmul_swiglu_quant_workspace_size(c->t[0], c->t[1], c->t[2], NULL, c->t[3], c->t[4],
                                                c->t[5], c->t[6], c->t[7], NULL, o, &wsb, ex);
}

/* The info the last call left: status, rule and argument name. */
static int info_is(qmoe_status st, qmoe_error_rule rule, const char *arg)
{
    const qmoe_error_info *e = qmoe_last_error_info();
    int ok = e && e->status == st && e->rule == rule && !strcmp(e->arg, arg) &&
             !strcmp(e->message, qmoe_last_error());
    if (!ok && e)
        fprintf(stderr, "  info: %s %s '%s' (%s), expected %s %s '%s'\n",
                qmoe_status_name(e->status), qmoe_error_rule_name(e->rule), e->arg, e->message,
                qmoe_status_name(st), qmoe_error_rule_name(rule), arg);
    return ok;
}

static void options_growth(rt_case *c)
{
    qmoe_grouped_matmul_swiglu_quant_executor *ex = NULL;
    /* a zeroed struct (struct_size 0) is the 0.2 layout with defaults */
    qmoe_grouped_matmul_swiglu_quant_options zero;
    memset(&zero, 0, sizeof zero);
    CHECK(plan_with(c, &zero, &ex) == QMOE_OK && ex);
    CHECK(qmoe_grouped_matmul_swiglu_quant_executor_kernel(ex) != QMOE_KERNEL_AUTO);
    qmoe_grouped_matmul_swiglu_quant_executor_destroy(ex), ex = NULL;
    CHECK(info_is(QMOE_OK, QMOE_RULE_NONE, ""));

    qmoe_grouped_matmul_swiglu_quant_options init = QMOE_GROUPED_MATMUL_SWIGLU_QUANT_OPTIONS_INIT, fn;
    memset(&fn, 0x7f, sizeof fn);
    qmoe_grouped_matmul_swiglu_quant_options_init(&fn);
    CHECK(memcmp(&init, &fn, sizeof fn) == 0 && init.struct_size == sizeof(qmoe_grouped_matmul_swiglu_quant_options));
    qmoe_grouped_matmul_swiglu_quant_options_init(NULL); /* a no-op */
    init.kernel = QMOE_KERNEL_REFERENCE;
    CHECK(plan_with(c, &init, &ex) == QMOE_OK && qmoe_grouped_matmul_swiglu_quant_executor_kernel(ex) == QMOE_KERNEL_REFERENCE);
    qmoe_grouped_matmul_swiglu_quant_executor_destroy(ex), ex = NULL;

    /* smaller than the 0.2 layout: refused, nothing allocated */
    qmoe_grouped_matmul_swiglu_quant_options small = QMOE_GROUPED_MATMUL_SWIGLU_QUANT_OPTIONS_INIT;
    small.struct_size = 8;
    CHECK(plan_with(c, &small, &ex) == QMOE_ERR_PARAM_INVALID && !ex);
    CHECK(info_is(QMOE_ERR_PARAM_INVALID, QMOE_RULE_OPTION, "options"));

    /* a newer caller's larger struct: its unknown tail zero -> accepted; set -> refused */
    struct {
        qmoe_grouped_matmul_swiglu_quant_options o;
        int future_field;
    } big;
    memset(&big, 0, sizeof big);
    big.o.struct_size = sizeof big;
    big.o.kernel = QMOE_KERNEL_REFERENCE;
    CHECK(plan_with(c, &big.o, &ex) == QMOE_OK && qmoe_grouped_matmul_swiglu_quant_executor_kernel(ex) == QMOE_KERNEL_REFERENCE);
    qmoe_grouped_matmul_swiglu_quant_executor_destroy(ex), ex = NULL;
    big.future_field = 1;
    CHECK(plan_with(c, &big.o, &ex) == QMOE_ERR_PARAM_INVALID && !ex);
    CHECK(info_is(QMOE_ERR_PARAM_INVALID, QMOE_RULE_OPTION, "options"));
    CHECK(strstr(qmoe_last_error(), "struct_size") != NULL);

    /* fields are read from the caller's struct as before */
    qmoe_grouped_matmul_swiglu_quant_options bad = QMOE_GROUPED_MATMUL_SWIGLU_QUANT_OPTIONS_INIT;
    bad.threads = -1;
    CHECK(plan_with(c, &bad, &ex) == QMOE_ERR_PARAM_INVALID && !ex);
    CHECK(info_is(QMOE_ERR_PARAM_INVALID, QMOE_RULE_OPTION, "options"));
    bad = (qmoe_grouped_matmul_swiglu_quant_options)QMOE_GROUPED_MATMUL_SWIGLU_QUANT_OPTIONS_INIT;
    bad.kernel = (qmoe_kernel)99;
    CHECK(plan_with(c, &bad, &ex) == QMOE_ERR_PARAM_INVALID && !ex);
    CHECK(info_is(QMOE_ERR_PARAM_INVALID, QMOE_RULE_UNSUPPORTED, "options"));

    qmoe_device_options dz, di = QMOE_DEVICE_OPTIONS_INIT;
    memset(&dz, 0, sizeof dz);
    dz.threads = di.threads = 1;
    CHECK(di.struct_size == sizeof(qmoe_device_options));
    qmoe_device *d1 = NULL, *d2 = NULL;
    CHECK(qmoe_device_create(&dz, &d1) == QMOE_OK && qmoe_device_create(&di, &d2) == QMOE_OK);
    CHECK(qmoe_device_threads(d1) == 1 && qmoe_device_threads(d2) == 1);
    qmoe_device_destroy(d1);
    qmoe_device_destroy(d2);
    /* device options grow the same way */
    struct {
        qmoe_device_options o;
        uint64_t future_field;
    } dbig;
    memset(&dbig, 0, sizeof dbig);
    dbig.o.struct_size = sizeof dbig;
    dbig.o.threads = 1;
    d1 = NULL;
    CHECK(qmoe_device_create(&dbig.o, &d1) == QMOE_OK && qmoe_device_threads(d1) == 1);
    qmoe_device_destroy(d1), d1 = NULL;
    dbig.future_field = 3;
    CHECK(qmoe_device_create(&dbig.o, &d1) == QMOE_ERR_PARAM_INVALID && !d1);
    CHECK(info_is(QMOE_ERR_PARAM_INVALID, QMOE_RULE_OPTION, "options"));
    di.struct_size = 4;
    CHECK(qmoe_device_create(&di, &d1) == QMOE_ERR_PARAM_INVALID && !d1);
    CHECK(info_is(QMOE_ERR_PARAM_INVALID, QMOE_RULE_OPTION, "options"));
}

/* One tensor replaced by a wrong one: the plan must name that argument and rule. */
static void error_sites(rt_case *c)
{
    qmoe_grouped_matmul_swiglu_quant_executor *ex = NULL;
    uint64_t wsb = 0;
    qmoe_grouped_matmul_swiglu_quant_options o = QMOE_GROUPED_MATMUL_SWIGLU_QUANT_OPTIONS_INIT;
    qmoe_tensor **t = c->t;

    CHECK(qmoe_grouped_matmul_swiglu_quant_workspace_size(NULL, t[1], t[2], NULL, t[3], t[4], t[5], t[6], t[7],
                                               NULL, &o, &wsb, &ex) == QMOE_ERR_PARAM_NULLPTR);
    CHECK(info_is(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, "x"));
    CHECK(qmoe_grouped_matmul_swiglu_quant_workspace_size(t[0], t[1], t[2], NULL, t[3], t[4], NULL, t[6], t[7],
                                               NULL, &o, &wsb, &ex) == QMOE_ERR_PARAM_NULLPTR);
    CHECK(info_is(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, "groupList"));
    CHECK(qmoe_grouped_matmul_swiglu_quant_workspace_size(t[0], t[1], t[2], NULL, t[3], t[4], t[5], t[6], t[7],
                                               NULL, &o, NULL, &ex) == QMOE_ERR_PARAM_NULLPTR);
    CHECK(info_is(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, "workspaceSize"));
    /* a reserved argument */
    CHECK(qmoe_grouped_matmul_swiglu_quant_workspace_size(t[0], t[1], t[2], t[0], t[3], t[4], t[5], t[6], t[7],
                                               NULL, &o, &wsb, &ex) == QMOE_ERR_PARAM_INVALID);
    CHECK(info_is(QMOE_ERR_PARAM_INVALID, QMOE_RULE_RESERVED, "offset"));

    int64_t M = c->M, K = c->K, N2 = c->N2;
    qmoe_tensor *w3 = NULL, *w_rank = NULL, *xs_f16 = NULL, *xs_short = NULL, *out_nz = NULL,
                *out_overlap = NULL;
    CHECK(!qmoe_tensor_create((int64_t[]){M, K, 1}, 3, NULL, QMOE_DTYPE_INT8, QMOE_FORMAT_ND, c->x, &w3));
    CHECK(!qmoe_tensor_create((int64_t[]){c->E, K}, 2, NULL, QMOE_DTYPE_INT8, QMOE_FORMAT_ND, c->w,
                              &w_rank));
    CHECK(!qmoe_tensor_create((int64_t[]){M}, 1, NULL, QMOE_DTYPE_FLOAT16, QMOE_FORMAT_ND, c->xs,
                              &xs_f16));
    CHECK(!qmoe_tensor_create((int64_t[]){M - 1}, 1, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, c->xs,
                              &xs_short));
    CHECK(!qmoe_tensor_create((int64_t[]){M, N2}, 2, NULL, QMOE_DTYPE_INT8, QMOE_FORMAT_FRACTAL_NZ,
                              c->out, &out_nz));
    CHECK(!qmoe_tensor_create((int64_t[]){M, N2}, 2, (int64_t[]){1, 1}, QMOE_DTYPE_INT8,
                              QMOE_FORMAT_ND, c->out, &out_overlap));
    const struct {
        int slot;
        qmoe_tensor *bad;
        qmoe_error_rule rule;
        const char *arg;
    } cases[] = {
        {0, w3, QMOE_RULE_RANK, "x"},
        {1, w_rank, QMOE_RULE_RANK, "weight"},
        {4, xs_f16, QMOE_RULE_DTYPE, "xScale"},
        {4, xs_short, QMOE_RULE_SHAPE, "xScale"},
        {6, out_nz, QMOE_RULE_FORMAT, "output"},
        {6, out_overlap, QMOE_RULE_OVERLAP, "output"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        qmoe_tensor *a[8];
        memcpy(a, t, sizeof a);
        a[cases[i].slot] = cases[i].bad;
        ex = NULL;
        CHECK_MSG(qmoe_grouped_matmul_swiglu_quant_workspace_size(a[0], a[1], a[2], NULL, a[3], a[4], a[5],
                                                       a[6], a[7], NULL, &o, &wsb, &ex) ==
                      QMOE_ERR_PARAM_INVALID && !ex,
                  "case %zu", i);
        CHECK_MSG(info_is(QMOE_ERR_PARAM_INVALID, cases[i].rule, cases[i].arg), "case %zu", i);
    }
    /* output on top of x: an input overlap */
    qmoe_tensor *out_on_x = NULL;
    CHECK(!qmoe_tensor_create((int64_t[]){M, N2}, 2, NULL, QMOE_DTYPE_INT8, QMOE_FORMAT_ND, c->x,
                              &out_on_x));
    CHECK(qmoe_grouped_matmul_swiglu_quant_workspace_size(t[0], t[1], t[2], NULL, t[3], t[4], t[5], out_on_x,
                                               t[7], NULL, &o, &wsb, &ex) == QMOE_ERR_PARAM_INVALID);
    CHECK(info_is(QMOE_ERR_PARAM_INVALID, QMOE_RULE_OVERLAP, "output"));

    /* phase two: groupList values, and the workspace */
    ex = NULL;
    CHECK(qmoe_grouped_matmul_swiglu_quant_workspace_size(t[0], t[1], t[2], NULL, t[3], t[4], t[5], t[6], t[7],
                                               NULL, &o, &wsb, &ex) == QMOE_OK);
    CHECK(info_is(QMOE_OK, QMOE_RULE_NONE, ""));
    int64_t saved = c->gl[0];
    c->gl[0] = -1;
    void *ws = wsb ? rt_alloc((size_t)wsb) : NULL;
    CHECK(qmoe_grouped_matmul_swiglu_quant(ws, wsb, ex, NULL) == QMOE_ERR_PARAM_INVALID);
    CHECK(info_is(QMOE_ERR_PARAM_INVALID, QMOE_RULE_VALUE, "groupList"));
    c->gl[0] = saved;
    CHECK(qmoe_grouped_matmul_swiglu_quant(NULL, wsb, NULL, NULL) == QMOE_ERR_PARAM_NULLPTR);
    CHECK(info_is(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, "executor"));
    CHECK(qmoe_grouped_matmul_swiglu_quant(ws, wsb, ex, NULL) == QMOE_OK);
    CHECK(info_is(QMOE_OK, QMOE_RULE_NONE, ""));
    free(ws);
    qmoe_grouped_matmul_swiglu_quant_executor_destroy(ex);
    qmoe_tensor *all[] = {w3, w_rank, xs_f16, xs_short, out_nz, out_overlap, out_on_x};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) qmoe_tensor_destroy(all[i]);

    CHECK(!strcmp(qmoe_error_rule_name(QMOE_RULE_SHAPE), "QMOE_RULE_SHAPE"));
    CHECK(!strcmp(qmoe_error_rule_name((qmoe_error_rule)999), "QMOE_RULE_UNKNOWN"));
}

static void one_version(void)
{
    char v[32];
    snprintf(v, sizeof v, "%d.%d.%d", QMOE_VERSION_MAJOR, QMOE_VERSION_MINOR, QMOE_VERSION_PATCH);
    CHECK(!strcmp(v, QMOE_VERSION_STRING) && !strcmp(qmoe_version(), QMOE_VERSION_STRING));
    CHECK(QMOE_VERSION == QMOE_VERSION_OF(QMOE_VERSION_MAJOR, QMOE_VERSION_MINOR,
                                          QMOE_VERSION_PATCH));
}

int main(void)
{
    (void)rt_expected; /* helpers of the shared case header this suite does not need */
    (void)rt_same_outputs;
    qt_rng r = {5};
    rt_case c;
    rt_case_init(&c, &r, 40, 32, 64, 3, 40, 0, 0, 0);
    options_growth(&c);
    error_sites(&c);
    one_version();
    rt_case_free(&c);
    return qt_finish("test_public_api");
}
