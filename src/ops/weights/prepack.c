/*
 * Prepacked expert weights (qmoe/weights.h): built once by the kernel's own packing code, then
 * recognised by phase one through a tensor view. See core/prepack.h for the layout.
 */
#define _DEFAULT_SOURCE /* madvise, MADV_HUGEPAGE */
#include "qmoe/weights.h"

#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "core/gmm_access.h"
#include "core/gmm_params.h"
#include "core/options.h"
#include "core/prepack.h"
#include "core/status.h"
#include "core/tensor.h"
#include "ops/grouped_matmul_swiglu_quant/plan.h"
#include "kernels/cpu_features.h"
#include "kernels/gmm_fast.h"
#include "kernels/kernel.h"

/* Argument errors with the structured info (rule, argument by the vendor's name). */
#define INVALID(rule, arg, ...) qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_##rule, arg, __VA_ARGS__)
#define NULLPTR(arg, ...) qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, arg, __VA_ARGS__)


static uint64_t align64(uint64_t n) { return (n + 63u) & ~(uint64_t)63u; }

static int add_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    if (b > UINT64_MAX - a) return 0;
    *out = a + b;
    return 1;
}

static int mul_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    if (a && b > UINT64_MAX / a) return 0;
    *out = a * b;
    return 1;
}

/* K and N the weight declares, for the zero-row probe tensors (a malformed weight is reported by
 * phase one's own checks before these are compared). */
static void weight_dims(const qmoe_tensor *w, int force_nz, int64_t *K, int64_t *N)
{
    int nz = force_nz || w->format == QMOE_FORMAT_FRACTAL_NZ;
    *K = *N = 0;
    if (nz && w->ndim == 5) {
        int64_t cols = w->dtype == QMOE_DTYPE_INT8 ? 32 : 64;
        if (w->shape[2] <= INT64_MAX / 16) *K = w->shape[2] * 16;
        if (w->shape[1] <= INT64_MAX / cols) *N = w->shape[1] * cols;
    } else if (!nz && w->ndim == 3) {
        *K = w->shape[1];
        int64_t f = w->dtype == QMOE_DTYPE_INT32 ? 8 : 1;
        if (w->shape[2] <= INT64_MAX / f) *N = w->shape[2] * f;
    }
}

/* The weight, scale and bias checks of phase one, run by phase one itself on zero-row
 * activations and outputs, so prepacking accepts exactly what the operator accepts. */
static qmoe_status plan_source(const qmoe_tensor *weight, const qmoe_tensor *weight_scale,
                               const qmoe_tensor *bias, const qmoe_weights_options *o,
                               qmoe_gmm_params *p)
{
    int64_t K, N;
    weight_dims(weight, o->force_weight_nz, &K, &N);
    int64_t xd[2] = {0, K}, od[2] = {0, N / 2}, zero = 0;
    qmoe_tensor *x = NULL, *xs = NULL, *gl = NULL, *out = NULL, *os = NULL;
    qmoe_status st;
    if ((st = qmoe_tensor_create(xd, 2, NULL, QMOE_DTYPE_INT8, QMOE_FORMAT_ND, NULL, &x)) ||
        (st = qmoe_tensor_create(&zero, 1, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, NULL, &xs)) ||
        (st = qmoe_tensor_create(&zero, 1, NULL, QMOE_DTYPE_INT64, QMOE_FORMAT_ND, NULL, &gl)) ||
        (st = qmoe_tensor_create(od, 2, NULL, QMOE_DTYPE_INT8, QMOE_FORMAT_ND, NULL, &out)) ||
        (st = qmoe_tensor_create(&zero, 1, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, NULL, &os))) {
        st = qmoe_fail(QMOE_ERR_INNER, "prepack: out of memory");
    } else {
        qmoe_grouped_matmul_swiglu_quant_options opt;
        qmoe_grouped_matmul_swiglu_quant_options_init(&opt);
        opt.force_weight_nz = o->force_weight_nz;
        opt.kernel = o->kernel;
        opt.threads = 1;
        st = qmoe_gmm_plan(x, weight, bias, NULL, weight_scale, xs, gl, out, os, NULL, &opt, p);
    }
    qmoe_tensor_destroy(x);
    qmoe_tensor_destroy(xs);
    qmoe_tensor_destroy(gl);
    qmoe_tensor_destroy(out);
    qmoe_tensor_destroy(os);
    return st;
}

