/* The portable kernel against the reference kernel and exact accumulators (test_kernel_common.h). */
#include "test_kernel_common.h"

int main(void) { return kernel_test_main(QMOE_KERNEL_PORTABLE, "test_kernel_portable", 120); }
