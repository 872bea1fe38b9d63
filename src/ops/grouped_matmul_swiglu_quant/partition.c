#include "ops/grouped_matmul_swiglu_quant/partition.h"

#include <stdint.h>

#include "core/options.h"
#include "core/prepack.h"
#include "core/status.h"
#include "kernels/swiglu_quant.h"
#include "qmoe/runtime.h"

enum {
    LINE = 128,
    ROW_BLOCK = 32,             /* rows per block call when the kernel has no preference */
    BLOCKS_PER_PART = 4,
    BALANCE_FLOOR = 256,
    STAGE_BYTES = 16 << 20,     /* cap on one staged x block (2048 AMX rows at K = 7168) */
    COL_BLOCK = 64,             /* column split granularity: whole NZ int4 column tiles */
    COL_MAX_ROWS = 256,         /* column split only for small row counts (S rows in workspace) */
};

static uint64_t gcd_u64(uint64_t a, uint64_t b)
{
    while (b) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* Rows whose bytes at `stride_bytes` per row fill whole lines. */
static int32_t line_rows(uint64_t stride_bytes)
{
    return (int32_t)(LINE / gcd_u64(stride_bytes, LINE));
}

int32_t qmoe_gmm_rows_per_chunk(const qmoe_gmm_params *p)
{
    if ((uintptr_t)p->out % LINE || (uintptr_t)p->out_scale % LINE) return 0;
    if (p->N2 > 1 && p->out_s[1] != 1) return 0;         /* a row is not contiguous */
    if (p->out_s[0] < p->N2 || p->out_scale_s < 1) return 0; /* rows overlap or interleave */
    int32_t a = line_rows((uint64_t)p->out_s[0]);
    int32_t b = line_rows((uint64_t)p->out_scale_s * sizeof(float));
    return a > b ? a : b; /* both are powers of two: the larger is their lcm */
}

qmoe_row_range qmoe_partition_rows(int64_t total, int32_t rows_per_chunk, int index, int count,
                                   const qmoe_fastdiv_t *count_div)
{
    qmoe_row_range all = {index == 0 ? 0 : total, index == 0 ? total : 0};
    if (count <= 1 || rows_per_chunk <= 0) return all;
    int64_t chunks = total / rows_per_chunk;
    if (chunks < count) return all;
    int64_t per = chunks <= UINT32_MAX ? (int64_t)qmoe_fastdiv((uint32_t)chunks, count_div)
                                       : chunks / count;
    qmoe_row_range r;
    r.start = (int64_t)index * per * rows_per_chunk;
    r.count = index == count - 1 ? total - r.start : per * rows_per_chunk;
    return r;
}

/* Rows of all experts: g[last] (cumsum) or the sum of counts. */
static int64_t total_rows(const qmoe_gmm_params *p)
{
    int64_t end = 0;
    for (int64_t e = 0; e < p->E_groups; e++) end = qmoe_gmm_group_end(p, e, end);
    return end;
}

int64_t qmoe_gmm_count_blocks(const qmoe_gmm_params *p, int64_t r0, int64_t r1)
{
    int64_t n = 0, start = 0;
    for (int64_t e = 0; e < p->E_groups && start < r1; e++) {
        int64_t end = qmoe_gmm_group_end(p, e, start);
        int64_t a = start > r0 ? start : r0, b = end < r1 ? end : r1;
        if (b > a) {
            int64_t rows = b - a + p->row_block - 1;
            n += rows <= UINT32_MAX ? qmoe_fastdiv((uint32_t)rows, &p->row_block_div)
                                    : rows / p->row_block;
        }
        start = end;
    }
    return n;
}

/* Cut i of `parts` over rows [r0, r1) (qmoe_gmm_part_rows). */
static int64_t part_cut(const qmoe_gmm_params *p, int64_t r0, int64_t r1, int64_t align,
                        int64_t i, int64_t parts)
{
    if (i <= 0) return r0;
    if (i >= parts) return r1;
    int64_t n = r1 - r0;
    int64_t c = r0 + n / parts * i + n % parts * i / parts; /* no n * i: it could overflow */
    int64_t start = 0;
    for (int64_t e = 0; e < p->E_groups; e++) {
        int64_t end = qmoe_gmm_group_end(p, e, start);
        if (end > c) { /* c lies in this expert's rows (empty experts never get here) */
            int64_t a = start > r0 ? start : r0, b = end < r1 ? end : r1;
            int64_t lo = a + (c - a) / align * align, hi = b - lo > align ? lo + align : b;
            return c - lo <= hi - c ? lo : hi;
        }
        start = end;
    }
    return r1;
}

qmoe_row_range qmoe_gmm_part_rows(const qmoe_gmm_params *p, int64_t r0, int64_t n, int64_t align,
                                  int part, int parts)
{
    if (align < 1) align = 1;
    int64_t a = part_cut(p, r0, r0 + n, align, part, parts);
    int64_t b = part_cut(p, r0, r0 + n, align, (int64_t)part + 1, parts);
    qmoe_row_range r = {a, b - a};
    return r;
}

void qmoe_gmm_plan_split(const qmoe_gmm_params *p, qmoe_gmm_split *split)
{
    int64_t total = total_rows(p);
    for (int d = 0; d < p->devices; d++) {
        qmoe_gmm_device_split *s = &split->dev[d];
        qmoe_row_range r = {0, total};
        if (p->devices > 1)
            r = qmoe_partition_rows(total, p->rows_per_chunk, d, p->devices, &p->devices_div);
        s->row_start = r.start;
        s->nrows = r.count;
        s->nblocks = qmoe_gmm_count_blocks(p, r.start, r.start + r.count);
        s->columns = p->col_max_rows && s->nblocks < p->threads && r.count <= p->col_max_rows;
        s->pad = 0;
    }
}

qmoe_status qmoe_gmm_plan_execution(qmoe_gmm_params *p, const qmoe_kernel_entry *k, int threads,
                                    int devices)
{
    if (devices > QMOE_MAX_DEVICES)
        return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_OPTION, "options",
                             "options: devices = %d exceeds %d", devices, QMOE_MAX_DEVICES);
    if (threads > QMOE_MAX_THREADS)
        return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_OPTION, "options",
                             "options: threads = %d exceeds %d", threads, QMOE_MAX_THREADS);
    p->devices = devices > 0 ? devices : 1;
    if (threads > 0) {
        p->threads = threads;
    } else {
        /* the default group's thread count: all cores, shared by the devices */
        int per = qmoe_device_online_cores() / p->devices;
        p->threads = per > 0 ? per : 1;
    }
    /* Large blocks: the kernel packs a weight panel once per call and reuses it for each row. */
    int64_t rb = qmoe_kernel_row_block(k) > 0 ? qmoe_kernel_row_block(k) : ROW_BLOCK;
    if (p->K > 0 && rb * p->K > STAGE_BYTES) rb = STAGE_BYTES / p->K;
    /* About BLOCKS_PER_PART blocks per part (never below BALANCE_FLOOR rows per block): parts
     * once took whole blocks and needed several each to balance; they now cut rows
     * (qmoe_gmm_part_rows), and the cap stays, not measured against larger blocks at small M. */
    int64_t parts = (int64_t)p->threads * p->devices * BLOCKS_PER_PART;
    int64_t balanced = (p->M + parts - 1) / parts;
    if (balanced < BALANCE_FLOOR) balanced = BALANCE_FLOOR;
    if (rb > balanced) rb = balanced;
    if (rb > p->M) rb = p->M;
    if (rb < 1) rb = 1;
    /* whole accumulator blocks: with the parts' cuts on them too, only an expert's last block
     * has a partial one, which the driver runs on its slower path */
    int64_t ra = qmoe_kernel_row_align(k);
    if (ra > 1 && rb > ra) rb = rb / ra * ra;
    p->row_block = (int32_t)rb;
    p->stage_depth = 2;
    /* column ranges start at multiples of the kernel's alignment (its fast packing path) */
    int32_t align = qmoe_kernel_col_align(k) > 0 ? qmoe_kernel_col_align(k) : 1;
    p->col_block = (COL_BLOCK + align - 1) / align * align;
    /* prepacked weights come in panels of QMOE_PP_COLS columns: splits start on their edges */
    if (p->pp && p->col_block % QMOE_PP_COLS)
        p->col_block = (p->col_block / QMOE_PP_COLS + 1) * QMOE_PP_COLS;
    int64_t col_rows = (int64_t)p->threads * rb;
    p->col_max_rows = p->threads > 1 && p->N2 >= 2 * p->col_block
                          ? (int32_t)(col_rows < COL_MAX_ROWS ? col_rows : COL_MAX_ROWS)
                          : 0;
    p->rows_per_chunk = qmoe_gmm_rows_per_chunk(p);
    p->ws_row_bytes = ((uint64_t)p->N2 * sizeof(float) + 63u) & ~(uint64_t)63u;
    p->kernel_scratch_bytes = qmoe_swiglu_quant_scratch_bytes(k, p, rb, p->N2);
    p->thread_scratch_bytes = qmoe_gmm_slice_layout_of(p).total;
    p->device_ws_bytes = (uint64_t)p->col_max_rows * p->ws_row_bytes;
    p->workspace_bytes = p->device_ws_bytes * (uint64_t)p->devices;
    p->threads_div = qmoe_fastdiv_init((uint32_t)p->threads);
    p->devices_div = qmoe_fastdiv_init((uint32_t)p->devices);
    p->row_block_div = qmoe_fastdiv_init((uint32_t)p->row_block);
    return QMOE_OK;
}
