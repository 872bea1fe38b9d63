/* qmoe bench moe: the MoE layer at a model's shapes vs. the DRAM bandwidth of the same run. */
#ifndef QMOE_TOOLS_BENCH_MOE_LAYER_H
#define QMOE_TOOLS_BENCH_MOE_LAYER_H

/* argv[0] is "moe"; returns the process exit code. */
int bench_moe_layer(int argc, char **argv);

#endif
