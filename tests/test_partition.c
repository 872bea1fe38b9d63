/* The multi-device partition, exhaustively over small cases: every row goes to exactly one
 * device, no two devices write one 128-byte line of output or outputScale, chunks are whole,
 * the remainder goes to the last device, and unsafe splits fall back to device 0. The threads'
 * row split (qmoe_gmm_part_rows) over random routings: parts tile the rows in order, each cut is
 * the aligned row of its expert nearest to the even share, and parts differ by at most about
 * one alignment, however unevenly the experts' rows end. */
#include <stdlib.h>
#include <string.h>

#include "ops/grouped_matmul_swiglu_quant/partition.h"
#include "support/testlib.h"

/* A plan with only the fields the partition reads; pointers are never dereferenced. */
static qmoe_gmm_params fake_plan(int64_t n2, int64_t out_stride, int64_t scale_stride,
                                 uintptr_t out_base, uintptr_t scale_base)
{
    qmoe_gmm_params p;
    memset(&p, 0, sizeof p);
    p.N2 = n2;
    p.out = (int8_t *)out_base;
    p.out_s[0] = out_stride;
    p.out_s[1] = 1;
    p.out_scale = (float *)scale_base;
    p.out_scale_s = scale_stride;
    return p;
}

static int owner_conflict(int *owner, int64_t line, int dev)
{
    if (owner[line] >= 0 && owner[line] != dev) return 1;
    owner[line] = dev;
    return 0;
}

/* Expert e's first row and end row (cumsum groupList). */
static int64_t expert_of(const int64_t *gl, int64_t E, int64_t m, int64_t *start, int64_t *end)
{
    int64_t s = 0;
    for (int64_t e = 0; e < E; e++) {
        if (gl[e] > m) {
            *start = s, *end = gl[e];
            return e;
        }
        s = gl[e];
    }
    *start = *end = s;
    return E;
}

/* The threads' split against its definition, over random routings of a device range. */
static void part_rows_cases(void)
{
    enum { MAXE = 9 };
    qt_rng r = {99};
    int64_t gl[MAXE];
    long tile_bad = 0, cut_bad = 0, balance_bad = 0;
    for (int i = 0; i < 4000; i++) {
        int64_t E = qt_range(&r, 1, MAXE), end = 0;
        for (int64_t e = 0; e < E; e++) gl[e] = end += qt_range(&r, 0, 3) == 0 ? 0 : qt_range(&r, 1, 700);
        int64_t r0 = qt_range(&r, 0, end), n = qt_range(&r, 0, end - r0);
        int64_t align = qt_range(&r, 0, 2) == 0 ? 1 : qt_range(&r, 1, 64);
        int parts = (int)qt_range(&r, 1, 6);
        qmoe_gmm_params p;
        memset(&p, 0, sizeof p);
        p.gl = gl, p.gl_s = 1, p.E_groups = E, p.group_list_type = QMOE_GROUP_LIST_CUMSUM;
        int64_t next = r0;
        for (int k = 0; k < parts; k++) {
            qmoe_row_range pr = qmoe_gmm_part_rows(&p, r0, n, align, k, parts);
            tile_bad += pr.start != next || pr.count < 0;
            next = pr.start + pr.count;
            if (k == parts - 1) continue;
            /* the cut after part k: the nearest aligned row of its segment to the share */
            int64_t ideal = r0 + n * (k + 1) / parts, es, ee, best = -1;
            if (ideal >= r0 + n) continue; /* n == 0 */
            expert_of(gl, E, ideal, &es, &ee);
            int64_t a = es > r0 ? es : r0, b = ee < r0 + n ? ee : r0 + n;
            for (int64_t c = a; c <= b; c++)
                if ((c - a) % align == 0 || c == b)
                    if (best < 0 || llabs(c - ideal) < llabs(best - ideal)) best = c;
            cut_bad += next != best;
            balance_bad += llabs(next - ideal) > align;
        }
        tile_bad += next != r0 + n;
    }
    CHECK_MSG(tile_bad == 0, "%ld part splits that do not tile the range in order", tile_bad);
    CHECK_MSG(cut_bad == 0, "%ld cuts off the nearest aligned row", cut_bad);
    CHECK_MSG(balance_bad == 0, "%ld cuts more than an alignment from the even share", balance_bad);

    /* the prefill routing of qmoe bench (experts of 2470, 4200, 700, 822 rows; VNNI blocks of 48
     * rows) over 2 threads: 4102 + 4090 rows; splitting the blocks (9 + 9 of up to 512 rows) gave
     * 4518 + 3674 */
    int64_t pre[4] = {2470, 6670, 7370, 8192};
    qmoe_gmm_params p;
    memset(&p, 0, sizeof p);
    p.gl = pre, p.gl_s = 1, p.E_groups = 4, p.group_list_type = QMOE_GROUP_LIST_CUMSUM;
    CHECK(qmoe_gmm_part_rows(&p, 0, 8192, 48, 0, 2).count == 4102);
    CHECK(qmoe_gmm_part_rows(&p, 0, 8192, 48, 1, 2).count == 4090);
    /* counts, not ends: the same split */
    int64_t cnt[4] = {2470, 4200, 700, 822};
    p.gl = cnt, p.group_list_type = QMOE_GROUP_LIST_COUNT;
    CHECK(qmoe_gmm_part_rows(&p, 0, 8192, 48, 1, 2).start == 4102);
}

