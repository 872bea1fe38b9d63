/*
 * The oneMKL peer of `qmoe bench --peer mkl`: oneMKL's packed int8 GEMM, what an engine without
 * qmoe would run on weights loaded once: cblas_gemm_s8u8s32_pack of every expert's [K, N]
 * weights (outside the timing), then cblas_gemm_s8u8s32_compute of [rows, K] x packed [K, N] ->
 * s32, expert after expert, no SwiGLU or quantization. oneMKL is found at run time (dlopen of
 * libmkl_rt: $QMOE_MKL_LIB, the bench venv next to the program, then the loader's search path),
 * so neither the program nor the library depends on it.
 */
#define _GNU_SOURCE
#include "peer_mkl.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* mkl_cblas.h values (stable across oneMKL releases); MKL_INT is int (the LP64 interface that
 * libmkl_rt selects by default). */
enum {
    ROW_MAJOR = 101,
    NO_TRANS = 111,
    PACKED = 151,
    B_MATRIX = 162,
    FIX_OFFSET = 173,
};

typedef size_t (*pack_size_fn)(int identifier, int m, int n, int k);
typedef void (*pack_fn)(int layout, int identifier, int trans, int m, int n, int k,
                        const void *src, int ld, void *dest);
typedef void (*compute_fn)(int layout, int transa, int transb, int offsetc, int m, int n, int k,
                           float alpha, const void *a, int lda, signed char oa, const void *b,
                           int ldb, signed char ob, float beta, int32_t *c, int ldc,
                           const int32_t *oc);
typedef void (*threads_fn)(int n);

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* libmkl_rt, from the first place that has it. */
static void *open_mkl(char *where, size_t size)
{
    const char *env = getenv("QMOE_MKL_LIB");
    if (env && *env) {
        snprintf(where, size, "%s", env);
        return dlopen(env, RTLD_NOW | RTLD_LOCAL);
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) *slash = '\0';
        /* <build>/tools/qmoe -> <build>/bench-venv/lib (make bench-venv) */
        static const char *rel[] = {"/../bench-venv/lib/libmkl_rt.so.3",
                                    "/../bench-venv/lib/libmkl_rt.so.2",
                                    "/../bench-venv/lib/libmkl_rt.so"};
        for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
            snprintf(where, size, "%s%s", exe, rel[i]);
            void *h = dlopen(where, RTLD_NOW | RTLD_LOCAL);
            if (h) return h;
        }
    }
    static const char *names[] = {"libmkl_rt.so.3", "libmkl_rt.so.2", "libmkl_rt.so"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(where, size, "%s", names[i]);
        void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (h) return h;
    }
    return NULL;
}

int peer_mkl_time(const int64_t *rows, int64_t E, int64_t K, int64_t N, int threads, int repeat,
                  double *median_ms)
{
    char where[PATH_MAX + 64];
    void *h = open_mkl(where, sizeof where);
    if (!h) {
        fprintf(stderr, "qmoe bench: --peer mkl: oneMKL not found (libmkl_rt; make bench-venv "
                        "installs it, or set QMOE_MKL_LIB); peer skipped\n");
        return -1;
    }
    pack_size_fn pack_size = (pack_size_fn)dlsym(h, "cblas_gemm_s8u8s32_pack_get_size");
    pack_fn pack = (pack_fn)dlsym(h, "cblas_gemm_s8u8s32_pack");
    compute_fn compute = (compute_fn)dlsym(h, "cblas_gemm_s8u8s32_compute");
    threads_fn set_threads = (threads_fn)dlsym(h, "MKL_Set_Num_Threads");
    if (!pack_size || !pack || !compute || !set_threads) {
        fprintf(stderr, "qmoe bench: --peer mkl: %s lacks the packed int8 GEMM; peer skipped\n",
                where);
        dlclose(h);
        return -1;
    }
    if (K > INT_MAX || N > INT_MAX || E < 1) {
        dlclose(h);
        return -1;
    }
    set_threads(threads);
    int64_t mrows = 0;
    for (int64_t e = 0; e < E; e++) mrows = rows[e] > mrows ? rows[e] : mrows;
    int rc = -1;
    void **packed = calloc((size_t)E, sizeof *packed);
    int8_t *w = malloc((size_t)(K * N));
    uint8_t *a = malloc((size_t)((mrows ? mrows : 1) * K));
    int32_t *c = malloc(sizeof(int32_t) * (size_t)((mrows ? mrows : 1) * N));
    double *ms = calloc((size_t)repeat, sizeof(double));
    int32_t oc = 0;
    if (!packed || !w || !a || !c || !ms) goto done;
    for (int64_t i = 0; i < K * N; i++) w[i] = (int8_t)(i * 13 % 255 - 127);
    for (int64_t i = 0; i < mrows * K; i++) a[i] = (uint8_t)(i * 7 % 251);
    fprintf(stderr, "qmoe bench: oneMKL from %s: packing %lld experts' weights\n", where,
            (long long)E);
    for (int64_t e = 0; e < E; e++) {
        /* rows do not change the packed B; the size query takes m anyway */
        size_t bytes = pack_size(B_MATRIX, (int)(rows[e] > 0 ? rows[e] : 1), (int)N, (int)K);
        if (!(packed[e] = aligned_alloc(64, (bytes + 63) / 64 * 64))) goto done;
        pack(ROW_MAJOR, B_MATRIX, NO_TRANS, (int)(rows[e] > 0 ? rows[e] : 1), (int)N, (int)K, w,
             (int)N, packed[e]);
    }
    for (int r = -1; r < repeat; r++) {
        double t0 = now();
        for (int64_t e = 0; e < E; e++)
            if (rows[e] > 0)
                compute(ROW_MAJOR, NO_TRANS, PACKED, FIX_OFFSET, (int)rows[e], (int)N, (int)K,
                        1.0f, a, (int)K, 0, packed[e], (int)N, 0, 0.0f, c, (int)N, &oc);
        double dt = (now() - t0) * 1e3;
        if (r >= 0) ms[r] = dt;
    }
    qsort(ms, (size_t)repeat, sizeof(double), cmp_double);
    *median_ms = repeat % 2 ? ms[repeat / 2] : 0.5 * (ms[repeat / 2 - 1] + ms[repeat / 2]);
    rc = 0;
done:
    if (rc) fprintf(stderr, "qmoe bench: --peer mkl: out of memory; peer skipped\n");
    for (int64_t e = 0; packed && e < E; e++) free(packed[e]);
    free(packed);
    free(w);
    free(a);
    free(c);
    free(ms);
    /* oneMKL keeps threads and buffers alive; unloading it under them is not safe */
    return rc;
}
