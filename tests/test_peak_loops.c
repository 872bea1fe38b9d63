/* The peak probes (src/kernels/peak.h) execute the dot-product instructions they count. This
 * program disassembles itself with the toolchain's objdump (QMOE_TEST_OBJDUMP, from CMake), finds
 * each compiled probe's hot loop (of its backward branches, the one whose body holds the most of
 * the probe's instruction) and compares that count with the probe's claim. The old C loops fail
 * here: the compiler had merged their equal accumulators (1 vpdpbusd of the 12 claimed). Probes
 * this CPU runs are also called: the operations they return are iters x the counted claim, and
 * the kernel's table (which qmoe bench uses) points at the probe checked. */
#define _POSIX_C_SOURCE 200809L
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/cpu_features.h"
#include "kernels/gmm_fast.h"
#include "kernels/peak.h"
#include "support/testlib.h"

#ifndef QMOE_TEST_OBJDUMP
#define QMOE_TEST_OBJDUMP ""
#endif

typedef struct probe {
    const char *symbol;       /* the loop's function in this executable */
    const char *mnemonics;    /* the counted instruction ('|' between alternatives) */
    const char *need;         /* text each counted instruction shows ("zmm"), or NULL */
    const char *need2;        /* a second such text, or NULL */
    int dots, ops;            /* the claim: instructions per round, int8 operations each */
    int kernel;               /* QMOE_KERNEL_* whose table holds the probe */
    uint64_t (*fn)(uint64_t); /* NULL: file-local to its kernel (AMX) */
} probe;

static const probe probes[] = {
    {"qmoe_peak_portable", "imul|imull|mul|madd", NULL, NULL, QMOE_PEAK_PORTABLE_MACS, 2,
     QMOE_KERNEL_PORTABLE, qmoe_peak_portable},
#if QMOE_HAVE_AVX512_VNNI
    {"qmoe_peak_avx512vnni", "vpdpbusd", "zmm", NULL, QMOE_PEAK_AVX512_VNNI_DOTS,
     QMOE_PEAK_AVX512_VNNI_OPS, QMOE_KERNEL_AVX512_VNNI, qmoe_peak_avx512vnni},
#endif
#if QMOE_HAVE_AVX_VNNI
    /* the VEX form: the EVEX one would need AVX512-VL, which AVX-VNNI CPUs may lack */
    {"qmoe_peak_avxvnni", "vpdpbusd", "ymm", "{vex}", QMOE_PEAK_AVX_VNNI_DOTS,
     QMOE_PEAK_AVX_VNNI_OPS, QMOE_KERNEL_AVX_VNNI, qmoe_peak_avxvnni},
#endif
#if QMOE_HAVE_AVX2
    {"qmoe_peak_avx2", "vpmaddubsw", "ymm", NULL, QMOE_PEAK_AVX2_DOTS, QMOE_PEAK_AVX2_OPS,
     QMOE_KERNEL_AVX2, qmoe_peak_avx2},
#endif
#if QMOE_HAVE_AMX_INT8
    {"peak_amx", "tdpbsud", "tmm", NULL, QMOE_PEAK_AMX_DOTS, QMOE_PEAK_AMX_OPS,
     QMOE_KERNEL_AMX_INT8, NULL},
#endif
#if QMOE_HAVE_NEON_DOT
    {"qmoe_peak_neondot", "sdot", ".4s", NULL, QMOE_PEAK_NEON_DOT_DOTS, QMOE_PEAK_NEON_DOT_OPS,
     QMOE_KERNEL_NEON_DOT, qmoe_peak_neondot},
#endif
#if QMOE_HAVE_NEON_I8MM
    {"qmoe_peak_i8mm", "usmmla", ".4s", NULL, QMOE_PEAK_NEON_I8MM_DOTS,
     QMOE_PEAK_NEON_I8MM_OPS, QMOE_KERNEL_NEON_I8MM, qmoe_peak_i8mm},
#endif
};
enum { NPROBES = sizeof probes / sizeof probes[0], MAXI = 4096 };

typedef struct insn {
    uint64_t addr, target; /* target: a branch's destination inside the function, else 0 */
    int branch, counted;
} insn;

typedef struct listing {
    insn *v;
    int n, found;
} listing;

static int is_prefix_token(const char *t)
{
    static const char *const pre[] = {"bnd", "notrack", "rep", "repz", "repnz", "lock", "cs",
                                      "ds", "data16", NULL};
    if (t[0] == '{') return 1;
    for (int i = 0; pre[i]; i++)
        if (!strcmp(t, pre[i])) return 1;
    return 0;
}

static int in_list(const char *m, const char *alts)
{
    size_t n = strlen(m);
    for (const char *p = alts; *p;) {
        const char *e = strchr(p, '|');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && !strncmp(p, m, n)) return 1;
        if (!e) break;
        p = e + 1;
    }
    return 0;
}

static int is_branch(const char *m)
{
    return m[0] == 'j' || !strncmp(m, "loop", 4) || !strcmp(m, "b") || !strncmp(m, "b.", 2) ||
           !strcmp(m, "cbz") || !strcmp(m, "cbnz") || !strcmp(m, "tbz") || !strcmp(m, "tbnz");
}

/* One instruction line of a probe's listing: "  8e:\tvpdpbusd %zmm17,%zmm16,%zmm0" (GNU
 * objdump) or "  8e:      \tvpdpbusd\t%zmm17, %zmm16, %zmm0" (llvm-objdump, the CMAKE_OBJDUMP
 * of clang builds; AT&T suffixes as in "imull"). */
