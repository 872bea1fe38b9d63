/*
 * qmoe moe: a MoE layer end to end. `qmoe moe gen` writes a random layer in the float checkpoint
 * convention (DIR/layer.safetensors) with inputs for it (DIR/hidden.npy, DIR/router_logits.npy);
 * the files appear together or not at all (tools/outfile.h).
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli_args.h"
#include "cli_size.h"
#include "commands.h"
#include "moe_run.h"
#include "npy.h"
#include "outfile.h"
#include "qmoe/quantize.h"
#include "safetensors_write.h"

enum { PATH_LEN = 4096, NAME_LEN = 160, ERR_LEN = 1024 };

typedef struct model_shape {
    const char *name;
    int64_t H, I, E, top_k, shared_I, layers;
    const char *gating, *block; /* gating function; the layer's module name */
    int mixtral_names;          /* experts.{e}.w1 / w3 / w2 */
} model_shape;

/* Published configurations (config.json of each model). */
static const model_shape models[] = {
    {"qwen3-30b-a3b", 2048, 768, 128, 8, 0, 48, "softmax-renormalize", "mlp", 0},
    {"deepseek-v3", 7168, 2048, 256, 8, 2048, 61, "sigmoid-group-topk", "mlp", 0},
    {"mixtral-8x7b", 4096, 14336, 8, 2, 0, 32, "softmax-renormalize", "block_sparse_moe", 1},
};
enum { MODELS = sizeof models / sizeof models[0] };

typedef struct gen_opts {
    model_shape m;
    int64_t tokens, group_size, seed, max_gib;
    int a8w4, bf16;
    const char *dir;
} gen_opts;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: qmoe moe gen --out DIR [options]\n\n"
            "Writes a random MoE layer as DIR/layer.safetensors (float checkpoint convention:\n"
            "model.layers.{l}.mlp.experts.{e}.gate_proj.weight [I,H], up_proj [I,H],\n"
            "down_proj [H,I], the router gate.weight [E,H]; DeepSeek-V3 adds\n"
            "gate.e_score_correction_bias [E] and shared_experts.*; Mixtral's names are\n"
            "block_sparse_moe.experts.{e}.w1/w3/w2), DIR/hidden.npy float32 [T,H] and\n"
            "DIR/router_logits.npy float32 [T,E] (layer 0's), creating DIR if needed.\n\n"
            "  --model NAME     qwen3-30b-a3b | deepseek-v3 | mixtral-8x7b (their shapes)\n"
            "  --H N --I N --E N --top-k N   the shape (default 512, 256, 8, 2; override --model)\n"
            "  --experts N      the expert count (same as --E: keeps model files small)\n"
            "  --layers N       layers in the file (default 1)\n"
            "  --shared-I N     a shared expert of intermediate size N (0: none)\n"
            "  --tokens T       rows of hidden.npy and router_logits.npy (default 64)\n"
            "  --mode a8w8|a8w4 --group-size G   the quantization the layer is meant for (stored\n"
            "                   in the file's metadata; its shape rules are checked here)\n"
            "  --dtype fp32|bf16  the weights' dtype (default fp32)\n"
            "  --seed N         (default 0)   --max-gib N  refuse files larger together\n"
            "                   (default 16)\n");
}

static int parse_int(int argc, char **argv, int *i, const char *opt, int64_t lo, int64_t hi,
                     int64_t *out)
{
    const char *v;
    return args_value("moe gen", argc, argv, i, &v) ||
           args_int("moe gen", opt, v, lo, hi, out) ? -1 : 0;
}

