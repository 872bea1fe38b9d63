/* GLU (SwiGLU) nodes, and llama.cpp's MoE FFN run as one: its graph builds, per layer,
 *   up = MUL_MAT_ID(up_exps, x, ids), gate = MUL_MAT_ID(gate_exps, x, ids),
 *   h = GLU swiglu(gate, up), out = MUL_MAT_ID(down_exps, h, ids)
 * (src/llama-graph.cpp, build_moe_ffn). Taken together, the routed rows are gathered, sorted and
 * quantized once for gate and up, both grouped matmuls write one [R, gate | up] block in the
 * sorted order, qmoe's SwiGLU and dynamic quant make the int8 rows the down projection reads
 * directly, and only the last node's output is written: the three intermediate tensors are not
 * (each has exactly one use, inside the pattern, which ggml's use counts say). Where gate and up
 * share one prepacked object — paired at load (buffer.c), or one ffn_gate_up_exps tensor, whose
 * graph is {gu = MUL_MAT_ID(gate_up_exps), two VIEWs of gu, GLU, down} — qmoe's fused
 * GroupedMatmulSwigluQuant makes the int8 rows in one operator instead. */
#include <stdlib.h>
#include <string.h>

#include "ggml-impl.h" /* ggml_node_has_n_uses: the graph's use counts, as ggml's own fusions read them */
#include "qmoe_ggml.h"

static int f32_rows(const struct ggml_tensor *t)
{
    return t && t->type == GGML_TYPE_F32 && ggml_is_contiguous_1(t);
}

/* ---- the pattern ---- */

static int taken_once(const struct ggml_cgraph *g, int i)
{
    return (g->nodes[i]->flags & GGML_TENSOR_FLAG_COMPUTE) && ggml_node_has_n_uses(g, i, 1);
}

/* The gate and up nodes of GLU node i (at i - 2, i - 1 in either order), NULL when not the pattern. */
static int match(const struct ggml_cgraph *g, int i, struct ggml_tensor **gate, struct ggml_tensor **up)
{
    if (i + 2 >= g->n_nodes) return 0;
    struct ggml_tensor *n0 = g->nodes[i], *n1 = g->nodes[i + 1], *h = g->nodes[i + 2];
    if (h->op != GGML_OP_GLU || !qg_supports_glu(h) || !h->src[1]) return 0;
    *gate = h->src[0];
    *up = h->src[1];
    if (!((*gate == n0 && *up == n1) || (*gate == n1 && *up == n0))) return 0;
    const struct ggml_tensor *ga = (*gate)->src[0], *ua = (*up)->src[0];
    return (*gate)->op == GGML_OP_MUL_MAT_ID && (*up)->op == GGML_OP_MUL_MAT_ID &&
           (*gate)->src[1] == (*up)->src[1] && (*gate)->src[2] == (*up)->src[2] &&
           ga->ne[1] == ua->ne[1] && ga->ne[2] == ua->ne[2] && ggml_are_same_shape(*gate, h) &&
           f32_rows(*gate) && f32_rows(*up) && qg_supports_matmul(*gate) && qg_supports_matmul(*up) &&
           taken_once(g, i) && taken_once(g, i + 1) && (h->flags & GGML_TENSOR_FLAG_COMPUTE);
}

/* The down node at i + 3 when it reads h with the same ids and experts, h used only there. */
static struct ggml_tensor *match_down(const struct ggml_cgraph *g, int i, const struct ggml_tensor *gate)
{
    if (i + 3 >= g->n_nodes) return NULL;
    struct ggml_tensor *d = g->nodes[i + 3], *h = g->nodes[i + 2];
    if (d->op != GGML_OP_MUL_MAT_ID || d->src[1] != h || d->src[2] != gate->src[2] ||
        d->src[0]->ne[0] != h->ne[0] || d->src[0]->ne[2] != gate->src[0]->ne[2] ||
        !qg_supports_matmul(d) || !taken_once(g, i + 2) || !(d->flags & GGML_TENSOR_FLAG_COMPUTE))
        return NULL;
    return d;
}

/* Row r = i + n_used t of the routed rows writes row (i, t) of dst (or of the MUL node after it). */
static void retarget(qg_acts *a, const struct ggml_tensor *dst, int64_t n_used, const struct ggml_tensor *mul)
{
    if (mul) {
        qg_rows_to_mul(a, mul);
        return;
    }
    for (int64_t r = 0; r < a->R; r++)
        a->rows[r].dst = (uint8_t *)dst->data + (r % n_used) * dst->nb[1] + (r / n_used) * dst->nb[2];
}

