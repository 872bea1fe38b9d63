/*
 * qmoe bench moe --ep P (under mpirun -np P): the MoE layer with its experts spread over P
 * ranks (qmoe_ep_layer_forward), one JSON line per token count from rank 0:
 *
 * - dispatch and combine (qmoe_moe_dispatch / qmoe_moe_combine, the routing of the layer's own
 *   gating; combine with qmoe_ep_expert_rows' buffer, its call counted in combine's time) against
 *   a bare MPI_Alltoallv of the same bytes each way, timed in the same run;
 * - the sharded layer's forward; at P = 1 also the whole layer's qmoe_moe_layer_forward, so
 *   `-np 1 --threads 2` and `-np 2 --threads 1` compare one process with two ranks.
 *
 * --tokens counts all ranks' tokens together (split evenly). dispatch_bytes counts a row per
 * (token, expert) as the bare exchange moves them; dispatch_bytes_sent what dispatch sends (a
 * token once per other rank, with its scale and ids). Every time is the slowest rank's
 * for that iteration (the ranks start together after a barrier); medians and the spread over
 * iterations. Weights: random int8 in the operators' layout (A8W8), each rank making only its
 * own experts'.
 */
#define _GNU_SOURCE /* sched_getaffinity */
#include "bench_moe_ep.h"

#include <sched.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_args.h"
#include "moe_ep.h"
#include "qmoe/moe_layer.h"

#define CMD "bench moe --ep"

#ifdef QMOE_CLI_MPI

#include "qmoe/mpi.h"

enum { MAX_T = 16, VARIANTS = 8, MAX_RUNS = 200, NTIMES = 5 };

/* The shapes of tools/bench_moe_layer.c's models. */
static const struct {
    const char *name;
    int64_t H, I, E, k;
    int sigmoid;
} models[] = {
    {"qwen3-30b-a3b", 2048, 768, 128, 8, 0},
    {"deepseek-v3", 7168, 2048, 256, 8, 1},
    {"mixtral-8x7b", 4096, 14336, 8, 2, 0},
};

typedef struct ep_args {
    int model;
    int64_t P, E, threads, tokens[MAX_T], max_gib;
    int nt, bf16, messages;
    double seconds;
} ep_args;

static int rank, size;

static void usage(FILE *f)
{
    fprintf(f, "usage: mpirun -np P qmoe bench moe --ep P --model qwen3-30b-a3b|deepseek-v3|mixtral-8x7b "
               "[options]\n\n"
               "  --tokens LIST     all ranks' tokens together, split evenly (default 64,512,4096)\n"
               "  --experts N       fewer experts than the model (to fit memory; >= top-k)\n"
               "  --dtype fp32|bf16 hidden states and output (default fp32)\n"
               "  --threads N       per rank (default 1)\n"
               "  --transport auto|messages  auto (default): shared memory when every rank is on\n"
               "                    one machine; messages: MPI messages only\n"
               "  --seconds S       time per token count (default 1)\n"
               "  --max-gib N       refuse more than N GiB of weights per rank (default 16)\n"
               "One JSON line per token count on rank 0's stdout. Every rank must be given the\n"
               "same arguments (checked before anything runs: otherwise refused on every rank).\n");
}

