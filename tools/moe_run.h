/* qmoe moe run (tools/cmd_moe_run.c): a MoE layer from a safetensors file, run on .npy inputs. */
#ifndef QMOE_TOOLS_MOE_RUN_H
#define QMOE_TOOLS_MOE_RUN_H

int moe_run(int argc, char **argv); /* argv[0] is "run" */

#endif
