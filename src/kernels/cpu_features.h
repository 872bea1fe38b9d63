/* What this CPU can execute (x86-64: CPUID and the register state the OS saves; aarch64: the
 * kernel's hardware capabilities, getauxval(AT_HWCAP / AT_HWCAP2)). */
#ifndef QMOE_KERNELS_CPU_FEATURES_H
#define QMOE_KERNELS_CPU_FEATURES_H

#include <stddef.h>
#include <stdint.h>

typedef struct qmoe_cpu_features {
    unsigned avx2 : 1;        /* with FMA and F16C, and the OS saving ymm state */
    unsigned avx_vnni : 1;    /* VEX vpdpbusd on ymm (and avx2) */
    unsigned avx512 : 1;      /* F, BW, VL, DQ with the OS saving zmm and mask state */
    unsigned avx512_vnni : 1; /* EVEX vpdpbusd (and avx512) */
    unsigned avx512_vbmi : 1;
    unsigned amx_int8 : 1;    /* AMX tiles + int8, state enabled and permitted (and avx512_vnni) */
    unsigned neon_dot : 1;    /* aarch64 ASIMD dot product (sdot/udot, ARMv8.2 dotprod) */
    unsigned neon_i8mm : 1;   /* aarch64 int8 matrix multiply (smmla/usmmla/usdot) and neon_dot */
} qmoe_cpu_features;

/* The features of this CPU (detected at the first call; thread-safe). */
qmoe_cpu_features qmoe_cpu_features_get(void);

/* Nonzero when this CPU runs the kernel `kernel` (a qmoe_kernel). */
int qmoe_cpu_runs_kernel(int kernel);

/* The kernels of this architecture, fastest first (AUTO's order; QMOE_ISA caps a walk down it),
 * ending with QMOE_KERNEL_PORTABLE, QMOE_KERNEL_REFERENCE; *count entries (kernels/registry.c). */
const int32_t *qmoe_kernel_priority(size_t *count);

/* The instruction sets this CPU offers to qmoe's kernels, fastest first, comma-separated, e.g.
 * "amx_int8,avx512_vnni,avx_vnni,avx2,portable" or "neon_i8mm,neon_dot,portable". Writes at most
 * `size` bytes including the terminating NUL; returns the length of the full list. */
size_t qmoe_cpu_isa_list(char *buf, size_t size);

#endif