/* Transparent huge pages for the whole 2 MiB pages inside the weights (no memory added): the
 * kernels stream tens of MB of them per call, and with 4 KB pages every B tile of 16 rows 256
 * bytes apart is a page of its own. Advice only: where THP is off nothing changes. */
static void advise_huge_pages(void *p, uint64_t n)
{
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    const uintptr_t huge = (uintptr_t)2 << 20;
    uintptr_t a = ((uintptr_t)p + huge - 1) & ~(huge - 1), b = ((uintptr_t)p + n) & ~(huge - 1);
    if (b > a) (void)madvise((void *)a, b - a, MADV_HUGEPAGE);
#else
    (void)p;
    (void)n;
#endif
}

/* Geometry and allocation of the object for plan p's experts, E of them in all (p->E at first). */
static qmoe_status allocate(const qmoe_gmm_params *p, qmoe_dtype ws_dtype, int64_t E,
                            const qmoe_weights_options *o, int has_bias, struct qmoe_weights **out)
{
    struct qmoe_weights *pp = calloc(1, sizeof *pp);
    if (!pp) return qmoe_fail(QMOE_ERR_INNER, "prepack: out of memory");
    pp->magic = QMOE_PP_MAGIC;
    pp->version = QMOE_PP_VERSION;
    pp->op = QMOE_PP_OP_SWIGLU;
    pp->build = &qmoe_pp_build_tag;
    pp->cpu = qmoe_pp_cpu_bits();
    pp->kernel = p->kernel;
    pp->mode = p->mode;
    pp->per_group = p->per_group;
    pp->ws_dtype = (int32_t)ws_dtype;
    /* 16-bit scales stay 16-bit (widened exactly per panel by the driver); others are float32 */
    pp->ws_kind = p->ws_type == QMOE_SCALE_F16 || p->ws_type == QMOE_SCALE_BF16 ? p->ws_type
                                                                                 : QMOE_SCALE_F32;
    pp->src_layout = p->w_layout;
    pp->force_nz = o->force_weight_nz != 0;
    pp->threads = o->threads ? o->threads : qmoe_device_online_cores();
    pp->has_bias = has_bias;
    if (o->scale_block > 0) { /* kept as int8 multipliers of a float32 base per block */
        pp->ws_kind = QMOE_SCALE_F32;
        pp->ws_block = o->scale_block < p->G ? o->scale_block : p->G;
        pp->nblk = (p->G + pp->ws_block - 1) / pp->ws_block;
    }
    pp->E = E;
    pp->K = p->K;
    pp->N = p->N;
    pp->N2 = p->N2;
    pp->G = p->G;
    pp->gk = p->group_k;
    pp->gkp = (pp->gk + 3) & ~(int64_t)3;
    pp->Kp = pp->gkp * pp->G;
    pp->panels = (pp->N2 + QMOE_PP_COLS - 1) / QMOE_PP_COLS;
    if (o->codebook) {
        pp->codes = 1;
        pp->u4 = 1;
        for (int c = 0; c < 16; c++) {
            pp->tbl[c] = (uint8_t)(o->codebook[c] + 128);
            pp->u4 &= o->codebook[c] == c;
        }
    }
    pp->bits6 = o->value_bits == 6;
    pp->step_bytes = p->mode != QMOE_MODE_A8W8 || pp->codes ? QMOE_PK_STEP / 2
                     : pp->bits6                          ? QMOE_PP_STEP6
                                                          : QMOE_PK_STEP;
    /* bounded by validated shapes (K < 65536, N <= 10240, G <= K): no overflow per expert */
    uint64_t steps = (uint64_t)(pp->Kp / 4);
    pp->panel_wbytes = align64(2 * steps * 4 * (uint64_t)pp->step_bytes);
    if (pp->panels > 0)
        pp->expert_wbytes = (uint64_t)(pp->panels - 1) * pp->panel_wbytes +
                            align64(2 * steps * (uint64_t)qmoe_pp_units(pp, pp->panels - 1) *
                                    (uint64_t)pp->step_bytes);
    uint64_t recs, ws_n, corr_n, ws_b, corr_b, base_n = 0, base_b = 0, side = 0, total = 0;
    const uint64_t ws_es = pp->ws_block ? 1 : pp->ws_kind == QMOE_SCALE_F32 ? 4 : 2;
    int ok = mul_u64((uint64_t)pp->E, pp->expert_wbytes, &pp->weight_bytes) &&
             mul_u64((uint64_t)pp->E, (uint64_t)pp->panels, &recs) &&
             mul_u64(recs, (uint64_t)pp->G * QMOE_PP_LD, &ws_n) &&
             mul_u64(recs, QMOE_PP_LD, &corr_n) && mul_u64(ws_n, ws_es, &ws_b) &&
             mul_u64(recs, (uint64_t)pp->nblk * QMOE_PP_LD, &base_n) &&
             mul_u64(base_n, sizeof(float), &base_b) && mul_u64(corr_n, sizeof(float), &corr_b) &&
             add_u64(ws_b, corr_b, &side) && add_u64(side, base_b, &side) &&
             add_u64(side, pp->weight_bytes, &total) && pp->weight_bytes <= SIZE_MAX && side <= SIZE_MAX;
    if (!ok) {
        free(pp);
        return INVALID(LIMIT, "weight", "prepack: the prepacked size of E = %lld experts overflows",
                       (long long)E);
    }
    pp->bytes = total;
    pp->w = aligned_alloc(64, pp->weight_bytes ? (size_t)pp->weight_bytes : 64);
    pp->ws = aligned_alloc(64, (size_t)align64(ws_b ? ws_b : 64));
    pp->corr = aligned_alloc(64, (size_t)align64(corr_b ? corr_b : 64));
    pp->wsb = pp->ws_block ? aligned_alloc(64, (size_t)align64(base_b ? base_b : 64)) : NULL;
    if (!pp->w || !pp->ws || !pp->corr || (pp->ws_block && !pp->wsb)) {
        qmoe_weights_destroy(pp);
        return qmoe_fail(QMOE_ERR_INNER, "prepack: out of memory for %llu bytes",
                         (unsigned long long)pp->bytes);
    }
    advise_huge_pages(pp->w, pp->weight_bytes);
    *out = pp;
    return QMOE_OK;
}

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* Scale s as M 2^E with M odd (0 when s is zero; -1 for infinity and NaN); *neg its sign. */
static int64_t odd_part(float s, int *e, int *neg)
{
    uint32_t u = f32_bits(s), ex = (u >> 23) & 0xFF, m = u & 0x7FFFFF;
    if (ex == 0xFF) return -1;
    if (ex == 0 && m == 0) return 0;
    if (ex) m |= 0x800000;
    int tz = __builtin_ctz(m);
    *e = (ex ? (int)ex : 1) - 150 + tz;
    *neg = (int)(u >> 31);
    return (int64_t)(m >> tz);
}

