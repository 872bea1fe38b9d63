/* What this CPU can execute (CPUID and the register state the OS saves). */
#ifndef QMOE_KERNELS_CPU_FEATURES_H
#define QMOE_KERNELS_CPU_FEATURES_H

#include <stddef.h>

typedef struct qmoe_cpu_features {
    unsigned avx2 : 1;        /* with FMA and F16C, and the OS saving ymm state */
    unsigned avx_vnni : 1;    /* VEX vpdpbusd on ymm (and avx2) */
    unsigned avx512 : 1;      /* F, BW, VL, DQ with the OS saving zmm and mask state */
    unsigned avx512_vnni : 1; /* EVEX vpdpbusd (and avx512) */
    unsigned avx512_vbmi : 1;
    unsigned amx_int8 : 1;    /* AMX tiles + int8, state enabled and permitted (and avx512_vnni) */
} qmoe_cpu_features;

/* The features of this CPU (detected at the first call; thread-safe). */
qmoe_cpu_features qmoe_cpu_features_get(void);

/* Nonzero when this CPU runs the kernel `kernel` (a qmoe_kernel). */
int qmoe_cpu_runs_kernel(int kernel);

/* The instruction sets this CPU offers to qmoe's kernels, fastest first, comma-separated, e.g.
 * "amx_int8,avx512_vnni,avx_vnni,avx2,portable". Writes at most
 * `size` bytes including the terminating NUL; returns the length of the full list. */
size_t qmoe_cpu_isa_list(char *buf, size_t size);

#endif
