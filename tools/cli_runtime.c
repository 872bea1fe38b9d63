/* Runtime options of the CLI. Until devices and streams land, execution is synchronous. */
#include "cli_runtime.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

int cli_runtime_begin(cli_runtime *rt, qmoe_op_options *options, qmoe_stream **stream)
{
    if (rt->trace_path) {
        fprintf(stderr, "qmoe: --trace is not available in this build yet\n");
        return 1;
    }
    options->threads = rt->threads;
    options->devices = rt->devices;
    *stream = NULL;
    return 0;
}

qmoe_status cli_runtime_end(cli_runtime *rt)
{
    (void)rt;
    return QMOE_OK;
}