/* gcd of two odd numbers (binary: no division) */
static uint32_t gcd_odd(uint32_t a, uint32_t b)
{
    while (a != b) {
        if (a > b) {
            a -= b;
            a >>= __builtin_ctz(a);
        } else {
            b -= a;
            b >>= __builtin_ctz(b);
        }
    }
    return a;
}

/* The run as exact multiples of the largest float that divides every scale: each nonzero s =
 * M 2^E (M odd), the base G 2^Emin with G the gcd of the M; 1 when every multiplier fits int8.
 * Integer work, no search: the search below divides once per element and candidate (39
 * candidates a run on average for q4_K's scales, most of a K-quant model's load time). Any
 * factorization gives the kernels the same bits (base * q is the scale), so which is kept is
 * free. The base is negative when a positive scale needs the multiplier 128 (q6_K's d * sc with
 * d < 0 and sc = -128: ggml's quantizer gives the largest sub-block of every block -128, and d
 * either sign) or a scale is -0 (d < 0, sc = 0). */
static int factor_exact(const float *s, int64_t n, int64_t ld, float *base, int8_t *q)
{
    uint32_t g = 0;
    int emin = 0, e, neg;
    for (int64_t i = 0; i < n; i++) {
        int64_t m = odd_part(s[i * ld], &e, &neg);
        if (m < 0) return 0;
        if (!m) continue;
        if (!g || e < emin) emin = e;
        /* once g is the block's d (K-quants: every M is d's odd part times sc's), g divides the
         * rest: one division instead of a binary gcd's loop of unpredictable branches */
        g = !g ? (uint32_t)m : (uint32_t)m % g == 0 ? g : gcd_odd(g, (uint32_t)m);
    }
    if (!g) return 0; /* all zero: the search's base 0 */
    /* the base's sign: -1 where a positive scale needs the multiplier 128 or a scale is -0
     * (base * 0 has the base's sign), +1 where a negative one needs 128 or one is +0 */
    int minus = 0, plus = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t m = odd_part(s[i * ld], &e, &neg);
        const int sbit = (int)(f32_bits(s[i * ld]) >> 31);
        if (!m) {
            *(sbit ? &minus : &plus) = 1;
            q[i * ld] = 0;
            continue;
        }
        uint32_t k = (uint32_t)m / g;
        if (e - emin > 7 || (k << (e - emin)) > 128) return 0;
        if ((k << (e - emin)) == 128) *(neg ? &plus : &minus) = 1;
        uint8_t mag = (uint8_t)(k << (e - emin)); /* kept in q's byte until the sign is known */
        memcpy(&q[i * ld], &mag, 1);
    }
    if (minus && plus) return 0;
    const int sign = minus ? -1 : 1;
    for (int64_t i = 0; i < n; i++) {
        uint8_t mag;
        memcpy(&mag, &q[i * ld], 1);
        q[i * ld] = (int8_t)(sign * (f32_bits(s[i * ld]) >> 31 ? -1 : 1) * (int)mag);
    }
    float b = (float)sign * ldexpf((float)g, emin);
    for (int64_t i = 0; i < n; i++) /* exact by construction; as the search tests it */
        if (f32_bits(b * (float)q[i * ld]) != f32_bits(s[i * ld])) return 0;
    *base = b;
    return 1;
}

