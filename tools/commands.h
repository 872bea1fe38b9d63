/* The subcommands of the `qmoe` program; each lives in its own cmd_*.c file. */
#ifndef QMOE_TOOLS_COMMANDS_H
#define QMOE_TOOLS_COMMANDS_H

int cmd_run(int argc, char **argv);   /* qmoe run: .npy in, .npy out */
int cmd_gen(int argc, char **argv);   /* qmoe gen: write a random case as .npy */
int cmd_demo(int argc, char **argv);  /* qmoe demo: the vendor sample's workload, verified */
int cmd_bench(int argc, char **argv); /* qmoe bench: JSON lines vs. measured machine limits */
int cmd_moe(int argc, char **argv);   /* qmoe moe: a MoE layer (gen: a random one) */

#endif
