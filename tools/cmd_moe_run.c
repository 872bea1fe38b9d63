/*
 * qmoe moe run: a MoE layer from a safetensors checkpoint (float weights, checkpoint names),
 * quantized on load, run on hidden.npy routed by router_logits.npy, written to OUT.npy through
 * tools/outfile.h (the output appears whole or not at all).
 */
#define _POSIX_C_SOURCE 200809L
#include "moe_run.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli_args.h"
#include "moe_ep.h"
#include "moe_run_layer.h"
#include "npy.h"
#include "outfile.h"
#include "qmoe/moe_layer.h"
#include "safetensors_read.h"

#define CMD "moe run"
/* RUN_MAX_THREADS: the library's one limit of a threads option (the layer's operators and the
 * quantization on load alike). */
enum { RUN_MAX_THREADS = 4096 };

typedef struct run_opts {
    const char *layer, *hidden, *logits, *out, *prefix;
    int64_t top_k, group_size, threads, groups, k_group, ep;
    int mode, gating, clip; /* -1: from the file's metadata */
    int sigmoid_opts;       /* --groups, --k-group or --scaling given */
    double scaling;
} run_opts;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: qmoe moe run --layer FILE.safetensors --hidden H.npy --router-logits L.npy "
            "--out OUT.npy [options]\n\n"
            "Builds the MoE layer under PREFIX (experts.{e}.gate_proj/up_proj/down_proj.weight or\n"
            "Mixtral's w1/w3/w2, or transformers 5's fused experts.gate_up_proj/down_proj, gpt-oss's\n"
            "with its biases and SwiGLU; gate.weight, gate.e_score_correction_bias, shared_experts.*\n"
            "or shared_expert.* (+ shared_expert_gate.weight): a shared expert of Is a multiple of\n"
            "I) quantized on load, runs hidden [T,H] (float32 or\n"
            "float16) with router_logits [T,E] (float32), writes out [T,H] in hidden's dtype.\n"
            "Defaults come from the file's qmoe.* metadata (qmoe moe gen writes it).\n\n"
            "  --prefix P        the layer's name prefix (default: qmoe.prefix, else the one\n"
            "                    prefix P of the file's P.experts.0.* (or fused\n"
            "                    P.experts.gate_up_proj*) tensors)\n"
            "  --mode a8w8|a8w4  --group-size G (0: per channel)  --clip-search\n"
            "  --top-k K         experts per token\n"
            "  --gating softmax|softmax-norenorm|sigmoid  (default: qmoe.gating, else softmax)\n"
            "  --groups N --k-group N --scaling F   sigmoid gating's expert groups, groups kept,\n"
            "                    routed scaling (default for sigmoid: 8, 4, 2.5 when E/8 >= 2)\n"
            "  --threads N       0..4096 (0: every online core; with --ep, shared by the host's\n"
            "                    ranks)\n"
            "  --ep P            expert parallelism over P MPI ranks: run as\n"
            "                    mpirun -np P qmoe moe run --ep P ...; each rank quantizes only its\n"
            "                    experts and runs an even share of the tokens; rank 0 writes --out,\n"
            "                    the same bytes as without --ep (needs a qmoe built with MPI);\n"
            "                    every rank must be given the same files and options (checked:\n"
            "                    --threads may differ)\n");
}

