/* Runtime options of the CLI: D devices of T threads, one stream over them, optional tracing. */
#include "cli_runtime.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "qmoe/runtime.h"

static int parse_count(const char *opt, const char *text, int *out)
{
    char *end;
    long v = strtol(text, &end, 10);
    if (*text == '\0' || *end != '\0' || v < 0 || v > 4096) {
        fprintf(stderr, "qmoe: %s needs a count in [0, 4096], got '%s'\n", opt, text);
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
    return parse_count(opt, val, is_threads ? &rt->threads : &rt->devices);
}

const char *cli_runtime_help(void)
{
    return "  --threads N     worker threads per device (default: all online cores)\n"
           "  --devices D     split rows over a group of D devices (default 1)\n"
           "  --trace FILE    write a trace that ui.perfetto.dev opens\n";
}

typedef struct cli_state {
    int ndev;
    qmoe_device *devices[QMOE_MAX_DEVICES];
    qmoe_stream *stream;
} cli_state;

static void free_state(cli_state *st)
{
    qmoe_stream_destroy(st->stream); /* waits for the work in flight */
    for (int d = 0; d < st->ndev; d++) qmoe_device_destroy(st->devices[d]);
    free(st);
}

int cli_runtime_begin(cli_runtime *rt, qmoe_op_options *options, qmoe_stream **stream)
{
    int ndev = rt->devices > 0 ? rt->devices : 1;
    if (ndev > QMOE_MAX_DEVICES) {
        fprintf(stderr, "qmoe: --devices %d: at most %d devices\n", ndev, QMOE_MAX_DEVICES);
        return 1;
    }
    cli_state *st = calloc(1, sizeof *st);
    if (!st) {
        fprintf(stderr, "qmoe: out of memory\n");
        return 1;
    }
    /* threads 0: the cores shared by the devices, as the plan's default assumes */
    int per = qmoe_online_cores() / ndev;
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

qmoe_status cli_runtime_end(cli_runtime *rt)
{
    cli_state *st = rt->state;
    if (!st) return QMOE_OK;
    qmoe_status status = qmoe_stream_synchronize(st->stream);
    if (rt->trace_path) {
        /* the trace is written even when the operator failed: it shows where */
        char saved[512];
        snprintf(saved, sizeof saved, "%s", qmoe_last_error());
        if (qmoe_trace_write(rt->trace_path, st->devices, st->ndev)) {
            fprintf(stderr, "qmoe: %s\n", qmoe_last_error());
            if (!status) status = QMOE_ERR_PARAM_INVALID;
        } else {
            fprintf(stderr, "qmoe: trace written to %s (open it in ui.perfetto.dev)\n",
                    rt->trace_path);
            if (status) qmoe_fail(status, "%s", saved); /* keep the operator's message */
        }
    }
    free_state(st);
    rt->state = NULL;
    return status;
}
