/* Float checkpoint weights -> the operators' quantized weights, scales and assist matrix
 * (include/qmoe/quantize.h; the scheme is docs/moe-layer.md). */
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "core/halfconv.h"
#include "core/options.h"
#include "qmoe/runtime.h"
#include "core/status.h"
#include "qmoe/quantize.h"

/* The scales are compared bit for bit with a NumPy simulation: no fused multiply-adds. */
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

enum { TILE = 64, CLIP_STEPS = 50 };

/* Everything a worker needs; validated before any worker starts. */
typedef struct job {
    const void *const *src_a, *const *src_b; /* rows n < split from a, the others from b */
    const char *name_a, *name_b;
    int64_t split;
    qmoe_dtype dtype;
    int64_t E, K, N, G, gk; /* gk: inputs per group (K when per channel) */
    int a8w4, nd, clip;
    int64_t tiles, items;   /* tiles per expert; items = E * tiles */
    float *scales;          /* [E, G or 1, N]: pass one's result */
    void *weight;
    float *scale_out, *bias_out;
    /* per item, pass one: the first non-finite weight (row, column) or -1 */
    int64_t *bad_row, *bad_col;
    int fail; /* a helper failed in pass two (cannot happen for validated input) */
} job;

static const void *row_ptr(const job *j, int64_t e, int64_t n)
{
    size_t item = j->dtype == QMOE_DTYPE_FLOAT32 ? 4 : 2;
    const char *base = n < j->split ? j->src_a[e] : j->src_b[e];
    int64_t r = n < j->split ? n : n - j->split;
    return base + (size_t)r * (size_t)j->K * item;
}

static void widen(const job *j, const void *src, int64_t count, float *out)
{
    if (j->dtype == QMOE_DTYPE_FLOAT32) {
        memcpy(out, src, (size_t)count * sizeof(float));
        return;
    }
    const uint16_t *h = src;
    for (int64_t i = 0; i < count; i++)
        out[i] = j->dtype == QMOE_DTYPE_BFLOAT16 ? qmoe_bf16_to_f32(h[i]) : qmoe_f16_to_f32(h[i]);
}

/* round half to even (the default rounding mode), clamped to [-qmax, qmax]; scale > 0 */
static inline float quant_value(float w, float scale, float qmax)
{
    float q = nearbyintf(w / scale);
    return q > qmax ? qmax : q < -qmax ? -qmax : q;
}

/* clamp(round_half_even(x), -7, 7) in a form the compiler vectorizes (the candidate loop below
 * is the load's hot loop): adding then subtracting 1.5 * 2^23 rounds half to even in the default
 * rounding mode, as nearbyintf does, for |x| < 2^22 (here |x| <= 14: every candidate scale is at
 * least half of amax / 7); the clamp is on integers, which vectorizes without -ffast-math. */
static inline int round_int4(float x)
{
#if FLT_EVAL_METHOD == 0
    int q = (int)((x + 0x1.8p23f) - 0x1.8p23f);
#else /* wider intermediates (x87) would not round at the float's units */
    int q = (int)nearbyintf(x > 8.0f ? 8.0f : x < -8.0f ? -8.0f : x);
#endif
    q = q > 7 ? 7 : q;
    return q < -7 ? -7 : q;
}

/* The scale of one group of `count` weights: amax / qmax, or with clip search the candidate
 * (amax * r) / 7 of least squared error. Each candidate's error is accumulated in double in
 * index order (its own accumulator, so evaluating the candidates side by side changes no bit);
 * the first of equal errors wins. */
