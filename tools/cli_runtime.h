/*
 * Runtime options shared by the subcommands that execute the operator (run, demo, bench):
 * --threads N, --devices D, --trace FILE. Parsing and setup live here so every subcommand gets
 * the same devices, streams and tracing. The trace file is an output like any other
 * (tools/outfile.h): checked against the command's other files before anything is read, and
 * written only when the run succeeded, together with the command's other outputs.
 */
#ifndef QMOE_TOOLS_CLI_RUNTIME_H
#define QMOE_TOOLS_CLI_RUNTIME_H

#include "outfile.h"
#include "qmoe/qmoe.h"

typedef struct cli_runtime {
    int threads;            /* 0: all online cores */
    int devices;            /* 0 or 1: one device */
    const char *trace_path; /* NULL: no trace */
    int trace_adopted;      /* the command writes the trace with its own outputs */
    void *state;            /* devices, stream, trace file: owned by cli_runtime.c */
} cli_runtime;

/* If argv[*i] is one of the runtime options, consumes it (and its value), advances *i past it
 * and returns 1; returns 0 when it is not one; -1 (message on stderr) for a bad value. */
int cli_runtime_parse(cli_runtime *rt, int argc, char **argv, int *i);

/* One help line per option, for the subcommands' --help. */
const char *cli_runtime_help(void);

/* The thread and device counts phase one needs, without creating anything. */
void cli_runtime_options(const cli_runtime *rt, qmoe_grouped_matmul_swiglu_quant_options *options);

/* For a command with outputs of its own: adds --trace (when given) to `set`, so that it is
 * checked with them and written with them (by outfiles_write, while the devices still exist).
 * Returns 0, or -1 when the set is full. */
int cli_runtime_trace_output(cli_runtime *rt, outfiles *set);

/* Before planning: checks the trace file (unless adopted), creates the devices and the stream
 * and fills options (threads, devices). Returns 0, or non-zero with a message on stderr. */
int cli_runtime_begin(cli_runtime *rt, qmoe_grouped_matmul_swiglu_quant_options *options, qmoe_stream **stream);

/* Waits for the stream; returns its status. The devices stay until cli_runtime_free. */
qmoe_status cli_runtime_sync(cli_runtime *rt);

/* Prints where the trace went (after the command's outputs were written). */
void cli_runtime_trace_written(const cli_runtime *rt);

/* Frees everything begin made (waiting for the work in flight). */
void cli_runtime_free(cli_runtime *rt);

/* For commands without output files (demo, bench): sync; if the run succeeded and a trace was
 * asked for, writes it (a failed run writes no trace); frees. Returns the run's status, or
 * QMOE_ERR_PARAM_INVALID when the trace could not be written (message on stderr). */
qmoe_status cli_runtime_end(cli_runtime *rt);

#endif
