/*
 * qmoe bench moe: the whole MoE layer (qmoe/moe_layer.h) at a model's shapes, one JSON line per
 * token count: tokens per second, and the bytes of the experts that received tokens streamed per
 * second against the DRAM read bandwidth measured in the same run (mo_dram).
 *
 * The weights are random quantized values made directly in the operators' layout (quantizing
 * float weights of a real model's size would need 4x the memory and says nothing about speed).
 */
#define _POSIX_C_SOURCE 200809L
#include "bench_moe_layer.h"
#include "bench_moe_ep.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_moe_ops.h"
#include "cli_args.h"
#include "cli_size.h"
#include "moe_ep.h"
#include "bench.h"
#include "qmoe/moe_layer.h"
#include "qmoe/moe_ops.h"
#include "qmoe/runtime.h"

#define CMD "bench moe"
/* Each run routes the tokens to other experts (the logits rotated by E/VARIANTS columns), so
 * at decode the experts come from DRAM, not from a last-level cache that holds a few of them. */
enum { MAX_T = 16, VARIANTS = 8 };

typedef struct bm_model {
    const char *name;
    int64_t H, I, E, k;
    int sigmoid;
} bm_model;

static const bm_model bm_models[] = {
    {"qwen3-30b-a3b", 2048, 768, 128, 8, 0},
    {"deepseek-v3", 7168, 2048, 256, 8, 1},
    {"mixtral-8x7b", 4096, 14336, 8, 2, 0},
};

typedef struct bm_args {
    bm_model m;
    int64_t tokens[MAX_T];
    int nt, a8w4, threads, bf16, breakdown;
    int64_t group_size, max_gib, dram_mb;
    double seconds;
} bm_args;

static void usage(FILE *f)
{
    fprintf(f, "usage: qmoe bench moe --model qwen3-30b-a3b|deepseek-v3|mixtral-8x7b [options]\n\n"
               "  --tokens LIST     token counts (default 1,8,64,512,4096)\n"
               "  --experts N       fewer experts than the model (to fit memory; >= top-k)\n"
               "  --mode a8w8|a8w4  --group-size G (0: per channel)\n"
               "  --dtype fp32|bf16 hidden states and output (default fp32)\n"
               "  --threads N       (default: every online core)\n"
               "  --ep P            under mpirun -np P: the layer's experts spread over P ranks\n"
               "                    (qmoe bench moe --ep 1 --help)\n"
               "  --seconds S       time per token count (default 1)\n"
               "  --max-gib N       refuse weights over N GiB (default 16)\n"
               "  --dram-mb N       the bandwidth probe's buffer (default 1024)\n"
               "  --breakdown       also time each operator of the forward (stream synchronized\n"
               "                    after each): phase_ms, and the gate/up operator's own GOPS\n"
               "One JSON line per token count on stdout; progress on stderr.\n");
}

static int parse_list(const char *v, bm_args *a)
{
    a->nt = 0;
    const char *s = v;
    while (*s) {
        char *end;
        long long x = strtoll(s, &end, 10);
        if (end == s || x < 1 || x > (1 << 20) || a->nt == MAX_T || (*end && *end != ',')) {
            fprintf(stderr, "qmoe " CMD ": --tokens: '%s' is not a list of 1..1048576 (at most %d)\n", v, MAX_T);
            return -1;
        }
        a->tokens[a->nt++] = x;
        s = *end ? end + 1 : end;
    }
    return a->nt ? 0 : -1;
}