int main(void)
{
    part_rows_cases();
    enum { MAXROWS = 150, MAXBYTES = MAXROWS * 300 * 4 };
    int *owner = malloc(sizeof(int) * (MAXBYTES / 128 + 4));
    int *sowner = malloc(sizeof(int) * (MAXBYTES / 128 + 4));
    int *hits = malloc(sizeof(int) * MAXROWS);
    long coverage_bad = 0, line_bad = 0, chunk_bad = 0, rule_bad = 0, cases = 0;
    for (int64_t n2 = 1; n2 <= 260; n2 += (n2 < 40 ? 1 : 17))
        for (int64_t pad = 0; pad <= 3; pad += 3)
            for (int64_t ss = 1; ss <= 2; ss++) {
                int64_t stride = n2 + pad;
                qmoe_gmm_params p = fake_plan(n2, stride, ss, 4096, 8192);
                int32_t rpc = qmoe_gmm_rows_per_chunk(&p);
                int64_t low = stride & -stride, low_s = (4 * ss) & -(4 * ss); /* lowest set bit */
                int32_t want = (int32_t)(128 / (low < 128 ? low : 128));
                int32_t want_s = (int32_t)(128 / (low_s < 128 ? low_s : 128));
                if (want_s > want) want = want_s;
                rule_bad += rpc != want;
                for (int count = 1; count <= 5; count++) {
                    qmoe_fastdiv_t div = qmoe_fastdiv_init((uint32_t)count);
                    for (int64_t total = 0; total <= MAXROWS; total++) {
                        cases++;
                        memset(hits, 0, sizeof(int) * MAXROWS);
                        for (int64_t i = 0; i < MAXBYTES / 128 + 4; i++) owner[i] = sowner[i] = -1;
                        int64_t next = 0;
                        int64_t chunks = total / rpc;
                        for (int d = 0; d < count; d++) {
                            qmoe_row_range r = qmoe_partition_rows(total, rpc, d, count, &div);
                            if (r.count && r.start != next) coverage_bad++; /* in order */
                            if (r.count) next = r.start + r.count;
                            if (chunks >= count && d < count - 1 &&
                                (r.start % rpc || r.count % rpc || r.count != chunks / count * rpc))
                                chunk_bad++;
                            if (chunks < count && d > 0 && r.count) chunk_bad++; /* fallback */
                            for (int64_t m = r.start; m < r.start + r.count; m++) {
                                hits[m]++;
                                for (int64_t b = m * stride; b < m * stride + n2; b++)
                                    line_bad += owner_conflict(owner, (4096 + b) / 128, d);
                                line_bad += owner_conflict(sowner, (8192 + 4 * ss * m) / 128, d);
                            }
                        }
                        for (int64_t m = 0; m < total; m++) coverage_bad += hits[m] != 1;
                    }
                }
            }
    CHECK_MSG(rule_bad == 0, "%ld rows_per_chunk values off the rule", rule_bad);
    CHECK_MSG(coverage_bad == 0, "%ld rows not covered exactly once (of %ld cases)", coverage_bad, cases);
    CHECK_MSG(line_bad == 0, "%ld shared 128-byte lines", line_bad);
    CHECK_MSG(chunk_bad == 0, "%ld ranges off whole chunks / fallback", chunk_bad);

    /* the remainder goes to the last device: 10 chunks of 1 row over 4 devices -> 2, 2, 2, 4 */
    qmoe_fastdiv_t d4 = qmoe_fastdiv_init(4);
    CHECK(qmoe_partition_rows(10, 1, 3, 4, &d4).count == 4);
    CHECK(qmoe_partition_rows(10, 1, 2, 4, &d4).start == 4);
    /* unsafe: unaligned bases, non-contiguous rows, column-major */
    qmoe_gmm_params p = fake_plan(64, 64, 1, 4096 + 64, 8192);
    CHECK(qmoe_gmm_rows_per_chunk(&p) == 0);
    p = fake_plan(64, 64, 1, 4096, 8192 + 4);
    CHECK(qmoe_gmm_rows_per_chunk(&p) == 0);
    p = fake_plan(64, 128, 1, 4096, 8192);
    p.out_s[1] = 2;
    CHECK(qmoe_gmm_rows_per_chunk(&p) == 0);
    /* fallback: everything on device 0, nothing elsewhere */
    CHECK(qmoe_partition_rows(100, 0, 0, 4, &d4).count == 100);
    CHECK(qmoe_partition_rows(100, 0, 1, 4, &d4).count == 0);
    CHECK(qmoe_partition_rows(100, 32, 0, 4, &d4).count == 100); /* 3 chunks < 4 devices */
    CHECK(qmoe_partition_rows(100, 32, 3, 4, &d4).count == 0);
    free(owner);
    free(sowner);
    free(hits);
    return qt_finish("test_partition");
}
