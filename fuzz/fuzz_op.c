/*
 * The whole operator on tiny valid cases decoded from the input, run with every kernel this CPU
 * runs, once with 1 thread and once with several threads on 1-3 devices, and compared with the
 * reference kernel: outputs within +-1, scales within 1e-6 relative (or float32's error bound
 * under cancellation; non-finite rows non-finite in both, output 0); each kernel bit-identical
 * across thread and device counts; no byte outside the written rows and elements touched.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/halfconv.h"
#include "fuzz_input.h"
#include "qmoe/qmoe.h"
#include "support/oracle.h"

typedef struct fz_case {
    int64_t M, K, N, E, Eg, G; /* G = 0: per-channel */
    int layout;                /* oracle_wlayout */
    qmoe_dtype scale_dtype;
    qmoe_group_list_type gl_type;
    int64_t x_s0, x_s1, out_s0, out_s1, outs_s;
    int8_t *x, *w_logical;
    uint8_t *w_packed;
    void *ws;
    float *bias, *xs;
    int64_t *gl;
    int64_t rows_written; /* g[last] */
    double *noise;        /* per row: the oracle's bound on float32 rounding noise in S */
    size_t out_bytes, outs_count;
} fz_case;

/* A float scale: usually modest, sometimes 0, negative, tiny or (rarely) non-finite. */
static float pick_scale(uint64_t *s, int specials)
{
    uint64_t r = fz_mix(s);
    switch (r % 32) {
    case 0: return 0.0f;
    case 1: return -ldexpf((float)(r >> 40 & 0xFFF) + 1.0f, -16);
    case 2: return ldexpf(1.0f, -(int)(r >> 40 & 31));
    case 3: return specials ? (r & 256 ? NAN : ((r & 512) ? INFINITY : -INFINITY)) : 1.0f;
    default: return ldexpf((float)(r >> 40 & 0xFFFF) + 1.0f, -22);
    }
}