static int parse(int argc, char **argv, bm_args *a)
{
    static const char *const modes[] = {"a8w8", "a8w4"}, *const dtypes[] = {"fp32", "bf16"};
    const char *names[3] = {bm_models[0].name, bm_models[1].name, bm_models[2].name};
    int model = -1;
    int64_t experts = 0, v64;
    memset(a, 0, sizeof *a);
    a->max_gib = 16, a->dram_mb = 1024, a->seconds = 1;
    parse_list("1,8,64,512,4096", a);
    for (int i = 1; i < argc;) {
        const char *o = argv[i], *v;
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) {
            usage(stdout);
            return 1;
        }
        if (!strcmp(o, "--breakdown")) {
            a->breakdown = 1, i++;
            continue;
        }
        if (args_value(CMD, argc, argv, &i, &v)) return -1;
        int bad = 0;
        if (!strcmp(o, "--model")) bad = args_choice(CMD, o, v, names, 3, &model);
        else if (!strcmp(o, "--tokens")) bad = parse_list(v, a);
        else if (!strcmp(o, "--experts")) bad = args_int(CMD, o, v, 1, 4096, &experts);
        else if (!strcmp(o, "--mode")) bad = args_choice(CMD, o, v, modes, 2, &a->a8w4);
        else if (!strcmp(o, "--dtype")) bad = args_choice(CMD, o, v, dtypes, 2, &a->bf16);
        else if (!strcmp(o, "--group-size")) bad = args_int(CMD, o, v, 0, 1 << 20, &a->group_size);
        else if (!strcmp(o, "--threads")) bad = args_int(CMD, o, v, 0, 4096, &v64) ? -1 : (a->threads = (int)v64, 0);
        else if (!strcmp(o, "--max-gib")) bad = args_int(CMD, o, v, 1, 1 << 20, &a->max_gib);
        else if (!strcmp(o, "--dram-mb")) bad = args_int(CMD, o, v, 16, 1 << 20, &a->dram_mb);
        else if (!strcmp(o, "--seconds")) {
            char *end;
            a->seconds = strtod(v, &end);
            if (*end || !(a->seconds > 0 && a->seconds <= 600)) {
                fprintf(stderr, "qmoe " CMD ": --seconds: '%s' is not in (0, 600]\n", v);
                bad = -1;
            }
        } else {
            fprintf(stderr, "qmoe " CMD ": unknown option '%s' (qmoe bench moe --help)\n", o);
            return -1;
        }
        if (bad) return -1;
    }
    if (model < 0) {
        fprintf(stderr, "qmoe " CMD ": --model is required (qmoe bench moe --help)\n");
        return -1;
    }
    a->m = bm_models[model];
    if (experts) {
        if (experts < a->m.k) {
            fprintf(stderr, "qmoe " CMD ": --experts %" PRId64 " is below top-%" PRId64 "\n", experts, a->m.k);
            return -1;
        }
        a->m.E = experts;
    }
    return 0;
}

