/* The options that describe a random case, shared by `qmoe gen` and `qmoe demo`. */
#ifndef QMOE_TOOLS_GEN_ARGS_H
#define QMOE_TOOLS_GEN_ARGS_H

#include "case.h"

/* If argv[*i] is a case option, consumes it (and its value) and returns 1; 0 when it is not one;
 * -1 (message on stderr) for a bad value. */
int gen_args_parse(const char *cmd, int argc, char **argv, int *i, gen_params *p);

/* One help line per option, with the defaults of gen_defaults. */
const char *gen_args_help(void);

/* "a8w4 per-channel, weight NZ int32, scale float32, cumsum" style summary for messages. */
void gen_args_describe(const gen_params *p, char *buf, size_t cap);

#endif