/* Nearest-even float -> half / bfloat16 bits (finite, normal-range inputs suffice here). */
static uint16_t to_bf16(float f)
{
    uint32_t b = qmoe_f32_to_bits(f);
    if (isnan(f)) return 0x7FC0;
    return (uint16_t)((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16);
}

static uint16_t to_f16(float f)
{
    uint32_t b = qmoe_f32_to_bits(f), sign = (b >> 16) & 0x8000u;
    if (isnan(f)) return 0x7E00;
    float a = fabsf(f);
    if (a >= 65520.0f) return (uint16_t)(sign | 0x7C00u);
    if (a < ldexpf(1.0f, -24)) return (uint16_t)sign;
    int e;
    float m = frexpf(a, &e); /* a = m * 2^e, m in [0.5, 1) */
    if (e < -13) /* subnormal half: units of 2^-24 */
        return (uint16_t)(sign | (uint32_t)rintf(ldexpf(a, 24)));
    uint32_t mant = (uint32_t)rintf(ldexpf(m, 11)); /* 1024..2048 */
    if (mant == 2048) { mant = 1024; e++; }
    return (uint16_t)(sign | (uint32_t)(e + 14) << 10 | (mant - 1024));
}

/* The weight scale as stored (dtype) and as the spec decodes it (float). */
static void put_scale(fz_case *c, int64_t i, float v, float *decoded)
{
    switch (c->scale_dtype) {
    case QMOE_DTYPE_FLOAT16: {
        uint16_t h = to_f16(v);
        ((uint16_t *)c->ws)[i] = h;
        decoded[i] = qmoe_f16_to_f32(h);
        break;
    }
    case QMOE_DTYPE_BFLOAT16: {
        uint16_t h = to_bf16(v);
        ((uint16_t *)c->ws)[i] = h;
        decoded[i] = qmoe_bf16_to_f32(h);
        break;
    }
    case QMOE_DTYPE_UINT64: /* float32 bits in the low word; junk in the high one */
        ((uint64_t *)c->ws)[i] = (uint64_t)0xABCD1234u << 32 | qmoe_f32_to_bits(v);
        decoded[i] = v;
        break;
    default:
        ((float *)c->ws)[i] = v;
        decoded[i] = v;
        break;
    }
}

static int64_t pick_divisor(fz_input *in, int64_t K)
{
    int64_t divs[64], n = 0;
    for (int64_t g = 1; g <= K && n < 64; g++)
        if (K % g == 0) divs[n++] = g;
    return divs[fz_range(in, 0, n - 1)];
}

static double finite_or_0(float v) { return isfinite(v) ? v : 0.0; }

/* The oracle's noise bound per row (tests/support/oracle.h): where the A8W4 bias cancels most
 * of the product, two correct float32 evaluations differ by more than 1e-6 relative. */
static void oracle_noise(fz_case *c, const float *decoded_ws)
{
    int64_t G = c->G ? c->G : 1, n2 = c->N / 2, M = c->M;
    double *ws = fz_xcalloc((size_t)(c->E * G * c->N), sizeof *ws), *xs = fz_xcalloc((size_t)M, sizeof *xs);
    double *bias = fz_xcalloc((size_t)(c->E * c->N), sizeof *bias);
    /* The oracle takes finite numbers; rows that meet a non-finite input are non-finite and
     * compared without the bound. */
    for (int64_t i = 0; i < c->E * G * c->N; i++) ws[i] = finite_or_0(decoded_ws[i]);
    for (int64_t m = 0; m < M; m++) xs[m] = finite_or_0(c->xs[m]);
    for (int64_t i = 0; c->bias && i < c->E * c->N; i++) bias[i] = finite_or_0(c->bias[i]);
    oracle_case oc = {.M = M, .K = c->K, .N = c->N, .E = c->E, .E_groups = c->Eg, .G = G,
                      .a8w4 = c->bias != NULL, .x = c->x, .x_s0 = c->x_s0, .x_s1 = c->x_s1,
                      .w = c->w_logical, .ws = ws, .bias = bias, .xs = xs, .gl = c->gl,
                      .count_list = c->gl_type == QMOE_GROUP_LIST_COUNT};
    double *S = fz_xcalloc((size_t)(M * n2), sizeof *S), *scale = fz_xcalloc((size_t)M, sizeof *scale);
    int8_t *q = fz_xcalloc((size_t)(M * n2), 1);
    uint8_t *written = fz_xcalloc((size_t)M, 1);
    oracle_run(&oc, S, scale, q, written, c->noise);
    free(ws), free(xs), free(bias), free(S), free(scale), free(q), free(written);
}

static void build(fz_input *in, fz_case *c)
{
    memset(c, 0, sizeof *c);
    c->layout = (int)fz_range(in, 0, 5);
    int a8w4 = c->layout >= ORACLE_W_INT4_ND;
    int nz = c->layout == ORACLE_W_INT8_NZ || c->layout == ORACLE_W_INT4_NZ ||
             c->layout == ORACLE_W_INT32_NZ;
    c->M = fz_range(in, 0, 12);
    c->K = nz ? fz_range(in, 1, 2) * 16 : fz_range(in, 1, 40);
    if (nz) c->N = a8w4 ? 64 : 32 * fz_range(in, 1, 2);
    else if (c->layout == ORACLE_W_INT32_ND) c->N = 8 * fz_range(in, 1, 3);
    else c->N = 2 * fz_range(in, 1, 12);
    c->E = fz_range(in, 1, 4);
    c->Eg = fz_range(in, 0, c->E);
    c->G = fz_u8(in) % 3 == 0 ? pick_divisor(in, c->K) : 0;
    static const qmoe_dtype sd[] = {QMOE_DTYPE_FLOAT32, QMOE_DTYPE_FLOAT16, QMOE_DTYPE_BFLOAT16,
                                    QMOE_DTYPE_UINT64};
    c->scale_dtype = sd[fz_range(in, 0, a8w4 ? 3 : 2)];
    c->gl_type = fz_u8(in) & 1 ? QMOE_GROUP_LIST_COUNT : QMOE_GROUP_LIST_CUMSUM;
    c->x_s1 = fz_range(in, 1, 2);
    c->x_s0 = c->K * c->x_s1 + fz_range(in, 0, 3);
    c->out_s1 = fz_range(in, 1, 2);
    c->out_s0 = c->N / 2 * c->out_s1 + fz_range(in, 0, 3);
    c->outs_s = fz_range(in, 1, 2);
    uint8_t flavour = fz_u8(in);
    int specials = flavour % 16 == 0;      /* non-finite scales somewhere */
    int extreme = flavour % 16 == 1;       /* x and W at their most negative */
    int own_bias = a8w4 && flavour % 4 == 2; /* a bias not built from the weights */
    uint64_t seed = fz_u64(in);

    /* groupList: counts that add up to at most M */
    c->gl = fz_xcalloc((size_t)c->Eg, sizeof *c->gl);
    int64_t end = 0;
    for (int64_t e = 0; e < c->Eg; e++) {
        int64_t cnt = fz_range(in, 0, c->M - end);
        end += cnt;
        c->gl[e] = c->gl_type == QMOE_GROUP_LIST_COUNT ? cnt : end;
    }
    c->rows_written = end;

    c->x = fz_xcalloc((size_t)(c->M ? (c->M - 1) * c->x_s0 + (c->K - 1) * c->x_s1 + 1 : 1), 1);
    for (int64_t m = 0; m < c->M; m++)
        for (int64_t k = 0; k < c->K; k++)
            c->x[m * c->x_s0 + k * c->x_s1] = extreme ? -128 : (int8_t)fz_mix(&seed);
    int64_t wn = c->E * c->K * c->N;
    c->w_logical = fz_xcalloc((size_t)wn, 1);
    for (int64_t i = 0; i < wn; i++)
        c->w_logical[i] = extreme ? (a8w4 ? -8 : -128)
                                  : (int8_t)(a8w4 ? (int)(fz_mix(&seed) % 16) - 8 : (int8_t)fz_mix(&seed));
    c->w_packed = fz_xcalloc((size_t)oracle_weight_bytes(c->layout, c->E, c->K, c->N), 1);
    oracle_pack_weight(c->layout, c->w_logical, c->E, c->K, c->N, c->w_packed);

    int64_t groups = c->G ? c->G : 1, ns = c->E * groups * c->N;
    int bytes = c->scale_dtype == QMOE_DTYPE_UINT64 ? 8 : c->scale_dtype == QMOE_DTYPE_FLOAT32 ? 4 : 2;
    c->ws = fz_xcalloc((size_t)ns, (size_t)bytes);
    float *decoded = fz_xcalloc((size_t)ns, sizeof *decoded);
    for (int64_t i = 0; i < ns; i++) put_scale(c, i, pick_scale(&seed, specials), decoded);
    c->xs = fz_xcalloc((size_t)c->M, sizeof *c->xs);
    for (int64_t m = 0; m < c->M; m++) c->xs[m] = pick_scale(&seed, specials);
    if (a8w4) {
        c->bias = fz_xcalloc((size_t)(c->E * c->N), sizeof *c->bias);
        if (own_bias)
            for (int64_t i = 0; i < c->E * c->N; i++) c->bias[i] = pick_scale(&seed, specials) * 64;
        else if (qmoe_layout_weight_assist_matrix(c->w_logical, c->E, c->K, c->N, decoded, c->G,
                                           c->bias) != QMOE_OK)
            abort();
    }
    c->noise = fz_xcalloc((size_t)c->M, sizeof *c->noise);
    oracle_noise(c, decoded);
    free(decoded);
    c->out_bytes = (size_t)(c->M ? (c->M - 1) * c->out_s0 + (c->N / 2 - 1) * c->out_s1 + 1 : 1);
    c->outs_count = (size_t)(c->M ? (c->M - 1) * c->outs_s + 1 : 1);
}

static void destroy(fz_case *c)
{
    free(c->x);
    free(c->w_logical);
    free(c->w_packed);
    free(c->ws);
    free(c->bias);
    free(c->xs);
    free(c->gl);
    free(c->noise);
}

static qmoe_tensor *tensor(int ndim, const int64_t *shape, const int64_t *strides, qmoe_dtype dt,
                           qmoe_format fmt, void *data)
{
    qmoe_tensor *t;
    if (qmoe_tensor_create(shape, ndim, strides, dt, fmt, data, &t) != QMOE_OK) {
        fprintf(stderr, "fuzz_op: tensor: %s\n", qmoe_last_error());
        abort();
    }
    return t;
}

static qmoe_tensor *weight_tensor(const fz_case *c)
{
    int64_t E = c->E, K = c->K, N = c->N;
    switch (c->layout) {
    case ORACLE_W_INT8_ND:
        return tensor(3, (int64_t[]){E, K, N}, NULL, QMOE_DTYPE_INT8, QMOE_FORMAT_ND, c->w_packed);
    case ORACLE_W_INT8_NZ:
        return tensor(5, (int64_t[]){E, N / 32, K / 16, 16, 32}, NULL, QMOE_DTYPE_INT8,
                      QMOE_FORMAT_FRACTAL_NZ, c->w_packed);
    case ORACLE_W_INT4_ND:
        return tensor(3, (int64_t[]){E, K, N}, NULL, QMOE_DTYPE_INT4, QMOE_FORMAT_ND, c->w_packed);
    case ORACLE_W_INT4_NZ:
        return tensor(5, (int64_t[]){E, N / 64, K / 16, 16, 64}, NULL, QMOE_DTYPE_INT4,
                      QMOE_FORMAT_FRACTAL_NZ, c->w_packed);
    case ORACLE_W_INT32_ND:
        return tensor(3, (int64_t[]){E, K, N / 8}, NULL, QMOE_DTYPE_INT32, QMOE_FORMAT_ND,
                      c->w_packed);
    default:
        return tensor(5, (int64_t[]){E, N / 64, K / 16, 16, 8}, NULL, QMOE_DTYPE_INT32,
                      QMOE_FORMAT_FRACTAL_NZ, c->w_packed);
    }
}

enum { SENTINEL = 0x5A };

/* Plans and runs the case; returns 0 when the kernel is not available on this CPU. */
static int run(const fz_case *c, qmoe_kernel kernel, int threads, int devices, int8_t *out, float *outs)
{
    qmoe_tensor *x = tensor(2, (int64_t[]){c->M, c->K}, (int64_t[]){c->x_s0, c->x_s1},
                            QMOE_DTYPE_INT8, QMOE_FORMAT_ND, c->x);
    qmoe_tensor *w = weight_tensor(c);
    qmoe_tensor *bias = c->bias ? tensor(2, (int64_t[]){c->E, c->N}, NULL, QMOE_DTYPE_FLOAT32,
                                         QMOE_FORMAT_ND, c->bias)
                                : NULL;
    qmoe_tensor *ws = c->G ? tensor(3, (int64_t[]){c->E, c->G, c->N}, NULL, c->scale_dtype,
                                    QMOE_FORMAT_ND, c->ws)
                           : tensor(2, (int64_t[]){c->E, c->N}, NULL, c->scale_dtype,
                                    QMOE_FORMAT_ND, c->ws);
    qmoe_tensor *xs = tensor(1, (int64_t[]){c->M}, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, c->xs);
    qmoe_tensor *gl = tensor(1, (int64_t[]){c->Eg}, NULL, QMOE_DTYPE_INT64, QMOE_FORMAT_ND, c->gl);
    qmoe_tensor *o = tensor(2, (int64_t[]){c->M, c->N / 2}, (int64_t[]){c->out_s0, c->out_s1},
                            QMOE_DTYPE_INT8, QMOE_FORMAT_ND, out);
    qmoe_tensor *os = tensor(1, (int64_t[]){c->M}, (int64_t[]){c->outs_s}, QMOE_DTYPE_FLOAT32,
                             QMOE_FORMAT_ND, outs);
    qmoe_grouped_matmul_swiglu_quant_options opt = {.group_list_type = c->gl_type, .kernel = kernel, .threads = threads,
                           .devices = devices};
    uint64_t size = 0;
    qmoe_grouped_matmul_swiglu_quant_executor *ex = NULL;
    qmoe_status st = qmoe_grouped_matmul_swiglu_quant_workspace_size(x, w, bias, NULL, ws, xs, gl, o, os,
                                                          NULL, &opt, &size, &ex);
    qmoe_tensor *all[] = {x, w, bias, ws, xs, gl, o, os};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) qmoe_tensor_destroy(all[i]);
    if (st != QMOE_OK) {
        /* Only a kernel this CPU (or this build) lacks may be refused. */
        if (kernel == QMOE_KERNEL_REFERENCE || st != QMOE_ERR_PARAM_INVALID) {
            fprintf(stderr, "fuzz_op: %s refused a valid case: %s\n", qmoe_kernel_name(kernel),
                    qmoe_last_error());
            abort();
        }
        return 0;
    }
    void *work = malloc(size ? size : 1);
    if (!work) abort();
    st = qmoe_grouped_matmul_swiglu_quant(work, size, ex, NULL);
    if (st != QMOE_OK) {
        fprintf(stderr, "fuzz_op: %s failed on a valid case: %s\n", qmoe_kernel_name(kernel),
                qmoe_last_error());
        abort();
    }
    free(work);
    qmoe_grouped_matmul_swiglu_quant_executor_destroy(ex);
    return 1;
}

