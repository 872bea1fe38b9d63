/*
 * Prepacked weights (qmoe/weights.h) on tiny cases decoded from the input: qmoe_weights_prepack
 * may only answer 0, 161001, 161002 or 561000, and a refusal leaves *out as it was and gives a
 * message. An accepted object, with every kernel it can be made for, gives the raw weights'
 * output and scales bit for bit (1 and several threads); used with an x of another K, another
 * kernel, or a weight scale of another dtype it is refused with 161002 and outputs untouched.
 * An object of more experts (options.experts) takes the same slice again by qmoe_weights_append
 * while it fits, refuses one past its end, and is refused by the operator until it is full.
 * Mutations change one descriptor (dtype, rank, format, a smaller dim, absence) or the options
 * (experts, scale blocks, a codebook with the weights' values drawn from it, packing threads,
 * 6-bit values with the weights mostly brought into [-32, 31]);
 * dims never grow and every buffer has room for 64-bit elements (16 times the int4 bytes), so
 * whatever phase one accepts stays inside real memory.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_input.h"
#include "qmoe/qmoe.h"
#include "qmoe/weights.h"
#include "support/oracle.h"

enum { W, WS, BIAS, SLOTS };

typedef struct desc {
    int present, ndim, dtype, format;
    int64_t shape[5];
    void *data;
} desc;

static void require(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_prepack: %s (last error: %s)\n", what, qmoe_last_error());
        abort();
    }
}

static int documented(qmoe_status st)
{
    return st == QMOE_OK || st == QMOE_ERR_PARAM_NULLPTR || st == QMOE_ERR_PARAM_INVALID ||
           st == QMOE_ERR_INNER;
}

static qmoe_tensor *create(const desc *d)
{
    if (!d->present) return NULL;
    qmoe_tensor *t = NULL;
    qmoe_status st = qmoe_tensor_create(d->shape, d->ndim, NULL, (qmoe_dtype)d->dtype,
                                        (qmoe_format)d->format, d->data, &t);
    require(documented(st), "tensor_create: undocumented status");
    return t;
}

typedef struct run_out {
    int8_t *q;
    float *s;
} run_out;

/* The operator on (x [M, Kx], weight, scale, bias); outputs prefilled with 0x5A. */
static qmoe_status run(int64_t M, int64_t Kx, const int8_t *x, const float *xs, int64_t Eg,
                       const int64_t *gl, int64_t N2, const qmoe_tensor *w, const qmoe_tensor *ws,
                       const qmoe_tensor *b, qmoe_kernel kernel, int threads, int force_nz,
                       run_out *o)
{
    o->q = fz_xcalloc((size_t)(M * N2 + 1), 1);
    o->s = fz_xcalloc((size_t)(M + 1), sizeof(float));
    memset(o->q, 0x5A, (size_t)(M * N2 + 1));
    memset(o->s, 0x5A, sizeof(float) * (size_t)(M + 1));
    int64_t xd[2] = {M, Kx}, od[2] = {M, N2};
    qmoe_tensor *tx = NULL, *txs = NULL, *tgl = NULL, *to = NULL, *tos = NULL;
    require(qmoe_tensor_create(xd, 2, NULL, QMOE_DTYPE_INT8, QMOE_FORMAT_ND, (void *)x, &tx) == 0 &&
                qmoe_tensor_create(&M, 1, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, (void *)xs, &txs) == 0 &&
                qmoe_tensor_create(&Eg, 1, NULL, QMOE_DTYPE_INT64, QMOE_FORMAT_ND, (void *)gl, &tgl) == 0 &&
                qmoe_tensor_create(od, 2, NULL, QMOE_DTYPE_INT8, QMOE_FORMAT_ND, o->q, &to) == 0 &&
                qmoe_tensor_create(&M, 1, NULL, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, o->s, &tos) == 0,
            "operator tensors");
    qmoe_grouped_matmul_swiglu_quant_options opt = {.kernel = kernel, .threads = threads, .force_weight_nz = force_nz};
    uint64_t wsb = 0;
    qmoe_grouped_matmul_swiglu_quant_executor *ex = NULL;
    qmoe_status st = qmoe_grouped_matmul_swiglu_quant_workspace_size(tx, w, b, NULL, ws, txs, tgl, to, tos,
                                                          NULL, &opt, &wsb, &ex);
    if (st == QMOE_OK) {
        void *buf = wsb ? aligned_alloc(64, (wsb + 63) / 64 * 64) : NULL;
        st = qmoe_grouped_matmul_swiglu_quant(buf, wsb, ex, NULL);
        free(buf);
        qmoe_grouped_matmul_swiglu_quant_executor_destroy(ex);
    }
    qmoe_tensor_destroy(tx);
    qmoe_tensor_destroy(txs);
    qmoe_tensor_destroy(tgl);
    qmoe_tensor_destroy(to);
    qmoe_tensor_destroy(tos);
    return st;
}

