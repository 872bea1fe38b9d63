/* Decoding ggml's weight blocks into qmoe's integers and scales, and back. Every taken format is
 * an integer times a scale per group of values (q8_0, q4_0, mxfp4 per 32, q6_K per 16), or, for
 * q4_K / q5_K, w = d·sc_j·q − dmin·m_j per sub-block j of 32, written as s_j·(q − c) plus a
 * per-sub-block offset that the matmul adds from activation sums (matmul.c). A row splits into
 * the integers (what qmoe's prepacked weight holds) and the blocks' other bytes, kept verbatim
 * ("side" bytes: fp16 / e8m0 scales, 6-bit scale codes), so encode(decode(row)) is the row. */
#include <math.h>
#include <string.h>

#include "qmoe_ggml.h"

/* mxfp4's e2m1 codes, doubled (ggml's kvalues_mxfp4): integers in [-12, 12] */
static const int8_t kvalues_mxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* q4_K's codes as they are: qmoe reads this codebook as int4 without an offset (core/prepack.h) */
static const int8_t kvalues_u4[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

const int8_t *qg_codebook(enum ggml_type type)
{
    return type == GGML_TYPE_MXFP4 ? kvalues_mxfp4 : type == GGML_TYPE_Q4_K ? kvalues_u4 : NULL;
}

/* type, values and bytes per block, qmoe group size, int4, side bytes per block, min term,
 * scaled. The K-quants' unsigned integers are kept as they are, so their min term is dmin m_j
 * alone: q5_K's 0..31 as int8, q4_K's 0..15 4 bits a value as codes of the codebook 0..15
 * (weights.c), which qmoe reads as int4 steps without int4's offset of 8 (until 2026-12-07 they
 * were int4 less 8, and the min term's object held 8 sc_j rows besides the m_j). */
static const qg_format formats[] = {
    {GGML_TYPE_Q8_0, 32, 34, 32, 0, 2, 0, 1},
    {GGML_TYPE_Q4_0, 32, 18, 32, 1, 2, 0, 1},
    {GGML_TYPE_MXFP4, 32, 17, 32, 0, 1, 0, 1},
    {GGML_TYPE_Q6_K, 256, 210, 16, 0, 18, 0, 0},
    {GGML_TYPE_Q4_K, 256, 144, 32, 0, 16, 1, 0},
    {GGML_TYPE_Q5_K, 256, 176, 32, 0, 16, 1, 0},
};

const qg_format *qg_format_of(enum ggml_type type)
{
    for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++)
        if (formats[i].type == type) return &formats[i];
    return NULL;
}

int qg_type_supported(enum ggml_type type) { return qg_format_of(type) != NULL; }

static uint16_t u16_at(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, sizeof h);
    return h;
}

/* ggml's e8m0 scale halved (ggml_e8m0_to_fp32_half): mxfp4's codes are doubled */
static float e8m0_half(uint8_t x)
{
    uint32_t bits = x < 2 ? 0x00200000u << x : (uint32_t)(x - 1) << 23;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

uint16_t qg_half_bits(float f)
{
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    uint32_t sign = (b >> 16) & 0x8000u, a = b & 0x7fffffffu;
    if (a >= 0x7f800000u) return (uint16_t)(sign | 0x7c00u | ((a >> 13) & 0x3ffu)); /* inf / NaN */
    if (a >= 0x38800000u) return (uint16_t)(sign | (a - 0x38000000u) >> 13); /* normal half */
    return (uint16_t)(sign | (uint32_t)(fabsf(f) * 0x1p24f)); /* zero or subnormal half */
}

void qg_side_of_scale(enum ggml_type type, float s, uint8_t *side)
{
    if (type == GGML_TYPE_MXFP4) { /* the inverse of e8m0_half */
        uint32_t b;
        memcpy(&b, &s, sizeof b);
        side[0] = (uint8_t)(b == 0x00200000u ? 0 : b == 0x00400000u ? 1 : (b >> 23) + 1);
        return;
    }
    uint16_t h = qg_half_bits(s); /* q8_0, q4_0: d */
    memcpy(side, &h, sizeof h);
}

void qg_kq_unpack(const uint8_t *q, uint8_t *sc, uint8_t *m)
{
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            sc[j] = q[j] & 63;
            m[j] = q[j + 4] & 63;
        } else {
            sc[j] = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
            m[j] = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
        }
    }
}