static float group_scale(const float *w, int64_t count, int a8w4, int clip)
{
    float amax = 0.0f;
    for (int64_t i = 0; i < count; i++) amax = fmaxf(amax, fabsf(w[i]));
    float qmax = a8w4 ? 7.0f : 127.0f, best = amax / qmax;
    if (best == 0.0f || !clip) return best;
    float cand[CLIP_STEPS + 1];
    double err[CLIP_STEPS + 1];
    int nc = 0;
    for (int step = 0; step <= CLIP_STEPS; step++) {
        float r = (float)(100 - step) / 100.0f, s = (amax * r) / 7.0f;
        if (s == 0.0f) break; /* smaller ratios underflow too */
        cand[nc] = s;
        err[nc++] = 0.0;
    }
    for (int64_t i = 0; i < count; i++) {
        float wi = w[i];
        for (int c = 0; c < nc; c++) {
            double d = (double)wi - (double)round_int4(wi / cand[c]) * (double)cand[c];
            err[c] += d * d;
        }
    }
    double best_err = INFINITY;
    for (int c = 0; c < nc; c++)
        if (err[c] < best_err) {
            best_err = err[c];
            best = cand[c];
        }
    return best;
}

/* Pass one for an item (expert, tile of columns): every scale, and the first non-finite
 * weight. Reads only the caller's weights; writes only job->scales and the item's slot. */
static void scale_item(job *j, int64_t item, float *row)
{
    int64_t e = item / j->tiles, n0 = (item % j->tiles) * TILE;
    int64_t n1 = n0 + TILE < j->N ? n0 + TILE : j->N, groups = j->G ? j->G : 1;
    for (int64_t n = n0; n < n1; n++) {
        widen(j, row_ptr(j, e, n), j->K, row);
        for (int64_t k = 0; k < j->K; k++)
            if (!isfinite(row[k])) {
                j->bad_row[item] = n;
                j->bad_col[item] = k;
                return;
            }
        for (int64_t g = 0; g < groups; g++)
            j->scales[(e * groups + g) * j->N + n] =
                group_scale(row + g * j->gk, j->gk, j->a8w4, j->clip);
    }
}

/* Pass two for an item: quantize the tile into `q` [K, nt] (ND), compute its assist matrix,
 * and write weight, scale and bias where the tile lives in the caller's buffers. */
static void write_item(job *j, int64_t item, float *row, int8_t *q, float *tile_scale)
{
    int64_t e = item / j->tiles, n0 = (item % j->tiles) * TILE;
    int64_t nt = (n0 + TILE < j->N ? n0 + TILE : j->N) - n0, groups = j->G ? j->G : 1;
    float qmax = j->a8w4 ? 7.0f : 127.0f;
    for (int64_t c = 0; c < nt; c++) {
        widen(j, row_ptr(j, e, n0 + c), j->K, row);
        for (int64_t k = 0; k < j->K; k++) {
            float s = j->scales[(e * groups + k / j->gk) * j->N + n0 + c];
            q[k * nt + c] = s == 0.0f ? 0 : (int8_t)quant_value(row[k], s, qmax);
        }
    }
    for (int64_t g = 0; g < groups; g++)
        for (int64_t c = 0; c < nt; c++) {
            float s = j->scales[(e * groups + g) * j->N + n0 + c];
            tile_scale[g * nt + c] = s;
            j->scale_out[(e * groups + g) * j->N + n0 + c] = s;
        }
    if (j->a8w4 && qmoe_layout_weight_assist_matrix(q, 1, j->K, nt, tile_scale, j->G,
                                             j->bias_out + e * j->N + n0) != QMOE_OK)
        j->fail = 1;
    /* element offset of W[e][0][n0]: NZ tiles of 32 (int8) / 64 (int4) columns are contiguous
     * K * cols blocks, so a tile of whole NZ tiles is one contiguous block */
    int64_t base = e * j->K * j->N;
    if (!j->nd) {
        qmoe_status st = j->a8w4
            ? qmoe_layout_nd_to_nz_int4(q, 1, j->K, nt, (uint8_t *)j->weight + (base + n0 * j->K) / 2)
            : qmoe_layout_nd_to_nz_int8(q, 1, j->K, nt, (int8_t *)j->weight + base + n0 * j->K);
        if (st != QMOE_OK) j->fail = 1;
        return;
    }
    for (int64_t k = 0; k < j->K; k++) {
        int64_t at = base + k * j->N + n0; /* even for int4: N and n0 are even */
        if (!j->a8w4) memcpy((int8_t *)j->weight + at, q + k * nt, (size_t)nt);
        else if (qmoe_layout_int4_pack(q + k * nt, nt, (uint8_t *)j->weight + at / 2) != QMOE_OK)
            j->fail = 1;
    }
}