static int parse(int argc, char **argv, ep_args *a)
{
    static const char *const dtypes[] = {"fp32", "bf16"}, *const transports[] = {"auto", "messages"};
    *a = (ep_args){.model = -1, .threads = 1, .seconds = 1, .max_gib = 16};
    for (int i = 1; i < argc;) {
        const char *o = argv[i], *v = NULL;
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) {
            if (rank == 0) usage(stdout);
            return 1;
        }
        if (args_value(CMD, argc, argv, &i, &v)) return -1;
        int bad = 0;
        if (!strcmp(o, "--ep")) bad = args_int(CMD, o, v, 1, 4096, &a->P);
        else if (!strcmp(o, "--experts")) bad = args_int(CMD, o, v, 1, 4096, &a->E);
        else if (!strcmp(o, "--threads")) bad = args_int(CMD, o, v, 1, 4096, &a->threads);
        else if (!strcmp(o, "--max-gib")) bad = args_int(CMD, o, v, 1, 1 << 20, &a->max_gib);
        else if (!strcmp(o, "--dtype")) bad = args_choice(CMD, o, v, dtypes, 2, &a->bf16);
        else if (!strcmp(o, "--transport")) bad = args_choice(CMD, o, v, transports, 2, &a->messages);
        else if (!strcmp(o, "--model")) {
            for (int m = 0; m < (int)(sizeof models / sizeof models[0]); m++)
                if (!strcmp(v, models[m].name)) a->model = m;
            if (a->model < 0) {
                fprintf(stderr, "qmoe " CMD ": --model %s: unknown\n", v);
                bad = -1;
            }
        } else if (!strcmp(o, "--seconds")) {
            char *end;
            a->seconds = strtod(v, &end);
            if (*end || !(a->seconds > 0 && a->seconds <= 600)) {
                fprintf(stderr, "qmoe " CMD ": --seconds %s: expected 0 < S <= 600\n", v);
                bad = -1;
            }
        } else if (!strcmp(o, "--tokens")) {
            char *s = (char *)v, *end;
            a->nt = 0;
            while (*s && a->nt < MAX_T) {
                long long x = strtoll(s, &end, 10);
                if (end == s || x < 1 || x > 1048576 || (*end && *end != ',')) break;
                a->tokens[a->nt++] = x;
                s = *end ? end + 1 : end;
            }
            if (*s || !a->nt) {
                fprintf(stderr, "qmoe " CMD ": --tokens %s: not a list of 1..1048576 (at most %d)\n", v, MAX_T);
                bad = -1;
            }
        } else {
            fprintf(stderr, "qmoe " CMD ": unknown option %s (qmoe bench moe --ep 1 --help)\n", o);
            return -1;
        }
        if (bad) return -1;
    }
    if (a->model < 0) {
        fprintf(stderr, "qmoe " CMD ": --model is required\n");
        return -1;
    }
    if (a->E && a->E < models[a->model].k) {
        fprintf(stderr, "qmoe " CMD ": --experts %" PRId64 " is below top-%" PRId64 "\n", a->E, models[a->model].k);
        return -1;
    }
    if (!a->E) a->E = models[a->model].E;
    if (!a->nt) a->tokens[0] = 64, a->tokens[1] = 512, a->tokens[2] = 4096, a->nt = 3;
    return 0;
}

static uint64_t next(uint64_t *s) /* splitmix64 */
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Experts ids[0 .. n) (random int8 weights, seeded by the expert id) -> a shard, or the whole
 * layer when whole. */