void qg_kq_pack(const uint8_t *sc, const uint8_t *m, uint8_t *q)
{
    for (int j = 0; j < 4; j++) {
        q[j] = (uint8_t)((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
        q[j + 4] = (uint8_t)((m[j] & 63) | ((m[j + 4] >> 4) << 6));
        q[j + 8] = (uint8_t)((sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4));
    }
}

/* One block: integers v[blk], qmoe scales s[blk / gs], side bytes (NULL: not wanted). */
static void decode_block(const qg_format *f, const uint8_t *b, int8_t *v, float *s, uint8_t *side)
{
    switch (f->type) {
    case GGML_TYPE_Q8_0:
        s[0] = qg_half(u16_at(b));
        memcpy(v, b + 2, 32);
        if (side) memcpy(side, b, 2);
        break;
    case GGML_TYPE_Q4_0: /* byte j holds value j (low nibble) and value j + 16 (high nibble) */
        s[0] = qg_half(u16_at(b));
        for (int j = 0; j < 16; j++) {
            v[j] = (int8_t)((b[2 + j] & 0x0F) - 8);
            v[j + 16] = (int8_t)((b[2 + j] >> 4) - 8);
        }
        if (side) memcpy(side, b, 2);
        break;
    case GGML_TYPE_MXFP4:
        s[0] = e8m0_half(b[0]);
        for (int j = 0; j < 16; j++) {
            v[j] = kvalues_mxfp4[b[1 + j] & 0x0F];
            v[j + 16] = kvalues_mxfp4[b[1 + j] >> 4];
        }
        if (side) side[0] = b[0];
        break;
    case GGML_TYPE_Q6_K: { /* ql[128] qh[64] scales[16] d: value i uses scale i / 16 */
        const uint8_t *ql = b, *qh = b + 128;
        const int8_t *sc = (const int8_t *)(b + 192);
        float d = qg_half(u16_at(b + 208));
        for (int h = 0; h < 2; h++)
            for (int l = 0; l < 32; l++) {
                const uint8_t *L = ql + 64 * h, *H = qh + 32 * h;
                int8_t *o = v + 128 * h;
                o[l] = (int8_t)(((L[l] & 0xF) | (((H[l] >> 0) & 3) << 4)) - 32);
                o[l + 32] = (int8_t)(((L[l + 32] & 0xF) | (((H[l] >> 2) & 3) << 4)) - 32);
                o[l + 64] = (int8_t)(((L[l] >> 4) | (((H[l] >> 4) & 3) << 4)) - 32);
                o[l + 96] = (int8_t)(((L[l + 32] >> 4) | (((H[l] >> 6) & 3) << 4)) - 32);
            }
        for (int g = 0; g < 16; g++) s[g] = d * (float)sc[g]; /* exact: 11 x 8 bits */
        if (side) memcpy(side, b + 192, 18);
        break;
    }
    case GGML_TYPE_Q4_K:
    case GGML_TYPE_Q5_K: { /* d dmin scales[12] (qh[32]) qs[128] */
        uint8_t sc[8], m[8];
        qg_kq_unpack(b + 4, sc, m);
        float d = qg_half(u16_at(b));
        const int five = f->type == GGML_TYPE_Q5_K;
        const uint8_t *qh = b + 16, *qs = b + (five ? 48 : 16);
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 32; l++) {
                int lo = qs[32 * j + l] & 0xF, hi = qs[32 * j + l] >> 4;
                if (five) {
                    lo += qh[l] & (1 << (2 * j)) ? 16 : 0;
                    hi += qh[l] & (2 << (2 * j)) ? 16 : 0;
                }
                v[64 * j + l] = (int8_t)lo;
                v[64 * j + 32 + l] = (int8_t)hi;
            }
        for (int j = 0; j < 8; j++) s[j] = d * (float)sc[j]; /* exact: 11 x 6 bits */
        if (side) memcpy(side, b, 16);
        break;
    }
    default:
        break;
    }
}

static void encode_block(const qg_format *f, const int8_t *v, const uint8_t *side, uint8_t *b)
{
    switch (f->type) {
    case GGML_TYPE_Q8_0:
        memcpy(b, side, 2);
        memcpy(b + 2, v, 32);
        break;
    case GGML_TYPE_Q4_0:
        memcpy(b, side, 2);
        for (int j = 0; j < 16; j++) b[2 + j] = (uint8_t)(((v[j] + 8) & 0xF) | ((v[j + 16] + 8) << 4));
        break;
    case GGML_TYPE_MXFP4: { /* value -> code; 0 -> code 0 (code 8, -0, is kept by the caller) */
        uint8_t code[32];
        for (int j = 0; j < 32; j++) {
            int a = v[j] < 0 ? -v[j] : v[j], c = 0;
            while (c < 8 && kvalues_mxfp4[c] != a) c++;
            code[j] = (uint8_t)((c & 7) | (v[j] < 0 ? 8 : 0));
        }
        b[0] = side[0];
        for (int j = 0; j < 16; j++) b[1 + j] = (uint8_t)(code[j] | code[j + 16] << 4);
        break;
    }
    case GGML_TYPE_Q6_K:
        for (int h = 0; h < 2; h++)
            for (int l = 0; l < 32; l++) {
                const int8_t *o = v + 128 * h;
                int q1 = o[l] + 32, q2 = o[l + 32] + 32, q3 = o[l + 64] + 32, q4 = o[l + 96] + 32;
                b[64 * h + l] = (uint8_t)((q1 & 0xF) | (q3 & 0xF) << 4);
                b[64 * h + l + 32] = (uint8_t)((q2 & 0xF) | (q4 & 0xF) << 4);
                b[128 + 32 * h + l] = (uint8_t)((q1 >> 4) | (q2 >> 4) << 2 | (q3 >> 4) << 4 | (q4 >> 4) << 6);
            }
        memcpy(b + 192, side, 18);
        break;
    case GGML_TYPE_Q4_K:
    case GGML_TYPE_Q5_K: {
        const int five = f->type == GGML_TYPE_Q5_K;
        uint8_t *qh = b + 16, *qs = b + (five ? 48 : 16);
        memcpy(b, side, 16);
        if (five) memset(qh, 0, 32);
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 32; l++) {
                int lo = v[64 * j + l], hi = v[64 * j + 32 + l];
                qs[32 * j + l] = (uint8_t)((lo & 0xF) | (hi & 0xF) << 4);
                if (five) qh[l] = (uint8_t)(qh[l] | (lo >> 4) << (2 * j) | (hi >> 4) << (2 * j + 1));
            }
        break;
    }
    default:
        break;
    }
}

