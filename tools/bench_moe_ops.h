/* qmoe bench moe-ops: the element-wise MoE operators vs. the DRAM bandwidth of the same run. */
#ifndef QMOE_TOOLS_BENCH_MOE_OPS_H
#define QMOE_TOOLS_BENCH_MOE_OPS_H

/* argv[0] is "moe-ops"; returns the process exit code. */
int bench_moe_ops(int argc, char **argv);

#endif
