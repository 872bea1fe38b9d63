/* qmoe_quant_gate_up / qmoe_quant_linear against a plain scalar statement of the scheme
 * (docs/moe-layer.md) and the spec's layout formulas; refusals write nothing. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "qmoe/quantize.h"
#include "support/testlib.h"

#define SENTINEL 0x5A

static float *random_rows(qt_rng *rng, int64_t count)
{
    float *w = malloc((size_t)count * sizeof(float));
    for (int64_t i = 0; i < count; i++) w[i] = qt_uniform(rng, -1.0f, 1.0f) * qt_uniform(rng, 0, 1);
    return w;
}

/* Logical W[e][k][n] of a quantized weight, read back with the spec's formulas. */
static int value_at(const void *weight, int a8w4, int nd, int64_t e, int64_t k, int64_t n,
                    int64_t K, int64_t N)
{
    int64_t cols = a8w4 ? 64 : 32;
    int64_t i = nd ? (e * K + k) * N + n : e * K * N + (n / cols) * (K * cols) + k * cols + n % cols;
    if (!a8w4) return ((const int8_t *)weight)[i];
    int nib = (((const uint8_t *)weight)[i / 2] >> (4 * (i % 2))) & 0xF;
    return nib >= 8 ? nib - 16 : nib;
}

/* The scheme for one group, plainly: float32 scale and division, half-even, clamp. */
static float plain_scale(const float *w, int64_t count, float qmax)
{
    float amax = 0;
    for (int64_t i = 0; i < count; i++)
        if (fabsf(w[i]) > amax) amax = fabsf(w[i]);
    return amax / qmax;
}

static int plain_value(float w, float s, float qmax)
{
    if (s == 0.0f) return 0;
    float q = rintf(w / s);
    return (int)(q > qmax ? qmax : q < -qmax ? -qmax : q);
}

static double group_error(const float *w, int64_t count, float s)
{
    double err = 0;
    for (int64_t i = 0; i < count; i++) {
        double d = (double)w[i] - (double)plain_value(w[i], s, 7.0f) * (double)s;
        err += d * d;
    }
    return err;
}

