#include "support/oracle.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int64_t oracle_nz_index(int64_t e, int64_t k, int64_t n, int64_t K, int64_t N, int64_t cols)
{
    return e * K * N + (n / cols) * (K * cols) + k * cols + (n % cols);
}

void oracle_set_nibble(uint8_t *bytes, int64_t i, int value)
{
    uint8_t nib = (uint8_t)(value & 0xF);
    if (i % 2 == 0)
        bytes[i / 2] = (uint8_t)((bytes[i / 2] & 0xF0) | nib);
    else
        bytes[i / 2] = (uint8_t)((bytes[i / 2] & 0x0F) | (nib << 4));
}

int oracle_get_nibble(const uint8_t *bytes, int64_t i)
{
    int nib = i % 2 == 0 ? bytes[i / 2] & 0xF : bytes[i / 2] >> 4;
    return nib < 8 ? nib : nib - 16; /* two's complement */
}

double oracle_f16_to_double(uint16_t bits)
{
    int sign = bits >> 15, exp = (bits >> 10) & 31, man = bits & 1023;
    double v;
    if (exp == 31)
        v = man ? NAN : INFINITY;
    else if (exp == 0)
        v = ldexp(man, -24);
    else
        v = ldexp(1024 + man, exp - 25);
    return sign ? -v : v;
}

double oracle_bf16_to_double(uint16_t bits)
{
    uint32_t f32 = (uint32_t)bits << 16;
    float f;
    memcpy(&f, &f32, sizeof f);
    return f;
}

int64_t oracle_weight_bytes(oracle_wlayout layout, int64_t E, int64_t K, int64_t N)
{
    int64_t n = E * K * N;
    return layout == ORACLE_W_INT8_ND || layout == ORACLE_W_INT8_NZ ? n : (n + 1) / 2;
}

/* The int32 word holding element (word, j): bits [4j, 4j+4) of a little-endian int32. */
static void set_word_nibble(uint8_t *out, int64_t word, int j, int value)
{
    uint32_t w;
    memcpy(&w, out + 4 * word, 4);
    w &= ~(0xFu << (4 * j));
    w |= (uint32_t)(value & 0xF) << (4 * j);
    memcpy(out + 4 * word, &w, 4);
}

void oracle_pack_weight(oracle_wlayout layout, const int8_t *w, int64_t E, int64_t K, int64_t N,
                        uint8_t *out)
{
    memset(out, 0, (size_t)oracle_weight_bytes(layout, E, K, N));
    for (int64_t e = 0; e < E; e++)
        for (int64_t k = 0; k < K; k++)
            for (int64_t n = 0; n < N; n++) {
                int v = w[(e * K + k) * N + n];
                int64_t nd = (e * K + k) * N + n;
                switch (layout) {
                case ORACLE_W_INT8_ND: out[nd] = (uint8_t)v; break;
                case ORACLE_W_INT8_NZ: out[oracle_nz_index(e, k, n, K, N, 32)] = (uint8_t)v; break;
                case ORACLE_W_INT4_ND: oracle_set_nibble(out, nd, v); break;
                case ORACLE_W_INT4_NZ:
                    oracle_set_nibble(out, oracle_nz_index(e, k, n, K, N, 64), v);
                    break;
                case ORACLE_W_INT32_ND:
                    set_word_nibble(out, (e * K + k) * (N / 8) + n / 8, (int)(n % 8), v);
                    break;
                case ORACLE_W_INT32_NZ:
                    /* [E, N/64, K/16, 16, 8] words: word = (element index) / 8, j = n % 8 */
                    set_word_nibble(out, oracle_nz_index(e, k, n, K, N, 64) / 8, (int)(n % 8), v);
                    break;
                }
            }
}

