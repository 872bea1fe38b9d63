/* qmoe bench moe-ops: the element-wise MoE operators vs. the DRAM bandwidth of the same run. */
#ifndef QMOE_TOOLS_BENCH_MOE_OPS_H
#define QMOE_TOOLS_BENCH_MOE_OPS_H

#include <stdint.h>

/* argv[0] is "moe-ops"; returns the process exit code. */
int bench_moe_ops(int argc, char **argv);

/* DRAM read GB/s on `threads` threads over `mb` MB: best of 3 (0 when out of memory); also the
 * probe of qmoe bench down-proj. */
double mo_dram(int threads, int64_t mb);

#endif
