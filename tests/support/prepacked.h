/* The fused operator run on a prepacked weight object, for the tests that compare objects. */
#ifndef QMOE_TEST_PREPACKED_H
#define QMOE_TEST_PREPACKED_H

#include <stdint.h>

#include "qmoe/qmoe.h"
#include "qmoe/weights.h"
#include "support/testlib.h"

/* An ND tensor over data (CHECKed). */
qmoe_tensor *qt_tensor(const int64_t *shape, int nd, qmoe_dtype dt, void *data);

/* GroupedMatmulSwigluQuant on M rows x (K) routed by the cumulative group list gl (E experts)
 * with the prepacked weight pw of N columns: the int8 output q [M, N / 2] and its scale [M]. */
void qt_run_prepacked(qmoe_weights *pw, int kernel, int threads, int64_t M, int64_t K, int64_t N,
                      int64_t E, const int8_t *x, const float *xs, const int64_t *gl, int8_t *q,
                      float *scale);

/* Objects a and b (of the same E, K, N) give the same output and scale bits: 1, 14, 27 and 40
 * rows (1 row on the first expert; more routed at random), 1 and 3 threads; a failure names
 * `what`. */
void qt_check_same_outputs(qt_rng *r, qmoe_weights *a, qmoe_weights *b, int kernel, int64_t K,
                           int64_t N, int64_t E, const char *what);

#endif
