/* Every kernel this CPU runs that reads 4-bit or 6-bit records (gmm_fast.h gemm_c4, expand_c4,
 * expand_i4, expand_b6): expand_c4 equals this test's own lookup (byte tbl[n] for each nibble n:
 * the low nibbles of a record are the step's bytes 0-31, the high ones 32-63), expand_i4 the
 * nibbles themselves, expand_b6 this test's reading of core/prepack.h's 6-bit step (byte b: its
 * nibble, bit pair b / 16 of record byte 32 + b % 16 above it, + 96), and gemm_c4 equals the same kernel's gemm on the looked-up steps, for every row
 * count and unit count the kernel takes, several step counts, gaps between steps, and
 * accumulate on and off. */
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu_features.h"
#include "kernels/gmm_fast.h"
#include "support/testlib.h"

static qt_rng rng = {0xc0de5};

static void lookup(const uint8_t *src, int64_t steps, uint8_t *dst, const uint8_t *tbl)
{
    for (int64_t q = 0; q < steps; q++)
        for (int i = 0; i < 32; i++) {
            dst[q * 64 + i] = tbl[src[q * 32 + i] & 0xF];
            dst[q * 64 + 32 + i] = tbl[src[q * 32 + i] >> 4];
        }
}

/* 48-byte 6-bit records -> 64-byte steps, byte by byte from the layout's statement */
static void widen6(const uint8_t *src, int64_t steps, uint8_t *dst)
{
    for (int64_t q = 0; q < steps; q++, src += 48, dst += 64)
        for (int b = 0; b < 64; b++) {
            int nib = b < 32 ? src[b] & 0xF : src[b - 32] >> 4;
            int pair = src[32 + b % 16] >> (2 * (b / 16)) & 3;
            dst[b] = (uint8_t)((nib | pair << 4) + 96);
        }
}

static void check_kernel(const qmoe_gemm_isa *isa)
{
    enum { KQ_MAX = 17, NU_MAX = 8, MR_MAX = 16 };
    uint8_t tbl[16], codes[KQ_MAX * NU_MAX * 32 * 2], bytes[KQ_MAX * NU_MAX * 64 * 2];
    int8_t x[MR_MAX * 4 * KQ_MAX];
    int32_t a1[MR_MAX * NU_MAX * 16], a2[MR_MAX * NU_MAX * 16];
    for (int rep = 0; rep < 4; rep++) {
        for (int i = 0; i < 16; i++) tbl[i] = (uint8_t)qt_range(&rng, 0, 255);
        for (size_t i = 0; i < sizeof codes; i++) codes[i] = (uint8_t)qt_range(&rng, 0, 255);
        for (size_t i = 0; i < sizeof x; i++) x[i] = (int8_t)qt_range(&rng, -128, 127);
        if (isa->expand_i4) {
            uint8_t ident[16], got[KQ_MAX * 64 * 2];
            for (int i = 0; i < 16; i++) ident[i] = (uint8_t)i;
            lookup(codes, 2 * KQ_MAX, bytes, ident);
            isa->expand_i4(codes, 2 * KQ_MAX, got);
            CHECK_MSG(!memcmp(got, bytes, sizeof got), "%s: expand_i4 differs from the nibbles", isa->name);
        }
        if (isa->expand_b6) {
            uint8_t want[KQ_MAX * 64 * 2], got[KQ_MAX * 64 * 2];
            widen6(codes, 2 * KQ_MAX, want);
            isa->expand_b6(codes, 2 * KQ_MAX, got);
            CHECK_MSG(!memcmp(got, want, sizeof got), "%s: expand_b6 differs from the 6-bit layout",
                      isa->name);
        }
        if (isa->expand_c4) {
            uint8_t got[KQ_MAX * 64 * 2];
            lookup(codes, 2 * KQ_MAX, bytes, tbl);
            isa->expand_c4(codes, 2 * KQ_MAX, got, tbl);
            CHECK_MSG(!memcmp(got, bytes, sizeof got), "%s: expand_c4 differs from the lookup", isa->name);
        }
        if (!isa->gemm_c4) continue;
        const int kqs[4] = {1, 3, 8, KQ_MAX};
        for (int mr = 1; mr <= isa->mr && mr <= MR_MAX; mr++)
            for (int nu = 1; nu <= isa->nu && nu <= NU_MAX; nu++)
                for (int ki = 0; ki < 4; ki++)
                    for (int gap = 0; gap < 2; gap++)
                        for (int accumulate = 0; accumulate < 2; accumulate++) {
                            const int64_t kq = kqs[ki], cstep = (nu + gap) * 32, bstep = (nu + gap) * 64;
                            /* the same steps as bytes: record q, unit u at codes + q cstep + 32 u */
                            for (int64_t q = 0; q < kq; q++)
                                for (int u = 0; u < nu; u++)
                                    lookup(codes + q * cstep + 32 * u, 1, bytes + q * bstep + 64 * u, tbl);
                            const int64_t ldacc = nu * 16 + 16;
                            for (int i = 0; i < MR_MAX * NU_MAX * 16; i++)
                                a1[i] = a2[i] = (int32_t)qt_range(&rng, -1000000, 1000000);
                            isa->gemm_c4(mr, nu, kq, x, 4 * KQ_MAX, codes, cstep, tbl, a1, ldacc,
                                         accumulate);
                            isa->gemm(mr, nu, kq, x, 4 * KQ_MAX, bytes, bstep, a2, ldacc, accumulate);
                            int bad = 0;
                            for (int r = 0; r < mr; r++)
                                for (int c = 0; c < nu * 16; c++) bad += a1[r * ldacc + c] != a2[r * ldacc + c];
                            CHECK_MSG(!bad, "%s: gemm_c4 differs from gemm on the looked-up steps (rows %d "
                                      "units %d steps %lld gap %d accumulate %d)", isa->name, mr, nu,
                                      (long long)kq, gap, accumulate);
                        }
    }
}

int main(void)
{
    int tested = 0;
    for (int id = QMOE_KERNEL_PORTABLE; id <= QMOE_KERNEL_NEON_I8MM; id++) {
        const qmoe_gemm_isa *isa = qmoe_cpu_runs_kernel(id) ? qmoe_gemm_isa_for(id) : NULL;
        if (!isa || (!isa->gemm_c4 && !isa->expand_c4 && !isa->expand_i4 && !isa->expand_b6))
            continue;
        check_kernel(isa);
        tested++;
    }
    if (!tested) return qt_skip("kernel_codes", "no kernel this CPU runs reads 4-bit or 6-bit records");
    return qt_finish("kernel_codes");
}