/* C[n] of row m for expert e: the simplified formula plus, for A8W4, the bias correction that
 * makes an arbitrary bias give the vendor formula (bias - 8 * sum_k W * ws) * xScale.
 * The integer sums are exact in any backend; *mag adds up the magnitudes of the per-group float
 * terms either formulation rounds and sums (acc, 16*C_high, C_low, the 8*sum W correction, the
 * bias), so float32 rounding noise in C is a small multiple of eps32 * *mag. */
static double dequant(const oracle_case *c, int64_t e, int64_t m, int64_t n, double *mag)
{
    int64_t per = c->K / c->G;
    double sum = 0.0, wsum_scaled = 0.0, size = 0.0;
    for (int64_t g = 0; g < c->G; g++) {
        int64_t acc = 0, wsum = 0, hi = 0, lo = 0;
        for (int64_t k = g * per; k < (g + 1) * per; k++) {
            int64_t w = c->w[(e * c->K + k) * c->N + n];
            int64_t x = c->x[m * c->x_s0 + k * c->x_s1];
            acc += x * w;
            wsum += w;
            /* the vendor split x = 16*floor(x/16) + ((x & 15) - 8) + 8 */
            int64_t x_hi = (int64_t)floor((double)x / 16.0), x_lo = (x - 16 * x_hi) - 8;
            hi += x_hi * w;
            lo += x_lo * w;
        }
        double ws = c->ws[(e * c->G + g) * c->N + n];
        sum += (double)acc * ws;
        wsum_scaled += (double)wsum * ws;
        double terms = (double)llabs(acc);
        if (c->a8w4)
            terms += 16.0 * (double)llabs(hi) + (double)llabs(lo) + 8.0 * (double)llabs(wsum);
        size += terms * fabs(ws);
    }
    double xs = c->xs[m];
    double out = sum * xs;
    if (c->a8w4) {
        double bias = c->bias[e * c->N + n];
        out += (bias - 8.0 * wsum_scaled) * xs;
        size += fabs(bias);
    }
    *mag = size * fabs(xs);
    return out;
}

static int row_finite(const double *s, int64_t n)
{
    for (int64_t j = 0; j < n; j++)
        if (!isfinite(s[j])) return 0;
    return 1;
}

void oracle_run(const oracle_case *c, double *S, double *scale, int8_t *q, uint8_t *written,
                double *noise)
{
    const double eps32 = ldexp(1.0, -24);
    int64_t N2 = c->N / 2;
    memset(written, 0, (size_t)c->M);
    int64_t start = 0;
    for (int64_t e = 0; e < c->E_groups; e++) {
        int64_t end = c->count_list ? start + c->gl[e] : c->gl[e];
        for (int64_t m = start; m < end; m++) {
            double *s = S + m * N2;
            double amax = 0.0, row_noise = 0.0;
            for (int64_t j = 0; j < N2; j++) {
                double mag_a, mag_b;
                double a = dequant(c, e, m, j, &mag_a), b = dequant(c, e, m, j + N2, &mag_b);
                s[j] = a / (1.0 + exp(-a)) * b;
                if (fabs(s[j]) > amax) amax = fabs(s[j]);
                /* float32 noise, first order: one rounding per term summed (G groups, the
                 * split terms, bias, xScale) bounded by eps32 * mag; Swish' <= 1.1 */
                double da = (double)(c->G + 4) * eps32 * mag_a;
                double db = (double)(c->G + 4) * eps32 * mag_b;
                double ds = 1.1 * da * fabs(b) + (fabs(a) + da) * db + 4.0 * eps32 * fabs(s[j]);
                if (ds > row_noise) row_noise = ds;
            }
            scale[m] = amax / 127.0;
            if (noise) noise[m] = row_noise;
            /* the spec's zero row; a non-finite row's output is 0 too */
            int zero_row = amax == 0.0 || !row_finite(s, N2);
            for (int64_t j = 0; j < N2; j++)
                q[m * N2 + j] = zero_row ? 0 : (int8_t)nearbyint(s[j] * 127.0 / amax);
            written[m] = 1;
        }
        start = end;
    }
}