/* n scales s[0], s[ld], ... as base * q[i] with the same bits (the driver's widen_s8), q in
 * int8: 1 when found. Exact multiples first; else the base is the smallest nonzero magnitude
 * over j = 1..128, of either sign, the largest that works (rounding included): for d * sc
 * (|sc| <= 128, d * sc exact in float32) j = |sc| of the smallest gives d itself, so such scales
 * always factor. */
static int factor_run(const float *s, int64_t n, int64_t ld, float *base, int8_t *q)
{
    if (factor_exact(s, n, ld, base, q)) return 1;
    float smin = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        float a = s[i * ld] < 0 ? -s[i * ld] : s[i * ld];
        if (a != 0.0f && (smin == 0.0f || a < smin)) smin = a;
    }
    for (int j = 1; j <= (smin == 0.0f ? 1 : 128); j++)
        for (int sign = 1; sign >= -1; sign -= 2) {
            float b = (float)sign * smin / (float)j;
            int64_t i = 0;
            for (; i < n; i++) {
                float r = b == 0.0f ? 0.0f : s[i * ld] / b;
                if (!(r > -128.5f && r < 127.5f)) break; /* NaN too: before the integer cast */
                r = r < 0 ? -(float)(int)(-r + 0.5f) : (float)(int)(r + 0.5f);
                if (f32_bits(b * r) != f32_bits(s[i * ld])) break;
                q[i * ld] = (int8_t)r;
            }
            if (i == n) {
                *base = b;
                return 1;
            }
        }
    return 0;
}

