/*
 * Runtime options shared by the subcommands that execute the operator (run, demo, bench):
 * --threads N, --devices D, --trace FILE. Parsing and setup live here so every subcommand gets
 * the same devices, streams and tracing.
 */
#ifndef QMOE_TOOLS_CLI_RUNTIME_H
#define QMOE_TOOLS_CLI_RUNTIME_H

#include "qmoe/qmoe.h"

typedef struct cli_runtime {
    int threads;            /* 0: all online cores */
    int devices;            /* 0 or 1: one device */
    const char *trace_path; /* NULL: no trace */
    void *state;            /* devices, stream, trace session: owned by cli_runtime.c */
} cli_runtime;

/* If argv[*i] is one of the runtime options, consumes it (and its value), advances *i past it
 * and returns 1; returns 0 when it is not one; -1 (message on stderr) for a bad value. */
int cli_runtime_parse(cli_runtime *rt, int argc, char **argv, int *i);

/* One help line per option, for the subcommands' --help. */
const char *cli_runtime_help(void);

/* Before planning: fills the options (threads, devices) and the stream to execute on (may be
 * NULL: synchronous on the calling thread). Returns 0, or non-zero with a message on stderr. */
int cli_runtime_begin(cli_runtime *rt, qmoe_op_options *options, qmoe_stream **stream);

/* After executing: waits for the stream and returns its status, writes the trace file if asked,
 * and frees everything begin made. */
qmoe_status cli_runtime_end(cli_runtime *rt);

#endif