static void fail(const char *what, qmoe_kernel kernel, int threads, int64_t m, int64_t j)
{
    fprintf(stderr, "fuzz_op: %s: kernel %s, %d threads, row %lld, column %lld\n", what,
            qmoe_kernel_name(kernel), threads, (long long)m, (long long)j);
    abort();
}

/* Bytes that belong to no written element keep the sentinel. */
static void check_untouched(const fz_case *c, const int8_t *out, const float *outs,
                            qmoe_kernel kernel, int threads)
{
    uint8_t *mine = fz_xcalloc(c->out_bytes, 1);
    for (int64_t m = 0; m < c->rows_written; m++)
        for (int64_t j = 0; j < c->N / 2; j++) mine[m * c->out_s0 + j * c->out_s1] = 1;
    for (size_t i = 0; i < c->out_bytes; i++)
        if (!mine[i] && (uint8_t)out[i] != SENTINEL) fail("wrote outside its rows", kernel, threads, (int64_t)i, -1);
    free(mine);
    for (size_t i = 0; i < c->outs_count; i++) {
        int written = (int64_t)i % c->outs_s == 0 && (int64_t)i / c->outs_s < c->rows_written;
        uint32_t bits;
        memcpy(&bits, &outs[i], sizeof bits);
        if (!written && bits != 0x5A5A5A5Au) fail("wrote a scale outside its rows", kernel, threads, (int64_t)i, -1);
    }
}

