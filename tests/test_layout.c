/* Layout helpers: ND <-> FRACTAL_NZ (int8, int4), int4 packing and its int32 view, the A8W4
 * assist matrix, each checked against the spec's formulas as re-derived in support/oracle.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "qmoe/qmoe.h"
#include "support/oracle.h"
#include "support/testlib.h"

static qt_rng rng = {12345};

static void fill_values(int8_t *v, int64_t n, int lo, int hi)
{
    for (int64_t i = 0; i < n; i++) v[i] = (int8_t)qt_range(&rng, lo, hi);
}

static int all_bytes_are(const void *p, size_t n, unsigned char b)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        if (c[i] != b) return 0;
    return 1;
}

static const int64_t shapes[][3] = {
    {0, 16, 64}, {1, 0, 64},  {1, 16, 0},   {1, 16, 64},  {2, 16, 64},  {1, 32, 128},
    {3, 48, 192}, {2, 80, 320}, {1, 256, 64}, {2, 128, 512}, {1, 16, 1024}, {4, 64, 256},
};
enum { NSHAPES = sizeof shapes / sizeof shapes[0] };

static void test_nz_int8(void)
{
    /* int8 also accepts N = 32 * odd */
    static const int64_t extra[][3] = {{1, 16, 32}, {2, 32, 96}, {3, 16, 160}};
    for (int s = 0; s < NSHAPES + 3; s++) {
        const int64_t *d = s < NSHAPES ? shapes[s] : extra[s - NSHAPES];
        int64_t E = d[0], K = d[1], N = d[2], total = E * K * N;
        size_t bytes = (size_t)(total ? total : 1);
        int8_t *w = malloc(bytes), *nz = malloc(bytes), *back = malloc(bytes);
        uint8_t *expect = malloc(bytes);
        fill_values(w, total, -128, 127);
        memset(nz, 0x5A, bytes);
        CHECK_MSG(qmoe_layout_nd_to_nz_int8(w, E, K, N, nz) == QMOE_OK, "E=%lld K=%lld N=%lld",
                  (long long)E, (long long)K, (long long)N);
        int bad = 0;
        for (int64_t e = 0; e < E; e++)
            for (int64_t k = 0; k < K; k++)
                for (int64_t n = 0; n < N; n++)
                    bad += nz[oracle_nz_index(e, k, n, K, N, 32)] != w[(e * K + k) * N + n];
        CHECK_MSG(bad == 0, "%d misplaced NZ int8 elements (E=%lld K=%lld N=%lld)", bad,
                  (long long)E, (long long)K, (long long)N);
        /* the 5-D reading [e][n1][k1][k0][n0] = W[e][16k1+k0][32n1+n0] */
        if (total) {
            int64_t e = E - 1, n1 = N / 32 - 1, k1 = K / 16 - 1, k0 = 15, n0 = 31;
            int64_t flat = (((e * (N / 32) + n1) * (K / 16) + k1) * 16 + k0) * 32 + n0;
            CHECK(nz[flat] == w[(e * K + 16 * k1 + k0) * N + 32 * n1 + n0]);
        }
        oracle_pack_weight(ORACLE_W_INT8_NZ, w, E, K, N, expect);
        CHECK(memcmp(nz, expect, (size_t)total) == 0);
        memset(back, 0x5A, bytes);
        CHECK(qmoe_layout_nz_to_nd_int8(nz, E, K, N, back) == QMOE_OK);
        CHECK(memcmp(back, w, (size_t)total) == 0);
        free(w), free(nz), free(back), free(expect);
    }
}

static void test_nz_int4(void)
{
    for (int s = 0; s < NSHAPES; s++) {
        int64_t E = shapes[s][0], K = shapes[s][1], N = shapes[s][2], total = E * K * N;
        size_t bytes = (size_t)(total ? total : 1);
        int8_t *w = malloc(bytes), *back = malloc(bytes);
        uint8_t *nz = malloc(bytes), *expect = malloc(bytes);
        fill_values(w, total, -8, 7);
        memset(nz, 0x5A, bytes);
        CHECK(qmoe_layout_nd_to_nz_int4(w, E, K, N, nz) == QMOE_OK);
        int bad = 0;
        for (int64_t e = 0; e < E; e++)
            for (int64_t k = 0; k < K; k++)
                for (int64_t n = 0; n < N; n++)
                    bad += oracle_get_nibble(nz, oracle_nz_index(e, k, n, K, N, 64)) !=
                           w[(e * K + k) * N + n];
        CHECK_MSG(bad == 0, "%d misplaced NZ int4 elements (E=%lld K=%lld N=%lld)", bad,
                  (long long)E, (long long)K, (long long)N);
        oracle_pack_weight(ORACLE_W_INT4_NZ, w, E, K, N, expect);
        CHECK(memcmp(nz, expect, (size_t)total / 2) == 0);
        memset(back, 0x5A, bytes);
        CHECK(qmoe_layout_nz_to_nd_int4(nz, E, K, N, back) == QMOE_OK);
        CHECK(memcmp(back, w, (size_t)total) == 0);
        free(w), free(nz), free(back), free(expect);
    }
}