/* Quantizes gate/up (E experts, I, H) with the options and checks every output. */
static void check_gate_up(int64_t E, int64_t I, int64_t H, qmoe_quant_mode mode, int nd,
                          int64_t group, int clip, int threads)
{
    qt_rng rng = {(uint64_t)(E * 131 + I * 7 + H + mode * 3 + nd + group + clip)};
    int64_t N = 2 * I, K = H, G = group ? K / group : 1, gk = group ? group : K;
    float *gate = random_rows(&rng, E * I * H), *up = random_rows(&rng, E * I * H);
    for (int64_t k = 0; k < H; k++) gate[(1 % E) * I * H + 2 * H + k] = 0.0f; /* a zero channel */
    const void *gp[64], *upp[64];
    for (int64_t e = 0; e < E; e++) {
        gp[e] = gate + e * I * H;
        upp[e] = up + e * I * H;
    }
    qmoe_quant_options o = QMOE_QUANT_OPTIONS_INIT;
    o.mode = mode;
    o.weight_nd = nd;
    o.group_size = group;
    o.clip_search = clip;
    o.threads = threads;
    qmoe_quant_sizes sz;
    CHECK(qmoe_quant_sizes_of(&o, E, K, N, &sz) == QMOE_OK);
    int a8w4 = mode == QMOE_QUANT_A8W4;
    CHECK(sz.weight_bytes == (a8w4 ? E * K * N / 2 : E * K * N));
    CHECK(sz.scale_count == E * G * N && sz.groups == (group ? G : 0));
    void *weight = malloc((size_t)sz.weight_bytes);
    float *scale = malloc((size_t)sz.scale_count * sizeof(float));
    float *bias = malloc((size_t)(E * N) * sizeof(float));
    qmoe_status st = qmoe_quant_gate_up(gp, upp, QMOE_DTYPE_FLOAT32, E, I, H, &o, weight, scale,
                                           bias);
    CHECK_MSG(st == QMOE_OK, "%s", qmoe_last_error());
    float qmax = a8w4 ? 7.0f : 127.0f;
    int64_t bad = 0;
    float *row = malloc((size_t)K * sizeof(float));
    for (int64_t e = 0; e < E; e++)
        for (int64_t n = 0; n < N; n++) {
            /* column n < I is gate row n (the activated half), else up row n - I */
            memcpy(row, (n < I ? gate + (e * I + n) * H : up + (e * I + n - I) * H),
                   (size_t)K * sizeof(float));
            double bsum = 0;
            for (int64_t g = 0; g < G; g++) {
                float s = scale[(e * G + g) * N + n], plain = plain_scale(row + g * gk, gk, qmax);
                if (!clip) {
                    bad += s != plain;
                } else if (plain > 0) {
                    /* the chosen scale is one of the candidates and no candidate beats it */
                    int found = 0;
                    double err = group_error(row + g * gk, gk, s);
                    for (int step = 0; step <= 50; step++) {
                        float r = (float)(100 - step) / 100.0f;
                        float c = (plain_scale(row + g * gk, gk, 1.0f) * r) / 7.0f;
                        found |= c == s;
                        bad += group_error(row + g * gk, gk, c) < err;
                    }
                    bad += !found;
                } else {
                    bad += s != 0.0f;
                }
                for (int64_t k = g * gk; k < (g + 1) * gk; k++) {
                    int v = value_at(weight, a8w4, nd, e, k, n, K, N);
                    bad += v != plain_value(row[k], s, qmax);
                    bsum += (double)v * s;
                }
            }
            if (a8w4) bad += fabs(bias[e * N + n] - 8.0 * bsum) > 1e-6 * (1 + fabs(8.0 * bsum));
        }
    CHECK_MSG(bad == 0, "E=%lld I=%lld H=%lld mode=%d nd=%d group=%lld clip=%d: %lld mismatches",
              (long long)E, (long long)I, (long long)H, mode, nd, (long long)group, clip,
              (long long)bad);
    CHECK(scale[1 % E * G * N + 2] == 0.0f); /* the zero channel */

    /* the same bits on one thread and from bf16 inputs that are exactly these floats */
    qmoe_quant_options o1 = o;
    o1.threads = 1;
    void *w1 = malloc((size_t)sz.weight_bytes);
    float *s1 = malloc((size_t)sz.scale_count * sizeof(float));
    float *b1 = malloc((size_t)(E * N) * sizeof(float));
    CHECK(qmoe_quant_gate_up(gp, upp, QMOE_DTYPE_FLOAT32, E, I, H, &o1, w1, s1, b1) == QMOE_OK);
    CHECK(!memcmp(w1, weight, (size_t)sz.weight_bytes));
    CHECK(!memcmp(s1, scale, (size_t)sz.scale_count * sizeof(float)));
    CHECK(!a8w4 || !memcmp(b1, bias, (size_t)(E * N) * sizeof(float)));
    free(w1);
    free(s1);
    free(b1);
    free(row);
    free(gate);
    free(up);
    free(weight);
    free(scale);
    free(bias);
}

static void check_half_inputs(void)
{
    enum { E = 2, N = 64, K = 32 };
    qt_rng rng = {5};
    static uint16_t bf[E * N * K], hf[E * N * K];
    static float f_bf[E * N * K], f_hf[E * N * K];
    for (int i = 0; i < E * N * K; i++) {
        float v = qt_uniform(&rng, -2, 2);
        uint32_t bits;
        memcpy(&bits, &v, 4);
        bf[i] = (uint16_t)(bits >> 16); /* truncation: some bf16 value, exactly known */
        bits = (uint32_t)bf[i] << 16;
        memcpy(&f_bf[i], &bits, 4);
        int m = (int)qt_range(&rng, -1023, 1023); /* fp16 m * 2^-10: exact */
        hf[i] = (uint16_t)(m < 0 ? 0x8000 | (uint16_t)(-m) : (uint16_t)m); /* subnormal fp16 */
        f_hf[i] = (float)m * 0x1p-24f;
    }
    const void *pb[E] = {bf, bf + N * K}, *ph[E] = {hf, hf + N * K};
    const void *pfb[E] = {f_bf, f_bf + N * K}, *pfh[E] = {f_hf, f_hf + N * K};
    qmoe_quant_options o = QMOE_QUANT_OPTIONS_INIT;
    static int8_t w_a[E * N * K], w_b[E * N * K];
    float s_a[E * N], s_b[E * N];
    CHECK(qmoe_quant_linear(pb, QMOE_DTYPE_BFLOAT16, E, N, K, &o, w_a, s_a, NULL) == QMOE_OK);
    CHECK(qmoe_quant_linear(pfb, QMOE_DTYPE_FLOAT32, E, N, K, &o, w_b, s_b, NULL) == QMOE_OK);
    CHECK(!memcmp(w_a, w_b, sizeof w_a) && !memcmp(s_a, s_b, sizeof s_a));
    CHECK(qmoe_quant_linear(ph, QMOE_DTYPE_FLOAT16, E, N, K, &o, w_a, s_a, NULL) == QMOE_OK);
    CHECK(qmoe_quant_linear(pfh, QMOE_DTYPE_FLOAT32, E, N, K, &o, w_b, s_b, NULL) == QMOE_OK);
    CHECK(!memcmp(w_a, w_b, sizeof w_a) && !memcmp(s_a, s_b, sizeof s_a));
}

