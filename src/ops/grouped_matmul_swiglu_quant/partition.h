/*
 * Host-side execution planning of GroupedMatmulSwigluQuant, shared with the driver
 * (src/ops/grouped_matmul_swiglu_quant/run.c): how many parts (threads), how rows and columns are split, the row block,
 * the multi-device chunking, and the layout of a thread's scratchpad slice.
 *
 * Rules the driver follows to the letter:
 * - Rows are flattened over all experts (row m of the output, m < g[last]); a device gets a
 *   contiguous range of them (multi-device: qmoe_partition_rows), and splits its range into
 *   blocks of at most row_block rows that never cross an expert boundary.
 * - Row split (default): part i of `threads` takes the device's rows [c_i, c_(i+1))
 *   (qmoe_gmm_part_rows: cuts near i * rows / threads, on a multiple of the kernel's row
 *   alignment from the start of the expert cut, or at its end), splits them into blocks as above,
 *   computes them for all N2 columns, and quantizes each block right after computing it. Parts
 *   balance rows, the work, rather than blocks: experts' rows end unevenly.
 * - Which split a device uses, and its rows, are these rules applied to the experts' rows
 *   (qmoe_gmm_plan_split), at execution time: groupList may be written by an operator queued
 *   before this one, so the driver calls it on each device once groupList is checked.
 * - Column split (a device with fewer blocks than parts and at most col_max_rows rows): part i
 *   computes every block for columns [i*c, min((i+1)*c, N2)), c = ceil(N2 / threads) rounded up
 *   to col_block, into the device's S rows in the workspace; after a barrier, part i quantizes
 *   rows [i*r, (i+1)*r) of the range, r = ceil(rows / threads).
 * - Each part streams x rows and x scales of its blocks through its copy queue, stage_depth
 *   buffers deep, into its scratchpad slice (qmoe_gmm_slice_layout).
 */
#ifndef QMOE_HOST_GMM_PARTITION_H
#define QMOE_HOST_GMM_PARTITION_H

#include "core/gmm_params.h"
#include "kernels/kernel.h"
#include "qmoe/qmoe.h"
#include "qmoe/runtime.h"

/* Bump allocator over a region: returns the offset of `bytes` and moves past them, keeping every
 * region 64-byte aligned. */
static inline uint64_t qmoe_bump(uint64_t *offset, uint64_t bytes)
{
    uint64_t at = *offset;
    *offset = (at + bytes + 63u) & ~(uint64_t)63u;
    return at;
}

/* Offsets of one thread's scratchpad slice. The planner sizes the slice with it
 * (thread_scratch_bytes = total) and the driver finds its buffers with it. */
typedef struct qmoe_gmm_slice_layout {
    uint64_t s_block;       /* row_block S rows (ws_row_bytes each) of the row split */
    uint64_t x_slot_bytes;  /* one staged x block: row_block * K bytes */
    uint64_t xs_slot_bytes; /* one staged x-scale block: row_block floats */
    uint64_t x_stage;       /* stage_depth x slots */
    uint64_t xs_stage;      /* stage_depth x-scale slots */
    uint64_t kernel;        /* the kernel's scratch (kernel_scratch_bytes) */
    uint64_t total;
} qmoe_gmm_slice_layout;

static inline qmoe_gmm_slice_layout qmoe_gmm_slice_layout_of(const qmoe_gmm_params *p)
{
    qmoe_gmm_slice_layout l;
    uint64_t off = 0, rb = (uint64_t)p->row_block, depth = (uint64_t)p->stage_depth;
    l.x_slot_bytes = (rb * (uint64_t)p->K + 63u) & ~(uint64_t)63u;
    l.xs_slot_bytes = (rb * sizeof(float) + 63u) & ~(uint64_t)63u;
    l.s_block = qmoe_bump(&off, rb * p->ws_row_bytes);
    l.x_stage = qmoe_bump(&off, depth * l.x_slot_bytes);
    l.xs_stage = qmoe_bump(&off, depth * l.xs_slot_bytes);
    l.kernel = qmoe_bump(&off, p->kernel_scratch_bytes);
    l.total = off;
    return l;
}

/* A device's share of the flattened rows. */
typedef struct qmoe_row_range {
    int64_t start, count;
} qmoe_row_range;

/* Rows per multi-device chunk: the least number of rows whose output bytes and outputScale bytes
 * are both whole 128-byte lines (128 / gcd(row stride bytes, 128) for each, the larger of the
 * two); 0 when a split is unsafe: a base not 128-byte aligned or elements of a row not
 * contiguous. */
int32_t qmoe_gmm_rows_per_chunk(const qmoe_gmm_params *p);

/* Device `index` of `count` gets whole chunks: floor(chunks / count) each, the remainder chunks
 * and the partial tail to the last device; device 0 gets everything when rows_per_chunk is 0 or
 * there are fewer whole chunks than devices. `count_div` divides by count. */
qmoe_row_range qmoe_partition_rows(int64_t total, int32_t rows_per_chunk, int index, int count,
                                   const qmoe_fastdiv_t *count_div);

/* The split of one run over the plan's devices, a pure function of the plan and the checked
 * groupList (it needs the rows of the experts): each device's row range, its number of row blocks
 * and whether it splits by columns. The driver executes it as given and derives none of it. */
typedef struct qmoe_gmm_device_split {
    int64_t row_start, nrows; /* the device's flattened rows */
    int64_t nblocks;          /* blocks of at most row_block rows, never across an expert */
    int32_t columns;          /* 1: column split (fewer blocks than parts, few rows) */
    int32_t pad;
} qmoe_gmm_device_split;

typedef struct qmoe_gmm_split {
    qmoe_gmm_device_split dev[QMOE_MAX_DEVICES];
} qmoe_gmm_split;

/* The end row of expert e whose rows start at `start` (groupList type of the plan). */
static inline int64_t qmoe_gmm_group_end(const qmoe_gmm_params *p, int64_t e, int64_t start)
{
    int64_t v = p->gl[e * p->gl_s];
    return p->group_list_type == QMOE_GROUP_LIST_COUNT ? start + v : v;
}

/* Blocks of rows [r0, r1): per expert segment, ceil(rows / row_block). */
int64_t qmoe_gmm_count_blocks(const qmoe_gmm_params *p, int64_t r0, int64_t r1);

/* Part `part` of `parts` of a device's rows [r0, r0 + n) in the row split: its cuts c_i, c_0 =
 * r0 and c_parts = r0 + n, the others nearest to r0 + i * n / parts among the rows a multiple of
 * `align` (>= 1) past the start of the expert segment holding it and that segment's end (ties:
 * the lower). A pure function of the plan and groupList, so the parts tile the rows. */
qmoe_row_range qmoe_gmm_part_rows(const qmoe_gmm_params *p, int64_t r0, int64_t n, int64_t align,
                                  int part, int parts);

/* Fills `split` for p->devices devices (groupList checked: qmoe_gmm_check_groups). */
void qmoe_gmm_plan_split(const qmoe_gmm_params *p, qmoe_gmm_split *split);

/* Fills the execution fields of a validated plan (threads, devices, blocks, splits, scratchpad
 * and workspace sizes, fast-division constants) for kernel `k`. `threads` / `devices` are the
 * caller's options (0: defaults). QMOE_ERR_PARAM_INVALID when they are out of range. */
qmoe_status qmoe_gmm_plan_execution(qmoe_gmm_params *p, const qmoe_kernel_entry *k, int threads,
                                    int devices);

#endif
