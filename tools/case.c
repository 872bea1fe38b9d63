/* An operator case as arrays: loading from files and single-row views. */
#include "case.h"

#include <stdio.h>
#include <string.h>

const case_input_info case_inputs[CASE_INPUTS] = {
    [CASE_X] = {"--x", "x", "x.npy"},
    [CASE_WEIGHT] = {"--weight", "weight", "weight.npy"},
    [CASE_BIAS] = {"--bias", "bias", "bias.npy"},
    [CASE_WEIGHT_SCALE] = {"--weight-scale", "weightScale", "weight_scale.npy"},
    [CASE_X_SCALE] = {"--x-scale", "xScale", "x_scale.npy"},
    [CASE_GROUP_LIST] = {"--group-list", "groupList", "group_list.npy"},
};

void case_free(op_case *c)
{
    for (int i = 0; i < CASE_INPUTS; i++) npy_free(&c->in[i]);
}

int case_load_headers(op_case *c, char *err)
{
    char why[NPY_ERR_LEN];
    for (int i = 0; i < CASE_INPUTS; i++) {
        if (!c->source[i]) continue;
        if (npy_load_header(c->source[i], &c->in[i], why)) {
            snprintf(err, CASE_ERR_LEN, "%s: %s", c->source[i], why);
            return -1;
        }
    }
    return 0;
}

int case_load(op_case *c, char *err)
{
    char why[NPY_ERR_LEN];
    for (int i = 0; i < CASE_INPUTS; i++) {
        if (!c->source[i]) continue;
        if (npy_load(c->source[i], &c->in[i], why)) {
            snprintf(err, CASE_ERR_LEN, "%s: %s", c->source[i], why);
            return -1;
        }
    }
    return 0;
}

void case_group_ends(const op_case *c, int64_t *ends)
{
    const npy_array *gl = &c->in[CASE_GROUP_LIST];
    const int64_t *g = gl->data;
    int64_t sum = 0;
    for (int64_t e = 0; e < gl->count; e++) {
        sum = c->group_list_type == QMOE_GROUP_LIST_COUNT ? sum + g[e] : g[e];
        ends[e] = sum;
    }
}

/* A view of row m of a 1-D or 2-D array. */
static npy_array row_view(const npy_array *a, int64_t m)
{
    npy_array v = npy_view(a);
    size_t row_bytes = a->count ? a->nbytes / (size_t)a->shape[0] : 0;
    v.shape[0] = 1;
    v.count = a->ndim == 2 ? a->shape[1] : 1;
    v.nbytes = row_bytes;
    v.data = (char *)a->data + (size_t)m * row_bytes;
    return v;
}

int case_row(const op_case *c, int64_t m, int64_t e, op_case *row, char *err)
{
    char why[NPY_ERR_LEN];
    memset(row, 0, sizeof *row);
    for (int i = 0; i < CASE_INPUTS; i++) row->in[i] = npy_view(&c->in[i]);
    row->in[CASE_X] = row_view(&c->in[CASE_X], m);
    row->in[CASE_X_SCALE] = row_view(&c->in[CASE_X_SCALE], m);
    row->weight_int4_nd = c->weight_int4_nd;
    row->scale_bf16 = c->scale_bf16;
    row->group_list_type = QMOE_GROUP_LIST_CUMSUM;
    int64_t experts = e + 1;
    if (npy_alloc(&row->in[CASE_GROUP_LIST], NPY_INT64, 1, &experts, why)) {
        snprintf(err, CASE_ERR_LEN, "groupList of row %lld: %s", (long long)m, why);
        return -1;
    }
    ((int64_t *)row->in[CASE_GROUP_LIST].data)[e] = 1;
    return 0;
}