/* Expert de's float32 record scales ws32 [panels][G][128] as the object's scale blocks; an
 * error names the first column and block that do not factor. */
static qmoe_status keep_blocks(struct qmoe_weights *pp, int64_t de, const float *ws32)
{
    const int64_t G = pp->G, B = pp->ws_block;
    for (int64_t i = 0; i < pp->panels; i++) {
        const uint64_t r = (uint64_t)(de * pp->panels + i);
        const float *s = ws32 + i * G * QMOE_PP_LD;
        int8_t *q = (int8_t *)pp->ws + r * (uint64_t)(G * QMOE_PP_LD);
        float *base = pp->wsb + r * (uint64_t)(pp->nblk * QMOE_PP_LD);
        for (int64_t b = 0; b < pp->nblk; b++)
            for (int64_t c = 0; c < QMOE_PP_LD; c++) {
                int64_t g0 = b * B, n = G - g0 < B ? G - g0 : B;
                if (factor_run(s + g0 * QMOE_PP_LD + c, n, QMOE_PP_LD, base + b * QMOE_PP_LD + c,
                               q + g0 * QMOE_PP_LD + c))
                    continue;
                int64_t col = (c / QMOE_PP_COLS) * pp->N2 + i * QMOE_PP_COLS + c % QMOE_PP_COLS;
                return INVALID(VALUE, "weightScale",
                               "weightScale: expert %lld, column %lld, groups [%lld, %lld): not one "
                               "float32 times int8 multipliers (options.scale_block = %lld)",
                               (long long)(de - pp->filled), (long long)col, (long long)g0,
                               (long long)(g0 + n), (long long)pp->ws_block);
            }
    }
    return QMOE_OK;
}

/* The first value of slice expert e that the object cannot hold (outside its codebook, or
 * its 6 bits; the packing found one): an error naming it. */
static qmoe_status not_held(const qmoe_gmm_params *p, const struct qmoe_weights *pp, int64_t e)
{
    for (int64_t k = 0; k < p->K; k++)
        for (int64_t n = 0; n < p->N; n++) {
            int v = qmoe_w_get(p, e, k, n), c = 0;
            if (pp->bits6) {
                if (v < -32 || v > 31)
                    return INVALID(VALUE, "weight",
                                   "weight: expert %lld, k %lld, column %lld holds %d, outside "
                                   "[-32, 31] (options.value_bits = 6)",
                                   (long long)e, (long long)k, (long long)n, v);
                continue;
            }
            while (c < 16 && pp->tbl[c] != (uint8_t)(v + 128)) c++;
            if (c == 16)
                return INVALID(VALUE, "weight",
                               "weight: expert %lld, k %lld, column %lld holds %d, which is not in "
                               "options.codebook", (long long)e, (long long)k, (long long)n, v);
        }
    return qmoe_fail(QMOE_ERR_INNER, "prepack: a value the object cannot hold that the weight does not hold");
}

/* Slice expert e packed as the object's expert filled + e; an error names what does not fit. */
static qmoe_status pack_one(const qmoe_gemm_isa *isa, const qmoe_gmm_params *p, struct qmoe_weights *pp,
                            int64_t e, void *scratch, float *ws32)
{
    int64_t de = pp->filled + e;
    /* the 64-byte padding of records is never read; keep it defined */
    memset(pp->w + (uint64_t)de * pp->expert_wbytes, 0, (size_t)pp->expert_wbytes);
    if (!qmoe_fast_prepack_expert(isa, p, e, de, scratch, pp, ws32)) return not_held(p, pp, e);
    return ws32 ? keep_blocks(pp, de, ws32) : QMOE_OK;
}

/* One thread's experts [e0, e1) of a slice, with its own scratch; bad: the first that failed. */
typedef struct fill_part {
    const qmoe_gemm_isa *isa;
    const qmoe_gmm_params *p;
    struct qmoe_weights *pp;
    int64_t e0, e1, bad;
    void *scratch;
    float *ws32;
    pthread_t tid;
    int started;
} fill_part;