static int untouched(const run_out *o, int64_t M, int64_t N2)
{
    for (int64_t i = 0; i < M * N2; i++)
        if ((uint8_t)o->q[i] != 0x5A) return 0;
    const uint8_t *s = (const uint8_t *)o->s;
    for (int64_t i = 0; i < 4 * M; i++)
        if (s[i] != 0x5A) return 0;
    return 1;
}

static void out_free(run_out *o)
{
    free(o->q);
    free(o->s);
}

/* The prepacked view on x [M, Kx] with `kernel` must be refused, outputs untouched. */
static void require_refused(int64_t M, int64_t Kx, const int8_t *x, const float *xs, int64_t Eg,
                            const int64_t *gl, int64_t N2, const qmoe_tensor *view,
                            qmoe_kernel kernel, const char *what)
{
    run_out bad;
    require(run(M, Kx, x, xs, Eg, gl, N2, view, NULL, NULL, kernel, 1, 0, &bad) ==
                    QMOE_ERR_PARAM_INVALID && untouched(&bad, M, N2),
            what);
    out_free(&bad);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_input in = {data, size, 0};
    int layout = (int)fz_range(&in, 0, 5);
    int nz = layout == ORACLE_W_INT8_NZ || layout == ORACLE_W_INT4_NZ || layout == ORACLE_W_INT32_NZ;
    int a8w4 = layout >= ORACLE_W_INT4_ND;
    int64_t E = fz_range(&in, 1, 3), M = fz_range(&in, 0, 40);
    int64_t K = nz ? 16 * fz_range(&in, 1, 5) : fz_range(&in, 1, 80);
    if (layout == ORACLE_W_INT4_ND || layout == ORACLE_W_INT32_ND) K += K & 1;
    int64_t unit = layout == ORACLE_W_INT8_NZ ? 32 : nz ? 64 : layout == ORACLE_W_INT32_ND ? 16 : 2;
    int64_t N = unit * fz_range(&in, 1, 192 / unit);
    int64_t G = 1, per_group = fz_u8(&in) & 1;
    if (per_group) {
        int64_t g = fz_range(&in, 1, K);
        while (K % g) g--;
        G = g;
    }
    static const qmoe_dtype sdt[] = {QMOE_DTYPE_FLOAT32, QMOE_DTYPE_FLOAT16, QMOE_DTYPE_BFLOAT16,
                                     QMOE_DTYPE_UINT64};
    qmoe_dtype scale_dtype = sdt[fz_range(&in, 0, a8w4 ? 3 : 2)];
    uint64_t seed = fz_u64(&in);

    /* data */
    int8_t *w = fz_xcalloc((size_t)(E * K * N), 1);
    for (int64_t i = 0; i < E * K * N; i++)
        w[i] = (int8_t)(a8w4 ? (int)(fz_mix(&seed) % 16) - 8 : (int)(fz_mix(&seed) % 256) - 128);
    uint8_t *wst = fz_xcalloc((size_t)(E * K * N) * 8 + 64, 1);
    oracle_pack_weight((oracle_wlayout)layout, w, E, K, N, wst);
    int64_t nws = E * G * N;
    size_t ebytes = scale_dtype == QMOE_DTYPE_UINT64 ? 8 : scale_dtype == QMOE_DTYPE_FLOAT32 ? 4 : 2;
    uint8_t *ws = fz_xcalloc((size_t)nws, 8);
    for (int64_t i = 0; i < nws; i++) {
        float f = (float)(fz_mix(&seed) % 1000 + 1) * 1e-5f;
        uint32_t bits;
        memcpy(&bits, &f, 4);
        if (ebytes == 4) memcpy(ws + 4 * i, &f, 4);
        else if (ebytes == 8) memcpy(ws + 8 * i, &(uint64_t){bits}, 8);
        else if (scale_dtype == QMOE_DTYPE_BFLOAT16) memcpy(ws + 2 * i, &(uint16_t){(uint16_t)(bits >> 16)}, 2);
        else memcpy(ws + 2 * i, &(uint16_t){(uint16_t)(0x1000 + fz_mix(&seed) % 0x2000)}, 2);
    }
    float *bias = fz_xcalloc((size_t)(E * N), 2 * sizeof(float));
    for (int64_t i = 0; i < E * N; i++) bias[i] = (float)((int)(fz_mix(&seed) % 2001) - 1000) * 1e-3f;
    int8_t *x = fz_xcalloc((size_t)(M * (K + 16) + 1), 1);
    for (int64_t i = 0; i < M * (K + 16); i++) x[i] = (int8_t)(fz_mix(&seed) % 256);
    float *xs = fz_xcalloc((size_t)(M + 1), sizeof(float));
    for (int64_t i = 0; i < M; i++) xs[i] = (float)(fz_mix(&seed) % 100 + 1) * 1e-3f;
    int64_t Eg = fz_range(&in, 1, E), *gl = fz_xcalloc((size_t)Eg, sizeof(int64_t)), end = 0;
    for (int64_t e = 0; e < Eg; e++) {
        end = e == Eg - 1 ? M : end + (int64_t)(fz_mix(&seed) % (uint64_t)(M - end + 1));
        gl[e] = end;
    }

    /* descriptors, then mutations that never enlarge a claim */
    desc d[SLOTS];
    memset(d, 0, sizeof d);
    d[W].present = 1;
    d[W].data = wst;
    static const qmoe_dtype wdt[] = {QMOE_DTYPE_INT8, QMOE_DTYPE_INT8, QMOE_DTYPE_INT4,
                                     QMOE_DTYPE_INT4, QMOE_DTYPE_INT32, QMOE_DTYPE_INT32};
    d[W].dtype = wdt[layout];
    d[W].format = nz ? QMOE_FORMAT_FRACTAL_NZ : QMOE_FORMAT_ND;
    if (nz) {
        int64_t cols = layout == ORACLE_W_INT8_NZ ? 32 : 64;
        int64_t s[5] = {E, N / cols, K / 16, 16, layout == ORACLE_W_INT32_NZ ? 8 : cols};
        d[W].ndim = 5;
        memcpy(d[W].shape, s, sizeof s);
    } else {
        int64_t s[3] = {E, K, layout == ORACLE_W_INT32_ND ? N / 8 : N};
        d[W].ndim = 3;
        memcpy(d[W].shape, s, sizeof s);
    }
    d[WS] = (desc){1, per_group ? 3 : 2, scale_dtype, QMOE_FORMAT_ND, {E, G, N}, ws};
    if (!per_group) d[WS].shape[1] = N;
    d[BIAS] = (desc){a8w4, 2, QMOE_DTYPE_FLOAT32, QMOE_FORMAT_ND, {E, N}, bias};
    qmoe_weights_options po = {.kernel = QMOE_KERNEL_AUTO};
    int8_t book[16];
    int mutations = (int)fz_range(&in, 0, 3);
    for (int i = 0; i < mutations; i++) {
        desc *m = &d[fz_range(&in, 0, SLOTS - 1)];
        switch (fz_range(&in, 0, 11)) {
        case 0: m->present = !m->present; break;
        case 1: m->dtype = (int)fz_range(&in, 0, 7); break; /* buffers have room for 64-bit */
        case 2: m->format = !m->format; break;
        case 3: m->ndim = (int)fz_range(&in, 0, m->ndim); break;
        case 4: { int a = (int)fz_range(&in, 0, 4); if (m->shape[a] > 0) m->shape[a] = fz_range(&in, 0, m->shape[a] - 1); } break;
        case 5: po.kernel = (qmoe_kernel)fz_range(&in, -1, 8); break;
        case 6: po.force_weight_nz = (int)fz_range(&in, 0, 1); break;
        case 7: /* an object of more experts, the rest appended below */
            po.struct_size = (uint32_t)sizeof po;
            po.experts = fz_range(&in, 0, 3 * E);
            break;
        case 8: /* scale blocks: most fuzzed scales do not factor and are refused */
            po.struct_size = (uint32_t)sizeof po;
            po.scale_block = fz_range(&in, -2, 70);
            break;
        case 9: /* 4-bit codes: a codebook from the input (0 in it or not); the weights' values
                 * mostly drawn from it (repacked), so the accepted path runs too */
            po.struct_size = (uint32_t)sizeof po;
            for (int c = 0; c < 16; c++) book[c] = (int8_t)fz_u8(&in);
            if (fz_u8(&in) & 1) {
                for (int64_t j = 0; j < E * K * N; j++)
                    w[j] = (int8_t)(book[(uint8_t)w[j] % 16] / (a8w4 ? 16 : 1)); /* int4: in range */
                oracle_pack_weight((oracle_wlayout)layout, w, E, K, N, wst);
            }
            po.codebook = book;
            break;
        case 10: /* packing threads: 0 (every core) to a few, or past the limit (refused) */
            po.struct_size = (uint32_t)sizeof po;
            po.threads = fz_u8(&in) & 1 ? (int)fz_range(&in, -2, 5) : (int)fz_range(&in, 4094, 4098);
            break;
        case 11: /* 6-bit values (0, 6, 8 or refused ones); the weights mostly brought into
                  * [-32, 31] (repacked), so the accepted path runs too */
            po.struct_size = (uint32_t)sizeof po;
            po.value_bits = (int)fz_range(&in, -1, 9);
            if (fz_u8(&in) & 1) {
                for (int64_t j = 0; j < E * K * N; j++) w[j] = (int8_t)(w[j] / 4);
                oracle_pack_weight((oracle_wlayout)layout, w, E, K, N, wst);
            }
            break;
        }
    }

    qmoe_tensor *tw = create(&d[W]), *tws = create(&d[WS]), *tb = create(&d[BIAS]);
    qmoe_weights *const sentinel = (qmoe_weights *)(uintptr_t)0x5e5e5e50;
    qmoe_weights *pw = sentinel;
    int null_options = fz_u8(&in) == 0xA5;
    if (null_options) memset(&po, 0, sizeof po);
    qmoe_status st = qmoe_weights_prepack(tw, tws, tb, null_options ? NULL : &po, &pw);
    require(documented(st), "prepack: undocumented status");
    if (st) {
        require(pw == sentinel, "a refused prepack changed *out");
        require(qmoe_last_error()[0] != '\0', "a refused prepack gave no message");
    } else {
        qmoe_kernel k = qmoe_weights_kernel(pw);
        qmoe_tensor *view = NULL;
        require(qmoe_weights_tensor(pw, &view) == QMOE_OK, "weights_tensor");
        /* the K and N the (possibly mutated, smaller) weight declares */
        int64_t Kw = qmoe_tensor_dim(view, 1), N2 = qmoe_tensor_dim(view, 2) / 2;
        int64_t total = qmoe_tensor_dim(view, 0), ew = qmoe_tensor_dim(tw, 0), filled = ew;
        require(total <= (po.experts > E ? po.experts : E) && Kw <= K && 2 * N2 <= N, "view dims grew");
        /* the rest of a larger object: the same slice again while it fits, then refused */
        while (ew > 0 && filled < total) {
            qmoe_status sa = qmoe_weights_append(pw, tw, tws, tb);
            require(documented(sa), "append: undocumented status");
            if (total - filled < ew) {
                require(sa == QMOE_ERR_PARAM_INVALID && qmoe_last_error()[0] != '\0',
                        "an append past the object's experts was not refused");
                break;
            }
            require(sa == QMOE_OK, "an append of the first slice again failed");
            filled += ew;
        }
        int threads = (int)fz_range(&in, 1, 4);
        run_out raw, pre;
        if (filled < total) { /* not every expert in: refused, outputs untouched */
            require_refused(M, Kw, x, xs, Eg, gl, N2, view, k, "an object with experts missing was not refused");
            qmoe_tensor_destroy(view);
            qmoe_weights_destroy(pw);
            goto done;
        }
        int fnz = po.force_weight_nz;
        if (Eg > ew) { /* a weight cut to fewer experts than groupList names: the raw one refuses,
                        * and so does the object unless appends made it long enough */
            run_out bad;
            require(run(M, Kw, x, xs, Eg, gl, N2, tw, tws, tb, k, 1, fnz, &bad) == QMOE_ERR_PARAM_INVALID &&
                        untouched(&bad, M, N2),
                    "more groups than the raw weight's experts were not refused");
            out_free(&bad);
            if (Eg > total)
                require_refused(M, Kw, x, xs, Eg, gl, N2, view, k, "more groups than experts were not refused");
            qmoe_tensor_destroy(view);
            qmoe_weights_destroy(pw);
            goto done;
        }
        qmoe_status s1 = run(M, Kw, x, xs, Eg, gl, N2, tw, tws, tb, k, threads, fnz, &raw);
        qmoe_status s2 = run(M, Kw, x, xs, Eg, gl, N2, view, NULL, NULL, k, threads, 0, &pre);
        require(s1 == QMOE_OK && s2 == QMOE_OK, "the raw or prepacked operator failed");
        require(!memcmp(raw.q, pre.q, (size_t)(M * N2)) &&
                    !memcmp(raw.s, pre.s, sizeof(float) * (size_t)M),
                "prepacked output differs from raw");
        out_free(&raw);
        out_free(&pre);
        /* refusals: another K, another kernel */
        require_refused(M, Kw + 16, x, xs, Eg, gl, N2, view, k, "another K was not refused");
        qmoe_kernel other = k == QMOE_KERNEL_PORTABLE ? QMOE_KERNEL_AVX2 : QMOE_KERNEL_PORTABLE;
        require_refused(M, Kw, x, xs, Eg, gl, N2, view, other, "another kernel was not refused");
        qmoe_tensor_destroy(view);
        qmoe_weights_destroy(pw);
    }
done:
    qmoe_tensor_destroy(tw);
    qmoe_tensor_destroy(tws);
    qmoe_tensor_destroy(tb);
    free(w);
    free(wst);
    free(ws);
    free(bias);
    free(x);
    free(xs);
    free(gl);
    return 0;
}
