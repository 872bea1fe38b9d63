/* CPU feature detection for the kernel registry. The facts come from the hardware once: x86-64
 * CPUID leaves 1, 7.0 and 7.1 and XGETBV for the register state the OS saves (AVX-512 needs the
 * mask and upper-zmm state too; AMX the tile state, which Linux in addition hands out per process
 * on request); aarch64 Linux the hwcaps the kernel reports (user space cannot read the ID
 * registers reliably on every kernel). Each kernel's check is its entry's expression over them
 * (kernels/isa_list.h). */
#define _GNU_SOURCE /* syscall() */
#include "kernels/cpu_features.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kernels/isa_list.h"
#include "qmoe/qmoe.h"

/* What the checks read; zero on the other architecture, so every check compiles everywhere. */
typedef struct cpu_facts {
    uint32_t l1_ecx, l7_ebx, l7_ecx, l7_edx, l71_eax; /* CPUID leaves 1, 7.0, 7.1 */
    uint64_t xcr0;                                    /* XGETBV 0; 0 without OSXSAVE and AVX */
    unsigned long hwcap, hwcap2;                      /* aarch64: AT_HWCAP, AT_HWCAP2 */
} cpu_facts;

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

static cpu_facts read_facts(void)
{
    cpu_facts c;
    memset(&c, 0, sizeof c);
    unsigned a, b, cx, d;
    if (!__get_cpuid(1, &a, &b, &cx, &d)) return c;
    c.l1_ecx = cx;
    int osxsave = (cx >> 27) & 1, avx = (cx >> 28) & 1;
    if (!osxsave || !avx) return c; /* no state: every vector check fails */
    c.xcr0 = xgetbv0();
    if (__get_cpuid_max(0, NULL) < 7) return c;
    __cpuid_count(7, 0, a, b, cx, d);
    c.l7_ebx = b, c.l7_ecx = cx, c.l7_edx = d;
    if (a >= 1) {
        __cpuid_count(7, 1, a, b, cx, d);
        c.l71_eax = a;
    }
    return c;
}
#elif defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>

static int amx_allowed(void) { return 0; }

static cpu_facts read_facts(void)
{
    cpu_facts c;
    memset(&c, 0, sizeof c);
    c.hwcap = getauxval(AT_HWCAP);
    c.hwcap2 = getauxval(AT_HWCAP2);
    return c;
}
#else
static int amx_allowed(void) { return 0; }

static cpu_facts read_facts(void)
{
    cpu_facts c;
    memset(&c, 0, sizeof c);
    return c;
}
#endif

/* The vocabulary of the list's checks. */
#define X86_BIT(reg, bit) ((c->reg >> (bit)) & 1u)
#define X86_YMM_STATE ((c->xcr0 & 0x6) == 0x6)
#define X86_ZMM_STATE ((c->xcr0 & 0xE6) == 0xE6)
#define X86_TILE_STATE (((c->xcr0 >> 17) & 3) == 3) /* XTILECFG and XTILEDATA */
#define X86_AMX_PERMITTED amx_allowed()
#define X86_AVX512 x86_avx512(c)
#define ARM_HWCAP(bit) ((c->hwcap >> (bit)) & 1u)
#define ARM_HWCAP2(bit) ((c->hwcap2 >> (bit)) & 1u)
#define CPU_RUNS(SET) check_##SET(c)

#define PROTO_(SET, ...) static int check_##SET(const cpu_facts *c);
QMOE_ISA_LIST(PROTO_, QMOE_ISA_SKIP)
#undef PROTO_

/* AVX-512 F, DQ, BW, VL with the zmm and mask state, on top of AVX2. */
static int x86_avx512(const cpu_facts *c)
{
    return CPU_RUNS(AVX2) && X86_ZMM_STATE && X86_BIT(l7_ebx, 16) && X86_BIT(l7_ebx, 17) &&
           X86_BIT(l7_ebx, 30) && X86_BIT(l7_ebx, 31);
}

#define CHECK_(SET, name, arch, suffix, needs, eltwise, check, ...)                               \
    static int check_##SET(const cpu_facts *c) { return (check) != 0; }