/* Every refusal returns its code, names the argument, and leaves all outputs as they were. */
static int64_t refusals_failed;

static void refused(qmoe_status want, const char *arg, const void *const *gate,
                    const void *const *up, qmoe_dtype dtype, int64_t E, int64_t I, int64_t H,
                    const qmoe_quant_options *o, int with_bias)
{
    static int8_t weight[4096];
    static float scale[512], bias[512];
    memset(weight, SENTINEL, sizeof weight);
    memset(scale, SENTINEL, sizeof scale);
    memset(bias, SENTINEL, sizeof bias);
    qmoe_status st = qmoe_quant_gate_up(gate, up, dtype, E, I, H, o, weight, scale,
                                           with_bias ? bias : NULL);
    int untouched = 1;
    for (size_t i = 0; i < sizeof weight; i++) untouched &= weight[i] == SENTINEL;
    for (size_t i = 0; i < sizeof scale; i++) untouched &= ((uint8_t *)scale)[i] == SENTINEL;
    for (size_t i = 0; i < sizeof bias; i++) untouched &= ((uint8_t *)bias)[i] == SENTINEL;
    const qmoe_error_info *info = qmoe_last_error_info();
    int ok = st == want && untouched && !strcmp(info->arg, arg) && qmoe_last_error()[0];
    CHECK_MSG(ok, "want %d arg %s, got %d arg %s untouched %d: %s", want, arg, st, info->arg,
              untouched, qmoe_last_error());
    refusals_failed += !ok;
}

