/* The i8mm kernel (ARM64) against the exact accumulators, the double oracle and the reference kernel
 * (test_kernel_common.h); skipped where the CPU (or the emulated one) lacks the instructions. */
#include "test_kernel_common.h"

int main(void) { return kernel_test_main(QMOE_KERNEL_NEON_I8MM, "test_kernel_i8mm", 120); }