/* A non-finite row is "as computed" (spec): NaN in one formula may be Inf in another (the
 * reference's 16*C_high + C_low + bias meets Inf - Inf where x*W meets Inf), so non-finite rows
 * only have to agree on being non-finite, with an all-zero output row. Finite scales agree to
 * 1e-6 relative, or within float32's own error where cancellation makes that larger; outputs to
 * +-1 where amax stands well above that error (the rule of tests/test_reference.c). */
static int scale_close(float a, float b, double noise)
{
    if (!isfinite(a) || !isfinite(b)) return !isfinite(a) && !isfinite(b);
    double d = fabs((double)a - (double)b);
    return d <= 1e-6 * fmax(fabs(a), fabs(b)) || d <= 4.0 * noise / 127.0;
}

static void compare(const fz_case *c, const int8_t *ref, const float *ref_s, const int8_t *out,
                    const float *outs, qmoe_kernel kernel, int threads)
{
    for (int64_t m = 0; m < c->rows_written; m++) {
        float a = ref_s[m * c->outs_s], b = outs[m * c->outs_s];
        if (!scale_close(a, b, c->noise[m])) {
            fprintf(stderr, "scale %.9g vs reference %.9g (noise %.3g)\n", b, a, c->noise[m]);
            fail("scale differs from the reference", kernel, threads, m, -1);
        }
        int determined = isfinite(b) && 127.0 * fabs(a) >= 600.0 * c->noise[m];
        for (int64_t j = 0; j < c->N / 2; j++) {
            int v = out[m * c->out_s0 + j * c->out_s1], d = v - ref[m * c->out_s0 + j * c->out_s1];
            if (!isfinite(b) && v != 0) fail("non-finite row with a nonzero output", kernel, threads, m, j);
            if (determined && (d < -1 || d > 1))
                fail("output differs from the reference by more than 1", kernel, threads, m, j);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_input in = {data, size, 0};
    fz_case c;
    build(&in, &c);
    /* the second run: several threads, on a default group of 1-3 devices (stream NULL) */
    int many = (int)fz_range(&in, 2, 4), devices = (int)fz_range(&in, 1, 3);

    int8_t *ref = fz_xcalloc(c.out_bytes, 1), *out = fz_xcalloc(c.out_bytes, 1), *out1 = fz_xcalloc(c.out_bytes, 1);
    float *ref_s = fz_xcalloc(c.outs_count, sizeof(float)), *outs = fz_xcalloc(c.outs_count, sizeof(float)),
          *outs1 = fz_xcalloc(c.outs_count, sizeof(float));
    /* every kernel the library names (the reference first), from its one list of instruction
     * sets: the ids are dense, the first unnamed one ends them */
    qmoe_kernel kernels[64];
    size_t nkernels = 0;
    while (nkernels < 64 && strcmp(qmoe_kernel_name((qmoe_kernel)(nkernels + 1)), "unknown")) {
        kernels[nkernels] = (qmoe_kernel)(nkernels + 1);
        nkernels++;
    }
    for (size_t k = 0; k < nkernels; k++) {
        const int thread_counts[] = {1, many};
        int available = 1;
        for (int t = 0; t < 2 && available; t++) {
            int8_t *o = t ? out : out1;
            float *os = t ? outs : outs1;
            memset(o, SENTINEL, c.out_bytes);
            memset(os, SENTINEL, c.outs_count * sizeof(float));
            available = run(&c, kernels[k], thread_counts[t], t ? devices : 1, o, os);
            if (available) check_untouched(&c, o, os, kernels[k], thread_counts[t]);
        }
        if (!available) continue;
        if (k == 0) { /* the reference with one thread is the yardstick */
            memcpy(ref, out1, c.out_bytes);
            memcpy(ref_s, outs1, c.outs_count * sizeof(float));
        }
        /* Rows past the last group hold the sentinel in both runs, so whole buffers compare. */
        if (memcmp(out1, out, c.out_bytes) || memcmp(outs1, outs, c.outs_count * sizeof(float)))
            fail("results differ between 1 thread and several threads or devices", kernels[k], many,
                 -1, devices);
        compare(&c, ref, ref_s, out1, outs1, kernels[k], 1);
    }
    free(ref); free(out); free(out1); free(ref_s); free(outs); free(outs1);
    destroy(&c);
    return 0;
}
