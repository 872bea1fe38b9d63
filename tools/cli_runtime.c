/* Runtime options of the CLI: D devices of T threads, one stream over them, optional tracing. */
#include "cli_runtime.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qmoe/runtime.h"

enum { MAX_THREADS = 4096 }; /* a device's limit (qmoe_device_create) */

static int parse_count(const char *opt, const char *text, int max, int *out)
{
    char *end;
    long v = strtol(text, &end, 10);
    if (*text == '\0' || *end != '\0' || v < 0 || v > max) {
        fprintf(stderr, "qmoe: %s needs a count in [0, %d], got '%s'\n", opt, max, text);
        return -1;
    }
    *out = (int)v;
    return 1;
}

int cli_runtime_parse(cli_runtime *rt, int argc, char **argv, int *i)
{
    const char *opt = argv[*i];
    int is_threads = !strcmp(opt, "--threads"), is_devices = !strcmp(opt, "--devices");
    int is_trace = !strcmp(opt, "--trace");
    if (!is_threads && !is_devices && !is_trace) return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "qmoe: %s needs a value\n", opt);
        return -1;
    }
    const char *val = argv[*i + 1];
    *i += 2;
    if (is_trace) {
        rt->trace_path = val;
        return 1;
    }
    if (is_threads) return parse_count(opt, val, MAX_THREADS, &rt->threads);
    return parse_count(opt, val, QMOE_MAX_DEVICES, &rt->devices);
}

const char *cli_runtime_help(void)
{
    return "  --threads N     worker threads per device, at most 4096 (default: the online cores\n"
           "                  shared by the devices)\n"
           "  --devices D     split rows over a group of D devices, at most 16 (default 1)\n"
           "  --trace FILE    write a trace that ui.perfetto.dev opens (only when the run "
           "succeeds)\n";
}

typedef struct cli_state {
    int ndev;
    qmoe_device *devices[QMOE_MAX_DEVICES];
    qmoe_stream *stream;
    outfiles trace; /* the trace alone, for commands without outputs of their own */
} cli_state;

void cli_runtime_options(const cli_runtime *rt, qmoe_grouped_matmul_swiglu_quant_options *options)
{
    options->threads = rt->threads;
    options->devices = rt->devices > 0 ? rt->devices : 1;
}

/* outfile_writer for the trace: the events of the devices of `ctx` (a cli_runtime). */
static int write_trace(const char *path, void *ctx, char *err)
{
    const cli_state *st = ((const cli_runtime *)ctx)->state;
    if (!st) {
        snprintf(err, OUTFILE_ERR_LEN, "no devices ran");
        return -1;
    }
    if (qmoe_trace_write(path, st->devices, st->ndev)) {
        snprintf(err, OUTFILE_ERR_LEN, "%s", qmoe_last_error());
        return -1;
    }
    return 0;
}

static outfile *add_trace(cli_runtime *rt, outfiles *set)
{
    outfile *o = outfiles_output(set, "--trace", rt->trace_path);
    if (o) {
        o->write = write_trace;
        o->ctx = rt;
    }
    return o;
}

int cli_runtime_trace_output(cli_runtime *rt, outfiles *set)
{
    if (!rt->trace_path) return 0;
    rt->trace_adopted = 1;
    return add_trace(rt, set) ? 0 : -1;
}

static void free_state(cli_state *st)
{
    qmoe_stream_destroy(st->stream); /* waits for the work in flight */
    for (int d = 0; d < st->ndev; d++) qmoe_device_destroy(st->devices[d]);
    outfiles_free(&st->trace);
    free(st);
}

int cli_runtime_begin(cli_runtime *rt, qmoe_grouped_matmul_swiglu_quant_options *options, qmoe_stream **stream)
{
    int ndev = rt->devices > 0 ? rt->devices : 1;
    char err[OUTFILE_ERR_LEN] = "--trace: too many output files";
    if (ndev > QMOE_MAX_DEVICES) {
        fprintf(stderr, "qmoe: --devices %d: at most %d devices\n", ndev, QMOE_MAX_DEVICES);
        return 1;
    }
    cli_state *st = calloc(1, sizeof *st);
    if (!st) {
        fprintf(stderr, "qmoe: out of memory\n");
        return 1;
    }
    outfiles_init(&st->trace);
    if (rt->trace_path && !rt->trace_adopted &&
        (!add_trace(rt, &st->trace) || outfiles_check(&st->trace, err))) {
        fprintf(stderr, "qmoe: %s\n", err);
        free_state(st);
        return 1;
    }
    /* threads 0: the cores shared by the devices, as the plan's default assumes */
    int per = qmoe_device_online_cores() / ndev;
    qmoe_device_options o = {.threads = rt->threads > 0 ? rt->threads : per > 0 ? per : 1};
    for (; st->ndev < ndev; st->ndev++) {
        qmoe_device **dev = &st->devices[st->ndev];
        if (qmoe_device_create(&o, dev) ||
            (rt->trace_path && qmoe_device_trace(*dev, 1, 0))) {
            fprintf(stderr, "qmoe: cannot create device %d: %s\n", st->ndev, qmoe_last_error());
            if (*dev) st->ndev++;
            free_state(st);
            return 1;
        }
    }
    if (qmoe_stream_create_group(st->devices, ndev, &st->stream)) {
        fprintf(stderr, "qmoe: cannot create a stream: %s\n", qmoe_last_error());
        free_state(st);
        return 1;
    }
    rt->state = st;
    options->threads = rt->threads;
    options->devices = ndev;
    *stream = st->stream;
    return 0;
}

qmoe_status cli_runtime_sync(cli_runtime *rt)
{
    cli_state *st = rt->state;
    return st ? qmoe_stream_synchronize(st->stream) : QMOE_OK;
}

void cli_runtime_trace_written(const cli_runtime *rt)
{
    if (rt->trace_path)
        fprintf(stderr, "qmoe: trace written to %s (open it in ui.perfetto.dev)\n", rt->trace_path);
}

void cli_runtime_free(cli_runtime *rt)
{
    if (rt->state) free_state(rt->state);
    rt->state = NULL;
}

qmoe_status cli_runtime_end(cli_runtime *rt)
{
    cli_state *st = rt->state;
    if (!st) return QMOE_OK;
    qmoe_status status = qmoe_stream_synchronize(st->stream);
    if (!status && rt->trace_path && !rt->trace_adopted) {
        char err[OUTFILE_ERR_LEN];
        if (outfiles_write(&st->trace, err))
            status = qmoe_error_set(QMOE_ERR_PARAM_INVALID, QMOE_RULE_NONE, "", err);
        else
            cli_runtime_trace_written(rt);
    }
    cli_runtime_free(rt);
    return status;
}