static void check_refusals(void)
{
    enum { E = 2, I = 32, H = 32 };
    static float g[E * I * H], u[E * I * H];
    qt_rng rng = {9};
    for (int i = 0; i < E * I * H; i++) g[i] = u[i] = qt_uniform(&rng, -1, 1);
    const void *gp[E] = {g, g + I * H}, *up[E] = {u, u + I * H}, *holed[E] = {g, NULL};
    qmoe_quant_options o = QMOE_QUANT_OPTIONS_INIT, w4 = o, bad;
    w4.mode = QMOE_QUANT_A8W4;
    refused(QMOE_ERR_PARAM_NULLPTR, "gate", NULL, up, QMOE_DTYPE_FLOAT32, E, I, H, &o, 0);
    refused(QMOE_ERR_PARAM_NULLPTR, "up", gp, holed, QMOE_DTYPE_FLOAT32, E, I, H, &o, 0);
    refused(QMOE_ERR_PARAM_NULLPTR, "up", gp, NULL, QMOE_DTYPE_FLOAT32, E, I, H, &o, 0);
    refused(QMOE_ERR_PARAM_NULLPTR, "bias", gp, up, QMOE_DTYPE_FLOAT32, E, I, H, &w4, 0);
    refused(QMOE_ERR_PARAM_INVALID, "gate", gp, up, QMOE_DTYPE_INT8, E, I, H, &o, 0);
    refused(QMOE_ERR_PARAM_INVALID, "weight", gp, up, QMOE_DTYPE_FLOAT32, E, I, 24, &o, 0);
    refused(QMOE_ERR_PARAM_INVALID, "weight", gp, up, QMOE_DTYPE_FLOAT32, E, 16, H, &w4, 1);
    refused(QMOE_ERR_PARAM_INVALID, "weight", gp, up, QMOE_DTYPE_FLOAT32, -1, I, H, &o, 0);
    refused(QMOE_ERR_PARAM_INVALID, "gate", gp, up, QMOE_DTYPE_FLOAT32, E, -1, H, &o, 0);
    bad = o;
    bad.mode = (qmoe_quant_mode)7;
    refused(QMOE_ERR_PARAM_INVALID, "options", gp, up, QMOE_DTYPE_FLOAT32, E, I, H, &bad, 0);
    bad = o;
    bad.clip_search = 1;
    refused(QMOE_ERR_PARAM_INVALID, "options", gp, up, QMOE_DTYPE_FLOAT32, E, I, H, &bad, 0);
    bad = o;
    bad.group_size = 12;
    refused(QMOE_ERR_PARAM_INVALID, "weight", gp, up, QMOE_DTYPE_FLOAT32, E, I, H, &bad, 0);
    bad = o;
    bad.threads = -2;
    refused(QMOE_ERR_PARAM_INVALID, "options", gp, up, QMOE_DTYPE_FLOAT32, E, I, H, &bad, 0);
    bad = o;
    bad.struct_size = 3;
    refused(QMOE_ERR_PARAM_INVALID, "options", gp, up, QMOE_DTYPE_FLOAT32, E, I, H, &bad, 0);
    /* a non-finite weight anywhere (here the last expert's up) writes nothing */
    u[E * I * H - 1] = NAN;
    refused(QMOE_ERR_PARAM_INVALID, "up", gp, up, QMOE_DTYPE_FLOAT32, E, I, H, &w4, 1);
    CHECK(strstr(qmoe_last_error(), "expert 1, row 31, column 31") != NULL);
    u[E * I * H - 1] = INFINITY;
    refused(QMOE_ERR_PARAM_INVALID, "up", gp, up, QMOE_DTYPE_FLOAT32, E, I, H, &o, 0);
    u[E * I * H - 1] = 0.5f;

    qmoe_quant_sizes sz;
    CHECK(qmoe_quant_sizes_of(&o, (int64_t)1 << 40, (int64_t)1 << 20, (int64_t)1 << 20, &sz) ==
          QMOE_ERR_PARAM_INVALID);
    CHECK(qmoe_last_error_info()->rule == QMOE_RULE_LIMIT);
    CHECK(qmoe_quant_sizes_of(&o, 1, 16, 32, NULL) == QMOE_ERR_PARAM_NULLPTR);
    /* nothing to do: E = 0 succeeds without touching anything */
    CHECK(qmoe_quant_gate_up(NULL, NULL, QMOE_DTYPE_FLOAT32, 0, I, H, &o, NULL, NULL, NULL) ==
          QMOE_OK);
    /* a zeroed options struct is the defaults */
    qmoe_quant_options zero;
    memset(&zero, 0, sizeof zero);
    static int8_t wz[E * I * H * 2];
    static float sz2[E * I * 2];
    CHECK(qmoe_quant_gate_up(gp, up, QMOE_DTYPE_FLOAT32, E, I, H, &zero, wz, sz2, NULL) ==
          QMOE_OK);
    CHECK(qmoe_last_error()[0] == '\0');
}

int main(void)
{
    for (int nd = 0; nd <= 1; nd++) {
        check_gate_up(3, 32, 64, QMOE_QUANT_A8W8, nd, 0, 0, 4);
        check_gate_up(3, 32, 64, QMOE_QUANT_A8W8, nd, 32, 0, 2);
        check_gate_up(2, 64, 128, QMOE_QUANT_A8W4, nd, 0, 0, 3);
        check_gate_up(2, 64, 256, QMOE_QUANT_A8W4, nd, 128, 0, 5);
        check_gate_up(2, 32, 128, QMOE_QUANT_A8W4, nd, 64, 1, 3);
    }
    check_gate_up(2, 3, 10, QMOE_QUANT_A8W8, 1, 5, 0, 2); /* ND: any K, odd I */
    check_gate_up(1, 5, 8, QMOE_QUANT_A8W4, 1, 0, 0, 0);  /* ND int4: N = 10 even, not % 8 */
    check_half_inputs();
    check_refusals();
    return qt_finish("weight_quant");
}