static void *fill_range(void *arg)
{
    fill_part *f = arg;
    for (int64_t e = f->e0; e < f->e1 && f->bad == f->p->E; e++)
        if (pack_one(f->isa, f->p, f->pp, e, f->scratch, f->ws32)) f->bad = e;
    if (f->isa->release) f->isa->release(); /* state the packing's micro-kernels set up (AMX tiles) */
    return NULL;
}

/* p's experts packed as the object's next ones, [filled, filled + p->E), on pp->threads threads
 * (contiguous ranges of experts; each expert's bytes depend on nothing but its inputs, so the
 * split changes no bit): each expert's pages are touched only when it is packed (a weight
 * appended in slices grows the memory it holds as it goes), and on several threads the first
 * touch of those pages, most of a large model's conversion, is shared too. An error is the
 * first failing expert's, found again on the calling thread for its message (the workers'
 * messages are theirs), so it does not depend on the split either. */
static qmoe_status fill(const qmoe_gemm_isa *isa, const qmoe_gmm_params *p, struct qmoe_weights *pp)
{
    const int64_t T = pp->threads < p->E ? pp->threads : p->E > 0 ? p->E : 1;
    const size_t sbytes = (size_t)align64(qmoe_fast_prepack_scratch_bytes(isa, p));
    /* scale blocks: one expert's float32 scales at a time (bounded by allocate's checks) */
    const size_t wbytes = sizeof(float) * (size_t)(pp->panels * pp->G * QMOE_PP_LD) + 1;
    fill_part *parts = calloc((size_t)T, sizeof *parts);
    qmoe_status st = parts ? QMOE_OK : qmoe_fail(QMOE_ERR_INNER, "prepack: out of memory for the packing scratchpad");
    for (int64_t t = 0; !st && t < T; t++) {
        parts[t] = (fill_part){.isa = isa, .p = p, .pp = pp, .e0 = p->E * t / T,
                               .e1 = p->E * (t + 1) / T, .bad = p->E};
        parts[t].scratch = aligned_alloc(64, sbytes);
        parts[t].ws32 = pp->ws_block ? malloc(wbytes) : NULL;
        if (!parts[t].scratch || (pp->ws_block && !parts[t].ws32))
            st = qmoe_fail(QMOE_ERR_INNER, "prepack: out of memory for the packing scratchpad");
    }
    if (!st) {
        for (int64_t t = 1; t < T; t++)
            parts[t].started = pthread_create(&parts[t].tid, NULL, fill_range, &parts[t]) == 0;
        fill_range(&parts[0]);
        for (int64_t t = 1; t < T; t++) {
            if (parts[t].started) pthread_join(parts[t].tid, NULL);
            else fill_range(&parts[t]); /* a thread that could not start: its range here */
        }
        int64_t bad = p->E;
        for (int64_t t = 0; t < T; t++) bad = parts[t].bad < bad ? parts[t].bad : bad;
        if (bad < p->E) {
            st = pack_one(isa, p, pp, bad, parts[0].scratch, parts[0].ws32);
            if (isa->release) isa->release();
            if (!st) st = qmoe_fail(QMOE_ERR_INNER, "prepack: expert %lld failed on a worker thread only",
                                    (long long)bad);
        }
    }
    for (int64_t t = 0; parts && t < T; t++) {
        free(parts[t].scratch);
        free(parts[t].ws32);
    }
    free(parts);
    if (!st) pp->filled += p->E;
    return st;
}

