/* Shared by the MPI tests: a deterministic global problem that every rank builds whole (all
 * ranks' tokens), so each rank knows what it should receive and what its outputs should be. */
#ifndef QMOE_TESTS_MPI_CASE_H
#define QMOE_TESTS_MPI_CASE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qmoe/mpi.h"
#include "support/testlib.h"

typedef struct mpi_case {
    int P;
    int64_t E, H, K;
    qmoe_dtype x_dtype;
    int64_t *first;   /* [P + 1] rank r holds global tokens [first[r], first[r+1]) */
    int64_t N;        /* all tokens */
    unsigned char *x; /* [N, H] of x_dtype */
    float *x_scale;   /* [N] (INT8) */
    int32_t *ids;     /* [N, K] */
    float *weights;   /* [N, K] */
    int32_t *map;     /* [E] or NULL */
} mpi_case;

/* The status every rank got, checked equal everywhere (and to `want`), with a message on error. */
static inline void mc_agreed(const char *what, qmoe_status st, qmoe_status want, int me)
{
    int v[2] = {(int)st, -(int)st};
    MPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    CHECK_MSG(v[0] == -v[1], "%s: ranks disagree (%d..%d)", what, -v[1], v[0]);
    CHECK_MSG(st == want, "%s: rank %d got %d, want %d (%s)", what, me, (int)st, (int)want,
              qmoe_mpi_last_error());
    if (st != QMOE_OK) CHECK_MSG(qmoe_mpi_last_error()[0] != '\0', "%s: no message", what);
}

/* The end of an MPI test: every rank reports, MPI is finalized, and the exit code is the worst
 * rank's (a job passes only when every rank passed). */
static inline int mc_finish(const char *test, int me, int P)
{
    int failures = qt_failures, worst = 0;
    MPI_Allreduce(&failures, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    char suite[64];
    snprintf(suite, sizeof suite, "%s rank %d/%d", test, me, P);
    int rc = qt_finish(suite);
    MPI_Finalize();
    return worst ? 1 : rc;
}

static inline size_t mc_size(qmoe_dtype dt)
{
    return dt == QMOE_DTYPE_INT8 ? 1 : dt == QMOE_DTYPE_FLOAT32 ? 4 : 2;
}

static inline uint16_t mc_f32_to_bf16(float f)
{
    uint32_t b;
    memcpy(&b, &f, 4);
    return (uint16_t)((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16); /* test data has no NaN */
}

static inline float mc_bf16_to_f32(uint16_t h)
{
    uint32_t b = (uint32_t)h << 16;
    float f;
    memcpy(&f, &b, 4);
    return f;
}

/* Element h of global token t, in double. */
static inline double mc_x(const mpi_case *c, int64_t t, int64_t h)
{
    const unsigned char *row = c->x + (size_t)(t * c->H) * mc_size(c->x_dtype);
    switch (c->x_dtype) {
    case QMOE_DTYPE_INT8: return (double)((const int8_t *)row)[h] * (double)c->x_scale[t];
    case QMOE_DTYPE_FLOAT32: return ((const float *)(const void *)row)[h];
    default: return mc_bf16_to_f32(((const uint16_t *)(const void *)row)[h]);
    }
}

static inline void mc_free(mpi_case *c)
{
    free(c->first);
    free(c->x);
    free(c->x_scale);
    free(c->ids);
    free(c->weights);
    free(c->map);
    memset(c, 0, sizeof *c);
}

#endif