static int parse(int argc, char **argv, run_opts *o)
{
    static const char *const modes[] = {"a8w8", "a8w4"},
                             *const gatings[] = {"softmax", "softmax-norenorm", "sigmoid"};
    *o = (run_opts){.top_k = -1, .group_size = -1, .groups = 0, .k_group = 0, .mode = -1,
                    .gating = -1, .scaling = 0};
    for (int i = 1; i < argc;) {
        const char *a = argv[i], *v = NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 1;
        }
        if (!strcmp(a, "--clip-search")) {
            o->clip = 1, i++;
            continue;
        }
        if (args_value(CMD, argc, argv, &i, &v)) return -1;
        int bad = 0;
        if (!strcmp(a, "--layer")) o->layer = v;
        else if (!strcmp(a, "--hidden")) o->hidden = v;
        else if (!strcmp(a, "--router-logits")) o->logits = v;
        else if (!strcmp(a, "--out")) o->out = v;
        else if (!strcmp(a, "--prefix")) o->prefix = v;
        else if (!strcmp(a, "--mode")) bad = args_choice(CMD, a, v, modes, 2, &o->mode);
        else if (!strcmp(a, "--gating")) bad = args_choice(CMD, a, v, gatings, 3, &o->gating);
        else if (!strcmp(a, "--top-k")) bad = args_int(CMD, a, v, 1, 1024, &o->top_k);
        else if (!strcmp(a, "--group-size")) bad = args_int(CMD, a, v, 0, INT32_MAX, &o->group_size);
        else if (!strcmp(a, "--threads")) bad = args_int(CMD, a, v, 0, RUN_MAX_THREADS, &o->threads);
        else if (!strcmp(a, "--ep")) bad = args_int(CMD, a, v, 1, 4096, &o->ep);
        else if (!strcmp(a, "--groups")) bad = args_int(CMD, a, v, 1, 2048, &o->groups), o->sigmoid_opts = 1;
        else if (!strcmp(a, "--k-group")) bad = args_int(CMD, a, v, 1, 2048, &o->k_group), o->sigmoid_opts = 1;
        else if (!strcmp(a, "--scaling")) {
            o->sigmoid_opts = 1;
            char *end;
            o->scaling = strtod(v, &end);
            if (*end || !(o->scaling > 0 && o->scaling < 1e6)) {
                fprintf(stderr, "qmoe " CMD ": --scaling: %s is not a positive number\n", v);
                bad = -1;
            }
        } else {
            fprintf(stderr, "qmoe " CMD ": unknown option %s (qmoe moe run --help)\n", a);
            return -1;
        }
        if (bad) return -1;
    }
    if (!o->layer || !o->hidden || !o->logits || !o->out) {
        fprintf(stderr, "qmoe " CMD ": --layer, --hidden, --router-logits and --out are required\n");
        return -1;
    }
    return 0;
}

static int write_array(const char *path, void *ctx, char *err)
{
    char why[NPY_ERR_LEN];
    if (!npy_write(path, ctx, why)) return 0;
    snprintf(err, OUTFILE_ERR_LEN, "%s", why);
    return -1;
}

/* The integer metadata `key` into *out (left as it is when absent); -1 with err when present but
 * not an integer in [lo, hi]. */
static int meta_int(const str_file *f, const char *key, int64_t lo, int64_t hi, int64_t *out, char *err)
{
    const char *v = str_meta(f, key);
    if (!v) return 0;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (!*v || *end || errno || x < lo || x > hi) {
        snprintf(err, RUN_ERR_LEN, "metadata %s = \"%.100s\" is invalid: not an integer in [%" PRId64 ", %" PRId64 "]",
                 key, v, lo, hi);
        return -1;
    }
    *out = x;
    return 0;
}

/* The metadata `key` as one of `count` names into *out (codes[i] for names[i]; left as it is
 * when absent); -1 with err for another value. */
static int meta_choice(const str_file *f, const char *key, const char *const *names, const int *codes, int count,
                       int *out, char *err)
{
    const char *v = str_meta(f, key);
    if (!v) return 0;
    for (int i = 0; i < count; i++)
        if (!strcmp(v, names[i])) return *out = codes[i], 0;
    int at = snprintf(err, RUN_ERR_LEN, "metadata %s = \"%.100s\" is invalid: not one of", key, v);
    for (int i = 0; i < count && at > 0 && at < RUN_ERR_LEN; i++)
        at += snprintf(err + at, (size_t)(RUN_ERR_LEN - at), " %s", names[i]);
    return -1;
}

/* No qmoe.prefix and no --prefix: the P of the file's P.experts.0.* tensors, which must be one
 * (a file of several layers needs --prefix). 0 with out set, or -1 with err. */