static void test_pack_int4(void)
{
    /* all 16 values, each in both nibble positions, and odd counts */
    int8_t v[41], back[41];
    uint8_t packed[21], expect[21];
    for (int i = 0; i < 41; i++) v[i] = (int8_t)((i * 7) % 16 - 8);
    for (int64_t count = 0; count <= 41; count++) {
        memset(packed, 0xEE, sizeof packed);
        memset(expect, 0xEE, sizeof expect);
        for (int64_t i = 0; i < (count + 1) / 2; i++) expect[i] = 0;
        for (int64_t i = 0; i < count; i++) oracle_set_nibble(expect, i, v[i]);
        CHECK(qmoe_layout_int4_pack(v, count, packed) == QMOE_OK);
        CHECK_MSG(memcmp(packed, expect, sizeof packed) == 0, "count %lld", (long long)count);
        memset(back, 0x77, sizeof back);
        CHECK(qmoe_layout_int4_unpack(packed, count, back) == QMOE_OK);
        CHECK(memcmp(back, v, (size_t)count) == 0);
        CHECK(all_bytes_are(back + count, sizeof back - (size_t)count, 0x77));
    }
    /* low nibble first, two's complement; odd tail has a zero high nibble */
    int8_t pair[3] = {1, -1, -8};
    CHECK(qmoe_layout_int4_pack(pair, 3, packed) == QMOE_OK);
    CHECK(packed[0] == 0xF1 && packed[1] == 0x08);
    /* every byte unpacks to its two sign-extended nibbles */
    for (int b = 0; b < 256; b++) {
        uint8_t byte = (uint8_t)b;
        int8_t two[2];
        CHECK(qmoe_layout_int4_unpack(&byte, 2, two) == QMOE_OK);
        int lo = b & 15, hi = b >> 4;
        CHECK(two[0] == (lo < 8 ? lo : lo - 16) && two[1] == (hi < 8 ? hi : hi - 16));
    }
}

static int little_endian(void)
{
    uint32_t one = 1;
    unsigned char c;
    memcpy(&c, &one, 1);
    return c == 1;
}

static void test_int32_view(void)
{
    int8_t ascending[8] = {0, 1, 2, 3, 4, 5, 6, 7}, negative[8] = {-8, -7, -6, -5, -4, -3, -2, -1};
    int32_t word;
    CHECK(qmoe_layout_int4_pack_int32(ascending, 8, &word) == QMOE_OK);
    CHECK((uint32_t)word == 0x76543210u);
    CHECK(qmoe_layout_int4_pack_int32(negative, 8, &word) == QMOE_OK);
    CHECK((uint32_t)word == 0xFEDCBA98u);

    enum { COUNT = 8 * 37 };
    int8_t v[COUNT], back[COUNT];
    int32_t words[COUNT / 8];
    uint8_t packed[COUNT / 2];
    fill_values(v, COUNT, -8, 7);
    CHECK(qmoe_layout_int4_pack_int32(v, COUNT, words) == QMOE_OK);
    int bad = 0;
    for (int i = 0; i < COUNT; i++) {
        int nib = (int)(((uint32_t)words[i / 8] >> (4 * (i % 8))) & 15u);
        bad += (nib < 8 ? nib : nib - 16) != v[i];
    }
    CHECK(bad == 0);
    CHECK(qmoe_layout_int4_pack(v, COUNT, packed) == QMOE_OK);
    if (little_endian()) CHECK(memcmp(words, packed, sizeof packed) == 0);
    memset(back, 0, sizeof back);
    CHECK(qmoe_layout_int4_unpack_int32(words, COUNT, back) == QMOE_OK);
    CHECK(memcmp(back, v, COUNT) == 0);
}

