/* Public weight-layout helpers: ND <-> FRACTAL_NZ, int4 packing, the A8W4 assist matrix. */
#include <stdlib.h>

#include "core/checked.h"
#include "core/gmm_access.h" /* qmoe_nibble, qmoe_word_nibble: the kernels' int4 decoding */
#include "core/status.h"
#include "qmoe/qmoe.h"

/* Checks E, K, N >= 0, the NZ alignment (k_align, n_align; 1 = none) and that E*K*N fits, with
 * room to spare: the element indices below (nibbles for int4) are then free of overflow. */
static qmoe_status check_ekn(const char *fn, int64_t E, int64_t K, int64_t N, int64_t k_align,
                             int64_t n_align, int64_t *total)
{
    if (E < 0 || K < 0 || N < 0)
        return qmoe_fail(QMOE_ERR_PARAM_INVALID, "%s: negative size E=%lld K=%lld N=%lld", fn,
                         (long long)E, (long long)K, (long long)N);
    if (K % k_align || N % n_align)
        return qmoe_fail(QMOE_ERR_PARAM_INVALID,
                         "%s: FRACTAL_NZ needs K %% %lld == 0 and N %% %lld == 0 (K=%lld N=%lld)",
                         fn, (long long)k_align, (long long)n_align, (long long)K, (long long)N);
    if (!qmoe_mul_i64(E, K, total) || !qmoe_mul_i64(*total, N, total) || *total > INT64_MAX / 8)
        return qmoe_fail(QMOE_ERR_PARAM_INVALID, "%s: E*K*N overflows", fn);
    return QMOE_OK;
}

/* Flat NZ element index of W[e][k][n] for a column tile of `cols` (32 int8, 64 int4). */
static inline int64_t nz_index(int64_t e, int64_t k, int64_t n, int64_t K, int64_t N, int64_t cols)
{
    return e * K * N + (n / cols) * (K * cols) + k * cols + (n % cols);
}

static qmoe_status check_values(const char *fn, const int8_t *v, int64_t count)
{
    for (int64_t i = 0; i < count; i++)
        if (v[i] < -8 || v[i] > 7)
            return qmoe_fail(QMOE_ERR_PARAM_INVALID, "%s: value[%lld] = %d outside int4 [-8, 7]",
                             fn, (long long)i, v[i]);
    return QMOE_OK;
}

static inline void put_nibble(uint8_t *bytes, int64_t i, int v)
{
    int shift = (int)(i & 1) * 4;
    bytes[i >> 1] = (uint8_t)((bytes[i >> 1] & ~(0xF << shift)) | ((v & 0xF) << shift));
}

/* Every successful return clears the last error, including the early ones for empty sizes. */
static qmoe_status succeed(void)
{
    qmoe_clear_error();
    return QMOE_OK;
}

#define REQUIRE(ptr, fn, name)                                                                   \
    do {                                                                                         \
        if (!(ptr)) return qmoe_fail(QMOE_ERR_PARAM_NULLPTR, "%s: %s is NULL", fn, name);      \
    } while (0)

/* One element loop for the four ND <-> NZ conversions: int8 moves bytes, int4 moves nibbles
 * (unpacked int8 values on the ND side, validated when they go in). */
static qmoe_status relayout(const char *fn, const char *src_name, const char *dst_name,
                            const void *src, void *dst, int64_t E, int64_t K, int64_t N, int int4,
                            int to_nz)
{
    int64_t cols = int4 ? 64 : 32, total;
    qmoe_status st = check_ekn(fn, E, K, N, 16, cols, &total);
    if (st) return st;
    if (total == 0) return succeed();
    REQUIRE(src, fn, src_name);
    REQUIRE(dst, fn, dst_name);
    if (int4 && to_nz && (st = check_values(fn, src, total))) return st;
    for (int64_t e = 0; e < E; e++)
        for (int64_t k = 0; k < K; k++)
            for (int64_t n = 0; n < N; n++) {
                int64_t nd_i = (e * K + k) * N + n, nz_i = nz_index(e, k, n, K, N, cols);
                if (!int4 && to_nz) ((int8_t *)dst)[nz_i] = ((const int8_t *)src)[nd_i];
                else if (!int4) ((int8_t *)dst)[nd_i] = ((const int8_t *)src)[nz_i];
                else if (to_nz) put_nibble(dst, nz_i, ((const int8_t *)src)[nd_i]);
                else ((int8_t *)dst)[nd_i] = (int8_t)qmoe_nibble(src, nz_i);
            }
    return succeed();
}

qmoe_status qmoe_layout_nd_to_nz_int8(const int8_t *nd, int64_t E, int64_t K, int64_t N, int8_t *nz)
{
    return relayout("nd_to_nz_int8", "nd", "nz", nd, nz, E, K, N, 0, 1);
}

qmoe_status qmoe_layout_nz_to_nd_int8(const int8_t *nz, int64_t E, int64_t K, int64_t N, int8_t *nd)
{
    return relayout("nz_to_nd_int8", "nz", "nd", nz, nd, E, K, N, 0, 0);
}

