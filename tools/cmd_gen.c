/*
 * qmoe gen: a random, realistic case as .npy files in a folder (x, weight, weight_scale,
 * x_scale, group_list, and bias for A8W4), plus the `qmoe run` line that runs it. The files
 * appear together or not at all, by the rules of tools/outfile.h.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "case.h"
#include "cli_args.h"
#include "commands.h"
#include "gen_args.h"
#include "outfile.h"

enum { PATH_LEN = 4096 };

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: qmoe gen --out DIR [options]\n\n"
        "Writes x.npy, weight.npy, weight_scale.npy, x_scale.npy, group_list.npy (and bias.npy,\n"
        "the assist matrix, for a8w4) into DIR, creating it if needed, and prints the\n"
        "`qmoe run` command for the case.\n\n%s",
        gen_args_help());
}

/* Returns 0 to go on, 1 after --help, -1 after an error message. */
static int parse(int argc, char **argv, gen_params *p, const char **dir)
{
    for (int i = 1; i < argc;) {
        const char *opt = argv[i];
        int r = gen_args_parse("gen", argc, argv, &i, p);
        if (r < 0) return -1;
        if (r) continue;
        if (!strcmp(opt, "--help") || !strcmp(opt, "-h")) {
            usage(stdout);
            return 1;
        }
        if (strcmp(opt, "--out")) {
            fprintf(stderr, "qmoe gen: %s: unknown option (see qmoe gen --help)\n", opt);
            return -1;
        }
        if (args_value("gen", argc, argv, &i, dir)) return -1;
    }
    if (!*dir) {
        fprintf(stderr, "qmoe gen: --out: missing (the folder to write the case to)\n");
        return -1;
    }
    return 0;
}

/* mkdir -p: every missing folder of the path. */
static int make_dirs(const char *dir, char *err)
{
    char path[PATH_LEN];
    struct stat st;
    if (!*dir) {
        snprintf(err, CASE_ERR_LEN, "--out: the folder name is empty");
        return -1;
    }
    if (snprintf(path, sizeof path, "%s", dir) >= PATH_LEN) {
        snprintf(err, CASE_ERR_LEN, "%s: path too long", dir);
        return -1;
    }
    for (char *p = path + 1;; p++) {
        if (*p != '/' && *p != '\0') continue;
        char end = *p;
        *p = '\0';
        if (mkdir(path, 0777) && errno != EEXIST) {
            snprintf(err, CASE_ERR_LEN, "%.400s: cannot create the folder: %s", path,
                     strerror(errno));
            return -1;
        }
        *p = end;
        if (!end) break;
    }
    if (stat(dir, &st) || !S_ISDIR(st.st_mode)) {
        snprintf(err, CASE_ERR_LEN, "%s: not a folder", dir);
        return -1;
    }
    return 0;
}

/* outfile_writer for one array. */
static int write_array(const char *path, void *ctx, char *err)
{
    char why[NPY_ERR_LEN];
    if (!npy_write(path, ctx, why)) return 0;
    snprintf(err, OUTFILE_ERR_LEN, "%s", why);
    return -1;
}

/* Every file together or none, each old file kept until all are in place (tools/outfile.h). */
static int write_case(const op_case *c, const char *dir, char *err)
{
    char paths[CASE_INPUTS][PATH_LEN];
    outfiles files;
    outfiles_init(&files);
    for (int i = 0; i < CASE_INPUTS; i++) {
        if (!c->in[i].data) continue; /* no bias for A8W8 */
        if (snprintf(paths[i], PATH_LEN, "%s/%s", dir, case_inputs[i].file) >= PATH_LEN) {
            snprintf(err, CASE_ERR_LEN, "%s: path too long", dir);
            return -1;
        }
        outfile *o = outfiles_output(&files, case_inputs[i].file, paths[i]);
        o->write = write_array;
        o->ctx = (void *)&c->in[i];
    }
    int rc = outfiles_check(&files, err) || outfiles_write(&files, err) ? -1 : 0;
    outfiles_free(&files);
    return rc;
}

static void print_command(const op_case *c, const gen_params *p, const char *dir)
{
    printf("qmoe run");
    for (int i = 0; i < CASE_INPUTS; i++)
        if (c->in[i].data) printf(" %s %s/%s", case_inputs[i].option, dir, case_inputs[i].file);
    if (p->group_list_type == QMOE_GROUP_LIST_COUNT) printf(" --group-list-type count");
    if (c->weight_int4_nd) printf(" --weight-int4-nd");
    if (c->scale_bf16) printf(" --weight-scale-bf16");
    printf(" --out %s/out.npy --out-scale %s/out_scale.npy\n", dir, dir);
}

int cmd_gen(int argc, char **argv)
{
    gen_params p;
    const char *dir = NULL;
    char err[CASE_ERR_LEN], what[256];
    op_case c;
    gen_defaults(&p);
    int rc = parse(argc, argv, &p, &dir);
    if (rc) return rc > 0 ? 0 : 2;
    gen_args_describe(&p, what, sizeof what);
    /* the sizes first: a case over --max-gib costs no memory */
    if (case_generate_headers(&p, &c, err) || case_generate(&p, &c, err)) {
        fprintf(stderr, "qmoe gen: %s: %s\n", what, err);
        return 1;
    }
    rc = make_dirs(dir, err) || write_case(&c, dir, err);
    if (rc)
        fprintf(stderr, "qmoe gen: %s\n", err);
    else {
        printf("# %s\n", what);
        print_command(&c, &p, dir);
    }
    case_free(&c);
    return rc ? 1 : 0;
}