static double bm_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t bm_next(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

static qmoe_moe_layer_config config_of(const bm_args *a)
{
    qmoe_moe_layer_config c = QMOE_MOE_LAYER_CONFIG_INIT;
    c.hidden_size = a->m.H, c.intermediate_size = a->m.I, c.num_experts = a->m.E, c.top_k = a->m.k;
    c.mode = a->a8w4 ? QMOE_QUANT_A8W4 : QMOE_QUANT_A8W8, c.group_size = a->group_size;
    c.threads = a->threads;
    if (a->m.sigmoid) {
        int groups = a->m.E % 8 == 0 && a->m.E / 8 >= 2;
        c.gating = QMOE_MOE_GATING_SIGMOID, c.group_count = groups ? 8 : 1, c.k_group = groups ? 4 : 1;
        c.routed_scaling_factor = 2.5;
    }
    return c;
}

/* Random quantized weights in ND layout -> the layer (prepacked); the raw buffers are freed. */
static qmoe_moe_layer *make_layer(const bm_args *a, const qmoe_moe_layer_config *c)
{
    int64_t E = a->m.E, H = a->m.H, I = a->m.I, G1 = a->group_size ? H / a->group_size : 0,
            G2 = a->group_size ? I / a->group_size : 0;
    int64_t n13 = E * H * 2 * I, n2 = E * I * H, b13 = a->a8w4 ? n13 / 2 : n13, b2 = a->a8w4 ? n2 / 2 : n2;
    int64_t s13 = E * (G1 ? G1 : 1) * 2 * I, s2 = E * (G2 ? G2 : 1) * H;
    uint8_t *w13 = malloc((size_t)b13), *w2 = malloc((size_t)b2);
    float *sc13 = malloc((size_t)s13 * 4), *sc2 = malloc((size_t)s2 * 4), *bias = calloc((size_t)(E * 2 * I), 4);
    qmoe_moe_layer *L = NULL;
    if (w13 && w2 && sc13 && sc2 && bias) {
        uint64_t s = 7;
        uint8_t mask = a->a8w4 ? 0x77 : 0xff; /* int4: values 0..7 in both nibbles */
        for (int64_t i = 0; i < b13; i++) w13[i] = (uint8_t)(bm_next(&s) & mask);
        for (int64_t i = 0; i < b2; i++) w2[i] = (uint8_t)(bm_next(&s) & mask);
        if (!a->a8w4)
            for (int64_t i = 0; i < b13; i++) w13[i] = w13[i] == 0x80 ? 0 : w13[i];
        for (int64_t i = 0; i < s13; i++) sc13[i] = 1e-3f * (float)(1 + bm_next(&s) % 8);
        for (int64_t i = 0; i < s2; i++) sc2[i] = 1e-3f * (float)(1 + bm_next(&s) % 8);
        qmoe_dtype wd = a->a8w4 ? QMOE_DTYPE_INT4 : QMOE_DTYPE_INT8;
        int64_t sh13[3] = {E, H, 2 * I}, sh2[3] = {E, I, H}, ss13[3] = {E, G1, 2 * I}, ss2[3] = {E, G2, H},
                bs[2] = {E, 2 * I};
        qmoe_tensor *t[5] = {0};
        qmoe_status st = qmoe_tensor_create(sh13, 3, NULL, wd, QMOE_FORMAT_ND, w13, &t[0]);
        if (!st) st = qmoe_tensor_create(sh2, 3, NULL, wd, QMOE_FORMAT_ND, w2, &t[1]);
        if (!st) st = G1 ? qmoe_tensor_create(ss13, 3, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, sc13, &t[2])
                         : qmoe_tensor_create(bs, 2, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, sc13, &t[2]);
        int64_t s2p[2] = {E, H};
        if (!st) st = G2 ? qmoe_tensor_create(ss2, 3, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, sc2, &t[3])
                         : qmoe_tensor_create(s2p, 2, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, sc2, &t[3]);
        if (!st) st = qmoe_tensor_create(bs, 2, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, bias, &t[4]);
        if (!st) st = qmoe_moe_layer_create(c, t[0], t[2], a->a8w4 ? t[4] : NULL, t[1], t[3], &L);
        if (st) fprintf(stderr, "qmoe " CMD ": %s\n", qmoe_last_error());
        for (int k = 0; k < 5; k++) qmoe_tensor_destroy(t[k]);
    } else {
        fprintf(stderr, "qmoe " CMD ": out of memory for the weights\n");
    }
    free(w13), free(w2), free(sc13), free(sc2), free(bias);
    return L;
}

/* Experts that receive at least one token: the layer's own gating, run alone. */
static int64_t active_experts(const qmoe_moe_layer_config *c, float *logits, int64_t T)
{
    int64_t K = c->top_k, E = c->num_experts, ls[2] = {T, E}, ks[2] = {T, K}, n = 0;
    float *y = malloc((size_t)(T * K) * 4);
    int32_t *ids = malloc((size_t)(T * K) * 4), *rows = malloc((size_t)(T * K) * 4);
    char *seen = calloc((size_t)E, 1);
    qmoe_tensor *tl = NULL, *ty = NULL, *ti = NULL, *tr = NULL;
    qmoe_moe_executor *ex = NULL;
    uint64_t ws = 0;
    qmoe_moe_gating_attrs ga = {.k = K, .k_group = c->gating ? c->k_group : 1, .group_count = c->gating ? c->group_count : 1,
                                .group_select_mode = c->gating, .norm_type = c->gating,
                                .routed_scaling_factor = c->gating ? 2.5 : 1, .eps = 1e-20};
    if (y && ids && rows && seen && !qmoe_tensor_create(ls, 2, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, logits, &tl) &&
        !qmoe_tensor_create(ks, 2, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, y, &ty) &&
        !qmoe_tensor_create(ks, 2, NULL, QMOE_DTYPE_INT32, QMOE_FORMAT_ND, ids, &ti) &&
        !qmoe_moe_gating_top_k_workspace_size(tl, NULL, &ga, ty, ti, NULL, NULL, &ws, &ex)) {
        void *w = malloc(ws + 64);
        if (w && !qmoe_moe_gating_top_k(w, ws, ex, NULL))
            for (int64_t i = 0; i < T * K; i++)
                if (ids[i] >= 0 && ids[i] < E && !seen[ids[i]]) seen[ids[i]] = 1, n++;
        free(w);
    }
    qmoe_moe_executor_destroy(ex);
    qmoe_tensor_destroy(tl), qmoe_tensor_destroy(ty), qmoe_tensor_destroy(ti), qmoe_tensor_destroy(tr);
    free(y), free(ids), free(rows), free(seen);
    return n;
}

static int cmp_d(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* The breakdown's fields: each operator's median wall and CPU ms, the gate/up operator's and the
 * down projection's own int8 GOPS, the layer's GOPS as a share of gate/up's in the same forwards
 * (the prefill target: >= 0.8; the median over runs of 1.5 t_gate_up / t_all), and the
 * share of the phases' sum outside the two matmuls; each share in wall and in CPU time (the
 * process's threads only: other tenants' load does not count). */
static void print_breakdown(const bm_args *a, int64_t T, const double *ph)
{
    static const char *const names[MOE_LAYER_PHASES] = {"gating", "routing", "gate_up", "down", "finalize"};
    double rows = (double)T * (double)a->m.k, H = (double)a->m.H, I = (double)a->m.I, sum = 0;
    printf(",\"phase_ms\":{");
    for (int k = 0; k < MOE_LAYER_PHASES; k++) {
        printf("%s\"%s\":%.4g", k ? "," : "", names[k], ph[k] * 1e3);
        sum += ph[k];
    }
    printf("},\"phase_cpu_ms\":{");
    for (int k = 0; k < MOE_LAYER_PHASES; k++)
        printf("%s\"%s\":%.4g", k ? "," : "", names[k], ph[MOE_LAYER_PHASES + k] * 1e3);
    double gu = ph[2] > 0 ? 2.0 * rows * H * 2 * I / ph[2] / 1e9 : 0, dn = ph[3] > 0 ? 2.0 * rows * I * H / ph[3] / 1e9 : 0;
    const double *cpu = ph + MOE_LAYER_PHASES;
    double csum = cpu[0] + cpu[1] + cpu[2] + cpu[3] + cpu[4];
    printf("},\"gate_up_gops\":%.4g,\"down_gops\":%.4g,\"layer_vs_gate_up\":%.3f,\"outside_matmuls\":%.3f,"
           "\"layer_vs_gate_up_cpu\":%.3f,\"outside_matmuls_cpu\":%.3f", gu, dn, ph[2 * MOE_LAYER_PHASES],
           sum > 0 ? (ph[0] + ph[1] + ph[4]) / sum : 0, ph[2 * MOE_LAYER_PHASES + 1],
           csum > 0 ? (cpu[0] + cpu[1] + cpu[4]) / csum : 0);
}

int bench_moe_layer(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) /* the sharded layer under mpirun: bench_moe_ep.c */
        if (!strcmp(argv[i], "--ep")) return bench_moe_ep(argc, argv);
    bm_args a;
    int r = parse(argc, argv, &a);
    if (moe_ep_launched() && moe_ep_join(CMD, 0, r != 0, 0, 0) < 0) /* as in qmoe moe run */
        return r > 0 ? 0 : 2;
    if (r) return r > 0 ? 0 : 2;
    if (a.threads <= 0) a.threads = qmoe_device_online_cores();
    qmoe_moe_layer_config c = config_of(&a);
    double gib = (double)a.m.E * (double)a.m.H * (double)a.m.I * 3 / (a.a8w4 ? 2 : 1) / (1 << 30);
    if (gib * 2 > (double)a.max_gib) { /* raw buffers plus the prepacked copy while loading */
        fprintf(stderr, "qmoe " CMD ": %s with E=%" PRId64 " needs about %.1f GiB while loading, over --max-gib %" PRId64
                        " (use --experts)\n", a.m.name, a.m.E, 2 * gib, a.max_gib);
        return 2;
    }
    fprintf(stderr, "qmoe " CMD ": %s E=%" PRId64 " H=%" PRId64 " I=%" PRId64 " top-%" PRId64 " %s: making the layer\n",
            a.m.name, a.m.E, a.m.H, a.m.I, a.m.k, a.a8w4 ? "a8w4" : "a8w8");
    qmoe_moe_layer *L = make_layer(&a, &c);
    if (!L) return 1;
    /* each token count's buffers (hidden, out, the logits' variants, the workspace) beside the
     * prepacked weights, within --max-gib before any is allocated */
    for (int ti = 0; ti < a.nt; ti++) {
        uint64_t wsz = 0;
        cli_bytes b = {0};
        cli_bytes_add(&b, (int64_t)qmoe_moe_layer_weight_bytes(L), 1, 1);
        cli_bytes_add(&b, a.tokens[ti], a.m.H, 2 * 4);
        cli_bytes_add(&b, a.tokens[ti], a.m.E, VARIANTS * 4);
        if (qmoe_moe_layer_workspace_size(L, a.tokens[ti], a.bf16 ? QMOE_DTYPE_BFLOAT16 : QMOE_DTYPE_FLOAT32, &wsz))
            b.overflow = 1;
        cli_bytes_add(&b, (int64_t)(wsz > INT64_MAX ? INT64_MAX : wsz), 1, 1);
        char err[256];
        if (cli_bytes_check(&b, "the weights and this token count's buffers", a.max_gib, err, sizeof err)) {
            fprintf(stderr, "qmoe " CMD ": T=%" PRId64 ": %s\n", a.tokens[ti], err);
            qmoe_moe_layer_destroy(L);
            return 2;
        }
    }
    fprintf(stderr, "qmoe " CMD ": measuring the DRAM read bandwidth on %d threads\n", a.threads);
    double dram = mo_dram(a.threads, a.dram_mb);
    double per_expert = (double)qmoe_moe_layer_weight_bytes(L) / (double)a.m.E;
    qmoe_device_options dopt = QMOE_DEVICE_OPTIONS_INIT;
    dopt.threads = a.threads;
    qmoe_device *dev = NULL;
    qmoe_stream *stream = NULL;
    int rc = 0;
    if (qmoe_device_create(&dopt, &dev) || qmoe_stream_create(dev, &stream)) {
        fprintf(stderr, "qmoe " CMD ": %s\n", qmoe_last_error());
        rc = 1;
    }
    for (int ti = 0; !rc && ti < a.nt; ti++) {
        int64_t T = a.tokens[ti], H = a.m.H, E = a.m.E;
        qmoe_dtype hd = a.bf16 ? QMOE_DTYPE_BFLOAT16 : QMOE_DTYPE_FLOAT32;
        float *x = malloc((size_t)(T * H) * 4), *out = malloc((size_t)(T * H) * 4),
              *logits = malloc((size_t)(T * E * VARIANTS) * 4);
        uint64_t wsz = 0, s = 99 + (uint64_t)T;
        void *ws = NULL;
        qmoe_tensor *th = NULL, *tl = NULL, *to = NULL;
        (void)tl;
        int64_t hs[2] = {T, H}, ls[2] = {T, E};
        if (!x || !out || !logits || qmoe_moe_layer_workspace_size(L, T, hd, &wsz) ||
            !(ws = aligned_alloc(64, (size_t)((wsz + 64) & ~(uint64_t)63)))) {
            fprintf(stderr, "qmoe " CMD ": T=%" PRId64 ": out of memory\n", T);
            rc = 1;
        }
        for (int64_t i = 0; !rc && i < T * H; i++) x[i] = (float)((double)bm_next(&s) / 2147483648.0 * 2 - 1);
        for (int64_t i = 0; !rc && a.bf16 && i < T * H; i++) { /* bf16 in the first half of x */
            uint32_t b;
            memcpy(&b, &x[i], 4);
            ((uint16_t *)x)[i] = (uint16_t)(b >> 16);
        }
        for (int64_t i = 0; !rc && i < T * E; i++) logits[i] = (float)((double)bm_next(&s) / 2147483648.0 * 6 - 3);
        int64_t shift = E / VARIANTS ? E / VARIANTS : 1;
        for (int v = 1; !rc && v < VARIANTS; v++)
            for (int64_t t = 0; t < T; t++)
                for (int64_t e = 0; e < E; e++)
                    logits[(v * T + t) * E + (e + v * shift) % E] = logits[t * E + e];
        qmoe_tensor *tv[VARIANTS] = {0};
        for (int v = 0; !rc && v < VARIANTS; v++)
            if (qmoe_tensor_create(ls, 2, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, logits + v * T * E, &tv[v])) {
                fprintf(stderr, "qmoe " CMD ": %s\n", qmoe_last_error());
                rc = 1;
            }
        tl = tv[0];
        if (!rc && (qmoe_tensor_create(hs, 2, NULL, hd, QMOE_FORMAT_ND, x, &th) ||
                    qmoe_tensor_create(hs, 2, NULL, hd, QMOE_FORMAT_ND, out, &to))) {
            fprintf(stderr, "qmoe " CMD ": %s\n", qmoe_last_error());
            rc = 1;
        }
        double times[1000];
        int n = 0;
        if (!rc) {
            fprintf(stderr, "qmoe " CMD ": T=%" PRId64 ": timing for about %.1f s\n", T, a.seconds);
            double start = bm_now();
            for (int warm = 0; warm < 1 && !rc; warm++)
                rc = qmoe_moe_layer_forward(L, th, tl, to, ws, wsz, stream) || qmoe_stream_synchronize(stream);
            while (!rc && n < 1000 && (n < 3 || bm_now() - start < a.seconds)) {
                double t0 = bm_now();
                rc = qmoe_moe_layer_forward(L, th, tv[n % VARIANTS], to, ws, wsz, stream) ||
                     qmoe_stream_synchronize(stream);
                times[n++] = bm_now() - t0;
            }
            if (rc) fprintf(stderr, "qmoe " CMD ": %s\n", qmoe_last_error());
        }
        /* Each operator's median over as many forwards, the same routings (--breakdown). */
        /* wall and CPU ms per operator, then the median per-run share of gate/up's GOPS, each */
        double ph[2 * MOE_LAYER_PHASES + 2] = {0};
        for (int k = 0; !rc && a.breakdown && k < 2 * MOE_LAYER_PHASES + 2; k++) {
            static double each[1000][2 * MOE_LAYER_PHASES + 2];
            if (k == 0)
                for (int j = 0; !rc && j < n; j++) {
                    if (moe_layer_forward_phases(L, th, tv[j % VARIANTS], to, ws, wsz, stream, each[j])) {
                        fprintf(stderr, "qmoe " CMD ": %s\n", qmoe_last_error());
                        rc = 1;
                    }
                    for (int c2 = 0; c2 < 2; c2++) { /* the three matmuls' work over the whole, in gate/up's time */
                        const double *e = each[j] + c2 * MOE_LAYER_PHASES;
                        double sum = 0;
                        for (int q = 0; q < MOE_LAYER_PHASES; q++) sum += e[q];
                        each[j][2 * MOE_LAYER_PHASES + c2] = sum > 0 ? 1.5 * e[2] / sum : 0;
                    }
                }
            double col[1000];
            for (int j = 0; j < n; j++) col[j] = each[j][k];
            qsort(col, (size_t)n, sizeof col[0], cmp_d);
            ph[k] = col[n / 2];
        }
        if (!rc) {
            qsort(times, (size_t)n, sizeof times[0], cmp_d);
            double t = times[n / 2];
            int64_t act = active_experts(&c, logits, T);
            double bytes = per_expert * (double)act;
            printf("{\"bench\":\"moe\",\"model\":\"%s\",\"dtype\":\"%s\",\"mode\":\"%s\",\"group_size\":%" PRId64
                   ",\"E\":%" PRId64 ",\"H\":%" PRId64 ",\"I\":%" PRId64 ",\"top_k\":%" PRId64
                   ",\"tokens\":%" PRId64 ",\"threads\":%d,\"runs\":%d,\"seconds\":%.6g,"
                   "\"tokens_per_s\":%.6g,\"active_experts\":%" PRId64 ",\"weight_gb_per_s\":%.4g,"
                   "\"dram_gb_per_s\":%.4g,\"fraction_of_dram\":%.3f,\"int8_gops\":%.4g",
                   a.m.name, a.bf16 ? "bf16" : "fp32", a.a8w4 ? "a8w4" : "a8w8", a.group_size, E, H, a.m.I, a.m.k, T, a.threads, n, t,
                   (double)T / t, act, bytes / t / 1e9, dram, dram > 0 ? bytes / t / 1e9 / dram : 0,
                   2.0 * (double)T * (double)a.m.k * 3.0 * (double)H * (double)a.m.I / t / 1e9);
            if (a.breakdown) print_breakdown(&a, T, ph);
            printf("}\n");
            fflush(stdout);
        }
        qmoe_tensor_destroy(th), qmoe_tensor_destroy(to);
        for (int v = 0; v < VARIANTS; v++) qmoe_tensor_destroy(tv[v]);
        free(x), free(out), free(logits), free(ws);
    }
    qmoe_stream_destroy(stream);
    qmoe_device_destroy(dev);
    qmoe_moe_layer_destroy(L);
    return rc;
}