void qg_decode_row(enum ggml_type type, const void *row, int64_t K, int8_t *q, float *s, uint8_t *side)
{
    const qg_format *f = qg_format_of(type);
    const uint8_t *b = row;
    for (int64_t blk = 0; blk < K / f->blk; blk++, b += f->bytes)
        decode_block(f, b, q + blk * f->blk, s + blk * (f->blk / f->gs), side ? side + blk * f->side : NULL);
}

void qg_encode_row(enum ggml_type type, const int8_t *q, const uint8_t *side, int64_t K, void *row)
{
    const qg_format *f = qg_format_of(type);
    uint8_t *b = row;
    for (int64_t blk = 0; blk < K / f->blk; blk++, b += f->bytes)
        encode_block(f, q + blk * f->blk, side + blk * f->side, b);
}

/* mxfp4 value k of a block of 32: byte 1 + k % 16, low nibble for k < 16 */
int64_t qg_row_negative_zeros(enum ggml_type type, const void *row, int64_t K, uint8_t *bits)
{
    if (type != GGML_TYPE_MXFP4) return 0;
    const uint8_t *b = row;
    int64_t n = 0;
    for (int64_t blk = 0; blk < K / 32; blk++, b += 17) {
        /* most blocks hold no code 8: a nibble of x ^ 0x8..8 is zero exactly where one does,
         * and (y - 0x1..1) & ~y & 0x8..8 is nonzero exactly when y has a zero nibble */
        uint64_t x[2];
        memcpy(x, b + 1, 16);
        const uint64_t y0 = x[0] ^ 0x8888888888888888u, y1 = x[1] ^ 0x8888888888888888u;
        if (!(((y0 - 0x1111111111111111u) & ~y0) & 0x8888888888888888u) &&
            !(((y1 - 0x1111111111111111u) & ~y1) & 0x8888888888888888u))
            continue;
        for (int j = 0; j < 16; j++) { /* values j (low nibble) and j + 16 (high) */
            const int lo = (b[1 + j] & 0x0F) == 8, hi = (b[1 + j] >> 4) == 8;
            if (!(lo | hi)) continue;
            n += lo + hi;
            if (!bits) continue;
            uint8_t *m = bits + blk * 4;
            m[j / 8] |= (uint8_t)(lo << (j % 8));
            m[2 + j / 8] |= (uint8_t)(hi << (j % 8));
        }
    }
    return n;
}

void qg_row_put_negative_zeros(enum ggml_type type, const uint8_t *bits, int64_t K, void *row)
{
    if (type != GGML_TYPE_MXFP4) return;
    uint8_t *b = row;
    for (int64_t blk = 0; blk < K / 32; blk++, b += 17) {
        const uint8_t *m = bits + blk * 4;
        if (!(m[0] | m[1] | m[2] | m[3])) continue; /* most blocks: no -0 */
        for (int k = 0; k < 32; k++)
            if (m[k / 8] >> (k % 8) & 1) /* a zero, code 0: made code 8 */
                b[1 + k % 16] = k < 16 ? (uint8_t)((b[1 + k] & 0xF0) | 8) : (uint8_t)((b[1 + k - 16] & 0x0F) | 0x80);
    }
}
