/*
 * An independent, deliberately plain implementation of the operator contract for tests: the
 * spec's flat NZ offsets, int4 nibble packing, half-precision decoding and the simplified formula
 * in double precision. It includes nothing from src/ so that tests compare two derivations.
 */
#ifndef QMOE_TEST_ORACLE_H
#define QMOE_TEST_ORACLE_H

#include <stdint.h>

/* Flat element index of W[e][k][n] in FRACTAL_NZ with `cols` columns per tile (32 int8, 64 int4):
 * e*K*N + (n/cols)*(K*cols) + k*cols + n%cols (spec, "Weight layouts"). */
int64_t oracle_nz_index(int64_t e, int64_t k, int64_t n, int64_t K, int64_t N, int64_t cols);

/* Element i of packed int4 lives in byte i/2, low nibble when i is even. */
void oracle_set_nibble(uint8_t *bytes, int64_t i, int value);
int oracle_get_nibble(const uint8_t *bytes, int64_t i);

/* Exact decoding of IEEE half and bfloat16 bit patterns. */
double oracle_f16_to_double(uint16_t bits);
double oracle_bf16_to_double(uint16_t bits);

/* Weight storages the operator accepts, built from logical W[E][K][N] (int8 values; int4 ones in
 * [-8, 7]). */
typedef enum oracle_wlayout {
    ORACLE_W_INT8_ND,
    ORACLE_W_INT8_NZ,
    ORACLE_W_INT4_ND,
    ORACLE_W_INT4_NZ,
    ORACLE_W_INT32_ND,
    ORACLE_W_INT32_NZ,
} oracle_wlayout;

/* Bytes of the storage for E*K*N logical elements. */
int64_t oracle_weight_bytes(oracle_wlayout layout, int64_t E, int64_t K, int64_t N);
/* Writes the storage into `out` (oracle_weight_bytes bytes, zero-filled first). */
void oracle_pack_weight(oracle_wlayout layout, const int8_t *w, int64_t E, int64_t K, int64_t N,
                        uint8_t *out);

/* One operator case in plain numbers. */
typedef struct oracle_case {
    int64_t M, K, N, E, E_groups, G; /* G = 1 for per-channel */
    int a8w4;                        /* adds the bias correction term */
    const int8_t *x;                 /* x[m][k] at x[m*x_s0 + k*x_s1] */
    int64_t x_s0, x_s1;
    const int8_t *w;     /* logical [E][K][N] */
    const double *ws;    /* [E][G][N], decoded */
    const double *bias;  /* [E][N] (A8W4) */
    const double *xs;    /* [M] */
    const int64_t *gl;   /* [E_groups] */
    int count_list;      /* gl holds counts, not cumulative ends */
} oracle_case;

/* Computes, for every row m owned by an expert, S[m][j] (N/2 values), the scale amax/127 and the
 * int8 output round_half_even(S*127/amax) (0 and scale 0 when amax == 0). written[m] is 1 for
 * rows the operator writes, 0 for rows past the last group. noise (optional) receives, per row,
 * a bound on max_j |S[m][j]| error that float32 evaluation of the formula may incur: rows whose
 * amax is not well above it (cancellation, e.g. a zero x row with the caller-built bias) have no
 * float32-determined int8 result. All arrays are caller-allocated: S and q hold M*N/2, scale,
 * written and noise hold M. */
void oracle_run(const oracle_case *c, double *S, double *scale, int8_t *q, uint8_t *written,
                double *noise);

#endif
