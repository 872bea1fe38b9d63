/* CPU feature detection for the kernel registry. x86-64: CPUID for the instructions, XGETBV for
 * the register state the OS saves (AVX-512 needs the mask and upper-zmm state too; AMX the tile
 * state, which Linux in addition hands out per process on request). aarch64 Linux: the hwcaps
 * the kernel reports (user space cannot read the ID registers reliably on every kernel). */
#define _GNU_SOURCE /* syscall() */
#include "kernels/cpu_features.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "qmoe/qmoe.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#if defined(__linux__)
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

enum { ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };

static int amx_permitted;

static void request_amx(void)
{
    amx_permitted = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}

/* Linux (5.16+) lets a process use the 8 KB tile state only after asking for it, once. */
static int amx_allowed(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, request_amx);
    return amx_permitted;
}
#else
static int amx_allowed(void) { return 0; }
#endif

static uint64_t xgetbv0(void)
{
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static qmoe_cpu_features detect(void)
{
    qmoe_cpu_features f;
    memset(&f, 0, sizeof f);
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
    int fma = (c >> 12) & 1, osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, f16c = (c >> 29) & 1;
    if (!osxsave || !avx) return f;
    uint64_t xcr0 = xgetbv0();
    int ymm_ok = (xcr0 & 0x6) == 0x6, zmm_ok = (xcr0 & 0xE6) == 0xE6;
    unsigned max_leaf = __get_cpuid_max(0, NULL);
    if (max_leaf < 7) return f;
    __cpuid_count(7, 0, a, b, c, d);
    unsigned b7 = b, c7 = c, d7 = d, max_sub = a;
    unsigned a71 = 0;
    if (max_sub >= 1) {
        __cpuid_count(7, 1, a, b, c, d);
        a71 = a;
    }
    f.avx2 = ymm_ok && fma && f16c && ((b7 >> 5) & 1);
    f.avx_vnni = f.avx2 && ((a71 >> 4) & 1);
    f.avx512 = f.avx2 && zmm_ok && ((b7 >> 16) & 1) /* F */ && ((b7 >> 17) & 1) /* DQ */ &&
               ((b7 >> 30) & 1) /* BW */ && ((b7 >> 31) & 1) /* VL */;
    f.avx512_vnni = f.avx512 && ((c7 >> 11) & 1);
    f.avx512_vbmi = f.avx512 && ((c7 >> 1) & 1);
    /* AMX: tile and int8 instructions, XTILECFG and XTILEDATA state (XCR0 bits 17, 18), the OS's
     * permission, and AVX-512 VNNI for the blocks the tiles do not take. */
    int tiles_ok = ((xcr0 >> 17) & 3) == 3;
    f.amx_int8 = f.avx512_vnni && tiles_ok && ((d7 >> 24) & 1) /* AMX-TILE */ &&
                 ((d7 >> 25) & 1) /* AMX-INT8 */ && amx_allowed();
    return f;
}
#elif defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>

/* The kernel's hwcap bits (asm/hwcap.h), spelled out for C libraries whose headers predate them. */
enum { QMOE_HWCAP_ASIMDDP = 1 << 20, QMOE_HWCAP2_I8MM = 1 << 13 };

static qmoe_cpu_features detect(void)
{
    qmoe_cpu_features f;
    memset(&f, 0, sizeof f);
    unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
    f.neon_dot = (hw & QMOE_HWCAP_ASIMDDP) != 0;
    /* every CPU with I8MM has the dot product too (ARMv8.6); qmoe's ARM order relies on it */
    f.neon_i8mm = f.neon_dot && (hw2 & QMOE_HWCAP2_I8MM) != 0;
    return f;
}
#else
static qmoe_cpu_features detect(void)
{
    qmoe_cpu_features f;
    memset(&f, 0, sizeof f);
    return f;
}
#endif

qmoe_cpu_features qmoe_cpu_features_get(void)
{
    /* CPUID traps to the hypervisor in a VM: detect once. The result lives in one atomic word
     * (bit 31: valid); racing first calls store the same value. */
    static unsigned word;
    unsigned w = __atomic_load_n(&word, __ATOMIC_ACQUIRE);
    qmoe_cpu_features f;
    if (!(w >> 31)) {
        f = detect();
        w = 1u << 31 | f.avx2 | f.avx_vnni << 1 | f.avx512 << 2 | f.avx512_vnni << 3 |
            f.avx512_vbmi << 4 | f.amx_int8 << 5 | f.neon_dot << 6 | f.neon_i8mm << 7;
        __atomic_store_n(&word, w, __ATOMIC_RELEASE);
        return f;
    }
    memset(&f, 0, sizeof f);
    f.avx2 = w & 1, f.avx_vnni = w >> 1 & 1, f.avx512 = w >> 2 & 1, f.avx512_vnni = w >> 3 & 1;
    f.avx512_vbmi = w >> 4 & 1, f.amx_int8 = w >> 5 & 1;
    f.neon_dot = w >> 6 & 1, f.neon_i8mm = w >> 7 & 1;
    return f;
}

/* A kernel runs only when this build compiled it (QMOE_HAVE_<SET> from
 * cmake/qmoe_isa.cmake; without them, x86-64 builds have all). */
#ifndef QMOE_HAVE_AVX2
#if defined(__x86_64__) || defined(_M_X64)
#define QMOE_HAVE_AVX2 1
#define QMOE_HAVE_AVX_VNNI 1
#define QMOE_HAVE_AVX512_VNNI 1
#define QMOE_HAVE_AMX_INT8 1
#else
#define QMOE_HAVE_AVX2 0
#define QMOE_HAVE_AVX_VNNI 0
#define QMOE_HAVE_AVX512_VNNI 0
#define QMOE_HAVE_AMX_INT8 0
#endif
#endif
#ifndef QMOE_HAVE_NEON_DOT
#define QMOE_HAVE_NEON_DOT 0
#define QMOE_HAVE_NEON_I8MM 0
#endif

int qmoe_cpu_runs_kernel(int kernel)
{
    qmoe_cpu_features f = qmoe_cpu_features_get();
    switch (kernel) {
    case QMOE_KERNEL_REFERENCE:
    case QMOE_KERNEL_PORTABLE: return 1;
    case QMOE_KERNEL_AVX2: return QMOE_HAVE_AVX2 && f.avx2;
    case QMOE_KERNEL_AVX_VNNI: return QMOE_HAVE_AVX_VNNI && f.avx_vnni;
    case QMOE_KERNEL_AVX512_VNNI: return QMOE_HAVE_AVX512_VNNI && f.avx512_vnni;
    case QMOE_KERNEL_AMX_INT8: return QMOE_HAVE_AMX_INT8 && f.amx_int8;
    case QMOE_KERNEL_NEON_DOT: return QMOE_HAVE_NEON_DOT && f.neon_dot;
    case QMOE_KERNEL_NEON_I8MM: return QMOE_HAVE_NEON_I8MM && f.neon_i8mm;
    }
    return 0;
}

size_t qmoe_cpu_isa_list(char *buf, size_t size)
{
    qmoe_cpu_features f = qmoe_cpu_features_get();
    char list[128] = "";
    if (f.amx_int8) strcat(list, "amx_int8,");
    if (f.avx512_vnni) strcat(list, "avx512_vnni,");
    if (f.avx_vnni) strcat(list, "avx_vnni,");
    if (f.avx2) strcat(list, "avx2,");
    if (f.neon_i8mm) strcat(list, "neon_i8mm,");
    if (f.neon_dot) strcat(list, "neon_dot,");
    strcat(list, "portable");
    if (size) snprintf(buf, size, "%s", list);
    return strlen(list);
}