struct ggml_tensor *qg_mul_after(const struct ggml_cgraph *g, int j)
{
    if (j + 1 >= g->n_nodes) return NULL;
    struct ggml_tensor *d = g->nodes[j], *m = g->nodes[j + 1];
    const struct ggml_tensor *s = m->src[1];
    /* MUL(down, s [1, n_used, tokens]) that supports_op took (s a leaf: ggml's MUL_MAT_ID_FUSION) */
    if (d->op != GGML_OP_MUL_MAT_ID || m->op != GGML_OP_MUL || m->src[0] != d || !taken_once(g, j) ||
        !(m->flags & GGML_TENSOR_FLAG_COMPUTE) || m->type != GGML_TYPE_F32 || !ggml_are_same_shape(m, d) ||
        m->nb[0] != sizeof(float) || !s || s->type != GGML_TYPE_F32 || s->ne[0] != 1 || !ggml_can_repeat(s, d) ||
        d->ne[3] != 1 || !qg_supports_elementwise(m))
        return NULL;
    return m;
}

/* GroupedMatmulSwigluQuant by wg (gate | up in one object, I columns each), then the down
 * projection wd on its int8 rows, written to the down node's rows; the status. */
static enum ggml_status fused_down(qg_context *ctx, qg_acts *a, qg_weight *wg, int64_t I, qg_weight *wd,
                                   struct ggml_tensor *down, const struct ggml_tensor *mul)
{
    const int64_t R = a->R, Nd = wd->N, Npd = Nd + Nd % 2;
    /* h for every row at once (int8), then the down projection in passes of rows whose float
     * outputs fit QG_Y_BYTES, each scattered before the next */
    const int64_t P = qg_pass_rows(R, (size_t)Npd * sizeof(float));
    size_t nh = 0, ny = 0;
    int8_t *hq = qg_bytes3(R, I, 1, &nh) ? qg_scratch(ctx, QG_S_HQ, nh) : NULL;
    float *hs = hq ? qg_scratch(ctx, QG_S_HS, (size_t)R * sizeof(float)) : NULL;
    float *y = hs && qg_bytes3(P, Npd, sizeof(float), &ny) ? qg_scratch(ctx, QG_S_GU, ny) : NULL;
    if (!y) {
        qmoe_error_set(QMOE_ERR_INNER, QMOE_RULE_NONE, "", "out of memory for the MoE FFN's rows");
        return qg_failed(ggml_op_desc(down));
    }
    if (!qg_weight_swiglu_quant(ctx, wg, a, hq, hs))
        return qg_failed("GroupedMatmulSwigluQuant");
    retarget(a, down, down->src[2]->ne[0], mul);
    for (int64_t s0 = 0; s0 < R; s0 += P) {
        const int64_t n = R - s0 < P ? R - s0 : P;
        if (!qg_weight_run(ctx, wd, a, s0, n, hq + (size_t)s0 * (size_t)I, hs + s0, y, Npd))
            return qg_failed("the down projection");
        qg_scatter(ctx, a, s0, n, y, Npd, Nd);
    }
    return GGML_STATUS_SUCCESS;
}

/* A VIEW node of gu: its first I values of every row from value `at`, rows as gu's. */
static int view_of(const struct ggml_tensor *v, const struct ggml_tensor *gu, int64_t I, int64_t at)
{
    return v->op == GGML_OP_VIEW && v->src[0] == gu && v->view_src == gu &&
           v->view_offs == (size_t)at * sizeof(float) && v->ne[0] == I && v->ne[1] == gu->ne[1] &&
           v->ne[2] == gu->ne[2] && v->ne[3] == 1 && v->nb[1] == gu->nb[1] && v->nb[2] == gu->nb[2];
}

/* llama.cpp's merged gate | up: gu = MUL_MAT_ID(gate_up_exps, x, ids) at i, gate and up its two
 * views (either order), h = GLU swiglu(gate, up), down = MUL_MAT_ID(down_exps, h, ids), each
 * intermediate with no other reader; 5 nodes taken when it is, 0 when not. */
