/*
 * Kernel selection by request and CPU features, built from the one list of instruction sets
 * (kernels/isa_list.h).
 *
 * QMOE_KERNEL_AUTO picks the fastest kernel this CPU runs, walking the architecture's priority
 * order (the list's entries of this architecture in order, then portable, reference). The
 * environment variable QMOE_ISA (a kernel name) caps that choice, so every lower kernel can be
 * exercised on one machine: the walk starts at the named kernel, so a cap the CPU cannot run
 * falls to the best kernel below it; a name not in this architecture's order is ignored (AUTO
 * stays the fastest). Explicit requests ignore QMOE_ISA and return NULL when the CPU cannot run
 * the kernel.
 */
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu_features.h"
#include "kernels/gmm_fast.h"
#include "kernels/isa_list.h"
#include "kernels/kernel.h"
#include "qmoe/qmoe.h"

/* The public enum and the list agree: every listed SET is a qmoe_kernel, and the listed ids are
 * exactly the values after QMOE_KERNEL_PORTABLE, each once (no gap, no duplicate). */
enum {
#define COUNT_(...) +1
    LISTED = 0 QMOE_ISA_LIST(COUNT_, QMOE_ISA_SKIP),
#undef COUNT_
    KERNEL_IDS = QMOE_KERNEL_PORTABLE + 1 + LISTED, /* auto, reference, portable, the list */
};
_Static_assert(QMOE_KERNEL_AUTO == 0 && QMOE_KERNEL_REFERENCE == 1 && QMOE_KERNEL_PORTABLE == 2,
               "the kernels outside the list come first");
_Static_assert(KERNEL_IDS < 32, "kernel ids fit the mask below");
#define MASK_(SET, ...) | 1u << QMOE_KERNEL_##SET
_Static_assert((0u QMOE_ISA_LIST(MASK_, QMOE_ISA_SKIP)) ==
                   (((1u << KERNEL_IDS) - 1u) & ~((1u << (QMOE_KERNEL_PORTABLE + 1)) - 1u)),
               "kernels/isa_list.h: each qmoe_kernel after QMOE_KERNEL_PORTABLE once");
#undef MASK_
/* Every entry's `needs` is NONE or a set of the list, its `arch` x86_64 or aarch64 (cmake reads
 * the same fields): an undeclared name below is a mistake in the list. */
