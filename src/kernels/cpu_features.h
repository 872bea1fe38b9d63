/* What this CPU can execute (x86-64: CPUID and the register state the OS saves; aarch64: the
 * kernel's hardware capabilities, getauxval(AT_HWCAP / AT_HWCAP2)). */
#ifndef QMOE_KERNELS_CPU_FEATURES_H
#define QMOE_KERNELS_CPU_FEATURES_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/isa_list.h"

typedef struct qmoe_cpu_features {
    /* one bit per kernel of kernels/isa_list.h, by its name: the entry's check */
#define QMOE_CPU_FIELD_(SET, name, ...) unsigned name : 1;
    QMOE_ISA_LIST(QMOE_CPU_FIELD_, QMOE_ISA_SKIP)
#undef QMOE_CPU_FIELD_
    /* helpers several kernels test */
    unsigned avx512 : 1;      /* F, BW, VL, DQ with the OS saving zmm and mask state (and avx2) */
    unsigned avx512_vbmi : 1; /* and VBMI (vpermt2b) */
} qmoe_cpu_features;

/* The features of this CPU (detected at the first call; thread-safe). */
qmoe_cpu_features qmoe_cpu_features_get(void);

/* The same as one word, a bit per field: equal words, equal features (prepacked weights record
 * it). */
uint32_t qmoe_cpu_features_word(void);

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
