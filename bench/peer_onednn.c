/*
 * The oneDNN peer of `qmoe bench --peer onednn`, built as a plugin (libqmoe_peer_onednn.so, by
 * make bench-venv against the oneDNN 3.x of the bench venv; see bench/peer_onednn.h): what a user
 * without qmoe would run, oneDNN's plain int8 matmul x[rows, K] s8 x W[K, N] s8 -> s32, one
 * expert after another over one grouped activation buffer, with each expert's weights reordered
 * once (outside the timing) into the layout oneDNN picks for format_tag any, and no SwiGLU or
 * quantization. s8 activations as qmoe's; on AMX oneDNN multiplies s8 x s8 natively (tdpbssd).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <oneapi/dnnl/dnnl.h>

#include "peer_onednn.h"
#include "peer_time.h"

#define EXPORT __attribute__((visibility("default")))

typedef struct peer_expert {
    dnnl_primitive_t mm;
    dnnl_memory_t src, wei, dst;
} peer_expert;

#define TRY(call)                                                                                \
    do {                                                                                         \
        dnnl_status_t st_ = (call);                                                              \
        if (st_ != dnnl_success) {                                                               \
            fprintf(stderr, "qmoe bench: --peer onednn: %s failed (oneDNN status %d)\n", #call,  \
                    (int)st_);                                                                   \
            goto fail;                                                                           \
        }                                                                                        \
    } while (0)

/* oneDNN's threads are those of its OpenMP runtime (the gomp build: libgomp, loaded with
 * libdnnl); set to the bench's --threads, whatever OMP_NUM_THREADS says. Returns the count the
 * runtime will use, or 0 when libgomp is not there to ask. */
static int set_omp_threads(int threads)
{
    void *gomp = dlopen("libgomp.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!gomp) return 0;
    void (*set)(int) = (void (*)(int))dlsym(gomp, "omp_set_num_threads");
    int (*get)(void) = (int (*)(void))dlsym(gomp, "omp_get_max_threads");
    int n = 0;
    if (set && get) {
        set(threads);
        n = get();
    }
    dlclose(gomp); /* NOLOAD: drops only the reference taken above */
    return n;
}

/* One expert: a matmul primitive for its rows on its slice of the grouped src and dst buffers,
 * and its weights reordered from the plain [K, N] ones into the primitive's layout. */
static int setup(dnnl_engine_t eng, dnnl_stream_t st, int64_t rows, int64_t K, int64_t N,
                 int8_t *src, int32_t *dst, dnnl_memory_t plain, peer_expert *x, int say)
{
    dnnl_memory_desc_t a_md = NULL, b_any = NULL, c_md = NULL;
    dnnl_dims_t ad = {rows, K}, bd = {K, N}, cd = {rows, N};
    dnnl_primitive_desc_t pd = NULL, rpd = NULL;
    dnnl_primitive_t reorder = NULL;
    const_dnnl_memory_desc_t b_md = NULL, w_md = NULL;
    int rc = -1;
    memset(x, 0, sizeof *x);
    TRY(dnnl_memory_desc_create_with_tag(&a_md, 2, ad, dnnl_s8, dnnl_ab));
    TRY(dnnl_memory_desc_create_with_tag(&b_any, 2, bd, dnnl_s8, dnnl_format_tag_any));
    TRY(dnnl_memory_desc_create_with_tag(&c_md, 2, cd, dnnl_s32, dnnl_ab));
    TRY(dnnl_matmul_primitive_desc_create(&pd, eng, a_md, b_any, NULL, c_md, NULL));
    if (say) {
        const char *impl = NULL;
        if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success)
            impl = "?";
        fprintf(stderr, "qmoe bench: --peer onednn: matmul implementation %s (s8 x s8 -> s32)\n",
                impl);
    }
    w_md = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    TRY(dnnl_memory_get_memory_desc(plain, &b_md));
    TRY(dnnl_primitive_create(&x->mm, pd));
    TRY(dnnl_memory_create(&x->src, a_md, eng, src));
    TRY(dnnl_memory_create(&x->dst, c_md, eng, dst));
    TRY(dnnl_memory_create(&x->wei, w_md, eng, DNNL_MEMORY_ALLOCATE));
    TRY(dnnl_reorder_primitive_desc_create(&rpd, b_md, eng, w_md, eng, NULL));
    TRY(dnnl_primitive_create(&reorder, rpd));
    TRY(dnnl_primitive_execute(reorder, st, 2,
                               (dnnl_exec_arg_t[]){{DNNL_ARG_FROM, plain}, {DNNL_ARG_TO, x->wei}}));
    TRY(dnnl_stream_wait(st));
    rc = 0;
fail:
    if (reorder) dnnl_primitive_destroy(reorder);
    if (rpd) dnnl_primitive_desc_destroy(rpd);
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (a_md) dnnl_memory_desc_destroy(a_md);
    if (b_any) dnnl_memory_desc_destroy(b_any);
    if (c_md) dnnl_memory_desc_destroy(c_md);
    return rc;
}

