/* Case options of `qmoe gen` and `qmoe demo`. */
#include "gen_args.h"

#include <stdio.h>
#include <string.h>

#include "cli_args.h"

static const char *const modes[] = {"a8w8", "a8w4"};
static const char *const formats[] = {"nz", "nd", "nd4"};
static const char *const scales[] = {"f32", "f16", "u64", "bf16"};

/* Options with a size value: where it goes. */
static int64_t *int_option(const char *opt, gen_params *p)
{
    if (!strcmp(opt, "--E")) return &p->E;
    if (!strcmp(opt, "--M")) return &p->M;
    if (!strcmp(opt, "--K")) return &p->K;
    if (!strcmp(opt, "--N")) return &p->N;
    if (!strcmp(opt, "--groups")) return &p->groups;
    if (!strcmp(opt, "--tail-rows")) return &p->tail_rows;
    if (!strcmp(opt, "--max-gib")) return &p->max_gib;
    return NULL;
}

static int choice_option(const char *cmd, const char *opt, const char *val, gen_params *p)
{
    int k;
    if (!strcmp(opt, "--mode")) {
        if (args_choice(cmd, opt, val, modes, 2, &k)) return -1;
        p->a8w4 = k;
    } else if (!strcmp(opt, "--weight-format")) {
        if (args_choice(cmd, opt, val, formats, 3, &k)) return -1;
        p->weight_format = (gen_weight_format)k;
    } else if (!strcmp(opt, "--scale-dtype")) {
        if (args_choice(cmd, opt, val, scales, 4, &k)) return -1;
        p->scale_dtype = (gen_scale_dtype)k;
    } else if (!strcmp(opt, "--group-list-type")) {
        if (args_group_list_type(cmd, val, &p->group_list_type)) return -1;
    } else if (!strcmp(opt, "--seed")) {
        int64_t seed;
        if (args_int(cmd, opt, val, 0, INT64_MAX, &seed)) return -1;
        p->seed = (uint64_t)seed;
    } else {
        return 0;
    }
    return 1;
}

int gen_args_parse(const char *cmd, int argc, char **argv, int *i, gen_params *p)
{
    static const char *const valued[] = {"--mode", "--weight-format", "--scale-dtype",
                                         "--group-list-type", "--seed"};
    const char *opt = argv[*i], *val;
    int64_t *dst = int_option(opt, p);
    if (!strcmp(opt, "--empty-experts")) {
        p->empty_experts = 1;
        (*i)++;
        return 1;
    }
    int known = dst != NULL;
    for (size_t k = 0; k < sizeof valued / sizeof valued[0]; k++) known |= !strcmp(opt, valued[k]);
    if (!known) return 0;
    if (args_value(cmd, argc, argv, i, &val)) return -1;
    if (dst) return args_int(cmd, opt, val, 0, (int64_t)1 << 31, dst) ? -1 : 1;
    return choice_option(cmd, opt, val, p);
}

const char *gen_args_help(void)
{
    return "  --E N --M N --K N --N N   experts, tokens, hidden size, gate+up columns\n"
           "                            (default: the vendor sample E=4 M=8192 K=7168 N=4096)\n"
           "  --mode a8w8|a8w4          weight type (default a8w4)\n"
           "  --groups G                per-group weight scales [E, G, N]; 0 = per-channel "
           "(default)\n"
           "  --weight-format nz|nd|nd4 FRACTAL_NZ (default), ND, or ND packed int4 bytes (a8w4)\n"
           "  --scale-dtype f32|f16|u64|bf16  weight scale dtype (u64: a8w4; bf16 as <u2)\n"
           "  --group-list-type cumsum|count  (default cumsum)\n"
           "  --empty-experts           give experts 1, 4, 7, ... no tokens\n"
           "  --tail-rows R             leave the last R tokens outside every group\n"
           "  --seed S                  random seed (default 1)\n"
           "  --max-gib N               refuse a case of more memory (default 16)\n";
}

void gen_args_describe(const gen_params *p, char *buf, size_t cap)
{
    static const char *const weight_names[2][3] = {
        {"FRACTAL_NZ int8", "ND int8", "-"},
        {"FRACTAL_NZ int32-packed int4", "ND int32-packed int4", "ND int4 bytes"},
    };
    static const char *const scale_names[] = {"float32", "float16", "uint64", "bfloat16"};
    char groups[32] = "per-channel";
    if (p->groups) snprintf(groups, sizeof groups, "%lld groups", (long long)p->groups);
    snprintf(buf, cap, "E=%lld M=%lld K=%lld N=%lld %s %s, weight %s, scale %s, groupList %s",
             (long long)p->E, (long long)p->M, (long long)p->K, (long long)p->N, modes[p->a8w4],
             groups, weight_names[p->a8w4][p->weight_format], scale_names[p->scale_dtype],
             p->group_list_type == QMOE_GROUP_LIST_COUNT ? "count" : "cumsum");
}