typedef struct worker {
    job *j;
    int pass;
    int64_t first, last;
    pthread_t tid;
    int started;
    float *row, *tile_scale; /* a row of K floats; pass two: a [G, 64] scale tile */
    int8_t *q;               /* pass two: a [K, 64] tile of values */
} worker;

static void *run_worker(void *arg)
{
    worker *w = arg;
    for (int64_t i = w->first; i < w->last; i++) {
        if (w->pass == 1) scale_item(w->j, i, w->row);
        else write_item(w->j, i, w->row, w->q, w->tile_scale);
    }
    return NULL;
}

/* Runs one pass over every item on `threads` threads (contiguous item ranges; each item's
 * result depends on nothing but its inputs, so the split does not change any bit). Every
 * buffer is allocated before any worker starts, so running out of memory writes nothing.
 * Threads that cannot be started leave their range to the calling thread. */
static int run_pass(job *j, int pass, int threads)
{
    int64_t T = threads < j->items ? threads : j->items, groups = j->G ? j->G : 1;
    if (T < 1) T = 1;
    worker *ws = calloc((size_t)T, sizeof *ws);
    if (!ws) return -1;
    int oom = 0;
    for (int64_t t = 0; t < T; t++) {
        ws[t] = (worker){.j = j, .pass = pass, .first = j->items * t / T,
                         .last = j->items * (t + 1) / T};
        ws[t].row = malloc((size_t)j->K * sizeof(float) + 1);
        if (pass == 2) {
            ws[t].q = malloc((size_t)j->K * TILE + 1);
            ws[t].tile_scale = malloc((size_t)groups * TILE * sizeof(float));
        }
        oom |= !ws[t].row || (pass == 2 && (!ws[t].q || !ws[t].tile_scale));
    }
    for (int64_t t = 1; t < T && !oom; t++)
        ws[t].started = pthread_create(&ws[t].tid, NULL, run_worker, &ws[t]) == 0;
    if (!oom) run_worker(&ws[0]);
    for (int64_t t = 1; t < T && !oom; t++) {
        if (ws[t].started) pthread_join(ws[t].tid, NULL);
        else run_worker(&ws[t]);
    }
    for (int64_t t = 0; t < T; t++) {
        free(ws[t].row);
        free(ws[t].q);
        free(ws[t].tile_scale);
    }
    free(ws);
    return oom ? -1 : 0;
}

#define BAD(rule, arg, ...) qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, rule, arg, __VA_ARGS__)

static qmoe_status read_quant_options(const qmoe_quant_options *in, qmoe_quant_options *o)
{
    qmoe_status st = qmoe_read_options(in, o, sizeof *o, sizeof *o, "options");
    if (st) return st;
    if (o->mode != QMOE_QUANT_A8W8 && o->mode != QMOE_QUANT_A8W4)
        return BAD(QMOE_RULE_OPTION, "options", "options.mode = %d: expected A8W8 (0) or A8W4 (1)",
                   (int)o->mode);
    if (o->weight_nd != 0 && o->weight_nd != 1)
        return BAD(QMOE_RULE_OPTION, "options", "options.weight_nd = %d: expected 0 or 1",
                   o->weight_nd);
    if (o->clip_search != 0 && o->clip_search != 1)
        return BAD(QMOE_RULE_OPTION, "options", "options.clip_search = %d: expected 0 or 1",
                   o->clip_search);
    if (o->clip_search && o->mode != QMOE_QUANT_A8W4)
        return BAD(QMOE_RULE_OPTION, "options", "options.clip_search is for A8W4 only");
    if (o->group_size < 0)
        return BAD(QMOE_RULE_OPTION, "options", "options.group_size = %lld: must be >= 0",
                   (long long)o->group_size);
    if (o->threads < 0 || o->threads > QMOE_MAX_THREADS)
        return BAD(QMOE_RULE_OPTION, "options", "options.threads = %d: expected 0..%d",
                   o->threads, QMOE_MAX_THREADS);
    return QMOE_OK;
}

