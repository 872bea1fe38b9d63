/* qmoe bench moe --ep P (tools/bench_moe_ep.c): the sharded MoE layer under mpirun. */
#ifndef QMOE_TOOLS_BENCH_MOE_EP_H
#define QMOE_TOOLS_BENCH_MOE_EP_H

/* argv[0] is "moe"; returns the process exit code. */
int bench_moe_ep(int argc, char **argv);

#endif