/* Returns 0 to go on, 1 after --help, -1 after an error message. */
static int parse(int argc, char **argv, gen_opts *g)
{
    static const char *const modes[] = {"a8w8", "a8w4"}, *const dtypes[] = {"fp32", "bf16"};
    const char *model_names[MODELS];
    for (int k = 0; k < MODELS; k++) model_names[k] = models[k].name;
    int64_t H = 0, I = 0, E = 0, top_k = 0, layers = 0, shared_I = -1;
    const int64_t big = (int64_t)1 << 30;
    g->m = (model_shape){"custom", 512, 256, 8, 2, 0, 1, "softmax-renormalize", "mlp", 0};
    g->tokens = 64;
    g->max_gib = 16;
    for (int i = 1; i < argc;) {
        const char *opt = argv[i], *v;
        int r = 0, k;
        if (!strcmp(opt, "--help") || !strcmp(opt, "-h")) {
            usage(stdout);
            return 1;
        } else if (!strcmp(opt, "--out")) {
            r = args_value("moe gen", argc, argv, &i, &g->dir);
        } else if (!strcmp(opt, "--model")) {
            r = args_value("moe gen", argc, argv, &i, &v) ||
                args_choice("moe gen", opt, v, model_names, MODELS, &k);
            if (!r) g->m = models[k];
        } else if (!strcmp(opt, "--mode") || !strcmp(opt, "--dtype")) {
            int is_mode = !strcmp(opt, "--mode");
            r = args_value("moe gen", argc, argv, &i, &v) ||
                args_choice("moe gen", opt, v, is_mode ? modes : dtypes, 2, &k);
            if (!r) *(is_mode ? &g->a8w4 : &g->bf16) = k;
        } else if (!strcmp(opt, "--H")) r = parse_int(argc, argv, &i, opt, 1, big, &H);
        else if (!strcmp(opt, "--I")) r = parse_int(argc, argv, &i, opt, 1, big, &I);
        else if (!strcmp(opt, "--E") || !strcmp(opt, "--experts"))
            r = parse_int(argc, argv, &i, opt, 1, 1 << 16, &E);
        else if (!strcmp(opt, "--top-k")) r = parse_int(argc, argv, &i, opt, 1, 1 << 16, &top_k);
        else if (!strcmp(opt, "--layers")) r = parse_int(argc, argv, &i, opt, 1, 1024, &layers);
        else if (!strcmp(opt, "--shared-I")) r = parse_int(argc, argv, &i, opt, 0, big, &shared_I);
        else if (!strcmp(opt, "--tokens")) r = parse_int(argc, argv, &i, opt, 0, big, &g->tokens);
        else if (!strcmp(opt, "--group-size"))
            r = parse_int(argc, argv, &i, opt, 0, big, &g->group_size);
        else if (!strcmp(opt, "--seed")) r = parse_int(argc, argv, &i, opt, 0, INT64_MAX, &g->seed);
        else if (!strcmp(opt, "--max-gib")) r = parse_int(argc, argv, &i, opt, 1, 1 << 20, &g->max_gib);
        else {
            fprintf(stderr, "qmoe moe gen: %s: unknown option (see qmoe moe gen --help)\n", opt);
            return -1;
        }
        if (r) return -1;
    }
    if (!g->dir) {
        fprintf(stderr, "qmoe moe gen: --out: missing (the folder to write the layer to)\n");
        return -1;
    }
    if (H) g->m.H = H;
    if (I) g->m.I = I;
    if (E) g->m.E = E;
    if (top_k) g->m.top_k = top_k;
    else if (g->m.top_k > g->m.E) g->m.top_k = g->m.E; /* a model cut down with --experts */
    if (layers) g->m.layers = layers;
    else if (strcmp(g->m.name, "custom")) g->m.layers = 1; /* one layer unless asked */
    if (shared_I >= 0) g->m.shared_I = shared_I;
    if (g->m.top_k > g->m.E) {
        fprintf(stderr, "qmoe moe gen: --top-k: %" PRId64 " is more than the %" PRId64
                " experts\n", g->m.top_k, g->m.E);
        return -1;
    }
    return 0;
}

/* The shape rules of the operators' weights for the chosen mode, by the library's own check. */
static int check_shapes(const gen_opts *g)
{
    qmoe_quant_options o = QMOE_QUANT_OPTIONS_INIT;
    qmoe_quant_sizes sz;
    o.mode = g->a8w4 ? QMOE_QUANT_A8W4 : QMOE_QUANT_A8W8;
    o.group_size = g->group_size;
    struct { const char *what; int64_t E, K, N; } w[] = {
        {"gate/up (K = H, N = 2I)", g->m.E, g->m.H, 2 * g->m.I},
        {"down (K = I, N = H)", g->m.E, g->m.I, g->m.H},
        {"shared gate/up (K = H, N = 2 shared-I)", 1, g->m.H, 2 * g->m.shared_I},
        {"shared down (K = shared-I, N = H)", 1, g->m.shared_I, g->m.H},
    };
    for (int k = 0; k < (g->m.shared_I ? 4 : 2); k++)
        if (qmoe_quant_sizes_of(&o, w[k].E, w[k].K, w[k].N, &sz) != QMOE_OK) {
            fprintf(stderr, "qmoe moe gen: --mode %s: the %s weight: %s\n",
                    g->a8w4 ? "a8w4" : "a8w8", w[k].what, qmoe_last_error());
            return -1;
        }
    return 0;
}