static int compute_merged(qg_context *ctx, struct ggml_cgraph *g, int i, enum ggml_status *st)
{
    if (i + 4 >= g->n_nodes) return 0;
    struct ggml_tensor *gu = g->nodes[i], *h = g->nodes[i + 3], *down = g->nodes[i + 4];
    const int64_t I = gu->ne[0] / 2;
    if (gu->op != GGML_OP_MUL_MAT_ID || gu->ne[0] % 2 || !f32_rows(gu) || !qg_supports_matmul(gu) ||
        h->op != GGML_OP_GLU || !qg_supports_glu(h) || !h->src[1] || !view_of(h->src[0], gu, I, 0) ||
        !view_of(h->src[1], gu, I, I) ||
        !((h->src[0] == g->nodes[i + 1] && h->src[1] == g->nodes[i + 2]) ||
          (h->src[0] == g->nodes[i + 2] && h->src[1] == g->nodes[i + 1])) ||
        !(gu->flags & GGML_TENSOR_FLAG_COMPUTE) || !ggml_node_has_n_uses(g, i, 2) ||
        ggml_node_get_use_count(g, i + 1) != 1 || ggml_node_get_use_count(g, i + 2) != 1 || /* views */
        (g->nodes[i + 1]->flags | g->nodes[i + 2]->flags) & GGML_TENSOR_FLAG_OUTPUT || !taken_once(g, i + 3) || down->op != GGML_OP_MUL_MAT_ID || down->src[1] != h ||
        down->src[2] != gu->src[2] || down->src[0]->ne[0] != I || down->src[0]->ne[2] != gu->src[0]->ne[2] ||
        !qg_supports_matmul(down) || !(down->flags & GGML_TENSOR_FLAG_COMPUTE))
        return 0;
    if (!qg_context_ready(ctx)) {
        *st = qg_failed("making the qmoe device");
        return 5;
    }
    qg_weight *w = qg_node_weight(gu), *wd = w ? qg_node_weight(down) : NULL;
    if (!wd) {
        *st = qg_failed(ggml_op_desc(gu));
        return 5;
    }
    if (qg_weight_fusable(w) != I) return 0; /* node by node (a min term, an unnamed int4 weight) */
    qg_acts a;
    if (!qg_acts_prepare(ctx, gu, w, &a)) {
        *st = qg_failed(ggml_op_desc(gu));
        return 5;
    }
    struct ggml_tensor *mul = qg_mul_after(g, i + 4); /* the experts' weighting, taken along */
    *st = a.R ? fused_down(ctx, &a, w, I, wd, down, mul) : GGML_STATUS_SUCCESS;
    return mul ? 6 : 5;
}