/* The source's plan and kernel table, after the argument checks both entry points share. */
static qmoe_status plan_slice(const qmoe_tensor *weight, const qmoe_tensor *weight_scale,
                              const qmoe_tensor *bias, const qmoe_weights_options *o,
                              qmoe_gmm_params *p, const qmoe_gemm_isa **isa)
{
    if (!weight) return NULLPTR("weight", "weight is a null pointer");
    if (!weight_scale) return NULLPTR("weightScale", "weightScale is a null pointer");
    if (weight->packed) return INVALID(FORMAT, "weight", "weight: already prepacked");
    if (o->kernel == QMOE_KERNEL_REFERENCE)
        return INVALID(UNSUPPORTED, "options", "prepack: the reference kernel reads raw weights only");
    qmoe_status st = plan_source(weight, weight_scale, bias, o, p);
    if (st) return st;
    *isa = qmoe_gemm_isa_for(p->kernel);
    if (!*isa)
        return INVALID(UNSUPPORTED, "options", "prepack: kernel %s reads raw weights only (QMOE_ISA=%s?)",
                       qmoe_kernel_name((qmoe_kernel)p->kernel),
                       qmoe_kernel_name((qmoe_kernel)p->kernel));
    return QMOE_OK;
}

qmoe_status qmoe_weights_prepack(const qmoe_tensor *weight, const qmoe_tensor *weight_scale,
                                 const qmoe_tensor *bias, const qmoe_weights_options *options,
                                 qmoe_weights **out)
{
    if (!out) return NULLPTR("out", "prepack: out is a null pointer");
    qmoe_weights_options opts;
    /* the first layout ended at force_weight_nz (12 bytes): callers built before `experts` */
    qmoe_status st = qmoe_read_options(options, &opts, sizeof opts,
                                       offsetof(qmoe_weights_options, force_weight_nz) + sizeof(int),
                                       "options");
    if (st) return st;
    qmoe_gmm_params p;
    const qmoe_gemm_isa *isa = NULL;
    if ((st = plan_slice(weight, weight_scale, bias, &opts, &p, &isa))) return st;
    int64_t E = opts.experts ? opts.experts : p.E;
    if (E < p.E)
        return INVALID(SHAPE, "options", "options: experts = %lld, fewer than the weight's %lld",
                       (long long)opts.experts, (long long)p.E);
    if (opts.threads < 0 || opts.threads > QMOE_MAX_THREADS)
        return INVALID(OPTION, "options", "options: threads = %d; 0 (every online core) to %d",
                       opts.threads, QMOE_MAX_THREADS);
    if (opts.scale_block < 0)
        return INVALID(OPTION, "options", "options: scale_block = %lld; 0 (none) or groups per block",
                       (long long)opts.scale_block);
    if (opts.codebook && p.mode != QMOE_MODE_A8W8)
        return INVALID(OPTION, "options", "options: a codebook is for int8 weights; this weight is %s",
                       qmoe_dtype_name(weight->dtype));
    if (opts.codebook && !memchr(opts.codebook, 0, 16))
        return INVALID(OPTION, "options",
                       "options: the codebook has no 0 (the value of the layout's padding)");
    if (opts.value_bits != 0 && opts.value_bits != 8 && opts.value_bits != 6)
        return INVALID(OPTION, "options", "options: value_bits = %lld; 0 or 8 (a byte a value) or 6",
                       (long long)opts.value_bits);
    if (opts.value_bits == 6 && (p.mode != QMOE_MODE_A8W8 || opts.codebook))
        return INVALID(OPTION, "options", "options: value_bits 6 is for int8 weights without a "
                       "codebook; this weight is %s%s", qmoe_dtype_name(weight->dtype),
                       opts.codebook ? " with a codebook" : "");
    struct qmoe_weights *pp = NULL;
    if ((st = allocate(&p, weight_scale->dtype, E, &opts, bias != NULL, &pp))) return st;
    if ((st = fill(isa, &p, pp))) {
        qmoe_weights_destroy(pp);
        return st;
    }
    *out = pp;
    qmoe_clear_error();
    return QMOE_OK;
}

