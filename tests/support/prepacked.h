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

/* Prepacks the int8 weights w [E, K, N] with float32 scales ws [E, G, N] and options o (its
 * experts field set here): whole (slice 0) or slice experts at a time through
 * qmoe_weights_append. The first failing call's status. */
qmoe_status qt_prepack_int8(const int8_t *w, const float *ws, int64_t E, int64_t K, int64_t N,
                            int64_t G, const qmoe_weights_options *o, int64_t slice,
                            qmoe_weights **out);

/* An object of 4 experts (weights [4, K, N], scales [4, G, N], options o) appended two at a
 * time, whose second slice (bad's experts 2 and 3) holds a value the object cannot keep: the
 * append is refused with QMOE_ERR_PARAM_INVALID and a message holding `want`, expert 2 is still
 * not packed, and the good slice (good's experts 2 and 3) then completes it: expert 3 unpacks as
 * given. */
void qt_check_bad_append(const int8_t *good, const int8_t *bad, const float *ws, int64_t K,
                         int64_t N, int64_t G, const qmoe_weights_options *o, const char *want);

#endif