static void teardown(peer_expert *x)
{
    if (x->mm) dnnl_primitive_destroy(x->mm);
    if (x->src) dnnl_memory_destroy(x->src);
    if (x->wei) dnnl_memory_destroy(x->wei);
    if (x->dst) dnnl_memory_destroy(x->dst);
}

EXPORT int qmoe_peer_onednn_abi(void)
{
    return QMOE_PEER_ONEDNN_ABI;
}

EXPORT int qmoe_peer_onednn_time(const int64_t *rows, int64_t E, int64_t K, int64_t N,
                                 int threads, int repeat, double *median_ms)
{
    int64_t M = 0;
    int bad = E < 1 || K < 1 || N < 1 || threads < 1 || repeat < 1;
    for (int64_t e = 0; !bad && e < E; e++) {
        bad = rows[e] < 0;
        M += rows[e];
    }
    if (bad) {
        fprintf(stderr, "qmoe bench: --peer onednn: invalid case (E, K, N, rows, threads or "
                        "repeats out of range)\n");
        return -1;
    }
    const dnnl_version_t *v = dnnl_version();
    int omp = set_omp_threads(threads);
    fprintf(stderr, "qmoe bench: --peer onednn: oneDNN %d.%d.%d (%s), %d OpenMP threads: "
                    "reordering %lld experts' weights\n",
            v->major, v->minor, v->patch, v->hash, omp, (long long)E);
    /* gomp's default waits by spinning: with more runnable threads than free cores (a shared
     * machine) oneDNN then runs many times slower than quiet, which the line would not show */
    const char *wait = getenv("OMP_WAIT_POLICY");
    fprintf(stderr, "qmoe bench: --peer onednn: OMP_WAIT_POLICY=%s%s\n", wait ? wait : "(unset)",
            wait ? "" : ": its threads spin while they wait; on a busy machine passive is steadier");
    if (omp != threads)
        fprintf(stderr, "qmoe bench: --peer onednn: warning: oneDNN runs on %d threads, not %d\n",
                omp, threads);
    dnnl_engine_t eng = NULL;
    dnnl_stream_t st = NULL;
    dnnl_memory_desc_t b_md = NULL;
    dnnl_memory_t plain = NULL;
    int8_t *src = malloc((size_t)((M ? M : 1) * K)), *w = malloc((size_t)(K * N));
    int32_t *dst = malloc(sizeof(int32_t) * (size_t)((M ? M : 1) * N));
    peer_expert *xs = calloc((size_t)E, sizeof *xs);
    double *ms = calloc((size_t)repeat, sizeof *ms);
    dnnl_dims_t bd = {K, N};
    int rc = -1, said = 0;
    if (!src || !w || !dst || !xs || !ms) {
        fprintf(stderr, "qmoe bench: --peer onednn: out of memory\n");
        goto fail;
    }
    for (int64_t i = 0; i < M * K; i++) src[i] = (int8_t)(i * 7 % 251 - 125);
    for (int64_t i = 0; i < K * N; i++) w[i] = (int8_t)(i * 13 % 255 - 127);
    TRY(dnnl_engine_create(&eng, dnnl_cpu, 0));
    TRY(dnnl_stream_create(&st, eng, dnnl_stream_default_flags));
    TRY(dnnl_memory_desc_create_with_tag(&b_md, 2, bd, dnnl_s8, dnnl_ab));
    TRY(dnnl_memory_create(&plain, b_md, eng, w));
    for (int64_t e = 0, at = 0; e < E; at += rows[e], e++)
        if (rows[e] > 0 && setup(eng, st, rows[e], K, N, src + at * K, dst + at * N, plain, &xs[e],
                                 !said++))
            goto fail;
    for (int r = -1; r < repeat; r++) {
        double t0 = peer_now();
        for (int64_t e = 0; e < E; e++) {
            if (rows[e] <= 0) continue;
            dnnl_exec_arg_t args[3] = {
                {DNNL_ARG_SRC, xs[e].src}, {DNNL_ARG_WEIGHTS, xs[e].wei}, {DNNL_ARG_DST, xs[e].dst}};
            TRY(dnnl_primitive_execute(xs[e].mm, st, 3, args));
        }
        TRY(dnnl_stream_wait(st));
        if (r >= 0) ms[r] = (peer_now() - t0) * 1e3;
    }
    *median_ms = peer_median(ms, repeat);
    rc = 0;
fail:
    if (xs)
        for (int64_t e = 0; e < E; e++) teardown(&xs[e]);
    if (plain) dnnl_memory_destroy(plain);
    if (b_md) dnnl_memory_desc_destroy(b_md);
    if (st) dnnl_stream_destroy(st);
    if (eng) dnnl_engine_destroy(eng);
    free(xs);
    free(ms);
    free(src);
    free(w);
    free(dst);
    return rc;
}
