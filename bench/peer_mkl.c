/*
 * The oneMKL peer of `qmoe bench --peer mkl`: oneMKL's packed int8 GEMM, what an engine without
 * qmoe would run on weights loaded once: cblas_gemm_s8u8s32_pack of every expert's [K, N]
 * weights (outside the timing), then cblas_gemm_s8u8s32_compute of [rows, K] x packed [K, N] ->
 * s32, expert after expert, no SwiGLU or quantization. oneMKL is found at run time (peer_open
 * of libmkl_rt: $QMOE_MKL_LIB, the bench venv next to the program, then the loader's search
 * path), so neither the program nor the library depends on it.
 */
#define _GNU_SOURCE
#include "peer_mkl.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#include "peer_open.h"
#include "peer_time.h"

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

int peer_mkl_time(const int64_t *rows, int64_t E, int64_t K, int64_t N, int threads, int repeat,
                  double *median_ms)
{
    static const char *const names[] = {"libmkl_rt.so.3", "libmkl_rt.so.2", "libmkl_rt.so"};
    char where[PATH_MAX + 64], why[512];
    void *h = peer_open("QMOE_MKL_LIB", names, sizeof names / sizeof names[0], where, sizeof where,
                        why, sizeof why);
    if (!h) {
        fprintf(stderr, "qmoe bench: --peer mkl: oneMKL not found (libmkl_rt; make bench-venv "
                        "installs it, or set QMOE_MKL_LIB)%s%s; peer skipped\n",
                why[0] ? ": " : "", why);
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
        double t0 = peer_now();
        for (int64_t e = 0; e < E; e++)
            if (rows[e] > 0)
                compute(ROW_MAJOR, NO_TRANS, PACKED, FIX_OFFSET, (int)rows[e], (int)N, (int)K,
                        1.0f, a, (int)K, 0, packed[e], (int)N, 0, 0.0f, c, (int)N, &oc);
        double dt = (peer_now() - t0) * 1e3;
        if (r >= 0) ms[r] = dt;
    }
    *median_ms = peer_median(ms, repeat);
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