qmoe_status qmoe_weights_append(qmoe_weights *weights, const qmoe_tensor *weight,
                                const qmoe_tensor *weight_scale, const qmoe_tensor *bias)
{
    struct qmoe_weights *pp = weights;
    if (!pp) return NULLPTR("weights", "weights is a null pointer");
    if (pp->magic != QMOE_PP_MAGIC || pp->version != QMOE_PP_VERSION || pp->build != &qmoe_pp_build_tag)
        return INVALID(UNSUPPORTED, "weights", "weights: not a prepacked weight object of this qmoe build");
    if (pp->cpu != qmoe_pp_cpu_bits())
        return INVALID(UNSUPPORTED, "weights", "weights: made on a CPU with other features");
    /* the slice is planned for the object's kernel and format, then must match it */
    qmoe_weights_options o = QMOE_WEIGHTS_OPTIONS_INIT;
    o.kernel = (qmoe_kernel)pp->kernel;
    o.force_weight_nz = pp->force_nz;
    qmoe_gmm_params p;
    const qmoe_gemm_isa *isa = NULL;
    qmoe_status st = plan_slice(weight, weight_scale, bias, &o, &p, &isa);
    if (st) return st;
    if (p.mode != pp->mode || p.w_layout != pp->src_layout || p.K != pp->K || p.N != pp->N)
        return INVALID(SHAPE, "weight", "weight: K = %lld, N = %lld (%s), the object's K = %lld, N = %lld (%s)",
                       (long long)p.K, (long long)p.N, qmoe_dtype_name(weight->dtype), (long long)pp->K,
                       (long long)pp->N, pp->mode == QMOE_MODE_A8W8 ? "int8" : "int4");
    if ((int32_t)weight_scale->dtype != pp->ws_dtype || p.per_group != pp->per_group || p.G != pp->G)
        return INVALID(SHAPE, "weightScale", "weightScale: %s, %lld groups; the object's %s, %lld groups",
                       qmoe_dtype_name(weight_scale->dtype), (long long)p.G,
                       qmoe_dtype_name((qmoe_dtype)pp->ws_dtype), (long long)pp->G);
    if ((bias != NULL) != pp->has_bias)
        return INVALID(SHAPE, "bias", "bias: %s, the object was made %s one", bias ? "given" : "NULL",
                       pp->has_bias ? "with" : "without");
    if (p.E > pp->E - pp->filled)
        return INVALID(SHAPE, "weight", "weight: %lld experts, %lld of the object's %lld are left",
                       (long long)p.E, (long long)(pp->E - pp->filled), (long long)pp->E);
    if ((st = fill(isa, &p, pp))) return st;
    qmoe_clear_error();
    return QMOE_OK;
}

void qmoe_weights_destroy(qmoe_weights *weights)
{
    if (!weights) return;
    free(weights->w);
    free(weights->ws);
    free(weights->corr);
    free(weights->wsb);
    weights->magic = 0; /* a stale view is refused rather than misread, as long as memory lasts */
    free(weights);
}

qmoe_status qmoe_weights_tensor(const qmoe_weights *weights, qmoe_tensor **out)
{
    if (!weights) return NULLPTR("weights", "weights is a null pointer");
    if (!out) return NULLPTR("out", "weights_tensor: out is a null pointer");
    if (weights->magic != QMOE_PP_MAGIC)
        return INVALID(FORMAT, "weights", "weights: not a prepacked weight object");
    int64_t shape[3] = {weights->E, weights->K, weights->N};
    qmoe_dtype dt = weights->mode == QMOE_MODE_A8W8 ? QMOE_DTYPE_INT8 : QMOE_DTYPE_INT4;
    qmoe_tensor *t;
    /* the view spans the packed weights (about E K N elements) for phase one's alias checks */
    qmoe_status st = qmoe_tensor_create(shape, 3, NULL, dt, QMOE_FORMAT_ND, weights->w, &t);
    if (st) return st;
    t->packed = weights;
    *out = t;
    return QMOE_OK;
}

uint64_t qmoe_weights_bytes(const qmoe_weights *weights) { return weights ? weights->bytes : 0; }

qmoe_kernel qmoe_weights_kernel(const qmoe_weights *weights)
{
    return weights ? (qmoe_kernel)weights->kernel : QMOE_KERNEL_AUTO;
}