static qmoe_status sizes_of(const qmoe_quant_options *o, int64_t E, int64_t K, int64_t N,
                            qmoe_quant_sizes *out)
{
    int a8w4 = o->mode == QMOE_QUANT_A8W4;
    if (E < 0 || K < 0 || N < 0)
        return BAD(QMOE_RULE_SHAPE, "weight", "negative size E = %lld, K = %lld, N = %lld",
                   (long long)E, (long long)K, (long long)N);
    if (o->group_size > 0 && K % o->group_size)
        return BAD(QMOE_RULE_SHAPE, "weight",
                   "group_size %lld does not divide K = %lld (the inputs of each output)",
                   (long long)o->group_size, (long long)K);
    int64_t n_align = o->weight_nd ? (a8w4 ? 2 : 1) : (a8w4 ? 64 : 32);
    int64_t k_align = o->weight_nd ? 1 : 16;
    if (K % k_align || N % n_align)
        return BAD(QMOE_RULE_SHAPE, "weight",
                   "%s %s needs K %% %lld == 0 and N %% %lld == 0 (K = %lld, N = %lld)",
                   a8w4 ? "int4" : "int8", o->weight_nd ? "ND" : "FRACTAL_NZ",
                   (long long)k_align, (long long)n_align, (long long)K, (long long)N);
    int64_t ekn, en, G = o->group_size > 0 ? K / o->group_size : 0, egn;
    /* the element (nibble) indices and the per-thread buffers stay well clear of overflow */
    if (!qmoe_mul_i64(E, K, &ekn) || !qmoe_mul_i64(ekn, N, &ekn) || ekn > INT64_MAX / 8 ||
        !qmoe_mul_i64(E, N, &en) || !qmoe_mul_i64(en, G ? G : 1, &egn) || egn > INT64_MAX / 8 ||
        K > INT64_MAX / (8 * TILE))
        return BAD(QMOE_RULE_LIMIT, "weight", "E*K*N overflows (E = %lld, K = %lld, N = %lld)",
                   (long long)E, (long long)K, (long long)N);
    out->weight_bytes = a8w4 ? ekn / 2 : ekn;
    out->groups = G;
    out->scale_count = egn;
    out->bias_count = a8w4 ? en : 0;
    return QMOE_OK;
}

qmoe_status qmoe_quant_sizes_of(const qmoe_quant_options *options, int64_t E, int64_t K,
                                int64_t N, qmoe_quant_sizes *sizes)
{
    qmoe_quant_options o;
    qmoe_quant_sizes s = {0, 0, 0, 0};
    qmoe_status st;
    if (!sizes)
        return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, "sizes", "sizes is NULL");
    if ((st = read_quant_options(options, &o)) || (st = sizes_of(&o, E, K, N, &s))) return st;
    *sizes = s;
    qmoe_clear_error();
    return QMOE_OK;
}

#define NUL(arg, ...) qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, arg, __VA_ARGS__)

static qmoe_status check_sources(const void *const *src, const char *name, int64_t E)
{
    if (!src) return NUL(name, "%s is NULL", name);
    for (int64_t e = 0; e < E; e++)
        if (!src[e]) return NUL(name, "%s[%lld] (expert %lld) is NULL", name, (long long)e,
                                (long long)e);
    return QMOE_OK;
}

