/*
 * Option-value parsing shared by the subcommands. Each helper prints one line on stderr,
 * "qmoe CMD: OPTION: reason", and returns -1 on a bad value; 0 on success.
 */
#ifndef QMOE_TOOLS_CLI_ARGS_H
#define QMOE_TOOLS_CLI_ARGS_H

#include <stdint.h>

#include "qmoe/qmoe.h"

/* The value after the option argv[*i]; advances *i past both. */
int args_value(const char *cmd, int argc, char **argv, int *i, const char **value);

/* A decimal integer in [lo, hi]. */
int args_int(const char *cmd, const char *opt, const char *text, int64_t lo, int64_t hi,
             int64_t *out);

/* One of `count` names; *out is its index. */
int args_choice(const char *cmd, const char *opt, const char *text, const char *const *names,
                int count, int *out);

/* A kernel by its qmoe_kernel_name ("auto", "reference", ...). */
int args_kernel(const char *cmd, const char *text, qmoe_kernel *out);
/* "auto (default), reference, portable, ...": every kernel name of the library. */
const char *args_kernel_list(void);

/* "cumsum" or "count". */
int args_group_list_type(const char *cmd, const char *text, qmoe_group_list_type *out);

#endif