QMOE_ISA_LIST(CHECK_, QMOE_ISA_SKIP)
#undef CHECK_

/* Bits of the features word: the list's kernels in order, then the helpers. */
enum {
#define BIT_(SET, ...) BIT_##SET,
    QMOE_ISA_LIST(BIT_, QMOE_ISA_SKIP)
#undef BIT_
    BIT_AVX512,
    BIT_AVX512_VBMI,
    BIT_VALID = 31,
};
_Static_assert(BIT_AVX512_VBMI < BIT_VALID, "the features fit one word");

static uint32_t word_of(qmoe_cpu_features f)
{
    uint32_t w = (uint32_t)f.avx512 << BIT_AVX512 | (uint32_t)f.avx512_vbmi << BIT_AVX512_VBMI;
#define PACK_(SET, name, ...) w |= (uint32_t)f.name << BIT_##SET;
    QMOE_ISA_LIST(PACK_, QMOE_ISA_SKIP)
#undef PACK_
    return w;
}

static qmoe_cpu_features features_of(uint32_t w)
{
    qmoe_cpu_features f;
    memset(&f, 0, sizeof f);
    f.avx512 = w >> BIT_AVX512 & 1;
    f.avx512_vbmi = w >> BIT_AVX512_VBMI & 1;
#define UNPACK_(SET, name, ...) f.name = w >> BIT_##SET & 1;
    QMOE_ISA_LIST(UNPACK_, QMOE_ISA_SKIP)
#undef UNPACK_
    return f;
}

static qmoe_cpu_features detect(void)
{
    cpu_facts facts = read_facts();
    const cpu_facts *c = &facts;
    qmoe_cpu_features f;
    memset(&f, 0, sizeof f);
#define DETECT_(SET, name, ...) f.name = (unsigned)check_##SET(c);
    QMOE_ISA_LIST(DETECT_, QMOE_ISA_SKIP)
#undef DETECT_
    f.avx512 = (unsigned)x86_avx512(c);
    f.avx512_vbmi = f.avx512 && X86_BIT(l7_ecx, 1);
    return f;
}

uint32_t qmoe_cpu_features_word(void)
{
    /* CPUID traps to the hypervisor in a VM: detect once. The result lives in one atomic word
     * (bit BIT_VALID: valid); racing first calls store the same value. */
    static uint32_t word;
    uint32_t w = __atomic_load_n(&word, __ATOMIC_ACQUIRE);
    if (!(w >> BIT_VALID)) {
        w = 1u << BIT_VALID | word_of(detect());
        __atomic_store_n(&word, w, __ATOMIC_RELEASE);
    }
    return w & ~(1u << BIT_VALID);
}

qmoe_cpu_features qmoe_cpu_features_get(void) { return features_of(qmoe_cpu_features_word()); }

/* A kernel runs only when this build compiled it (QMOE_HAVE_<SET>, cmake/qmoe_isa.cmake) and the
 * CPU passes its check. */
int qmoe_cpu_runs_kernel(int kernel)
{
    qmoe_cpu_features f = qmoe_cpu_features_get();
    switch (kernel) {
    case QMOE_KERNEL_REFERENCE:
    case QMOE_KERNEL_PORTABLE: return 1;
#define RUNS_(SET, name, ...)                                                                     \
    case QMOE_KERNEL_##SET: return QMOE_HAVE_##SET && f.name;
        QMOE_ISA_LIST(RUNS_, QMOE_ISA_SKIP)
#undef RUNS_
    }
    return 0;
}

size_t qmoe_cpu_isa_list(char *buf, size_t size)
{
    qmoe_cpu_features f = qmoe_cpu_features_get();
#define LEN_(SET, name, ...) +sizeof(#name ",")
    char list[sizeof "portable" QMOE_ISA_LIST(LEN_, QMOE_ISA_SKIP)] = "";
#undef LEN_
#define LIST_(SET, name, ...)                                                                     \
    if (f.name) strcat(list, #name ",");
    QMOE_ISA_LIST(LIST_, QMOE_ISA_SKIP)
#undef LIST_
    strcat(list, "portable");
    if (size) snprintf(buf, size, "%s", list);
    return strlen(list);
}