static void add_insn(listing *l, const probe *p, const char *line)
{
    char *end;
    uint64_t addr = strtoull(line, &end, 16);
    if (end == line || *end != ':' || l->n >= MAXI) return;
    char text[512], *save = NULL;
    snprintf(text, sizeof text, "%s", end + 1);
    char *tok = strtok_r(text, " \t\n", &save);
    while (tok && is_prefix_token(tok)) tok = strtok_r(NULL, " \t\n", &save);
    if (!tok) return;
    insn in = {addr, 0, 0, 0};
    if (in_list(tok, p->mnemonics))
        in.counted = (!p->need || strstr(end + 1, p->need)) && (!p->need2 || strstr(end + 1, p->need2));
    char self[160];
    snprintf(self, sizeof self, "<%s", p->symbol);
    const char *lt = strstr(end + 1, self);
    if (is_branch(tok) && lt && (lt[strlen(self)] == '>' || lt[strlen(self)] == '+')) {
        /* the destination address is the word just before "<sym+off>" */
        const char *q = lt;
        while (q > end + 1 && q[-1] == ' ') q--;
        while (q > end + 1 && strchr("0123456789abcdefABCDEFx", q[-1])) q--;
        in.target = strtoull(q, NULL, 16);
        in.branch = 1;
    }
    l->v[l->n++] = in;
}

/* Disassembles this executable once; fills one listing per probe. 0 when objdump ran. */
static int disassemble(const char *objdump, const char *exe, listing *ls)
{
    char cmd[3 * PATH_MAX];
    snprintf(cmd, sizeof cmd, "'%s' -d --no-show-raw-insn '%s' 2>/dev/null", objdump, exe);
    FILE *f = popen(cmd, "r");
    if (!f) return -1;
    char line[1024];
    int cur = -1;
    while (fgets(line, sizeof line, f)) {
        char *lt = strchr(line, '<');
        if (line[0] != ' ' && line[0] != '\t' && lt && strstr(line, ">:")) { /* a function */
            cur = -1;
            for (int i = 0; i < NPROBES; i++) {
                size_t n = strlen(probes[i].symbol);
                if (!strncmp(lt + 1, probes[i].symbol, n) && !strncmp(lt + 1 + n, ">:", 2)) {
                    cur = i;
                    ls[i].found = 1;
                }
            }
            continue;
        }
        if (cur >= 0) add_insn(&ls[cur], &probes[cur], line);
    }
    return pclose(f) == 0 ? 0 : -1;
}

/* The most counted instructions inside one backward branch's loop body (-1: no loop). */
static int hot_loop_count(const listing *l)
{
    int best = -1;
    for (int i = 0; i < l->n; i++) {
        if (!l->v[i].branch || l->v[i].target > l->v[i].addr) continue;
        int c = 0;
        for (int j = 0; j < l->n; j++)
            c += l->v[j].counted && l->v[j].addr >= l->v[i].target && l->v[j].addr <= l->v[i].addr;
        if (c > best) best = c;
    }
    return best;
}

static void check_runs(const probe *p)
{
    if (!qmoe_cpu_runs_kernel(p->kernel)) {
        printf("  %s: not run (this CPU lacks the instruction set)\n", p->symbol);
        return;
    }
    const qmoe_gemm_isa *isa = qmoe_gemm_isa_for(p->kernel);
    CHECK_MSG(isa && isa->peak_loop, "%s: no table or no peak_loop", p->symbol);
    if (!isa || !isa->peak_loop) return;
    if (p->fn) CHECK_MSG(isa->peak_loop == p->fn, "%s: the table points elsewhere", p->symbol);
    uint64_t iters = 1000, want = iters * (uint64_t)p->dots * (uint64_t)p->ops;
    uint64_t got = isa->peak_loop(iters);
    CHECK_MSG(got == want, "%s(%llu) returned %llu operations, the counted loop does %llu",
              p->symbol, (unsigned long long)iters, (unsigned long long)got,
              (unsigned long long)want);
    CHECK_MSG(isa->peak_loop(0) == 0, "%s(0) claims work", p->symbol);
}

int main(void)
{
    const char *suite = "test_peak_loops";
    for (int i = 0; i < NPROBES; i++) check_runs(&probes[i]);
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    CHECK(n > 0);
    if (n <= 0) return qt_finish(suite);
    exe[n] = '\0';
    const char *objdump = QMOE_TEST_OBJDUMP;
    if (!objdump[0] || access(objdump, X_OK))
        return qt_skip(suite, "no objdump for this target (CMAKE_OBJDUMP)");
    listing ls[NPROBES];
    insn *store = calloc((size_t)NPROBES * MAXI, sizeof *store);
    CHECK(store != NULL);
    if (!store) return qt_finish(suite);
    for (int i = 0; i < NPROBES; i++) ls[i] = (listing){store + (size_t)i * MAXI, 0, 0};
    CHECK_MSG(disassemble(objdump, exe, ls) == 0, "%s -d %s failed", objdump, exe);
    for (int i = 0; i < NPROBES; i++) {
        const probe *p = &probes[i];
        CHECK_MSG(ls[i].found, "%s not found in the disassembly of %s", p->symbol, exe);
        if (!ls[i].found) continue;
        int c = hot_loop_count(&ls[i]);
        printf("  %s: %d %s in its loop, claims %d\n", p->symbol, c, p->mnemonics, p->dots);
        CHECK_MSG(c >= 0, "%s: no loop in the compiled probe (folded away)", p->symbol);
        CHECK_MSG(c < 0 || c == p->dots, "%s: its loop executes %d %s per round, it counts %d",
                  p->symbol, c, p->mnemonics, p->dots);
    }
    free(store);
    return qt_finish(suite);
}