static int infer_prefix(const str_file *f, const char *file, char *out, char *err)
{
    size_t len = 0;
    const char *first = NULL;
    for (size_t k = 0; k < f->n; k++) {
        const char *n = f->tensors[k].name, *s = strstr(n, ".experts.0.");
        if (!s) s = strstr(n, ".experts.gate_up_proj"); /* fused experts */
        if (!s) continue;
        size_t l = (size_t)(s - n);
        if (!first) {
            first = n, len = l;
        } else if (l != len || strncmp(n, first, l)) {
            snprintf(err, RUN_ERR_LEN, "%.300s: experts under %.*s and %.*s: give --prefix", file,
                     (int)(len < 200 ? len : 200), first, (int)(l < 200 ? l : 200), n);
            return -1;
        }
    }
    if (!first) {
        snprintf(err, RUN_ERR_LEN, "%.300s: no tensor *.experts.0.* or *.experts.gate_up_proj* (give --prefix)", file);
        return -1;
    }
    if (len >= NAME_MAX_LEN - 64) {
        snprintf(err, RUN_ERR_LEN, "%.300s: the prefix of %.300s is too long", file, first);
        return -1;
    }
    memcpy(out, first, len);
    out[len] = 0;
    return 0;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int64_t bits_of(double d)
{
    int64_t v;
    memcpy(&v, &d, sizeof v);
    return v;
}

/* What every rank of --ep must have the same of: the layer file (its size and its header's
 * checksum: names, shapes, offsets and metadata), the prefix, both inputs (shapes, dtypes, a
 * checksum of their bytes) and every resolved option but the threads. Returns the count. */
static int ep_facts(const str_file *f, const char *prefix, const npy_array *h, const npy_array *l,
                    const qmoe_moe_layer_config *c, moe_ep_fact *out)
{
    uint64_t hlen = 0;
    const unsigned char *m = f->map;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | m[i]; /* str_open checked it against the size */
    const moe_ep_fact facts[] = {
        {"the --layer file's size", (int64_t)f->size, MOE_EP_INT},
        {"the --layer file's header (its checksum)", (int64_t)moe_ep_checksum(m, (size_t)(8 + hlen)), MOE_EP_HEX},
        {"the layer's prefix (its checksum)", (int64_t)moe_ep_checksum(prefix, strlen(prefix)), MOE_EP_HEX},
        {"--hidden's tokens (rows)", h->shape[0], MOE_EP_INT},
        {"--hidden's columns", h->shape[1], MOE_EP_INT},
        {"--hidden's dtype", (int64_t)h->dtype, MOE_EP_INT},
        {"--hidden's data (its checksum)", (int64_t)moe_ep_checksum(h->data, h->nbytes), MOE_EP_HEX},
        {"--router-logits' rows", l->shape[0], MOE_EP_INT},
        {"--router-logits' columns", l->shape[1], MOE_EP_INT},
        {"--router-logits' data (its checksum)", (int64_t)moe_ep_checksum(l->data, l->nbytes), MOE_EP_HEX},
        {"--top-k", c->top_k, MOE_EP_INT},
        {"--mode", (int64_t)c->mode, MOE_EP_INT},
        {"--group-size", c->group_size, MOE_EP_INT},
        {"--clip-search", c->clip_search, MOE_EP_INT},
        {"--gating", (int64_t)c->gating * 2 + (c->renormalize != 0), MOE_EP_INT},
        {"--groups", c->group_count, MOE_EP_INT},
        {"--k-group", c->k_group, MOE_EP_INT},
        {"--scaling", bits_of(c->routed_scaling_factor), MOE_EP_REAL},
    };
    int n = (int)(sizeof facts / sizeof facts[0]);
    memcpy(out, facts, sizeof facts);
    return n;
}

/* ep NULL: one process. Otherwise every rank runs this; a rank that fails before a point where
 * the ranks agree (moe_ep_agree, then moe_ep_any) joins that point from `done` (synced 0) with
 * moe_ep_any(ep, 1), so none waits forever. */
static int run(const run_opts *o, moe_ep *ep, char *err)
{
    outfiles files;
    str_file f = {0};
    layer_in L = {0};
    npy_array hidden = {0}, logits = {0}, out = {0};
    qmoe_moe_layer *layer = NULL;
    void *ws = NULL;
    qmoe_tensor *th = NULL, *tl = NULL, *to = NULL;
    char why[RUN_ERR_LEN > OUTFILE_ERR_LEN ? RUN_ERR_LEN : OUTFILE_ERR_LEN], prefix[NAME_MAX_LEN];
    int rc = -1, synced = !ep, rank0 = !ep || moe_ep_rank(ep) == 0;
    int64_t first = 0, count = 0;
    err[0] = 0;
    outfiles_init(&files);
    outfiles_input(&files, "--layer", o->layer);
    outfiles_input(&files, "--hidden", o->hidden);
    outfiles_input(&files, "--router-logits", o->logits);
    outfile *of = rank0 ? outfiles_output(&files, "--out", o->out) : NULL;
    if (outfiles_check(&files, why)) {
        snprintf(err, RUN_ERR_LEN, "%.1000s", why);
        goto done;
    }
    if (str_open(o->layer, &f, why)) {
        snprintf(err, RUN_ERR_LEN, "%.300s: %.700s", o->layer, why);
        goto done;
    }
    const char *p = o->prefix ? o->prefix : str_meta(&f, "qmoe.prefix");
    if (!p) {
        if (infer_prefix(&f, o->layer, prefix, err)) goto done;
    } else if (strlen(p) >= NAME_MAX_LEN - 64) {
        snprintf(err, RUN_ERR_LEN, "prefix too long");
        goto done;
    } else {
        snprintf(prefix, sizeof prefix, "%s", p); /* p is not prefix here */
    }
    size_t pl = strlen(prefix);
    while (pl && prefix[pl - 1] == '.') prefix[--pl] = 0;
    if (moe_run_load_layer(&f, prefix, &L, why)) {
        snprintf(err, RUN_ERR_LEN, "%.300s: %.700s", o->layer, why);
        goto done;
    }
    char nerr[NPY_ERR_LEN];
    if (npy_load(o->hidden, &hidden, nerr)) {
        snprintf(err, RUN_ERR_LEN, "--hidden %.300s: %s", o->hidden, nerr);
        goto done;
    }
    if (npy_load(o->logits, &logits, nerr)) {
        snprintf(err, RUN_ERR_LEN, "--router-logits %.300s: %s", o->logits, nerr);
        goto done;
    }
    if (hidden.ndim != 2 || hidden.shape[1] != L.H ||
        (hidden.dtype != NPY_FLOAT32 && hidden.dtype != NPY_FLOAT16)) {
        snprintf(err, RUN_ERR_LEN, "--hidden %.300s: expected float32 or float16 [T, %" PRId64 "]", o->hidden, L.H);
        goto done;
    }
    if (logits.ndim != 2 || logits.shape[0] != hidden.shape[0] || logits.shape[1] != L.E ||
        logits.dtype != NPY_FLOAT32) {
        snprintf(err, RUN_ERR_LEN, "--router-logits %.300s: expected float32 [%" PRId64 ", %" PRId64 "]", o->logits,
                 hidden.shape[0], L.E);
        goto done;
    }
    if (ep && hidden.shape[0] > INT_MAX) { /* a rank's rows travel as MPI counts */
        snprintf(err, RUN_ERR_LEN, "--hidden %.300s: %" PRId64 " tokens; --ep takes at most %d", o->hidden,
                 hidden.shape[0], INT_MAX);
        goto done;
    }
    qmoe_moe_layer_config c = QMOE_MOE_LAYER_CONFIG_INIT;
    c.hidden_size = L.H, c.intermediate_size = L.I, c.num_experts = L.E;
    c.top_k = o->top_k;
    if (c.top_k < 0 && meta_int(&f, "qmoe.top_k", 1, 1024, &c.top_k, why)) {
        snprintf(err, RUN_ERR_LEN, "%.300s: %.700s (give --top-k)", o->layer, why);
        goto done;
    }
    if (c.top_k < 1) {
        snprintf(err, RUN_ERR_LEN, "give --top-k (the file has no qmoe.top_k)");
        goto done;
    }
    /* qmoe.mode and qmoe.gating as qmoe moe gen writes them (and the --mode / --gating names) */
    static const char *const mnames[] = {"a8w8", "a8w4"},
                             *const gnames[] = {"softmax-renormalize", "softmax", "softmax-norenorm",
                                                "sigmoid-group-topk", "sigmoid"};
    static const int mcodes[] = {0, 1}, gcodes[] = {0, 0, 1, 2, 2};
    int mode = o->mode, gating = o->gating;
    if ((mode < 0 && meta_choice(&f, "qmoe.mode", mnames, mcodes, 2, &mode, why)) ||
        (gating < 0 && meta_choice(&f, "qmoe.gating", gnames, gcodes, 5, &gating, why))) {
        snprintf(err, RUN_ERR_LEN, "%.300s: %.600s (give --mode / --gating)", o->layer, why);
        goto done;
    }
    c.mode = mode == 1 ? QMOE_QUANT_A8W4 : QMOE_QUANT_A8W8;
    c.group_size = o->group_size >= 0 ? o->group_size : 0;
    if (o->group_size < 0 && meta_int(&f, "qmoe.group_size", 0, INT32_MAX, &c.group_size, why)) {
        snprintf(err, RUN_ERR_LEN, "%.300s: %.700s (give --group-size)", o->layer, why);
        goto done;
    }
    c.clip_search = o->clip;
    c.threads = (int)o->threads;
    c.shared_intermediate_size = L.Is;
    c.shared_gate = L.shared[0], c.shared_up = L.shared[1], c.shared_down = L.shared[2];
    c.shared_expert_gate = L.shared_gate_w;
    c.gate_up_bias = L.gate_up_bias, c.down_bias = L.down_bias;
    if (L.gpt_oss) c.swiglu_limit = 7.0f, c.swiglu_alpha = 1.702f; /* gpt-oss's config values */
    c.correction_bias = L.bias; /* a selection bias with either gating, as qmoe.MoELayer takes it */
    if (gating < 0) gating = 0; /* softmax, renormalised */
    c.renormalize = gating != 1;
    if (gating != 2 && o->sigmoid_opts) { /* they would be ignored */
        snprintf(err, RUN_ERR_LEN, "--groups, --k-group and --scaling are for sigmoid gating, and this run's is %s "
                 "(give --gating sigmoid, or leave them out)", gating ? "softmax-norenorm" : "softmax");
        goto done;
    }
    if (gating == 2) {
        int dflt = L.E % 8 == 0 && L.E / 8 >= 2;
        c.gating = QMOE_MOE_GATING_SIGMOID;
        c.group_count = o->groups ? o->groups : dflt ? 8 : 1;
        c.k_group = o->k_group ? o->k_group : dflt ? 4 : 1;
        c.routed_scaling_factor = o->scaling ? o->scaling : 2.5;
    }
    qmoe_dtype hd = hidden.dtype == NPY_FLOAT32 ? QMOE_DTYPE_FLOAT32 : QMOE_DTYPE_FLOAT16;
    if (npy_alloc(&out, hidden.dtype, 2, hidden.shape, nerr)) {
        snprintf(err, RUN_ERR_LEN, "%s", nerr);
        goto done;
    }
    qmoe_status st;
    double t0, t1;
    if (ep) {
        moe_ep_fact facts[MOE_EP_MAX_FACTS];
        int nf = ep_facts(&f, prefix, &hidden, &logits, &c, facts);
        synced = 1; /* the first point the ranks agree on: a rank that failed joins it from done */
        int ag = moe_ep_agree(0, facts, nf, why);
        if (ag) {
            if (ag < 0) snprintf(err, RUN_ERR_LEN, "%.1000s", why);
            goto done; /* ag > 0: another rank failed (and says why) */
        }
        synced = 0;
        if (!o->threads) { /* ranks on a host share its cores */
            int t = moe_ep_default_threads(ep);
            c.threads = t < RUN_MAX_THREADS ? t : RUN_MAX_THREADS;
        }
        t0 = now();
        if (moe_ep_shard(ep, &c, L.w[0], L.w[1], L.w[2], L.dtype, &layer, why)) {
            synced = 1;
            if (why[0]) snprintf(err, RUN_ERR_LEN, "%.300s: %.700s", o->layer, why);
            goto done;
        }
        t1 = now();
        moe_ep_split(ep, hidden.shape[0], &first, &count);
        size_t row = (size_t)L.H * (hd == QMOE_DTYPE_FLOAT32 ? 4 : 2);
        char *h0 = (char *)hidden.data + (size_t)first * row, *l0 = (char *)logits.data + (size_t)(first * L.E) * 4,
             *o0 = (char *)out.data + (size_t)first * row;
        /* each rank's rows where they belong in out; rank 0 gathers the others' */
        synced = 1;
        if (moe_ep_forward(ep, layer, hd, count, L.H, L.E, h0, l0, o0, why)) {
            snprintf(err, RUN_ERR_LEN, "%.1000s", why);
            goto done;
        }
        if (moe_ep_gather(ep, o0, count, row, out.data)) {
            snprintf(err, RUN_ERR_LEN, "out of memory gathering the output (on this rank or another)");
            goto done;
        }
        synced = 0;
        goto write;
    }
    t0 = now();
    st = qmoe_moe_layer_create_from_float(&c, L.w[0], L.w[1], L.w[2], L.dtype, &layer);
    if (st) {
        snprintf(err, RUN_ERR_LEN, "%.300s: %.700s", o->layer, qmoe_last_error());
        goto done;
    }
    t1 = now();
    uint64_t wsz = 0;
    if ((st = qmoe_moe_layer_workspace_size(layer, hidden.shape[0], hd, &wsz)) ||
        (wsz && !(ws = aligned_alloc(64, (size_t)((wsz + 63) & ~(uint64_t)63))))) {
        snprintf(err, RUN_ERR_LEN, "workspace: %s", st ? qmoe_last_error() : "out of memory");
        goto done;
    }
    if ((st = qmoe_tensor_create(hidden.shape, 2, NULL, hd, QMOE_FORMAT_ND, hidden.data, &th)) ||
        (st = qmoe_tensor_create(logits.shape, 2, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, logits.data, &tl)) ||
        (st = qmoe_tensor_create(out.shape, 2, NULL, hd, QMOE_FORMAT_ND, out.data, &to)) ||
        (st = qmoe_moe_layer_forward(layer, th, tl, to, ws, wsz, NULL))) {
        snprintf(err, RUN_ERR_LEN, "%s", qmoe_last_error());
        goto done;
    }
write:;
    double t2 = now();
    if (rank0) {
        of->write = write_array;
        of->ctx = &out;
        if (outfiles_write(&files, why)) {
            snprintf(err, RUN_ERR_LEN, "%.1000s", why);
            goto done;
        }
    }
    if (ep) { /* rank 0's write, for every rank's exit code */
        synced = 1;
        if (moe_ep_any(ep, 0)) goto done;
    }
    if (rank0)
        printf("moe run: %s, E=%" PRId64 " H=%" PRId64 " I=%" PRId64 " top-%" PRId64 " %s%s%s, T=%" PRId64
           ": load+quantize %.3f s, forward %.3f s; wrote %s\n",
           prefix, L.E, L.H, L.I, c.top_k, c.mode == QMOE_QUANT_A8W4 ? "a8w4" : "a8w8",
           c.gating == QMOE_MOE_GATING_SIGMOID ? " sigmoid" : c.renormalize ? "" : " no-renorm",
           L.Is ? " + shared expert" : "", hidden.shape[0], t1 - t0, t2 - t1, o->out);
    if (ep && rank0) printf("moe run: expert parallel over %d ranks\n", moe_ep_size(ep));
    rc = 0;
done:
    if (!synced) moe_ep_any(ep, 1);
    qmoe_tensor_destroy(th), qmoe_tensor_destroy(tl), qmoe_tensor_destroy(to);
    free(ws);
    qmoe_moe_layer_destroy(layer);
    npy_free(&hidden), npy_free(&logits), npy_free(&out);
    moe_run_free_layer(&L);
    str_close(&f);
    outfiles_free(&files);
    return rc;
}

/* "--ep" among the arguments, whatever else they hold: a rank that refuses its arguments must
 * still join the others under mpirun, or they would wait for it. */
static int asks_ep(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--ep")) return 1;
    return 0;
}

int moe_run(int argc, char **argv)
{
    run_opts o;
    char err[RUN_ERR_LEN];
    int r = parse(argc, argv, &o);
    moe_ep *ep = NULL;
    if (asks_ep(argc, argv)) {
        if (moe_ep_start(CMD, o.ep, r != 0, &ep)) return r > 0 ? 0 : 2;
    } else {
        /* one of several processes of mpirun, without --ep: joins the others once, so that ranks
         * given --ep beside it stop instead of waiting for it */
        if (moe_ep_launched() && moe_ep_join(CMD, 0, r != 0, 0, 0) < 0) return r > 0 ? 0 : 2;
        if (r) return r > 0 ? 0 : 2;
    }
    int failed = run(&o, ep, err) != 0;
    if (failed && err[0]) {
        if (ep) fprintf(stderr, "qmoe " CMD " (rank %d of %d): %s\n", moe_ep_rank(ep), moe_ep_size(ep), err);
        else fprintf(stderr, "qmoe " CMD ": %s\n", err);
    }
    moe_ep_end(ep);
    return failed;
}
