/* Kernel selection: CPU features, QMOE_ISA caps, explicit requests, the ISA list. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu_features.h"
#include "kernels/gmm_fast.h"
#include "kernels/isa_list.h"
#include "kernels/kernel.h"
#include "qmoe/qmoe.h"
#include "support/testlib.h"

/* The best kernel this CPU runs, by the features alone, at or below `cap` in the architecture's
 * priority table (from its top when `cap` is not in it: the cap is then ignored). */
static int32_t best_at_most(int32_t cap)
{
    size_t n, i = 0;
    const int32_t *order = qmoe_kernel_priority(&n);
    while (i < n && order[i] != cap) i++;
    for (i = i < n ? i : 0; i < n; i++)
        if (order[i] == QMOE_KERNEL_REFERENCE || qmoe_cpu_runs_kernel(order[i])) return order[i];
    return QMOE_KERNEL_REFERENCE;
}

static int32_t auto_with(const char *isa)
{
    if (isa) setenv("QMOE_ISA", isa, 1);
    else unsetenv("QMOE_ISA");
    const qmoe_kernel_entry *k = qmoe_kernel_lookup(QMOE_KERNEL_AUTO);
    return k ? k->id : -1;
}

int main(void)
{
    qmoe_cpu_features f = qmoe_cpu_features_get();
    CHECK(qmoe_cpu_runs_kernel(QMOE_KERNEL_PORTABLE));
    CHECK(qmoe_cpu_runs_kernel(QMOE_KERNEL_REFERENCE));
    CHECK(!f.avx512_vnni || f.avx512);
    CHECK(!f.avx_vnni || f.avx2);

    CHECK(!f.amx_int8 || f.avx512_vnni);
#if defined(__x86_64__) || defined(__i386__)
    /* No false positives against the compiler's own CPUID reading (an independent one): a
     * feature qmoe reports must be there, or its kernel would die of SIGILL. qmoe may demand
     * more (FMA, F16C, BW/VL/DQ), so the other direction is not required. */
    __builtin_cpu_init();
    CHECK(!f.avx2 || (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")));
    CHECK(!f.avx512 || (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")));
    CHECK(!f.avx512_vnni || __builtin_cpu_supports("avx512vnni"));
    CHECK(!f.avx512_vbmi || __builtin_cpu_supports("avx512vbmi"));
#endif

    CHECK(auto_with(NULL) != QMOE_KERNEL_REFERENCE);
#if defined(__aarch64__)
    /* ARM's order, written out: I8MM, then the dot product, then portable C */
    CHECK(auto_with(NULL) == (f.neon_i8mm ? QMOE_KERNEL_NEON_I8MM
                              : f.neon_dot ? QMOE_KERNEL_NEON_DOT : QMOE_KERNEL_PORTABLE));
    CHECK(auto_with("neon_dot") == (f.neon_dot ? QMOE_KERNEL_NEON_DOT : QMOE_KERNEL_PORTABLE));
#elif defined(__x86_64__)
    CHECK(!qmoe_cpu_runs_kernel(QMOE_KERNEL_NEON_DOT));
    CHECK(!qmoe_cpu_runs_kernel(QMOE_KERNEL_NEON_I8MM));
#endif
    CHECK(auto_with("amx_int8") == best_at_most(QMOE_KERNEL_AMX_INT8));
    CHECK(auto_with("avx512_vnni") == best_at_most(QMOE_KERNEL_AVX512_VNNI));
    CHECK(auto_with("avx_vnni") == best_at_most(QMOE_KERNEL_AVX_VNNI));
    CHECK(auto_with("avx2") == best_at_most(QMOE_KERNEL_AVX2));
    CHECK(auto_with("portable") == QMOE_KERNEL_PORTABLE);
    CHECK(auto_with("reference") == QMOE_KERNEL_REFERENCE);
    CHECK(auto_with("neon_i8mm") == best_at_most(QMOE_KERNEL_NEON_I8MM));
    CHECK(auto_with("neon_dot") == best_at_most(QMOE_KERNEL_NEON_DOT));
    CHECK(auto_with("no-such-isa") == best_at_most(-1)); /* ignored */
    CHECK(auto_with(NULL) == best_at_most(-1));
    unsetenv("QMOE_ISA");

    /* The names: one per id, dense from auto through the list's last kernel (auto, reference,
     * portable, then one per entry of kernels/isa_list.h), distinct, "unknown" past them; every
     * kernel of AUTO's order among them, portable and reference last. */
    int32_t ids = 0;
    while (ids < 64 && strcmp(qmoe_kernel_name((qmoe_kernel)ids), "unknown")) ids++;
#define ONE_(...) +1
    CHECK(ids == QMOE_KERNEL_PORTABLE + 1 QMOE_ISA_LIST(ONE_, QMOE_ISA_SKIP));
#undef ONE_
    CHECK(!strcmp(qmoe_kernel_name((qmoe_kernel)-1), "unknown"));
    for (int32_t a = 0; a < ids; a++)
        for (int32_t b = a + 1; b < ids; b++)
            CHECK(strcmp(qmoe_kernel_name((qmoe_kernel)a), qmoe_kernel_name((qmoe_kernel)b)));
    size_t norder;
    const int32_t *order = qmoe_kernel_priority(&norder);
    CHECK(norder >= 2 && order[norder - 2] == QMOE_KERNEL_PORTABLE &&
          order[norder - 1] == QMOE_KERNEL_REFERENCE);
    for (size_t i = 0; i < norder; i++) CHECK(order[i] > QMOE_KERNEL_AUTO && order[i] < ids);

    /* explicit requests: the kernel itself, or NULL when the CPU cannot run it */
    for (int32_t k = QMOE_KERNEL_REFERENCE; k < ids; k++) {
        const qmoe_kernel_entry *ops = qmoe_kernel_lookup(k);
        CHECK_MSG(qmoe_cpu_runs_kernel(k) ? ops && ops->id == k : ops == NULL, "kernel %d", k);
        if (!ops) continue;
        CHECK(!strcmp(ops->name, qmoe_kernel_name((qmoe_kernel)k)));
        /* every kernel has element-wise routines; all but the reference a GEMM table of its id
         * and name */
        CHECK(ops->eltwise && ops->eltwise->swiglu && ops->eltwise->quantize_row);
        CHECK((ops->gemm == NULL) == (k == QMOE_KERNEL_REFERENCE));
        CHECK(ops->gemm == qmoe_gemm_isa_for(k));
        if (ops->gemm) {
            CHECK(ops->gemm->kernel_id == k && !strcmp(ops->gemm->name, ops->name));
            CHECK(qmoe_kernel_row_block(ops) > 0 && qmoe_kernel_col_align(ops) == QMOE_PK_UNIT);
        }
    }
    setenv("QMOE_ISA", "portable", 1); /* the cap does not apply to explicit requests */
    CHECK(qmoe_kernel_lookup(best_at_most(-1))->id == best_at_most(-1));
    unsetenv("QMOE_ISA");
    CHECK(qmoe_kernel_lookup(ids) == NULL);
    CHECK(qmoe_kernel_lookup(99) == NULL);
    CHECK(qmoe_kernel_lookup(-1) == NULL);

    char list[128];
    size_t len = qmoe_cpu_isa_list(list, sizeof list);
    CHECK(len == strlen(list));
    CHECK(strstr(list, "portable") != NULL);
    CHECK((strstr(list, "avx512_vnni") != NULL) == (f.avx512_vnni != 0));
    CHECK((strstr(list, "avx2") != NULL) == (f.avx2 != 0));
    CHECK((strstr(list, "amx_int8") != NULL) == (f.amx_int8 != 0));
    CHECK((strstr(list, "neon_dot") != NULL) == (f.neon_dot != 0));
    CHECK((strstr(list, "neon_i8mm") != NULL) == (f.neon_i8mm != 0));
    CHECK(!f.neon_i8mm || f.neon_dot);
    char small[4];
    CHECK(qmoe_cpu_isa_list(small, sizeof small) == len && strlen(small) == 3);
    return qt_finish("test_kernel_registry");
}