int qg_compute_moe_ffn(qg_context *ctx, struct ggml_cgraph *graph, int i, enum ggml_status *st)
{
    int merged = ctx->fuse ? compute_merged(ctx, graph, i, st) : 0;
    if (merged) return merged;
    struct ggml_tensor *gate, *up;
    if (!ctx->fuse || !match(graph, i, &gate, &up)) return 0;
    struct ggml_tensor *h = graph->nodes[i + 2], *down = match_down(graph, i, gate);
    struct ggml_tensor *mul = down ? qg_mul_after(graph, i + 3) : NULL; /* the experts' weighting */
    const int taken = down ? (mul ? 5 : 4) : 3;
    *st = GGML_STATUS_FAILED;
    if (!qg_context_ready(ctx)) {
        (void)qg_failed("making the qmoe device");
        return taken;
    }
    qg_weight *wg = qg_node_weight(gate), *wu = wg ? qg_node_weight(up) : NULL;
    qg_weight *wd = wu && down ? qg_node_weight(down) : NULL;
    /* the gate | up block below takes each weight's own columns: a half of a pair whose mate was
     * rewritten (it still holds both) runs node by node instead, which picks its columns out */
    const int64_t I0 = wg ? wg->N : 0;
    if (wu && !(wg->mate == wu) &&
        (qg_weight_col(wg) || qg_weight_col(wu) || qg_weight_out_cols(wg) != I0 + I0 % 2 ||
         qg_weight_out_cols(wu) != I0 + I0 % 2))
        return 0;
    qg_acts a;
    if (!wu || (down && !wd) || !qg_acts_prepare(ctx, gate, wg, &a)) {
        (void)qg_failed(ggml_op_desc(gate));
        return taken;
    }
    *st = GGML_STATUS_SUCCESS;
    if (a.R == 0) return taken;
    const int64_t I = wg->N, ld = 2 * (I + I % 2), R = a.R, n_used = gate->src[2]->ne[0];
    const int64_t Nd = down ? wd->N : 0, Npd = Nd + Nd % 2;
    /* gate and up paired at load (one object, gate columns first: qg_weight_build_pair) with
     * the down projection after them: qmoe's fused GroupedMatmulSwigluQuant makes h's int8 rows
     * and scales at once, no float block written */
    const int paired = wg->mate == wu && qg_weight_col(wg) == 0 && qg_weight_col(wu) == I;
    if (paired && down && qg_weight_fusable(wg) == I) {
        *st = fused_down(ctx, &a, wg, I, wd, down, mul);
        return taken;
    }
    /* In passes of sorted rows (a row's values do not depend on the rows beside it: the same bits
     * for any pass): one block for a pass's gate | up, then h, then (once h is int8) the down
     * projection's outputs: each is dead when the next is written, so they share the memory, and
     * the pass's rows are scattered before the next pass (at a 512-token prompt of
     * Qwen3-30B-A3B's shape all rows at once were 36 MiB, 71 before they shared it) */
    const size_t row_gu = (size_t)(ld + I) * sizeof(float) + 64, row_y = (size_t)Npd * sizeof(float);
    const int64_t P = qg_pass_rows(R, row_gu > row_y ? row_gu : row_y);
    size_t ngu = 0, nh = 0, ny = 0, nall = 0;
    int sized = qg_bytes3(P, ld, sizeof(float), &ngu) && qg_bytes3(P, I, sizeof(float), &nh) &&
                qg_bytes3(P, Npd, sizeof(float), &ny) && ngu <= SIZE_MAX - 64 - nh;
    ngu = (ngu + 63) & ~(size_t)63;
    if (sized) nall = ngu + nh > ny ? ngu + nh : ny;
    float *gu = sized ? qg_scratch(ctx, QG_S_GU, nall) : NULL;
    float *hv = gu ? (float *)(void *)((uint8_t *)gu + ngu) : NULL;
    int8_t *hq = down && hv ? qg_scratch(ctx, QG_S_HQ, nh / sizeof(float)) : NULL;
    float *hs = hq ? qg_scratch(ctx, QG_S_HS, (size_t)P * sizeof(float)) : NULL;
    if (!gu || !hv || (down && (!hq || !hs))) {
        qmoe_error_set(QMOE_ERR_INNER, QMOE_RULE_NONE, "", "out of memory for the MoE FFN's rows");
        *st = qg_failed(ggml_op_desc(h));
        return taken;
    }
    if (down) retarget(&a, down, n_used, mul);
    else retarget(&a, h, n_used, NULL);
    for (int64_t s0 = 0; s0 < R; s0 += P) {
        const int64_t n = R - s0 < P ? R - s0 : P;
        const int8_t *xq = a.xq + (size_t)s0 * (size_t)a.K;
        /* gate into columns [0, I), then up into [I, 2 I) (a pair: both from the one object at
         * once); an odd I's zero pad column of the gate (column I) is overwritten by up's first */
        if (!qg_weight_run(ctx, wg, &a, s0, n, xq, a.xs + s0, gu, ld) ||
            (!paired && !qg_weight_run(ctx, wu, &a, s0, n, xq, a.xs + s0, gu + I, ld))) {
            *st = qg_failed("grouped matmul (gate, up)");
            return taken;
        }
        qmoe_op *sw = qg_small_plan(ctx, 1, n, I, ld, qg_small_threads(ctx, n, I));
        void *sargs[2] = {gu, hv};
        if (!sw || !qg_run(ctx, sw, sargs, 2)) {
            *st = qg_failed("SwiGLU");
            return taken;
        }
        if (!down) {
            qg_scatter(ctx, &a, s0, n, hv, I, I);
            continue;
        }
        qmoe_op *qop = qg_small_plan(ctx, 0, n, I, I, qg_small_threads(ctx, n, I));
        void *qargs[4] = {hv, NULL, hq, hs};
        float *y = gu; /* gate, up and h are dead once h is quantized */
        if (!qop || !qg_run(ctx, qop, qargs, 4) || !qg_weight_run(ctx, wd, &a, s0, n, hq, hs, y, Npd)) {
            *st = qg_failed("the down projection");
            return taken;
        }
        qg_scatter(ctx, &a, s0, n, y, Npd, Nd);
    }
    return taken;
}