/* bias[e,n] = 8 * sum_k W[e,k,n] * scale[e, k/(K/G), n], computed directly in double. */
static void test_assist_matrix(void)
{
    static const int64_t cases[][4] = {
        {1, 16, 64, 0}, {2, 48, 32, 0}, {3, 64, 16, 4}, {2, 96, 8, 3}, {1, 32, 6, 32},
        {2, 20, 10, 1}, {0, 16, 64, 0}, {2, 0, 8, 0}, {2, 0, 8, 2},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int64_t E = cases[c][0], K = cases[c][1], N = cases[c][2], groups = cases[c][3];
        int64_t G = groups ? groups : 1;
        int8_t *w = malloc((size_t)(E * K * N + 1));
        float *scale = malloc(sizeof(float) * (size_t)(E * G * N + 1));
        float *bias = malloc(sizeof(float) * (size_t)(E * N + 1));
        fill_values(w, E * K * N, -8, 7);
        for (int64_t i = 0; i < E * G * N; i++) scale[i] = qt_uniform(&rng, 0.0005f, 0.02f);
        CHECK(qmoe_layout_weight_assist_matrix(w, E, K, N, scale, groups, bias) == QMOE_OK);
        int bad = 0;
        for (int64_t e = 0; e < E; e++)
            for (int64_t n = 0; n < N; n++) {
                double want = 0.0;
                for (int64_t k = 0; k < K; k++)
                    want += 8.0 * w[(e * K + k) * N + n] * scale[(e * G + k / (K / G)) * N + n];
                double got = bias[e * N + n];
                bad += fabs(got - want) > 1e-6 * fabs(want) + 1e-12;
            }
        CHECK_MSG(bad == 0, "case %zu: %d assist-matrix values differ", c, bad);
        free(w), free(scale), free(bias);
    }
}