/* The shared body of both entry points: validate everything, scales (pass one), then write. */
static qmoe_status quantize(job *j, const qmoe_quant_options *options, void *weight,
                            float *scale, float *bias)
{
    qmoe_quant_options o;
    qmoe_quant_sizes sz = {0, 0, 0, 0};
    qmoe_status st;
    if (j->dtype != QMOE_DTYPE_FLOAT32 && j->dtype != QMOE_DTYPE_FLOAT16 &&
        j->dtype != QMOE_DTYPE_BFLOAT16)
        return BAD(QMOE_RULE_DTYPE, j->name_a, "%s: dtype %d: expected FLOAT32, FLOAT16 or "
                   "BFLOAT16", j->name_a, (int)j->dtype);
    if ((st = read_quant_options(options, &o)) || (st = sizes_of(&o, j->E, j->K, j->N, &sz)))
        return st;
    if (sz.weight_bytes == 0 && sz.scale_count == 0) {
        qmoe_clear_error();
        return QMOE_OK;
    }
    int need_rows = j->K > 0 && j->N > 0;
    if (need_rows && ((st = check_sources(j->src_a, j->name_a, j->E)) ||
                      (j->name_b && (st = check_sources(j->src_b, j->name_b, j->E)))))
        return st;
    if (sz.weight_bytes && !weight) return NUL("weight", "weight is NULL");
    if (!scale) return NUL("scale", "scale is NULL");
    if (o.mode == QMOE_QUANT_A8W4 && !bias) return NUL("bias", "bias is NULL (A8W4 needs it)");

    j->a8w4 = o.mode == QMOE_QUANT_A8W4;
    j->nd = o.weight_nd;
    j->clip = o.clip_search;
    j->G = sz.groups;
    j->gk = sz.groups ? o.group_size : j->K;
    j->tiles = (j->N + TILE - 1) / TILE;
    j->items = j->E * j->tiles;
    j->weight = weight;
    j->scale_out = scale;
    j->bias_out = bias;
    int threads = o.threads ? o.threads : qmoe_device_online_cores();

    j->scales = calloc((size_t)sz.scale_count + 1, sizeof(float));
    j->bad_row = malloc(((size_t)j->items + 1) * sizeof(int64_t));
    j->bad_col = malloc(((size_t)j->items + 1) * sizeof(int64_t));
    st = QMOE_OK;
    if (!j->scales || !j->bad_row || !j->bad_col) {
        st = qmoe_fail(QMOE_ERR_INNER, "quantize: out of memory for %lld scales",
                       (long long)sz.scale_count);
        goto out;
    }
    for (int64_t i = 0; i < j->items; i++) j->bad_row[i] = -1;
    if (j->K > 0 && run_pass(j, 1, threads)) {
        st = qmoe_fail(QMOE_ERR_INNER, "quantize: out of memory for a row of K = %lld",
                       (long long)j->K);
        goto out;
    }
    for (int64_t i = 0; i < j->items; i++)
        if (j->bad_row[i] >= 0) {
            int64_t e = i / j->tiles, n = j->bad_row[i];
            int b = n >= j->split;
            const char *name = b ? j->name_b : j->name_a;
            st = BAD(QMOE_RULE_VALUE, name, "%s: expert %lld, row %lld, column %lld is not finite",
                     name, (long long)e, (long long)(b ? n - j->split : n),
                     (long long)j->bad_col[i]);
            goto out;
        }
    if (run_pass(j, 2, threads)) {
        st = qmoe_fail(QMOE_ERR_INNER, "quantize: out of memory for a tile of K = %lld",
                       (long long)j->K);
        goto out;
    }
    if (j->fail) st = qmoe_fail(QMOE_ERR_INNER, "quantize: a layout helper failed");
    else qmoe_clear_error();
out:
    free(j->scales);
    free(j->bad_row);
    free(j->bad_col);
    return st;
}

qmoe_status qmoe_quant_linear(const void *const *w, qmoe_dtype dtype, int64_t E, int64_t N,
                                 int64_t K, const qmoe_quant_options *options, void *weight,
                                 float *scale, float *bias)
{
    job j = {.src_a = w, .name_a = "w", .split = N, .dtype = dtype, .E = E, .K = K, .N = N};
    return quantize(&j, options, weight, scale, bias);
}

qmoe_status qmoe_quant_gate_up(const void *const *gate, const void *const *up,
                                  qmoe_dtype dtype, int64_t E, int64_t I, int64_t H,
                                  const qmoe_quant_options *options, void *weight, float *scale,
                                  float *bias)
{
    if (I < 0 || I > INT64_MAX / 2)
        return BAD(QMOE_RULE_SHAPE, "gate", "intermediate size I = %lld out of range",
                   (long long)I);
    job j = {.src_a = gate, .src_b = up, .name_a = "gate", .name_b = "up", .split = I,
             .dtype = dtype, .E = E, .K = H, .N = 2 * I};
    return quantize(&j, options, weight, scale, bias);
}