qmoe_status qmoe_layout_nd_to_nz_int4(const int8_t *nd_values, int64_t E, int64_t K, int64_t N,
                               uint8_t *nz_packed)
{
    return relayout("nd_to_nz_int4", "nd_values", "nz_packed", nd_values, nz_packed, E, K, N, 1, 1);
}

qmoe_status qmoe_layout_nz_to_nd_int4(const uint8_t *nz_packed, int64_t E, int64_t K, int64_t N,
                               int8_t *nd_values)
{
    return relayout("nz_to_nd_int4", "nz_packed", "nd_values", nz_packed, nd_values, E, K, N, 1, 0);
}

/* The count and buffers of a pack/unpack call; the buffers may be NULL only when count is 0.
 * The INT64_MAX / 2 cap keeps (count + 1) / 2 and the nibble indices clear of overflow. */
static qmoe_status check_io(const char *fn, int64_t count, int64_t multiple, const void *in,
                            const char *in_name, const void *out, const char *out_name)
{
    if (count < 0 || count % multiple || count > INT64_MAX / 2)
        return qmoe_fail(QMOE_ERR_PARAM_INVALID, "%s: count %lld must be >= 0%s", fn,
                         (long long)count, multiple == 8 ? " and a multiple of 8" : "");
    if (count > 0) {
        REQUIRE(in, fn, in_name);
        REQUIRE(out, fn, out_name);
    }
    return QMOE_OK;
}

qmoe_status qmoe_layout_int4_pack(const int8_t *values, int64_t count, uint8_t *packed)
{
    qmoe_status st;
    if ((st = check_io("pack_int4", count, 1, values, "values", packed, "packed")) ||
        (st = check_values("pack_int4", values, count)))
        return st;
    for (int64_t i = 0; i < count; i += 2) {
        int lo = values[i] & 0xF, hi = i + 1 < count ? values[i + 1] & 0xF : 0;
        packed[i / 2] = (uint8_t)(lo | hi << 4);
    }
    return succeed();
}

qmoe_status qmoe_layout_int4_unpack(const uint8_t *packed, int64_t count, int8_t *values)
{
    qmoe_status st = check_io("unpack_int4", count, 1, packed, "packed", values, "values");
    if (st) return st;
    for (int64_t i = 0; i < count; i++) values[i] = (int8_t)qmoe_nibble(packed, i);
    return succeed();
}

qmoe_status qmoe_layout_int4_pack_int32(const int8_t *values, int64_t count, int32_t *words)
{
    qmoe_status st;
    if ((st = check_io("pack_int4_int32", count, 8, values, "values", words, "words")) ||
        (st = check_values("pack_int4_int32", values, count)))
        return st;
    for (int64_t w = 0; w < count / 8; w++) {
        uint32_t word = 0;
        for (int j = 0; j < 8; j++) word |= (uint32_t)(values[8 * w + j] & 0xF) << (4 * j);
        words[w] = (int32_t)word;
    }
    return succeed();
}

qmoe_status qmoe_layout_int4_unpack_int32(const int32_t *words, int64_t count, int8_t *values)
{
    qmoe_status st = check_io("unpack_int4_int32", count, 8, words, "words", values, "values");
    if (st) return st;
    for (int64_t i = 0; i < count; i++)
        values[i] = (int8_t)qmoe_word_nibble(words, i / 8, (int)(i % 8));
    return succeed();
}

qmoe_status qmoe_layout_weight_assist_matrix(const int8_t *nd_values, int64_t E, int64_t K, int64_t N,
                                      const float *scale, int64_t groups, float *bias)
{
    int64_t total;
    qmoe_status st = check_ekn("weight_assist_matrix", E, K, N, 1, 1, &total);
    if (st) return st;
    if (groups < 0 || (groups > 0 && K % groups))
        return qmoe_fail(QMOE_ERR_PARAM_INVALID,
                         "weight_assist_matrix: groups = %lld must be 0 (per-channel) or divide "
                         "K = %lld",
                         (long long)groups, (long long)K);
    /* the scale's extent E*G*N too: with K == 0 any G divides K */
    int64_t en, egn;
    if (!qmoe_mul_i64(E, N, &en) || !qmoe_mul_i64(en, groups ? groups : 1, &egn))
        return qmoe_fail(QMOE_ERR_PARAM_INVALID, "weight_assist_matrix: E*N or E*G*N overflows");
    if (en == 0) return succeed();
    REQUIRE(scale, "weight_assist_matrix", "scale");
    REQUIRE(bias, "weight_assist_matrix", "bias");
    if (total > 0) {
        REQUIRE(nd_values, "weight_assist_matrix", "nd_values");
        if ((st = check_values("weight_assist_matrix", nd_values, total))) return st;
    }
    int64_t G = groups ? groups : 1, per = K / G;
    for (int64_t e = 0; e < E; e++)
        for (int64_t n = 0; n < N; n++) {
            double acc = 0.0;
            for (int64_t g = 0; g < G; g++) {
                double s = groups ? scale[(e * G + g) * N + n] : scale[e * N + n];
                int64_t wsum = 0;
                for (int64_t k = g * per; k < (g + 1) * per; k++)
                    wsum += nd_values[(e * K + k) * N + n];
                acc += (double)wsum * s;
            }
            bias[e * N + n] = (float)(8.0 * acc);
        }
    return succeed();
}
