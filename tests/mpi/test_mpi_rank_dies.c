/* A rank that dies between collectives: rank 1 exits without MPI_Finalize while the others are
 * in qmoe_moe_dispatch. The job must end (mpirun kills it, non-zero exit) instead of hanging; the
 * ctest wrapper (rank_dies.cmake) bounds the wait with a timeout. Exit 0 here would mean the
 * dispatch returned without rank 1, which it must not. argv[1]: "exit3" (_exit(3)), "exit0"
 * (_exit(0): a clean status, but no MPI_Finalize) or "abort" (SIGABRT); "combine": rank 1 takes
 * part in the dispatch, then exits (3) while the others are in qmoe_moe_combine, waiting for it
 * in the shared-memory window's agreement. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "qmoe/mpi.h"

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int P, me;
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    qmoe_ep_config cfg = QMOE_EP_CONFIG_INIT;
    cfg.num_experts = 4, cfg.hidden = 8, cfg.top_k = 1, cfg.x_dtype = QMOE_DTYPE_FLOAT32;
    qmoe_ep *ep = NULL;
    if (qmoe_ep_create(MPI_COMM_WORLD, &cfg, &ep) != QMOE_OK) return 2;
    const char *how = argc > 1 ? argv[1] : "exit3";
    int late = !strcmp(how, "combine"); /* rank 1 dies after the dispatch */
    float x[8] = {0}, rx[64], out[8];
    int32_t id = 0;
    int64_t groups[4], rows;
    qmoe_status st = QMOE_OK;
    if (late) st = qmoe_moe_dispatch(ep, 1, x, NULL, &id, 16, rx, NULL, groups, &rows);
    if (me == 1) {
        fprintf(stderr, "rank 1: dying mid-way on purpose (%s)\n", how);
        fflush(stderr);
        if (!strcmp(how, "abort")) abort();
        _exit(!strcmp(how, "exit0") ? 0 : 3);
    }
    if (late)
        st = qmoe_moe_combine(ep, QMOE_DTYPE_FLOAT32, rx, rows, NULL, QMOE_DTYPE_FLOAT32, out);
    else
        st = qmoe_moe_dispatch(ep, 1, x, NULL, &id, 16, rx, NULL, groups, &rows);
    fprintf(stderr, "rank %d: %s returned %d without rank 1\n", me, late ? "combine" : "dispatch",
            (int)st);
    qmoe_ep_destroy(ep);
    MPI_Finalize();
    return 0;
}
