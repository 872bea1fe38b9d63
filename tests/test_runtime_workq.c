/* The fork-join work queue: every part runs exactly once, on the thread the contract names
 * (part % threads, the caller being thread 0), and the countdown barrier separates sub-phases. */
#include <stdatomic.h>
#include <stdlib.h>

#include "runtime/workq.h"
#include "support/testlib.h"

typedef struct parts_job {
    atomic_int runs[64];
    int thread_of[64];
} parts_job;

static void count_part(qmoe_thread_ctx *ctx, void *data, int part, int nparts)
{
    parts_job *j = data;
    (void)nparts;
    atomic_fetch_add(&j->runs[part], 1);
    j->thread_of[part] = ctx->thread;
}

enum { PHASES = 200 };

typedef struct phase_job {
    atomic_int seen[8];
    atomic_int bad;
} phase_job;

/* Each phase: write my phase number, barrier, read everyone's: all must be this phase. */
static void phase_part(qmoe_thread_ctx *ctx, void *data, int part, int nparts)
{
    phase_job *j = data;
    for (int ph = 1; ph <= PHASES; ph++) {
        atomic_store(&j->seen[part], ph);
        qmoe_workq_barrier(ctx);
        for (int i = 0; i < nparts; i++)
            if (atomic_load(&j->seen[i]) != ph) atomic_fetch_add(&j->bad, 1);
        qmoe_workq_barrier(ctx);
    }
}

int main(void)
{
    for (int threads = 1; threads <= 4; threads++) {
        qmoe_thread_ctx ctx[4] = {{0}};
        for (int t = 0; t < 4; t++) ctx[t].thread = t;
        qmoe_workq *q = NULL;
        CHECK(qmoe_workq_create(threads, ctx, NULL, 0, &q) == QMOE_OK);
        CHECK(qmoe_workq_threads(q) == threads);
        for (int rep = 0; rep < 50; rep++) {
            int n = rep % 11;
            parts_job *j = calloc(1, sizeof *j);
            qmoe_workq_run(q, count_part, j, n);
            for (int p = 0; p < 64; p++) {
                CHECK(atomic_load(&j->runs[p]) == (p < n));
                if (p < n) CHECK(j->thread_of[p] == p % threads);
            }
            free(j);
        }
        phase_job pj = {0};
        qmoe_workq_run(q, phase_part, &pj, threads);
        CHECK_MSG(atomic_load(&pj.bad) == 0, "threads %d: %d barrier violations", threads,
                  atomic_load(&pj.bad));
        qmoe_workq_destroy(q);
    }
    return qt_finish("test_runtime_workq");
}