/* A failing helper returns `code`, says which function and argument, and writes nothing. */
#define EXPECT_FAIL(call, code, word, buf)                                                       \
    do {                                                                                         \
        memset(buf, 0x5A, sizeof buf);                                                           \
        qmoe_status st_ = (call);                                                                \
        CHECK_MSG(st_ == (code), "%s: got %d", #call, (int)st_);                                 \
        CHECK_MSG(strstr(qmoe_last_error(), word) != NULL, "%s: message '%s' lacks '%s'",      \
                  #call, qmoe_last_error(), word);                                               \
        CHECK_MSG(all_bytes_are(buf, sizeof buf, 0x5A), "%s wrote its output", #call);         \
    } while (0)

static void test_errors(void)
{
    int8_t w[2 * 16 * 64], out8[2 * 16 * 64];
    uint8_t out4[16 * 64];
    int32_t words[16];
    float scale[2 * 4 * 64], bias[2 * 64];
    fill_values(w, sizeof w, -8, 7);
    for (size_t i = 0; i < sizeof scale / sizeof scale[0]; i++) scale[i] = 0.01f;
    const qmoe_status NUL = QMOE_ERR_PARAM_NULLPTR, INV = QMOE_ERR_PARAM_INVALID;

    EXPECT_FAIL(qmoe_layout_nd_to_nz_int8(NULL, 1, 16, 32, out8), NUL, "nd", out8);
    EXPECT_FAIL(qmoe_layout_nd_to_nz_int8(w, 1, 16, 32, NULL), NUL, "nz", out8);
    EXPECT_FAIL(qmoe_layout_nz_to_nd_int8(NULL, 1, 16, 32, out8), NUL, "nz", out8);
    EXPECT_FAIL(qmoe_layout_nz_to_nd_int8(w, 1, 16, 32, NULL), NUL, "nd", out8);
    EXPECT_FAIL(qmoe_layout_nd_to_nz_int4(NULL, 1, 16, 64, out4), NUL, "nd_values", out4);
    EXPECT_FAIL(qmoe_layout_nd_to_nz_int4(w, 1, 16, 64, NULL), NUL, "nz_packed", out4);
    EXPECT_FAIL(qmoe_layout_nz_to_nd_int4(NULL, 1, 16, 64, out8), NUL, "nz_packed", out8);
    EXPECT_FAIL(qmoe_layout_int4_pack(NULL, 4, out4), NUL, "values", out4);
    EXPECT_FAIL(qmoe_layout_int4_unpack(NULL, 4, out8), NUL, "packed", out8);
    EXPECT_FAIL(qmoe_layout_int4_pack_int32(NULL, 8, words), NUL, "values", words);
    EXPECT_FAIL(qmoe_layout_int4_unpack_int32(NULL, 8, out8), NUL, "words", out8);
    EXPECT_FAIL(qmoe_layout_weight_assist_matrix(NULL, 1, 16, 64, scale, 0, bias), NUL, "nd_values", bias);
    EXPECT_FAIL(qmoe_layout_weight_assist_matrix(w, 1, 16, 64, NULL, 0, bias), NUL, "scale", bias);

    /* sizes and NZ alignment */
    EXPECT_FAIL(qmoe_layout_nd_to_nz_int8(w, -1, 16, 32, out8), INV, "negative", out8);
    EXPECT_FAIL(qmoe_layout_nd_to_nz_int8(w, 1, 8, 32, out8), INV, "K % 16", out8);
    EXPECT_FAIL(qmoe_layout_nd_to_nz_int8(w, 1, 16, 48, out8), INV, "N % 32", out8);
    EXPECT_FAIL(qmoe_layout_nz_to_nd_int8(w, 1, 24, 32, out8), INV, "K % 16", out8);
    EXPECT_FAIL(qmoe_layout_nd_to_nz_int4(w, 1, 16, 32, out4), INV, "N % 64", out4);
    EXPECT_FAIL(qmoe_layout_nz_to_nd_int4(out4, 1, 16, 96, out8), INV, "N % 64", out8);
    EXPECT_FAIL(qmoe_layout_nd_to_nz_int4(w, 1, 16, INT64_C(1) << 60, out4), INV, "overflows", out4);
    EXPECT_FAIL(qmoe_layout_nd_to_nz_int8(w, INT64_C(1) << 40, INT64_C(1) << 20, INT64_C(1) << 20, out8),
                INV, "overflows", out8);
    EXPECT_FAIL(qmoe_layout_int4_pack(w, -1, out4), INV, "count", out4);
    EXPECT_FAIL(qmoe_layout_int4_pack_int32(w, 12, words), INV, "multiple of 8", words);
    EXPECT_FAIL(qmoe_layout_int4_unpack_int32(words, 7, out8), INV, "multiple of 8", out8);
    EXPECT_FAIL(qmoe_layout_weight_assist_matrix(w, 1, 16, 64, scale, 3, bias), INV, "groups", bias);
    EXPECT_FAIL(qmoe_layout_weight_assist_matrix(w, 1, 16, 64, scale, -2, bias), INV, "groups", bias);
    /* K = 0: every G divides K, but the scale's E*G*N must still be representable */
    EXPECT_FAIL(qmoe_layout_weight_assist_matrix(w, 2, 0, 64, scale, INT64_MAX / 64, bias), INV,
                "overflows", bias);

    /* int4 values outside [-8, 7], even when only the last one is */
    int8_t bad_hi[64 * 16], bad_lo[8];
    fill_values(bad_hi, sizeof bad_hi, -8, 7);
    bad_hi[sizeof bad_hi - 1] = 8;
    fill_values(bad_lo, sizeof bad_lo, -8, 7);
    bad_lo[3] = -9;
    EXPECT_FAIL(qmoe_layout_nd_to_nz_int4(bad_hi, 1, 16, 64, out4), INV, "outside", out4);
    EXPECT_FAIL(qmoe_layout_int4_pack(bad_lo, 8, out4), INV, "value[3]", out4);
    EXPECT_FAIL(qmoe_layout_int4_pack_int32(bad_lo, 8, words), INV, "value[3]", words);
    EXPECT_FAIL(qmoe_layout_weight_assist_matrix(bad_hi, 1, 16, 64, scale, 0, bias), INV, "outside", bias);

    /* a success after an error clears the message; empty sizes succeed without touching memory */
    CHECK(qmoe_layout_int4_pack(w, 0, NULL) == QMOE_OK);
    CHECK(qmoe_layout_nd_to_nz_int8(NULL, 0, 16, 32, NULL) == QMOE_OK);
    CHECK(strcmp(qmoe_last_error(), "") == 0);
    CHECK(qmoe_layout_int4_pack(w, 2, out4) == QMOE_OK);
    CHECK(strcmp(qmoe_last_error(), "") == 0);
}

int main(void)
{
    test_nz_int8();
    test_nz_int4();
    test_pack_int4();
    test_int32_view();
    test_assist_matrix();
    test_errors();
    return qt_finish("test_layout");
}