static qmoe_moe_layer *make_layer(const qmoe_moe_layer_config *c, int64_t n, const int32_t *ids, int whole)
{
    int64_t H = c->hidden_size, I = c->intermediate_size;
    int64_t sh13[3] = {n, H, 2 * I}, sh2[3] = {n, I, H}, ss13[2] = {n, 2 * I}, ss2[2] = {n, H};
    int8_t *w13 = malloc((size_t)(n * H * 2 * I)), *w2 = malloc((size_t)(n * I * H));
    float *sc13 = malloc((size_t)(n * 2 * I) * 4), *sc2 = malloc((size_t)(n * H) * 4);
    qmoe_moe_layer *L = NULL;
    qmoe_tensor *t[4] = {0};
    if (!w13 || !w2 || !sc13 || !sc2) {
        fprintf(stderr, "qmoe " CMD ": rank %d: out of memory for the weights\n", rank);
        goto done;
    }
    for (int64_t j = 0; j < n; j++) {
        uint64_t s = 7 + (uint64_t)ids[j];
        int8_t *a = w13 + j * H * 2 * I, *b = w2 + j * I * H;
        for (int64_t i = 0; i < H * 2 * I; i++) a[i] = (int8_t)((int)(next(&s) % 255) - 127);
        for (int64_t i = 0; i < I * H; i++) b[i] = (int8_t)((int)(next(&s) % 255) - 127);
        for (int64_t i = 0; i < 2 * I; i++) sc13[j * 2 * I + i] = 1e-3f * (float)(1 + next(&s) % 8);
        for (int64_t i = 0; i < H; i++) sc2[j * H + i] = 1e-3f * (float)(1 + next(&s) % 8);
    }
    qmoe_status st = qmoe_tensor_create(sh13, 3, NULL, QMOE_DTYPE_INT8, QMOE_FORMAT_ND, w13, &t[0]);
    if (!st) st = qmoe_tensor_create(ss13, 2, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, sc13, &t[1]);
    if (!st) st = qmoe_tensor_create(sh2, 3, NULL, QMOE_DTYPE_INT8, QMOE_FORMAT_ND, w2, &t[2]);
    if (!st) st = qmoe_tensor_create(ss2, 2, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, sc2, &t[3]);
    if (!st)
        st = whole ? qmoe_moe_layer_create(c, t[0], t[1], NULL, t[2], t[3], &L)
                   : qmoe_moe_layer_create_shard(c, n, ids, t[0], t[1], NULL, t[2], t[3], &L);
    if (st) fprintf(stderr, "qmoe " CMD ": rank %d: %s\n", rank, qmoe_last_error());
done:
    for (int k = 0; k < 4; k++) qmoe_tensor_destroy(t[k]);
    free(w13), free(w2), free(sc13), free(sc2);
    return L;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* "name":median,"name_min":..,"name_max":.. in ms */
static void print_stat(const char *name, double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    printf(",\"%s_ms\":%.4g,\"%s_ms_min\":%.4g,\"%s_ms_max\":%.4g", name, v[n / 2] * 1e3, name, v[0] * 1e3,
           name, v[n - 1] * 1e3);
}

/* CPUs this process may run on (mpirun binds each rank to a core unless told --bind-to none). */
static int cpus_here(void)
{
    cpu_set_t set;
    return sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
}

/* One token count: its inputs, the timed loop, the JSON line. */
static int bench_tokens(const ep_args *a, const qmoe_moe_layer_config *c, qmoe_ep *ep, qmoe_moe_layer *shard,
                        qmoe_moe_layer *whole, int64_t T)
{
    const int64_t H = c->hidden_size, E = c->num_experts, K = c->top_k;
    const int64_t first = T * rank / size, n = T * (rank + 1) / size - first;
    const qmoe_dtype hd = a->bf16 ? QMOE_DTYPE_BFLOAT16 : QMOE_DTYPE_FLOAT32;
    const size_t hs = a->bf16 ? 2 : 4, nk = (size_t)(n * K) + 1;
    uint64_t s = 99 + (uint64_t)first;
    float *x = malloc((size_t)(n * H) * 4 + 4), *logits = malloc((size_t)(n * E * VARIANTS) * 4 + 4),
          *w = malloc(nk * 4), *xs = malloc((size_t)n * 4 + 4);
    void *out = malloc((size_t)(n * H) * hs + 4);
    int8_t *xq = malloc((size_t)(n * H) + 1);
    int32_t *ids = malloc(nk * 4);
    int64_t *groups = malloc((size_t)(qmoe_ep_local_experts(ep) + 1) * 8);
    int rc = !x || !logits || !w || !xs || !out || !xq || !ids || !groups;
    for (int64_t i = 0; !rc && i < n * H; i++) x[i] = (float)((double)(next(&s) >> 11) / 9007199254740992.0 * 2 - 1);
    for (int64_t i = 0; !rc && a->bf16 && i < n * H; i++) { /* bf16 in the first half of x */
        uint32_t b;
        memcpy(&b, &x[i], 4);
        ((uint16_t *)x)[i] = (uint16_t)(b >> 16);
    }
    for (int64_t i = 0; !rc && i < n * E * VARIANTS; i++)
        logits[i] = (float)((double)(next(&s) >> 11) / 9007199254740992.0 * 6 - 3);
    for (int64_t i = 0; !rc && i < n * H; i++) xq[i] = (int8_t)((int)(next(&s) % 255) - 127);
    for (int64_t i = 0; !rc && i < n; i++) xs[i] = 1e-2f;
    int64_t hsz[2] = {n, H}, lsz[2] = {n, E}, ksz[2] = {n, K};
    qmoe_tensor *th = NULL, *to = NULL, *tl[VARIANTS] = {0}, *ti = NULL, *tw = NULL;
    rc = rc || qmoe_tensor_create(hsz, 2, NULL, hd, QMOE_FORMAT_ND, x, &th) ||
         qmoe_tensor_create(hsz, 2, NULL, hd, QMOE_FORMAT_ND, out, &to) ||
         qmoe_tensor_create(ksz, 2, NULL, QMOE_DTYPE_INT32, QMOE_FORMAT_ND, ids, &ti) ||
         qmoe_tensor_create(ksz, 2, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, w, &tw);
    for (int v = 0; !rc && v < VARIANTS; v++)
        rc = qmoe_tensor_create(lsz, 2, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, logits + v * n * E, &tl[v]) != 0;
    /* the routing the dispatch timing moves: the layer's gating of variant 0 */
    if (!rc) rc = qmoe_moe_layer_route(shard, tl[0], ti, tw) != 0;
    /* bare MPI_Alltoallv of the same bytes: int8 row + its scale out, a row of hd back */
    int *rows_to = calloc((size_t)size, sizeof(int)), *rows_from = calloc((size_t)size, sizeof(int));
    int *c1 = calloc((size_t)size * 4, sizeof(int)), *c2 = calloc((size_t)size * 4, sizeof(int));
    rc = rc || !rows_to || !rows_from || !c1 || !c2;
    for (int64_t i = 0; !rc && i < n * K; i++) rows_to[(int64_t)ids[i] * size / E]++; /* contiguous owners */
    int64_t sent = 0, recv = 0, records = 0; /* records: (token, other rank) pairs */
    for (int64_t t = 0; !rc && t < n; t++)
        for (int r = 0; r < size; r++) {
            int64_t k = 0;
            while (k < K && (int64_t)ids[t * K + k] * size / E != r) k++;
            records += r != rank && k < K;
        }
    if (!rc) MPI_Alltoall(rows_to, 1, MPI_INT, rows_from, 1, MPI_INT, MPI_COMM_WORLD);
    int *fsc = c1, *fsd = c1 + size, *frc = c1 + 2 * size, *frd = c1 + 3 * size;
    int *bsc = c2, *bsd = c2 + size, *brc = c2 + 2 * size, *brd = c2 + 3 * size;
    for (int r = 0; !rc && r < size; r++) {
        fsc[r] = rows_to[r] * (int)(H + 4), frc[r] = rows_from[r] * (int)(H + 4);
        bsc[r] = rows_from[r] * (int)(H * (int64_t)hs), brc[r] = rows_to[r] * (int)(H * (int64_t)hs);
        fsd[r] = r ? fsd[r - 1] + fsc[r - 1] : 0, frd[r] = r ? frd[r - 1] + frc[r - 1] : 0;
        bsd[r] = r ? bsd[r - 1] + bsc[r - 1] : 0, brd[r] = r ? brd[r - 1] + brc[r - 1] : 0;
        sent += rows_to[r], recv += rows_from[r];
    }
    size_t fwd = (size_t)(sent + recv) * (size_t)(H + 4) + 1, back = (size_t)(sent + recv) * (size_t)H * hs + 1;
    unsigned char *fs = calloc(fwd, 1), *bs = calloc(back, 1);
    void *rx = malloc((size_t)recv * (size_t)H + 1), *y = calloc((size_t)recv * (size_t)H * hs + 1, 1);
    float *rs = malloc((size_t)recv * 4 + 4);
    rc = rc || !fs || !bs || !rx || !y || !rs;
    /* every buffer written once: untouched pages would all read the one zero page (cached), and
     * exchanges or sums from them would look faster than from real rows */
    if (!rc) {
        memset(fs, 0x11, fwd), memset(bs, 0x22, back);
        for (size_t i = 0; i < (size_t)recv * (size_t)H; i++) {
            float v = 1e-3f * (float)(i % 97);
            if (a->bf16) {
                uint32_t u;
                memcpy(&u, &v, 4);
                ((uint16_t *)y)[i] = (uint16_t)(u >> 16);
            } else {
                ((float *)y)[i] = v;
            }
        }
    }
    int any = 0;
    MPI_Allreduce(&rc, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    double *tm = malloc(sizeof(double) * NTIMES * MAX_RUNS);
    int runs = 0;
    uint64_t wsz = 0;
    void *ws = NULL;
    if (!any && tm) {
        int64_t rows = 0;
        /* warm-up, and the iteration count from its time (rank 0's, for every rank) */
        double t0 = MPI_Wtime();
        qmoe_status st = qmoe_ep_layer_forward(ep, shard, th, tl[0], to);
        /* the whole layer's workspace: taken and touched once, as the context keeps its buffers
         * (a fresh one per forward would time its page faults) */
        if (whole && !st) st = qmoe_moe_layer_workspace_size(whole, n, hd, &wsz);
        if (whole && !st && !(ws = aligned_alloc(64, (size_t)((wsz + 64) & ~(uint64_t)63)))) st = QMOE_ERR_INNER;
        if (whole && !st) st = qmoe_moe_layer_forward(whole, th, tl[0], to, ws, wsz, NULL);
        double once = MPI_Wtime() - t0;
        MPI_Bcast(&once, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        runs = (int)(a->seconds / (2 * once + 1e-6));
        runs = runs < 5 ? 5 : runs > MAX_RUNS ? MAX_RUNS : runs;
        void *yb_last = NULL;
        for (int it = 0; it < runs && !st; it++) {
            double t[NTIMES] = {0};
            MPI_Barrier(MPI_COMM_WORLD);
            t0 = MPI_Wtime();
            st = qmoe_moe_dispatch(ep, n, xq, xs, ids, recv, rx, rs, groups, &rows);
            t[0] = MPI_Wtime() - t0;
            /* the experts' outputs in qmoe_ep_expert_rows' buffer (read in place with shared
             * memory); the call is combine's, the writing the experts' (not timed, and only when
             * the buffer moved: the same rows every iteration; qmoe's experts stream their
             * outputs to memory, which a copy here each time would not) */
            void *yb = NULL;
            t0 = MPI_Wtime();
            if (!st) st = qmoe_ep_expert_rows(ep, hd, &yb);
            t[1] = MPI_Wtime() - t0;
            if (!st && yb != yb_last) memcpy(yb, y, (size_t)rows * (size_t)H * hs);
            yb_last = yb;
            t0 = MPI_Wtime();
            if (!st) st = qmoe_moe_combine(ep, hd, yb, rows, w, hd, out);
            t[1] += MPI_Wtime() - t0;
            MPI_Barrier(MPI_COMM_WORLD);
            t0 = MPI_Wtime();
            MPI_Alltoallv(fs, fsc, fsd, MPI_BYTE, fs + (size_t)sent * (size_t)(H + 4), frc, frd, MPI_BYTE,
                          MPI_COMM_WORLD);
            MPI_Alltoallv(bs, bsc, bsd, MPI_BYTE, bs + (size_t)recv * (size_t)H * hs, brc, brd, MPI_BYTE,
                          MPI_COMM_WORLD);
            t[2] = MPI_Wtime() - t0;
            MPI_Barrier(MPI_COMM_WORLD);
            t0 = MPI_Wtime();
            if (!st) st = qmoe_ep_layer_forward(ep, shard, th, tl[it % VARIANTS], to);
            t[3] = MPI_Wtime() - t0;
            if (whole && !st) { /* P = 1: the whole layer in one process, the same tokens */
                t0 = MPI_Wtime();
                st = qmoe_moe_layer_forward(whole, th, tl[it % VARIANTS], to, ws, wsz, NULL);
                t[4] = MPI_Wtime() - t0;
            }
            MPI_Reduce(rank ? t : MPI_IN_PLACE, t, NTIMES, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
            for (int k = 0; k < NTIMES; k++) tm[k * MAX_RUNS + it] = t[k];
        }
        if (st) {
            fprintf(stderr, "qmoe " CMD ": rank %d: %s %s\n", rank, qmoe_mpi_last_error(), qmoe_last_error());
            rc = 1;
        }
    } else {
        if (rank == 0) fprintf(stderr, "qmoe " CMD ": T=%" PRId64 ": out of memory or a failed setup\n", T);
        rc = 1;
    }
    int64_t all[3] = {sent, n, records}, tot[3] = {0, 0, 0};
    MPI_Reduce(all, tot, 3, MPI_INT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
    if (!rc && rank == 0) {
        double *d = tm, *cb = tm + MAX_RUNS, *bare = tm + 2 * MAX_RUNS, *ly = tm + 3 * MAX_RUNS, *one = tm + 4 * MAX_RUNS;
        double dc[MAX_RUNS];
        for (int i = 0; i < runs; i++) dc[i] = d[i] + cb[i];
        printf("{\"bench\":\"moe_ep\",\"model\":\"%s\",\"E\":%" PRId64 ",\"H\":%" PRId64 ",\"I\":%" PRId64
               ",\"top_k\":%" PRId64 ",\"dtype\":\"%s\",\"ranks\":%d,\"threads_per_rank\":%" PRId64
               ",\"tokens\":%" PRId64 ",\"rows_moved\":%" PRId64 ",\"dispatch_bytes\":%" PRId64
               ",\"dispatch_bytes_sent\":%" PRId64 ",\"combine_bytes\":%" PRId64
               ",\"transport\":\"%s\",\"cpus\":%d,\"runs\":%d",
               models[a->model].name, E, H, c->intermediate_size, K, a->bf16 ? "bf16" : "fp32", size, a->threads, T,
               tot[0], tot[0] * (H + 4), tot[2] * (H + 4 + 4 * K), tot[0] * H * (int64_t)hs,
               qmoe_ep_shared_memory(ep) ? "shared_memory" : "messages", cpus_here(), runs);
        print_stat("dispatch", d, runs);
        print_stat("combine", cb, runs);
        print_stat("dispatch_combine", dc, runs);
        print_stat("alltoallv", bare, runs);
        printf(",\"vs_alltoallv\":%.3f", dc[runs / 2] > 0 ? bare[runs / 2] / dc[runs / 2] : 0);
        print_stat("layer", ly, runs);
        if (whole) {
            print_stat("one_process_layer", one, runs);
            printf(",\"ep_vs_one_process\":%.3f", one[runs / 2] > 0 ? ly[runs / 2] / one[runs / 2] : 0);
        }
        printf("}\n");
        fflush(stdout);
    }
    for (int v = 0; v < VARIANTS; v++) qmoe_tensor_destroy(tl[v]);
    qmoe_tensor_destroy(th), qmoe_tensor_destroy(to), qmoe_tensor_destroy(ti), qmoe_tensor_destroy(tw);
    free(x), free(logits), free(w), free(xs), free(out), free(xq), free(ids), free(groups);
    free(rows_to), free(rows_from), free(c1), free(c2), free(fs), free(bs), free(rx), free(y), free(rs), free(tm);
    free(ws);
    return rc;
}

/* Every rank's arguments, to be the same (moe_ep_agree): each rank's loop runs for its token
 * counts and its seconds, so ranks given others would wait for each other forever. */
static int facts_of(const ep_args *a, moe_ep_fact *f)
{
    static char names[MAX_T][24];
    int n = 0;
    f[n++] = (moe_ep_fact){"--ep", a->P, MOE_EP_INT};
    f[n++] = (moe_ep_fact){"--model", a->model, MOE_EP_INT};
    f[n++] = (moe_ep_fact){"--experts", a->E, MOE_EP_INT};
    f[n++] = (moe_ep_fact){"--threads", a->threads, MOE_EP_INT};
    f[n++] = (moe_ep_fact){"--max-gib", a->max_gib, MOE_EP_INT};
    f[n++] = (moe_ep_fact){"--dtype", a->bf16, MOE_EP_INT};
    f[n++] = (moe_ep_fact){"--transport", a->messages, MOE_EP_INT};
    int64_t sec;
    memcpy(&sec, &a->seconds, sizeof sec);
    f[n++] = (moe_ep_fact){"--seconds", sec, MOE_EP_REAL};
    f[n++] = (moe_ep_fact){"the number of --tokens counts", a->nt, MOE_EP_INT};
    for (int i = 0; i < MAX_T; i++) {
        snprintf(names[i], sizeof names[i], "--tokens' count %d", i + 1);
        f[n++] = (moe_ep_fact){names[i], i < a->nt ? a->tokens[i] : 0, MOE_EP_INT};
    }
    return n;
}

int bench_moe_ep(int argc, char **argv)
{
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) MPI_Init(NULL, NULL);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    ep_args a;
    int r = parse(argc, argv, &a), rc = r < 0 ? 2 : 0;
    /* before anything else collective: a rank that refused its arguments stops every rank, and
     * ranks given other arguments are refused on every rank */
    moe_ep_fact facts[MOE_EP_MAX_FACTS];
    char why[MOE_EP_ERR_LEN];
    if (moe_ep_join(CMD, 1, r != 0, r ? 0 : a.P, 0)) /* with any process started without --ep */
        return r > 0 ? 0 : 2;
    int nf = facts_of(&a, facts), ag = moe_ep_agree(0, facts, nf, why);
    if (ag) {
        if (ag < 0) fprintf(stderr, "qmoe " CMD " (rank %d of %d): %s\n", rank, size, why);
        else if (!r) fprintf(stderr, "qmoe " CMD " (rank %d of %d): another rank refused its arguments\n", rank, size);
        MPI_Finalize();
        return r > 0 && ag > 0 ? 0 : 2;
    }
    if (a.P != size) {
        if (rank == 0)
            fprintf(stderr, "qmoe " CMD ": --ep %" PRId64 ", but %d rank(s) are running (mpirun -np %" PRId64 ")\n",
                    a.P, size, a.P);
        rc = 2;
    }
    int64_t H = r ? 0 : models[a.model].H, I = r ? 0 : models[a.model].I;
    double gib = r ? 0 : (double)a.E * (double)H * (double)I * 3 / size / (1 << 30);
    if (!r && !rc && gib * (size == 1 ? 4 : 2) > (double)a.max_gib) {
        if (rank == 0)
            fprintf(stderr, "qmoe " CMD ": about %.1f GiB of weights per rank while loading, over --max-gib %" PRId64
                            " (use --experts)\n", gib * (size == 1 ? 4 : 2), a.max_gib);
        rc = 2;
    }
    if (r || rc) {
        MPI_Finalize();
        return rc;
    }
    qmoe_moe_layer_config c = QMOE_MOE_LAYER_CONFIG_INIT;
    c.hidden_size = H, c.intermediate_size = I, c.num_experts = a.E, c.top_k = models[a.model].k;
    c.threads = (int)a.threads;
    if (models[a.model].sigmoid) {
        int groups = a.E % 8 == 0 && a.E / 8 >= 2;
        c.gating = QMOE_MOE_GATING_SIGMOID, c.group_count = groups ? 8 : 1, c.k_group = groups ? 4 : 1;
        c.routed_scaling_factor = 2.5;
    }
    qmoe_ep_config ec = QMOE_EP_CONFIG_INIT;
    ec.num_experts = a.E, ec.hidden = H, ec.top_k = c.top_k, ec.x_dtype = QMOE_DTYPE_INT8;
    ec.threads = (int)a.threads; /* combine's weighted sum, like the layer's operators */
    ec.messages_only = a.messages;
    qmoe_ep *ep = NULL;
    if (qmoe_ep_create(MPI_COMM_WORLD, &ec, &ep)) {
        if (rank == 0) fprintf(stderr, "qmoe " CMD ": %s\n", qmoe_mpi_last_error());
        MPI_Finalize();
        return 1;
    }
    int64_t nl = qmoe_ep_local_experts(ep);
    int32_t *ids = malloc((size_t)(a.E + 1) * sizeof *ids);
    for (int64_t i = 0; ids && i < a.E; i++) ids[i] = (int32_t)(i < nl ? qmoe_ep_local_expert_id(ep, i) : i);
    if (rank == 0)
        fprintf(stderr, "qmoe " CMD ": %s E=%" PRId64 " on %d ranks (%" PRId64 " experts on rank 0): making the shards\n",
                models[a.model].name, a.E, size, nl);
    qmoe_moe_layer *shard = ids ? make_layer(&c, nl, ids, 0) : NULL, *whole = NULL;
    if (size == 1 && shard) {
        for (int64_t i = 0; i < a.E; i++) ids[i] = (int32_t)i;
        whole = make_layer(&c, a.E, ids, 1);
    }
    if (cpus_here() > 0 && cpus_here() < a.threads)
        fprintf(stderr, "qmoe " CMD ": rank %d: %" PRId64 " threads on %d CPU(s): mpirun bound the rank; for one "
                        "process with several threads add --bind-to none\n", rank, a.threads, cpus_here());
    int bad = !shard || (size == 1 && !whole), any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    for (int i = 0; !any && i < a.nt && !rc; i++) {
        if (rank == 0) fprintf(stderr, "qmoe " CMD ": T=%" PRId64 "\n", a.tokens[i]);
        rc = bench_tokens(&a, &c, ep, shard, whole, a.tokens[i]);
    }
    free(ids);
    qmoe_moe_layer_destroy(shard), qmoe_moe_layer_destroy(whole);
    qmoe_ep_destroy(ep);
    MPI_Finalize();
    return any || rc ? 1 : 0;
}

#else /* built without MPI */

int bench_moe_ep(int argc, char **argv)
{
    (void)argc, (void)argv;
    fprintf(stderr, "qmoe " CMD ": --ep needs a qmoe built with MPI, and this one was built without it "
                    "(install Open MPI: scripts/require-mpi.sh, or apt-get install libopenmpi-dev "
                    "openmpi-bin; then configure again)\n");
    return 2;
}

#endif