/* ------------------------------------------------------------------ random tensors */

typedef struct gauss {
    uint64_t s;
} gauss;

static uint64_t mix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* A standard normal value (Box-Muller, one value per pair of uniforms). */
static double normal(gauss *g)
{
    double u1 = ((double)(mix(&g->s) >> 11) + 0.5) * 0x1p-53;
    double u2 = (double)(mix(&g->s) >> 11) * 0x1p-53;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static uint16_t to_bf16(float f)
{
    uint32_t b;
    memcpy(&b, &f, 4);
    return (uint16_t)((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16); /* half-even; values are finite */
}

typedef struct layer_file {
    st_file st;
    double *stddev; /* per tensor */
    uint64_t seed;
    gauss g;        /* the stream of the tensor being written */
} layer_file;

static int fill(void *ctx, size_t index, int64_t first, int64_t count, void *out, char *err)
{
    layer_file *lf = ctx;
    (void)err;
    if (first == 0) { /* each tensor its own stream: its values do not depend on the others */
        uint64_t s = lf->seed ^ (0xA0761D6478BD642Full * (index + 1));
        lf->g.s = mix(&s);
    }
    int bf16 = lf->st.tensors[index].dtype == ST_BF16;
    for (int64_t i = 0; i < count; i++) {
        float v = (float)(normal(&lf->g) * lf->stddev[index]);
        if (bf16) ((uint16_t *)out)[i] = to_bf16(v);
        else ((float *)out)[i] = v;
    }
    return 0;
}

static int add(layer_file *lf, size_t *cap, const char *name, st_dtype dt, int ndim,
               int64_t d0, int64_t d1, double stddev, char *err)
{
    int64_t shape[2] = {d0, d1};
    if (lf->st.n == *cap) {
        size_t c = *cap ? 2 * *cap : 64;
        double *grown = realloc(lf->stddev, c * sizeof *grown);
        if (!grown) {
            snprintf(err, ERR_LEN, "out of memory for the tensor list");
            return -1;
        }
        lf->stddev = grown;
        *cap = c;
    }
    if (st_add(&lf->st, name, dt, ndim, shape, err)) return -1;
    lf->stddev[lf->st.n - 1] = stddev;
    return 0;
}

/* Every tensor of every layer, in checkpoint order (layer, experts, router, shared expert). */
static int build_layer(const gen_opts *g, layer_file *lf, char *err)
{
    const model_shape *m = &g->m;
    st_dtype dt = g->bf16 ? ST_BF16 : ST_F32;
    const char *const *proj;
    static const char *const hf[] = {"gate_proj", "up_proj", "down_proj"},
                             *const mx[] = {"w1", "w3", "w2"};
    proj = m->mixtral_names ? mx : hf;
    double sh = 1.0 / sqrt((double)m->H), si = 1.0 / sqrt((double)m->I);
    size_t cap = 0;
    char name[NAME_LEN], num[32];
    st_init(&lf->st, fill, lf);
    lf->seed = (uint64_t)g->seed;
    for (int64_t l = 0; l < m->layers; l++) {
        for (int64_t e = 0; e < m->E; e++)
            for (int p = 0; p < 3; p++) {
                snprintf(name, sizeof name, "model.layers.%" PRId64 ".%s.experts.%" PRId64 ".%s.weight",
                         l, m->block, e, proj[p]);
                if (add(lf, &cap, name, dt, 2, p < 2 ? m->I : m->H, p < 2 ? m->H : m->I,
                        p < 2 ? sh : si, err))
                    return -1;
            }
        snprintf(name, sizeof name, "model.layers.%" PRId64 ".%s.gate.weight", l, m->block);
        if (add(lf, &cap, name, dt, 2, m->E, m->H, sh, err)) return -1;
        if (!strcmp(m->gating, "sigmoid-group-topk")) {
            snprintf(name, sizeof name, "model.layers.%" PRId64 ".%s.gate.e_score_correction_bias",
                     l, m->block);
            if (add(lf, &cap, name, ST_F32, 1, m->E, 0, 0.01, err)) return -1;
        }
        for (int p = 0; m->shared_I && p < 3; p++) {
            snprintf(name, sizeof name, "model.layers.%" PRId64 ".%s.shared_experts.%s.weight", l,
                     m->block, hf[p]);
            if (add(lf, &cap, name, dt, 2, p < 2 ? m->shared_I : m->H, p < 2 ? m->H : m->shared_I,
                    p < 2 ? sh : 1.0 / sqrt((double)m->shared_I), err))
                return -1;
        }
    }
    struct { const char *k; int64_t v; } ints[] = {
        {"qmoe.hidden_size", m->H}, {"qmoe.intermediate_size", m->I}, {"qmoe.num_experts", m->E},
        {"qmoe.top_k", m->top_k}, {"qmoe.layers", m->layers},
        {"qmoe.shared_intermediate_size", m->shared_I}, {"qmoe.group_size", g->group_size},
        {"qmoe.seed", g->seed}, {"qmoe.tokens", g->tokens},
    };
    if (st_meta(&lf->st, "format", "pt", err) || st_meta(&lf->st, "qmoe.model", m->name, err) ||
        st_meta(&lf->st, "qmoe.mode", g->a8w4 ? "a8w4" : "a8w8", err) ||
        st_meta(&lf->st, "qmoe.gating", m->gating, err))
        return -1;
    snprintf(name, sizeof name, "model.layers.0.%s", m->block);
    if (st_meta(&lf->st, "qmoe.prefix", name, err)) return -1;
    for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++) {
        snprintf(num, sizeof num, "%" PRId64, ints[k].v);
        if (st_meta(&lf->st, ints[k].k, num, err)) return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ files */

static int make_dirs(const char *dir, char *err)
{
    char path[PATH_LEN];
    struct stat sb;
    if (!*dir || snprintf(path, sizeof path, "%s", dir) >= PATH_LEN) {
        snprintf(err, ERR_LEN, "--out: the folder name is empty or too long");
        return -1;
    }
    for (char *p = path + 1;; p++) {
        if (*p != '/' && *p != '\0') continue;
        char end = *p;
        *p = '\0';
        if (mkdir(path, 0777) && errno != EEXIST) {
            snprintf(err, ERR_LEN, "%.400s: cannot create the folder: %s", path, strerror(errno));
            return -1;
        }
        *p = end;
        if (!end) break;
    }
    if (stat(dir, &sb) || !S_ISDIR(sb.st_mode)) {
        snprintf(err, ERR_LEN, "%.400s: not a folder", dir);
        return -1;
    }
    return 0;
}

static int write_layer(const char *path, void *ctx, char *err)
{
    char why[ST_ERR_LEN];
    if (!st_write(path, &((layer_file *)ctx)->st, why)) return 0;
    snprintf(err, OUTFILE_ERR_LEN, "%s", why);
    return -1;
}

static int write_array(const char *path, void *ctx, char *err)
{
    char why[NPY_ERR_LEN];
    if (!npy_write(path, ctx, why)) return 0;
    snprintf(err, OUTFILE_ERR_LEN, "%s", why);
    return -1;
}

static int random_array(npy_array *a, int64_t rows, int64_t cols, uint64_t seed, char *err)
{
    int64_t shape[2] = {rows, cols};
    char why[NPY_ERR_LEN];
    if (npy_alloc(a, NPY_FLOAT32, 2, shape, why)) {
        snprintf(err, ERR_LEN, "%s", why);
        return -1;
    }
    gauss g = {mix(&seed)};
    for (int64_t i = 0; i < a->count; i++) ((float *)a->data)[i] = (float)normal(&g);
    return 0;
}

static int generate(const gen_opts *g, char *err)
{
    layer_file lf = {0};
    npy_array hidden = {0}, logits = {0};
    char paths[3][PATH_LEN];
    static const char *const files[3] = {"layer.safetensors", "hidden.npy", "router_logits.npy"};
    outfiles out;
    int64_t size;
    int rc = -1;
    outfiles_init(&out);
    if (build_layer(g, &lf, err) || st_file_size(&lf.st, &size, err)) goto done;
    /* --max-gib bounds every file, before any is made: the layer and both float32 inputs */
    cli_bytes all = {0};
    cli_bytes_add(&all, size, 1, 1);
    cli_bytes_add(&all, g->tokens, g->m.H, 4);
    cli_bytes_add(&all, g->tokens, g->m.E, 4);
    char what[160], why_size[ERR_LEN];
    snprintf(what, sizeof what, "the files (layer.safetensors %.2f GiB, hidden.npy and router_logits.npy of "
             "%" PRId64 " tokens the rest)", (double)size / (1 << 30), g->tokens);
    if (cli_bytes_check(&all, what, g->max_gib, why_size, sizeof why_size)) {
        snprintf(err, ERR_LEN, "%.800s (use --experts, --layers, --dtype bf16 or fewer --tokens)", why_size);
        goto done;
    }
    for (int k = 0; k < 3; k++)
        if (snprintf(paths[k], PATH_LEN, "%s/%s", g->dir, files[k]) >= PATH_LEN) {
            snprintf(err, ERR_LEN, "%.400s: path too long", g->dir);
            goto done;
        }
    /* the inputs' seeds differ from every tensor's */
    if (make_dirs(g->dir, err) ||
        random_array(&hidden, g->tokens, g->m.H, (uint64_t)g->seed ^ 0x68696464656eull, err) ||
        random_array(&logits, g->tokens, g->m.E, (uint64_t)g->seed ^ 0x6c6f67697473ull, err))
        goto done;
    void *ctx[3] = {&lf, &hidden, &logits};
    for (int k = 0; k < 3; k++) {
        outfile *o = outfiles_output(&out, files[k], paths[k]);
        o->write = k ? write_array : write_layer;
        o->ctx = ctx[k];
    }
    char why[OUTFILE_ERR_LEN];
    if (outfiles_check(&out, why) || outfiles_write(&out, why)) {
        snprintf(err, ERR_LEN, "%s", why);
        goto done;
    }
    rc = 0;
    printf("wrote %s (%.1f MiB: %" PRId64 " layer(s) of E=%" PRId64 " H=%" PRId64 " I=%" PRId64
           "%s, %s), %s [%" PRId64 ", %" PRId64 "], %s [%" PRId64 ", %" PRId64 "]\n",
           paths[0], (double)size / (1 << 20), g->m.layers, g->m.E, g->m.H, g->m.I,
           g->m.shared_I ? ", shared expert" : "", g->bf16 ? "bf16" : "fp32", paths[1], g->tokens,
           g->m.H, paths[2], g->tokens, g->m.E);
    printf("qmoe moe run --layer %s --hidden %s --router-logits %s --out %s/out.npy --mode %s "
           "--top-k %" PRId64 "\n",
           paths[0], paths[1], paths[2], g->dir, g->a8w4 ? "a8w4" : "a8w8",
           g->m.top_k);
done:
    outfiles_free(&out);
    st_free(&lf.st);
    free(lf.stddev);
    npy_free(&hidden);
    npy_free(&logits);
    return rc;
}

static int moe_gen(int argc, char **argv)
{
    gen_opts g = {0};
    char err[ERR_LEN];
    int r = parse(argc, argv, &g);
    if (r) return r > 0 ? 0 : 2;
    if (check_shapes(&g)) return 2;
    if (generate(&g, err)) {
        fprintf(stderr, "qmoe moe gen: %s\n", err);
        return 1;
    }
    return 0;
}

int cmd_moe(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "gen")) return moe_gen(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "run")) return moe_run(argc - 1, argv + 1);
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: qmoe moe gen --out DIR [options]   (qmoe moe gen --help)\n"
               "       qmoe moe run --layer F --hidden H --router-logits L --out O   (--help)\n");
        return 0;
    }
    fprintf(stderr, "qmoe moe: %s: unknown subcommand (available: gen, run)\n",
            argc >= 2 ? argv[1] : "(none)");
    return 2;
}
