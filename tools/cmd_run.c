/*
 * qmoe run: the operator on .npy inputs, .npy outputs. Rows past the last group are 0 / 0.0 in
 * the output files (the operator leaves them untouched; the buffers start zeroed). On any error:
 * one line on stderr, exit 1, and no output file changed (tools/outfile.h). Order: files compared
 * (nothing read yet), headers read, phase one on the shapes (nothing allocated yet), data read,
 * run, outputs written together.
 */
#include <stdio.h>
#include <string.h>

#include "case.h"
#include "cli_args.h"
#include "cli_runtime.h"
#include "commands.h"
#include "outfile.h"

typedef struct run_args {
    op_case c; /* sources set, arrays loaded later */
    const char *out, *out_scale;
    qmoe_kernel kernel;
    cli_runtime rt;
} run_args;

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: qmoe run --x X.npy --weight W.npy --weight-scale WS.npy --x-scale XS.npy\n"
        "                --group-list GL.npy [--bias B.npy] --out Q.npy --out-scale QS.npy\n"
        "                [options]\n\n"
        "Inputs: x int8 [M,K]; weight by dtype and rank: int8 5-D FRACTAL_NZ (A8W8), int32 5-D\n"
        "FRACTAL_NZ int4 packed 8 per int32 (A8W4), int8 3-D [E,K,N] ND, int32 3-D [E,K,N/8] ND\n"
        "packed int4; weight scale float32/float16/uint64 [E,N] or [E,G,N]; x scale float32 [M];\n"
        "group list int64 [E']; bias float32 [E,N] (A8W4's assist matrix).\n"
        "Outputs: Q int8 [M,N/2], QS float32 [M]; rows past the last group are written as 0.\n"
        "An output may not be an input or another output (compared as files). Files are\n"
        "replaced together once all are complete (links followed); devices and pipes, such\n"
        "as /dev/null, are written in place. On any error no file changes.\n\n"
        "  --group-list-type cumsum|count   (default cumsum)\n"
        "  --weight-int4-nd  the weight is int8/uint8 [E,K,N/2] of packed int4 (low nibble first)\n"
        "  --weight-scale-bf16  the weight scale is <u2 holding bfloat16 bits\n"
        "  --kernel NAME     %s\n"
        "%s",
        args_kernel_list(), cli_runtime_help());
}

static int input_index(const char *opt)
{
    for (int i = 0; i < CASE_INPUTS; i++)
        if (!strcmp(opt, case_inputs[i].option)) return i;
    return -1;
}

/* Options that take a value; returns 0, or -1 after a message. */
static int valued_option(run_args *a, const char *opt, const char *val)
{
    int in = input_index(opt);
    if (in >= 0)
        a->c.source[in] = val;
    else if (!strcmp(opt, "--out"))
        a->out = val;
    else if (!strcmp(opt, "--out-scale"))
        a->out_scale = val;
    else if (!strcmp(opt, "--group-list-type"))
        return args_group_list_type("run", val, &a->c.group_list_type);
    else if (!strcmp(opt, "--kernel"))
        return args_kernel("run", val, &a->kernel);
    else {
        fprintf(stderr, "qmoe run: %s: unknown option (see qmoe run --help)\n", opt);
        return -1;
    }
    return 0;
}

static int check_required(const run_args *a)
{
    for (int i = 0; i < CASE_INPUTS; i++)
        if (i != CASE_BIAS && !a->c.source[i]) {
            fprintf(stderr, "qmoe run: %s: missing (the %s input)\n", case_inputs[i].option,
                    case_inputs[i].tensor);
            return -1;
        }
    if (!a->out || !a->out_scale) {
        fprintf(stderr, "qmoe run: %s: missing (the output file)\n",
                a->out ? "--out-scale" : "--out");
        return -1;
    }
    return 0;
}

/* Returns 0 to go on, 1 after --help, -1 after an error message. */
static int parse(int argc, char **argv, run_args *a)
{
    for (int i = 1; i < argc;) {
        const char *opt = argv[i], *val;
        int r = cli_runtime_parse(&a->rt, argc, argv, &i);
        if (r) {
            if (r < 0) return -1;
        } else if (!strcmp(opt, "--help") || !strcmp(opt, "-h")) {
            usage(stdout);
            return 1;
        } else if (!strcmp(opt, "--weight-int4-nd")) {
            a->c.weight_int4_nd = 1;
            i++;
        } else if (!strcmp(opt, "--weight-scale-bf16")) {
            a->c.scale_bf16 = 1;
            i++;
        } else if (args_value("run", argc, argv, &i, &val) || valued_option(a, opt, val)) {
            return -1;
        }
    }
    return check_required(a);
}

/* outfile_writer for one array. */
static int write_array(const char *path, void *ctx, char *err)
{
    char why[NPY_ERR_LEN];
    if (!npy_write(path, ctx, why)) return 0;
    snprintf(err, OUTFILE_ERR_LEN, "%s", why);
    return -1;
}

/* Every file of the command, compared before anything is read. */
static int check_files(run_args *a, outfiles *files, outfile **out, char *err)
{
    outfiles_init(files);
    for (int i = 0; i < CASE_INPUTS; i++)
        if (a->c.source[i]) outfiles_input(files, case_inputs[i].option, a->c.source[i]);
    out[0] = outfiles_output(files, "--out", a->out);
    out[1] = outfiles_output(files, "--out-scale", a->out_scale);
    if (cli_runtime_trace_output(&a->rt, files)) return -1;
    return outfiles_check(files, err);
}

/* Plan, execute and write; the stream is drained before anything is freed or written. */
static int execute(run_args *a, outfiles *files, outfile **out, char *err)
{
    qmoe_grouped_matmul_swiglu_quant_options o = {0};
    qmoe_stream *stream;
    case_exec ex = {0};
    if (cli_runtime_begin(&a->rt, &o, &stream)) return -2; /* message already printed */
    o.kernel = a->kernel;
    int rc = case_plan(&a->c, &o, &ex, err) || case_launch(&a->c, &ex, stream, err) ? -1 : 0;
    qmoe_status st = cli_runtime_sync(&a->rt);
    if (!rc && st) {
        case_error(&a->c, st, err);
        rc = -1;
    }
    if (!rc) {
        out[0]->write = out[1]->write = write_array;
        out[0]->ctx = &ex.out;
        out[1]->ctx = &ex.out_scale;
        rc = outfiles_write(files, err); /* the trace too, while the devices exist */
        if (!rc) cli_runtime_trace_written(&a->rt);
    }
    cli_runtime_free(&a->rt);
    case_exec_free(&ex);
    return rc;
}

int cmd_run(int argc, char **argv)
{
    run_args a;
    outfiles files;
    outfile *out[2];
    char err[CASE_ERR_LEN];
    memset(&a, 0, sizeof a);
    int rc = parse(argc, argv, &a);
    if (rc) return rc > 0 ? 0 : 2;
    qmoe_grouped_matmul_swiglu_quant_options o = {0};
    cli_runtime_options(&a.rt, &o);
    o.kernel = a.kernel;
    rc = check_files(&a, &files, out, err) || case_load_headers(&a.c, err) ||
                 case_check(&a.c, &o, err) || case_load(&a.c, err)
             ? -1
             : execute(&a, &files, out, err);
    if (rc == -1) fprintf(stderr, "qmoe run: %s\n", err);
    outfiles_free(&files);
    case_free(&a.c);
    return rc ? 1 : 0;
}
