/* Every kernel id the library names (qmoe_kernel_name), for the tests that walk the kernels: the
 * list of instruction sets (src/kernels/isa_list.h) as the library has it, so a new set is never
 * skipped silently. */
#ifndef QMOE_TEST_KERNELS_H
#define QMOE_TEST_KERNELS_H

#include <string.h>

#include "qmoe/qmoe.h"

enum { QT_MAX_KERNELS = 64 };

/* Ids from `first` up while the library names them; writes at most `max`; returns how many. */
static inline int qt_kernels(int first, int *ids, int max)
{
    int n = 0;
    for (int k = first; n < max && strcmp(qmoe_kernel_name((qmoe_kernel)k), "unknown"); k++)
        ids[n++] = k;
    return n;
}

#endif
