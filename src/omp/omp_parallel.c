/* libqmoe_omp: a qmoe_parallel_fn on the OpenMP runtime the process already runs, so a device made
 * with qmoe_device_create_external(options, qmoe_omp_parallel, NULL, &device) runs its parts on
 * the caller's OpenMP team. The library links libgomp by its soname: loaded into a process where
 * torch (or any engine) already loaded a libgomp.so.1, the loader reuses that one, so qmoe's
 * regions take the team threads that engine's last region left spinning instead of a second set
 * of threads competing with them for the cores. It does not link libqmoe (only its header's
 * types): the Python package passes this function's address to the libqmoe it loaded itself. */
#include <omp.h>
#include <stdint.h>

#include "qmoe/runtime.h"

#define QMOE_OMP_API __attribute__((visibility("default")))

static _Atomic uint64_t short_teams; /* regions whose team was smaller than asked */

/* Runs task(arg, t) for t in [0, n) on `omp parallel num_threads(n)`. A team smaller than asked
 * (OMP_THREAD_LIMIT, OMP_DYNAMIC, a region nested in another one) runs no task at all: the tasks
 * of one operator wait for each other at barriers, so running the missing ones on the threads
 * that exist would hang, and running some twice is wrong. qmoe then fails the operator with
 * QMOE_ERR_RUNTIME ("the parallel function missed a thread"), never a wrong result. */
QMOE_OMP_API void qmoe_omp_parallel(void *ctx, int n, qmoe_parallel_task task, void *arg)
{
    (void)ctx;
    if (n < 1 || !task) return;
#pragma omp parallel num_threads(n)
    {
        /* every thread of the team sees the same size: all run their task, or none does */
        if (omp_get_num_threads() == n) task(arg, omp_get_thread_num());
        else if (omp_get_thread_num() == 0) short_teams++;
    }
}

/* How many regions got a team smaller than asked since the library was loaded (the reason a
 * device on it reported QMOE_ERR_RUNTIME). */
QMOE_OMP_API uint64_t qmoe_omp_short_teams(void) { return short_teams; }

/* The OpenMP runtime's omp_get_max_threads() on the calling thread, and whether the calling
 * thread is inside a parallel region: what a caller checks before choosing a thread count. */
QMOE_OMP_API int qmoe_omp_max_threads(void) { return omp_get_max_threads(); }
QMOE_OMP_API int qmoe_omp_in_parallel(void) { return omp_in_parallel(); }
