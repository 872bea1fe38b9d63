/* The kernel qmoe runs here, and what the backend does because of it (dense weights, codes).
 * Its own file: backend.c names the kernel, matmul.c asks whether dense weights are taken,
 * weights.c whether codes are kept, and none calls another for it. */
#include <stdlib.h>
#include <string.h>

#include "qmoe_ggml.h"

/* The kernel qmoe plans a tiny int8 grouped matmul with (QMOE_KERNEL_AUTO if it cannot): what
 * qmoe runs on this CPU, found without starting any thread. */
static qmoe_kernel find_kernel(void)
{
    int64_t xd[2] = {1, 32}, wd[3] = {1, 32, 2}, sd[2] = {1, 2}, gd[1] = {1}, od[2] = {1, 2};
    qmoe_tensor *x = NULL, *w = NULL, *s = NULL, *pts = NULL, *gl = NULL, *o = NULL;
    qmoe_op *op = NULL;
    qmoe_kernel k = QMOE_KERNEL_AUTO;
    if (!qmoe_tensor_desc_create(xd, 2, NULL, QMOE_DTYPE_INT8, QMOE_FORMAT_ND, &x) &&
        !qmoe_tensor_desc_create(wd, 3, NULL, QMOE_DTYPE_INT8, QMOE_FORMAT_ND, &w) &&
        !qmoe_tensor_desc_create(sd, 2, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, &s) &&
        !qmoe_tensor_desc_create(xd, 1, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, &pts) &&
        !qmoe_tensor_desc_create(gd, 1, NULL, QMOE_DTYPE_INT64, QMOE_FORMAT_ND, &gl) &&
        !qmoe_tensor_desc_create(od, 2, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, &o) &&
        !qmoe_op_create_grouped_matmul(x, w, NULL, s, pts, gl, QMOE_GROUP_LIST_COUNT, o, NULL, &op))
        k = qmoe_op_kernel(op);
    qmoe_op_destroy(op);
    qmoe_tensor_destroy(x);
    qmoe_tensor_destroy(w);
    qmoe_tensor_destroy(s);
    qmoe_tensor_destroy(pts);
    qmoe_tensor_destroy(gl);
    qmoe_tensor_destroy(o);
    return k;
}

static qmoe_kernel found_kernel = QMOE_KERNEL_AUTO;
static void find_once(void) { found_kernel = find_kernel(); }

qmoe_kernel qg_kernel(void)
{
    /* asked for every weight the loader places: planned once */
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, find_once);
    return found_kernel;
}

static int dense_kernel(qmoe_kernel k)
{
    /* measured faster than llama.cpp's CPU path at prefill and level at decode (both read the
     * projections at DRAM speed) on AVX-512 VNNI; AMX runs prefill faster still. Not on AVX2 /
     * AVX-VNNI / NEON, whose kernels are about even with ggml's at prefill (docs/ggml.md) */
    return k == QMOE_KERNEL_AVX512_VNNI || k == QMOE_KERNEL_AMX_INT8;
}

int qg_take_codes(void)
{
    /* kernels that read 4-bit codes in place (gmm_fast.h gemm_c4, gemm_groups): the others
     * expand a panel per call, which at one row a matrix ran mxfp4 8x slower than its int8
     * weights (AVX2 before its gemm_c4, docs/ggml.md); there the integers stay int8 */
    const char *v = getenv("QMOE_GGML_CODES"); /* asked while weights are converted */
    if (v && !strcmp(v, "0")) return 0;
    if (v && !strcmp(v, "1")) return 1;
    qmoe_kernel k = qg_kernel();
    return k == QMOE_KERNEL_AVX512_VNNI || k == QMOE_KERNEL_AMX_INT8 || k == QMOE_KERNEL_AVX2;
}

int qg_take_bits6(void)
{
    /* a quarter fewer bytes of q6_K weights to hold and to read at decode, for a few per cent
     * more time at prompts (the widening, docs/ggml.md "Memory"); on kernels without the
     * in-place path each one-row call would widen a whole panel, and AVX2's, which has it,
     * measured 1.2-1.6x the int8 time at 1-2 rows a matrix on an AVX2-only CPU, whose one-row
     * matmuls are bound by instructions, not memory: there the user chooses */
    const char *v = getenv("QMOE_GGML_BITS6"); /* asked while weights are converted */
    if (v && !strcmp(v, "0")) return 0;
    if (v && !strcmp(v, "1")) return 1;
    return qg_kernel() == QMOE_KERNEL_AVX512_VNNI;
}

int qg_take_dense(void)
{
    /* asked only while a model's weights are placed, so nothing depends on it changing later */
    const char *v = getenv("QMOE_GGML_DENSE");
    if (v && !strcmp(v, "0")) return 0;
    if (v && !strcmp(v, "1")) return 1;
    return dense_kernel(qg_kernel());
}
