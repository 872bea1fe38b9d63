/* The avx2 kernel against the reference kernel and exact accumulators (test_kernel_common.h). */
#include "test_kernel_common.h"

int main(void) { return kernel_test_main(QMOE_KERNEL_AVX2, "test_kernel_avx2", 120); }
