/* Dispatch + combine against a bare MPI_Alltoallv of the same bytes, in one run (not a test).
 * Each rank: T tokens of H int8 (+ float scale), top-K of E experts, uniform random routing;
 * the experts are the identity (float32 rows back). Prints one JSON line per measure (rank 0):
 *   mpirun -np 2 build/src/mpi/bench_mpi_dispatch [T H E K reps] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qmoe/mpi.h"

static double now(void) { return MPI_Wtime(); }

/* Median of n seconds (n small). */
static double median(double *v, int n)
{
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
            double t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    return v[n / 2];
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int P, me;
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    long T = argc > 1 ? atol(argv[1]) : 2048, H = argc > 2 ? atol(argv[2]) : 4096;
    long E = argc > 3 ? atol(argv[3]) : 64, K = argc > 4 ? atol(argv[4]) : 8;
    int reps = argc > 5 ? atoi(argv[5]) : 10;
    if (T < 1 || H < 1 || E < 1 || K < 1 || reps < 1 || reps > 1000) {
        if (!me) fprintf(stderr, "usage: bench_mpi_dispatch [T H E K reps]\n");
        MPI_Finalize();
        return 2;
    }
    int8_t *x = malloc((size_t)(T * H));
    float *xs = malloc((size_t)T * sizeof *xs), *w = malloc((size_t)(T * K) * sizeof *w);
    int32_t *ids = malloc((size_t)(T * K) * sizeof *ids);
    unsigned s = 12345u + (unsigned)me;
    for (long i = 0; i < T * H; i++) x[i] = (int8_t)((s = s * 1103515245u + 12345u) >> 24);
    for (long t = 0; t < T; t++) xs[t] = 0.01f;
    for (long i = 0; i < T * K; i++) {
        ids[i] = (int32_t)(((s = s * 1103515245u + 12345u) >> 8) % (unsigned)E);
        w[i] = 1.0f / (float)K;
    }
    qmoe_ep_config cfg = QMOE_EP_CONFIG_INIT;
    cfg.num_experts = E, cfg.hidden = H, cfg.top_k = K, cfg.x_dtype = QMOE_DTYPE_INT8;
    qmoe_ep *ep = NULL;
    if (qmoe_ep_create(MPI_COMM_WORLD, &cfg, &ep) != QMOE_OK) {
        fprintf(stderr, "create: %s\n", qmoe_mpi_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    long cap = (long)P * T * K;
    int8_t *rx = malloc((size_t)(cap * H));
    float *rs = malloc((size_t)cap * sizeof *rs), *y = malloc((size_t)(cap * H) * sizeof *y);
    float *out = malloc((size_t)(T * H) * sizeof *out);
    int64_t *groups = malloc((size_t)E * sizeof *groups), rows = 0;
    double *td = malloc((size_t)reps * sizeof *td), *tc = malloc((size_t)reps * sizeof *tc);
    double *tb = malloc((size_t)reps * sizeof *tb);
    /* The bare exchange: each rank sends T*K rows of H int8 + 4 bytes there, H floats back. */
    int *cnt = malloc((size_t)P * sizeof *cnt), *dsp = malloc((size_t)P * sizeof *dsp);
    long fwd = T * K * (H + 4) / P, back = T * K * H * 4 / P;
    char *sb = malloc((size_t)(back * P)), *rb = malloc((size_t)(back * P));
    memset(sb, 1, (size_t)(back * P));
    for (int r = -1; r < reps; r++) { /* r = -1 warms up */
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = now();
        qmoe_moe_dispatch(ep, T, x, xs, ids, cap, rx, rs, groups, &rows);
        double t1 = now();
        for (int64_t i = 0; i < rows * H; i++)
            y[i] = (float)rx[i]; /* identity expert (not timed) */
        MPI_Barrier(MPI_COMM_WORLD);
        double t2 = now();
        qmoe_moe_combine(ep, QMOE_DTYPE_FLOAT32, y, rows, w, QMOE_DTYPE_FLOAT32, out);
        double t3 = now();
        MPI_Barrier(MPI_COMM_WORLD);
        double t4 = now();
        for (int p = 0; p < P; p++) cnt[p] = (int)fwd, dsp[p] = (int)(fwd * p);
        MPI_Alltoallv(sb, cnt, dsp, MPI_BYTE, rb, cnt, dsp, MPI_BYTE, MPI_COMM_WORLD);
        for (int p = 0; p < P; p++) cnt[p] = (int)back, dsp[p] = (int)(back * p);
        MPI_Alltoallv(sb, cnt, dsp, MPI_BYTE, rb, cnt, dsp, MPI_BYTE, MPI_COMM_WORLD);
        double t5 = now();
        if (r >= 0) td[r] = t1 - t0, tc[r] = t3 - t2, tb[r] = t5 - t4;
    }
    /* the slowest rank's medians */
    double m[3] = {median(td, reps), median(tc, reps), median(tb, reps)};
    MPI_Allreduce(MPI_IN_PLACE, m, 3, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (me == 0) {
        double bytes = (double)T * K * (H + 4) + (double)T * K * H * 4; /* per rank, both ways */
        printf("{\"bench\":\"mpi_dispatch\",\"ranks\":%d,\"tokens_per_rank\":%ld,\"hidden\":%ld,"
               "\"experts\":%ld,\"top_k\":%ld,\"reps\":%d,\"dispatch_s\":%.6f,\"combine_s\":%.6f,"
               "\"qmoe_total_s\":%.6f,\"bare_alltoallv_s\":%.6f,\"bytes_per_rank\":%.0f,"
               "\"qmoe_vs_bare_throughput\":%.3f}\n",
               P, T, H, E, K, reps, m[0], m[1], m[0] + m[1], m[2], bytes, m[2] / (m[0] + m[1]));
    }
    qmoe_ep_destroy(ep);
    free(x), free(xs), free(w), free(ids), free(rx), free(rs), free(y), free(out), free(groups);
    free(td), free(tc), free(tb), free(cnt), free(dsp), free(sb), free(rb);
    MPI_Finalize();
    return 0;
}