#define SET_ENUM_(SET, ...) QMOE_ISA_##SET##_,
enum { QMOE_ISA_NONE_, QMOE_ISA_LIST(SET_ENUM_, SET_ENUM_) QMOE_ARCH_x86_64_, QMOE_ARCH_aarch64_ };
#undef SET_ENUM_
#define FIELDS_(SET, name, arch, suffix, needs, ...)                                              \
    _Static_assert(QMOE_ISA_##needs##_ >= 0 && QMOE_ARCH_##arch##_ > 0, #SET);
QMOE_ISA_LIST(FIELDS_, FIELDS_)
#undef FIELDS_

/* Entries of this architecture's sets only: ON_<arch>(x) is x here and nothing elsewhere. */
#if defined(__x86_64__) || defined(_M_X64)
#define ON_x86_64(...) __VA_ARGS__
#define ON_aarch64(...)
#elif defined(__aarch64__)
#define ON_x86_64(...)
#define ON_aarch64(...) __VA_ARGS__
#else
#define ON_x86_64(...)
#define ON_aarch64(...)
#endif

/* The entries, by id. A table this build did not compile is never referenced (the condition
 * folds at compile time, so no symbol of an absent set is needed to link). */
#define ENTRY_(SET, name, arch, suffix, needs, eltwise, ...)                                      \
    [QMOE_KERNEL_##SET] = {QMOE_KERNEL_##SET, #name, QMOE_HAVE_##SET ? &qmoe_isa_##name : NULL,   \
                           QMOE_HAVE_##SET ? &qmoe_eltwise_##eltwise : NULL},
static const qmoe_kernel_entry entries[KERNEL_IDS] = {
    [QMOE_KERNEL_REFERENCE] = {QMOE_KERNEL_REFERENCE, "reference", NULL, &qmoe_eltwise_portable},
    [QMOE_KERNEL_PORTABLE] = {QMOE_KERNEL_PORTABLE, "portable", &qmoe_isa_portable,
                              &qmoe_eltwise_portable},
    QMOE_ISA_LIST(ENTRY_, QMOE_ISA_SKIP)
};
#undef ENTRY_

static const char *const names[KERNEL_IDS] = {
    [QMOE_KERNEL_AUTO] = "auto",
    [QMOE_KERNEL_REFERENCE] = "reference",
    [QMOE_KERNEL_PORTABLE] = "portable",
#define NAME_(SET, name, ...) [QMOE_KERNEL_##SET] = #name,
    QMOE_ISA_LIST(NAME_, QMOE_ISA_SKIP)
#undef NAME_
};

/* AUTO's order on this architecture: the list's order (the enum's says nothing about speed). */
#define PRIORITY_(SET, name, arch, ...) ON_##arch(QMOE_KERNEL_##SET, )
static const int32_t priority[] = {
    QMOE_ISA_LIST(PRIORITY_, QMOE_ISA_SKIP) QMOE_KERNEL_PORTABLE, QMOE_KERNEL_REFERENCE,
};
#undef PRIORITY_
enum { PRIORITY_COUNT = sizeof priority / sizeof priority[0] };

const int32_t *qmoe_kernel_priority(size_t *count)
{
    *count = PRIORITY_COUNT;
    return priority;
}

enum { DEFAULT_ROW_BLOCK = 512 }; /* the GEMM tables' row_block when they name none */

const qmoe_gemm_isa *qmoe_gemm_isa_for(int32_t kernel_id)
{
    return kernel_id >= 0 && kernel_id < KERNEL_IDS ? entries[kernel_id].gemm : NULL;
}

/* The entry of a kernel this build has; NULL otherwise. */
static const qmoe_kernel_entry *entry_of(int32_t kernel)
{
    if (kernel <= QMOE_KERNEL_AUTO || kernel >= KERNEL_IDS) return NULL;
    return entries[kernel].eltwise ? &entries[kernel] : NULL;
}

/* Where AUTO's walk starts: the QMOE_ISA cap's place in the order; 0 when unset or not there. */
static size_t isa_cap(void)
{
    const char *v = getenv("QMOE_ISA");
    if (v)
        for (size_t i = 0; i < PRIORITY_COUNT; i++)
            if (!strcmp(v, qmoe_kernel_name((qmoe_kernel)priority[i]))) return i;
    return 0;
}

const qmoe_kernel_entry *qmoe_kernel_lookup(int32_t requested)
{
    if (requested == QMOE_KERNEL_AUTO) {
        for (size_t i = isa_cap(); i < PRIORITY_COUNT; i++) {
            const qmoe_kernel_entry *k = entry_of(priority[i]);
            if (k && qmoe_cpu_runs_kernel(priority[i])) return k;
        }
        return &entries[QMOE_KERNEL_REFERENCE];
    }
    if (!qmoe_cpu_runs_kernel(requested)) return NULL;
    return entry_of(requested);
}

const char *qmoe_kernel_name(qmoe_kernel kernel)
{
    return (int)kernel >= 0 && (int)kernel < KERNEL_IDS ? names[kernel] : "unknown";
}

int32_t qmoe_kernel_row_block(const qmoe_kernel_entry *k)
{
    if (!k->gemm) return 0;
    return k->gemm->row_block > 0 ? k->gemm->row_block : DEFAULT_ROW_BLOCK;
}

int32_t qmoe_kernel_col_align(const qmoe_kernel_entry *k) { return k->gemm ? QMOE_PK_UNIT : 0; }

int32_t qmoe_kernel_row_align(const qmoe_kernel_entry *k)
{
    if (!k->gemm) return 0;
    return k->gemm->mc > 0 ? k->gemm->mc : QMOE_PK_MC;
}
