/* Every kernel table this CPU runs whose weight rearrangement (gmm_fast.h rearrange) is its own
 * gives the portable code's bytes: int8 and int4 rows, 1 to 4 units, 1 to 13 rows (whole steps
 * and a partial last one, whose missing rows are 0), a row stride of each unit's own (some
 * unaligned), units apart or back to back; the step stride leaves room that nothing may write. */
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu_features.h"
#include "kernels/gmm_fast.h"
#include "support/testlib.h"

static qt_rng rng = {0x7ea77a};

static void check_table(const qmoe_gemm_isa *isa)
{
    enum { MAXR = 13, MAXS = 40 };
    uint8_t *pool = malloc(QMOE_PK_BLOCK * MAXR * MAXS + 64);
    const int64_t wstep = QMOE_PK_BLOCK * QMOE_PK_STEP + 24, dbytes = (MAXR + 3) / 4 * wstep;
    uint8_t *want = malloc((size_t)dbytes), *got = malloc((size_t)dbytes);
    for (int int4 = 0; int4 < 2; int4++)
        for (int nub = 1; nub <= QMOE_PK_BLOCK; nub++)
            for (int64_t rows = 1; rows <= MAXR; rows++)
                for (int layout = 0; layout < 3; layout++) {
                    for (int i = 0; i < QMOE_PK_BLOCK * MAXR * MAXS + 64; i++) pool[i] = (uint8_t)qt_range(&rng, 0, 255);
                    const uint8_t *src[QMOE_PK_BLOCK];
                    int64_t stride[QMOE_PK_BLOCK];
                    const int64_t bytes = int4 ? 8 : 16;
                    for (int u = 0; u < nub; u++) {
                        /* 0: each unit its own stride and an odd start; 1: units back to back in
                         * rows of nub units; 2: one unit's bytes a row, rows apart */
                        stride[u] = layout == 0 ? bytes + qt_range(&rng, 0, 23) : layout == 1 ? nub * bytes : bytes;
                        src[u] = pool + (layout == 0   ? u * MAXR * MAXS + qt_range(&rng, 0, 7)
                                         : layout == 1 ? u * bytes
                                                       : u * MAXR * bytes);
                    }
                    memset(want, 0xA5, (size_t)dbytes);
                    memset(got, 0xA5, (size_t)dbytes);
                    qmoe_rearrange_portable(src, stride, rows, nub, int4, want, wstep);
                    isa->rearrange(src, stride, rows, nub, int4, got, wstep);
                    CHECK_MSG(memcmp(want, got, (size_t)dbytes) == 0,
                              "%s: %s, %d units, %lld rows, layout %d: bytes differ from the portable code",
                              isa->name, int4 ? "int4" : "int8", nub, (long long)rows, layout);
                }
    free(pool);
    free(want);
    free(got);
}

int main(void)
{
    int tested = 0;
    for (int id = QMOE_KERNEL_PORTABLE; id <= QMOE_KERNEL_NEON_I8MM; id++) {
        const qmoe_gemm_isa *isa = qmoe_cpu_runs_kernel(id) ? qmoe_gemm_isa_for(id) : NULL;
        if (!isa || isa->rearrange == qmoe_rearrange_portable) continue;
        check_table(isa);
        tested++;
    }
    if (!tested) return qt_skip("kernel_rearrange", "no kernel this CPU runs rearranges weights by code of its own");
    return qt_finish("kernel_rearrange");
}
