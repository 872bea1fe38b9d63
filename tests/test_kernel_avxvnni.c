/* The avxvnni kernel against the reference kernel and exact accumulators (test_kernel_common.h). */
#include "test_kernel_common.h"

int main(void) { return kernel_test_main(QMOE_KERNEL_AVX_VNNI, "test_kernel_avxvnni", 120); }
