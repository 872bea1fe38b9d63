/* qmoe bench down-proj: the grouped matmul (MoE down projection) vs. the int8 peak and the DRAM
 * bandwidth measured in the same run. */
#ifndef QMOE_TOOLS_BENCH_DOWN_PROJ_H
#define QMOE_TOOLS_BENCH_DOWN_PROJ_H

/* argv[0] is "down-proj"; returns the process exit code. */
int bench_down_proj(int argc, char **argv);

#endif
