/* A ggml weight tensor ([K, N, ne2, ne3] of a type convert.c decodes) as qmoe prepacked weights:
 * each matrix e = (i2, i3) is one qmoe expert with W[e][k][n] = the integer of value (k, n) and
 * scale[e][k / gs][n] = its group's scale (A8W4 per group for q4_0 / q4_K, A8W8 per group for
 * the others), and beside it what the integers do not hold (qg_weight's side arrays). Matrices
 * past qmoe's expert limit and columns past its N limit go to further chunks. */
#define _DEFAULT_SOURCE /* madvise */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "qmoe_ggml.h"

static int mul3(int64_t a, int64_t b, int64_t c, size_t *out)
{
    if (a < 0 || b < 0 || c < 0) return 0;
    if (a && b > INT64_MAX / a) return 0;
    int64_t ab = a * b;
    if (ab && c > INT64_MAX / ab) return 0;
    if ((uint64_t)(ab * c) > SIZE_MAX) return 0;
    *out = (size_t)(ab * c);
    return 1;
}

static qmoe_status tensor3(const int64_t *shape, int ndim, qmoe_dtype dt, void *data, qmoe_tensor **t)
{
    return qmoe_tensor_create(shape, ndim, NULL, dt, QMOE_FORMAT_ND, data, t);
}

/* f as float16 bits if exactly representable (finite). */
static int f16_exact(float f, uint16_t *h)
{
    uint32_t b, back;
    memcpy(&b, &f, sizeof b);
    if ((b & 0x7fffffffu) >= 0x7f800000u) return 0; /* inf / NaN: kept float32 */
    *h = qg_half_bits(f);
    float g = qg_half(*h);
    memcpy(&back, &g, sizeof back);
    return back == b;
}

/* 1 when every one of f[0, n) is exactly a value of dtype dt (float16, bfloat16 or float32). */
static int scales_fit(const float *f, size_t n, qmoe_dtype dt)
{
    uint16_t h;
    for (size_t i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, &f[i], sizeof b);
        if (dt == QMOE_DTYPE_FLOAT16 ? !f16_exact(f[i], &h) : dt == QMOE_DTYPE_BFLOAT16 && (b & 0xffffu))
            return 0;
    }
    return 1;
}

/* The scales as a tensor of dtype dt, which holds each exactly (scales_fit): a 16-bit copy in *h
 * (the caller frees it), or f itself. qmoe keeps float16 / bfloat16 scales 16-bit in the
 * prepacked object: half the scale bytes in memory and in every decode pass, the same values. */
static qmoe_status scale_tensor(const int64_t *shape, const float *f, size_t n, qmoe_dtype dt,
                                uint16_t **h, qmoe_tensor **t)
{
    *h = NULL;
    if (dt == QMOE_DTYPE_FLOAT32) return tensor3(shape, 3, dt, (void *)(uintptr_t)f, t);
    *h = malloc((n ? n : 1) * sizeof(uint16_t));
    if (!*h) return qmoe_error_set(QMOE_ERR_INNER, QMOE_RULE_NONE, "weight",
                                   "ggml-qmoe: out of memory converting a weight");
    for (size_t i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, &f[i], sizeof b);
        if (dt == QMOE_DTYPE_BFLOAT16) (*h)[i] = (uint16_t)(b >> 16);
        else (void)f16_exact(f[i], &(*h)[i]);
    }
    return tensor3(shape, 3, dt, *h, t);
}

/* The dtype of an object's scales: at its first slice the narrowest that holds them (float16:
 * q8_0 / q4_0, whose block scales are float16; bfloat16: mxfp4's powers of two; float32: the
 * K-quants' products of two scales); a later slice that does not fit it makes the whole object
 * float32 (the caller starts it again). 0 when that happened. */
static int scale_dtype(const float *f, size_t n, int first, qmoe_dtype *dt)
{
    if (first) {
        *dt = scales_fit(f, n, QMOE_DTYPE_FLOAT16)    ? QMOE_DTYPE_FLOAT16
              : scales_fit(f, n, QMOE_DTYPE_BFLOAT16) ? QMOE_DTYPE_BFLOAT16
                                                      : QMOE_DTYPE_FLOAT32;
        return 1;
    }
    if (scales_fit(f, n, *dt)) return 1;
    *dt = QMOE_DTYPE_FLOAT32;
    return 0;
}

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define QG_BIG_ENDIAN 1 /* the blocks below read bytes as little-endian words: the byte loop then */
#else
#define QG_BIG_ENDIAN 0
#endif

/* 8 x 8 bytes transposed in place: a[i] holds row i (byte j: column j, little-endian), after it
 * column i. Three rounds of swaps of 1, 2 and 4 bytes between row pairs. */
static void transpose8(uint64_t a[8])
{
    static const uint64_t m[3] = {0x00FF00FF00FF00FFull, 0x0000FFFF0000FFFFull, 0x00000000FFFFFFFFull};
    for (int r = 0, d = 1; r < 3; r++, d *= 2)
        for (int j = 0; j < 4; j++) { /* the 4 pairs (i, i + d) with bit d of i clear */
            int i = (j / d) * 2 * d + j % d;
            uint64_t t = ((a[i] >> (8 * d)) ^ a[i + d]) & m[r];
            a[i + d] ^= t;
            a[i] ^= t << (8 * d);
        }
}

/* 8 int8 values (one k, 8 columns, low byte first) as 4 bytes of int4 pairs, low nibble first. */
static uint32_t pack_nibbles(uint64_t x)
{
    x &= 0x0F0F0F0F0F0F0F0Full;
    x = (x | x >> 4) & 0x00FF00FF00FF00FFull;
    x = (x | x >> 8) & 0x0000FFFF0000FFFFull;
    return (uint32_t)(x | x >> 16);
}

/* A decoded tile (tn rows of K int8 values, row t at rowq + t K) written as columns v0 + t of the
 * [K, ncp] values, v0 + k ncp + t for row k (int4: two values a byte, low nibble first, or'ed in:
 * an odd column starts mid-byte; vals starts zeroed). Blocks of 8 x 8 go through registers:
 * the element-wise loop read each value from a different row and took most of a model's load
 * time (docs/ggml.md, "Load time"). The results are the same bytes. */
static void put_tile(const int8_t *rowq, int64_t K, int64_t tn, int int4, uint8_t *vals, size_t v0,
                     size_t ncp)
{
    int64_t t8 = 0; /* columns [0, t8) in blocks; whole bytes for int4 need even columns */
    if ((!int4 || (v0 % 2 == 0 && ncp % 2 == 0)) && K % 8 == 0 && !QG_BIG_ENDIAN) t8 = tn / 8 * 8;
    for (int64_t t0 = 0; t0 < t8; t0 += 8)
        for (int64_t k0 = 0; k0 < K; k0 += 8) {
            uint64_t a[8];
            for (int i = 0; i < 8; i++) memcpy(&a[i], rowq + (t0 + i) * K + k0, 8);
            transpose8(a);
            for (int j = 0; j < 8; j++) {
                size_t v = v0 + (size_t)(k0 + j) * ncp + (size_t)t0;
                if (int4) {
                    uint32_t b = pack_nibbles(a[j]);
                    memcpy(vals + v / 2, &b, 4);
                } else {
                    memcpy(vals + v, &a[j], 8);
                }
            }
        }
    size_t v = v0;
    for (int64_t k = 0; k < K; k++, v += ncp)
        for (int64_t t = t8; t < tn; t++) {
            if (int4)
                vals[(v + (size_t)t) / 2] |= (uint8_t)((rowq[t * K + k] & 0xF) << ((v + (size_t)t) % 2 ? 4 : 0));
            else
                vals[v + (size_t)t] = (uint8_t)rowq[t * K + k];
        }
}

/* Integers and scales of matrices [s0, s0 + ns) of the chunk, its columns, laid out [ns, K, ncp]
 * and [ns, G, ncp] (the pad column stays zero; vals zeroed); int4 ones packed straight away (two a
 * byte, low nibble first, as qmoe_layout_int4_pack), so no int8 copy of an int4 weight is made;
 * the side bytes go to the weight's arrays. */
typedef struct gather_part {
    qg_weight *w;
    const qg_chunk *c;
    int64_t s0, e0, e1; /* the slice's matrices [e0, e1), s0 its first in the chunk */
    uint8_t *vals;
    float *scales;
    int8_t *mvals;
    float *mscales, *bias;
    int8_t *rowq; /* the thread's own decoding buffers */
    float *rowd;
    uint8_t *rows;
    int64_t negzero; /* mxfp4's negative zeros it found (the weight's count: summed after) */
    pthread_t tid;
    int started;
} gather_part;

static void *gather(void *arg)
{
    gather_part *gp = arg;
    qg_weight *w = gp->w;
    const qg_chunk *c = gp->c;
    const int64_t s0 = gp->s0;
    uint8_t *vals = gp->vals, *rows = gp->rows;
    float *scales = gp->scales, *rowd = gp->rowd, *mscales = gp->mscales, *bias = gp->bias;
    int8_t *rowq = gp->rowq, *mvals = gp->mvals;
    const qg_format *f = w->fmt;
    const int64_t K = w->K, G = w->G, ncp = qg_chunk_cols(c), nb = K / f->blk, N = w->N;
    for (int64_t e = gp->e0; e < gp->e1; e++) {
        int64_t m = c->e0 + s0 + e, i2 = m % w->ne[2], i3 = m / w->ne[2];
        /* QG_TILE rows decoded, then written column-wise a run of QG_TILE at a time (one value
         * per row of K apart was a cache line and a TLB entry per value: minutes per large
         * weight) */
        for (int64_t n0 = 0; n0 < c->nc; n0 += QG_TILE) {
            const int64_t tn = c->nc - n0 < QG_TILE ? c->nc - n0 : QG_TILE;
            for (int64_t t = 0; t < tn; t++) {
                int64_t n = n0 + t, gn = c->n0 + n;
                const uint8_t *row = w->data + (size_t)gn * w->nb[1] + (size_t)i2 * w->nb[2] +
                                     (size_t)i3 * w->nb[3];
                uint8_t *side = w->side ? w->side + ((size_t)m * (size_t)N + (size_t)gn) * (size_t)(nb * f->side)
                                : f->mins ? rows
                                        : NULL; /* scaled: the object's scales hold them */
                qg_decode_row(w->type, row, K, rowq + t * K, rowd + t * G, side);
                if (w->negzero)
                    gp->negzero += qg_row_negative_zeros(w->type, row, K,
                                                          w->negzero + ((size_t)m * (size_t)N + (size_t)gn) * (size_t)(K / 8));
                if (bias) { /* the assist matrix as qmoe_layout_weight_assist_matrix states it */
                    double acc = 0; /* each group's integer sum first, as the library's rule */
                    for (int64_t g = 0; g < G; g++) {
                        int64_t sum = 0;
                        for (int64_t k = g * f->gs; k < (g + 1) * f->gs; k++) sum += rowq[t * K + k];
                        acc += (double)sum * rowd[t * G + g];
                    }
                    bias[(size_t)e * (size_t)ncp + (size_t)(c->col + n)] = (float)(8.0 * acc);
                }
                if (!f->mins) continue;
                /* the min object's rows: m_j, its scales -dmin; the sc_j in ksc (slim_side) */
                const size_t J = (size_t)nb * 8, col = (size_t)ncp;
                for (int64_t b = 0; b < nb; b++) { /* q4_K / q5_K: d, dmin, 12 bytes of codes */
                    const uint8_t *sb = rows + b * 16;
                    size_t at = ((size_t)m * (size_t)nb + (size_t)b) * (size_t)N + (size_t)gn;
                    memcpy(&w->kd[at], sb, 2);
                    memcpy(&w->kdmin[at], sb + 2, 2);
                    uint8_t sc[8], mn[8];
                    qg_kq_unpack(sb + 4, sc, mn);
                    int8_t *mv = mvals + (size_t)e * J * col + (size_t)n;
                    for (int j = 0; j < 8; j++) {
                        const size_t jj = (size_t)b * 8 + (size_t)j;
                        w->ksc[((size_t)m * J + jj) * (size_t)N + (size_t)gn] = sc[j];
                        mv[jj * col] = (int8_t)mn[j];
                    }
                    mscales[(size_t)e * (size_t)nb * col + (size_t)n + (size_t)b * col] = -qg_half(w->kdmin[at]);
                }
            }
            put_tile(rowq, K, tn, f->int4, vals, (size_t)e * (size_t)K * (size_t)ncp + (size_t)(c->col + n0),
                     (size_t)ncp);
            float *sg = scales + (size_t)e * (size_t)G * (size_t)ncp + (size_t)(c->col + n0);
            for (int64_t g = 0; g < G; g++)
                for (int64_t t = 0; t < tn; t++) sg[(size_t)g * (size_t)ncp + (size_t)t] = rowd[t * G + g];
        }
    }
    return NULL;
}

/* Matrices [s0, s0 + ns) of the chunk gathered by the parts' threads, a contiguous run of them
 * each (every matrix's bytes are its own: the split changes nothing); a thread that cannot be
 * started leaves its run to this one. */
static void gather_slice(gather_part *parts, int64_t T, qg_weight *w, const qg_chunk *c, int64_t s0,
                         int64_t ns, uint8_t *vals, float *scales, int8_t *mvals, float *mscales,
                         float *bias)
{
    T = T < ns ? T : ns > 0 ? ns : 1;
    for (int64_t t = 0; t < T; t++) {
        gather_part *g = &parts[t];
        g->w = w, g->c = c, g->s0 = s0, g->e0 = ns * t / T, g->e1 = ns * (t + 1) / T;
        g->vals = vals, g->scales = scales, g->mvals = mvals, g->mscales = mscales, g->bias = bias;
        g->negzero = 0;
        g->started = t > 0 && pthread_create(&g->tid, NULL, gather, g) == 0;
    }
    gather(&parts[0]);
    for (int64_t t = 1; t < T; t++) {
        if (parts[t].started) pthread_join(parts[t].tid, NULL);
        else gather(&parts[t]);
    }
    for (int64_t t = 0; t < T; t++) w->n_negzero += parts[t].negzero;
}

/* The caller's pages of matrices [m0, m0 + n) once read (source.c decides whether they can go):
 * in one call where they are one run of bytes. */
static void drop(const uint8_t *p, size_t n, int own)
{
    if (!own) {
        qg_source_release(p, n);
        return;
    }
    long ps = sysconf(_SC_PAGESIZE);
    uintptr_t page = ps > 0 ? (uintptr_t)ps : 4096, a = ((uintptr_t)p + page - 1) / page * page,
              z = ((uintptr_t)p + n) / page * page;
    if (z > a) (void)madvise((void *)a, z - a, MADV_DONTNEED); /* read as zeros from now on */
}

static void release_source(const qg_weight *w, int own, int64_t m0, int64_t n)
{
    const size_t len = (size_t)w->N * w->nb[1];
    size_t lo = SIZE_MAX, hi = 0;
    for (int64_t m = m0; m < m0 + n; m++) {
        size_t at = (size_t)(m % w->ne[2]) * w->nb[2] + (size_t)(m / w->ne[2]) * w->nb[3];
        lo = at < lo ? at : lo;
        hi = at + len > hi ? at + len : hi;
    }
    if (n > 0 && hi - lo == (size_t)n * len) {
        drop(w->data + lo, hi - lo, own);
        return;
    }
    for (int64_t m = m0; m < m0 + n; m++)
        drop(w->data + (size_t)(m % w->ne[2]) * w->nb[2] + (size_t)(m / w->ne[2]) * w->nb[3], len, own);
}

/* The chunk's prepacked objects, built QG_SLICE matrices at a time (qmoe_weights_append): the
 * staging copies are one slice's, and the caller's pages of each slice can go as soon as it is
 * read, so a weight's conversion holds little more than the objects it makes. A pair (np = 2:
 * a gate and an up, one chunk each, side by side in one object) is gathered part by part into
 * the same slice, with the assist matrix the fused operator reads; own[p]: part p's bytes are the
 * buffer's pages (dropped as read where a restart cannot need them again: scaled formats, whose
 * scale dtype never changes). */
static qmoe_status build_parts(qg_weight *const *ws, qg_chunk *const *cs, int np, int *own, int assist)
{
    qg_weight *w = ws[0];
    qg_chunk *c = cs[0];
    /* a pair's slices are half as many matrices: the same staging bytes, twice the columns */
    const int64_t slice = np > 1 ? QG_SLICE / 2 : QG_SLICE;
    const int64_t K = w->K, G = w->G, ncp = qg_chunk_cols(c), S = c->ne < slice ? c->ne : slice;
    const int a8w4 = w->fmt->int4, mins = w->fmt->mins;
    /* the min object: MJ rows (the m_j) in MG groups of 8 */
    const int64_t MJ = qg_min_rows(K), MG = MJ / 8;
    size_t nv, ns, nbias, nmv = 0, nms = 0, nt;
    if (!mul3(S, K, ncp, &nv) || !mul3(S, G, ncp, &ns) || !mul3(S, 1, ncp, &nbias) ||
        !mul3(S, MJ, ncp, &nmv) || !mul3(S, MG, ncp, &nms) || !mul3(QG_TILE, K, 4, &nt))
        return qmoe_error_set(QMOE_ERR_PARAM_INVALID, QMOE_RULE_LIMIT, "weight",
                              "ggml-qmoe: the weight's size overflows");
    const size_t vbytes = a8w4 ? nv / 2 + 1 : nv ? nv : 1;
    uint8_t *vals = malloc(vbytes);
    /* the slice's matrices are decoded on up to S threads (the loader's and S - 1 more) */
    const int64_t T = qmoe_device_online_cores() < S ? qmoe_device_online_cores() : S;
    gather_part *parts = calloc((size_t)T, sizeof *parts);
    int oom = !parts;
    for (int64_t t = 0; !oom && t < T; t++) {
        parts[t].rowq = malloc((size_t)(QG_TILE * K));
        parts[t].rowd = malloc((size_t)(QG_TILE * G) * sizeof(float));
        parts[t].rows = malloc((size_t)(K / w->fmt->blk * w->fmt->side));
        oom = !parts[t].rowq || !parts[t].rowd || !parts[t].rows;
    }
    float *scales = calloc(ns ? ns : 1, sizeof(float));
    float *bias = a8w4 ? calloc(nbias ? nbias : 1, sizeof(float)) : NULL;
    int8_t *mvals = mins ? calloc(nmv ? nmv : 1, 1) : NULL;
    float *mscales = mins ? calloc(nms ? nms : 1, sizeof(float)) : NULL;
    qmoe_tensor *tw = NULL, *ts = NULL, *tb = NULL;
    uint16_t *half = NULL;
    qmoe_status st = QMOE_OK;
    if (oom || !vals || !scales || (a8w4 && !bias) || (mins && (!mvals || !mscales))) {
        st = qmoe_error_set(QMOE_ERR_INNER, QMOE_RULE_NONE, "weight",
                            "ggml-qmoe: out of memory converting a weight");
        goto done;
    }
    qmoe_weights_options wo = QMOE_WEIGHTS_OPTIONS_INIT, mo = QMOE_WEIGHTS_OPTIONS_INIT;
    wo.experts = mo.experts = c->ne;
    /* mxfp4: its codes, 4 bits a value (the file's own), where the kernel reads them in place */
    wo.codebook = qg_take_codes() ? qg_codebook(w->type) : NULL;
    /* q4_K: its codes 0..15 as they are, 4 bits a value, which qmoe reads as int4 without the
     * offset of 8 on every kernel (no lookup): so the min term needs no 8 d sc_j part */
    if (w->type == GGML_TYPE_Q4_K) wo.codebook = qg_codebook(w->type);
    /* q6_K: its integers (q - 32, in [-32, 31]) kept in 6 bits, as the file holds them: 0.75
     * bytes a value instead of 1 (docs/ggml.md, "Memory") */
    wo.value_bits = w->type == GGML_TYPE_Q6_K && qg_take_bits6() ? 6 : 0;
    /* The K-quants' group scales are d * sc (an fp16 times a 6- or 8-bit integer, exact in
     * float32): kept as one base per super-block and int8 multipliers, 1 byte a group instead of
     * 4, the same values. They always factor; if qmoe refused, the weight is converted again with
     * float32 scales (its pages are kept until the end for that). */
    const int64_t kblock = w->fmt->scaled ? 0 : w->fmt->blk / w->fmt->gs;
    qmoe_dtype wdt = QMOE_DTYPE_FLOAT32, mdt = QMOE_DTYPE_FLOAT32;
    int wwide = 0, mwide = 0; /* 1: started again with float32 scales */
    int noblock = 0;          /* 1: started again without scale blocks */
    for (int64_t s0 = 0; !st && s0 < c->ne; s0 += S) {
        const int64_t n = c->ne - s0 < S ? c->ne - s0 : S;
        memset(vals, 0, vbytes); /* int4 values are or'ed in */
        for (int p = 0; p < np; p++) {
            /* GroupedMatmul reads no assist matrix (zero); the fused operator's is the weights' */
            gather_slice(parts, T, ws[p], cs[p], s0, n, vals, scales, mvals, mscales, assist ? bias : NULL);
            if (cs[p]->n0 + cs[p]->nc == ws[p]->N && (!own[p] || w->fmt->scaled))
            {
                release_source(ws[p], own[p], c->e0 + s0, n); /* no chunk reads them again */
                if (own[p]) own[p] = 2;                       /* gone: no retry can read them */
            }
        }
        int wfit = wwide || scale_dtype(scales, (size_t)(n * G * ncp), s0 == 0, &wdt);
        int mfit = mwide || !mins || scale_dtype(mscales, (size_t)(n * MG * ncp), s0 == 0, &mdt);
        if (!wfit || !mfit) { /* the slices so far again, that object's scales float32 (pages re-read) */
            qmoe_weights_destroy(c->w);
            qmoe_weights_destroy(c->mw);
            c->w = c->mw = NULL;
            wwide |= !wfit;
            mwide |= !mfit;
            s0 = -S;
            continue;
        }
        int64_t wshape[3] = {n, K, ncp}, sshape[3] = {n, G, ncp}, bshape[2] = {n, ncp};
        if (a8w4) {
            st = tensor3(wshape, 3, QMOE_DTYPE_INT4, vals, &tw);
            if (!st) st = tensor3(bshape, 2, QMOE_DTYPE_FLOAT32, bias, &tb);
        } else {
            st = tensor3(wshape, 3, QMOE_DTYPE_INT8, vals, &tw);
        }
        if (!st) st = scale_tensor(sshape, scales, (size_t)(n * G * ncp), wdt, &half, &ts);
        if (s0 == 0) wo.scale_block = wdt == QMOE_DTYPE_FLOAT32 && !noblock ? kblock : 0;
        if (!st) st = s0 == 0 ? qmoe_weights_prepack(tw, ts, tb, &wo, &c->w) : qmoe_weights_append(c->w, tw, ts, tb);
        qmoe_tensor_destroy(tw);
        qmoe_tensor_destroy(ts);
        qmoe_tensor_destroy(tb);
        tw = ts = tb = NULL;
        free(half);
        half = NULL;
        if (st == QMOE_ERR_PARAM_INVALID && wo.scale_block) { /* the slices so far again, float32 */
            qmoe_weights_destroy(c->w);
            qmoe_weights_destroy(c->mw);
            c->w = c->mw = NULL;
            noblock = 1;
            st = QMOE_OK;
            s0 = -S;
            continue;
        }
        if (!st && mins) {
            int64_t mshape[3] = {n, MJ, ncp}, msshape[3] = {n, MG, ncp};
            st = tensor3(mshape, 3, QMOE_DTYPE_INT8, mvals, &tw);
            if (!st) st = scale_tensor(msshape, mscales, (size_t)(n * MG * ncp), mdt, &half, &ts);
            if (!st) st = s0 == 0 ? qmoe_weights_prepack(tw, ts, NULL, &mo, &c->mw) : qmoe_weights_append(c->mw, tw, ts, NULL);
            qmoe_tensor_destroy(tw);
            qmoe_tensor_destroy(ts);
            tw = ts = NULL;
            free(half);
            half = NULL;
        }
    }
    for (int p = 0; p < np; p++) {
        if (!st && own[p] && !w->fmt->scaled) { /* kept for a restart until now */
            release_source(ws[p], 1, 0, c->ne);
            own[p] = 2;
        }
        cs[p]->wdt = wdt;
        cs[p]->mdt = mdt;
        cs[p]->w = c->w;
        if (!st) st = qmoe_weights_tensor(c->w, &cs[p]->view);
    }
    if (!st && mins) st = qmoe_weights_tensor(c->mw, &c->mview);
done:
    free(vals);
    for (int64_t t = 0; parts && t < T; t++) {
        free(parts[t].rowq);
        free(parts[t].rowd);
        free(parts[t].rows);
    }
    free(parts);
    free(scales);
    free(bias);
    free(mvals);
    free(mscales);
    return st;
}

static qmoe_status build_chunk(qg_weight *w, qg_chunk *c)
{
    int own = 0;
    return build_parts(&w, &c, 1, &own, w->assist);
}

/* The side arrays: ggml's sizes bound E * N * (K / blk) * side by the tensor's own bytes. None
 * for the scaled formats. */
static int alloc_side(qg_weight *w)
{
    const qg_format *f = w->fmt;
    size_t cols = (size_t)w->E * (size_t)w->N, nb = (size_t)(w->K / f->blk);
    if (w->type == GGML_TYPE_MXFP4) { /* K / 8 bytes a row: below the row's own K / 32 * 17 */
        w->negzero = calloc(cols * (size_t)(w->K / 8) + 1, 1);
        if (w->negzero) return 1;
        qmoe_error_set(QMOE_ERR_INNER, QMOE_RULE_NONE, "weight", "ggml-qmoe: out of memory");
        return 0;
    }
    if (f->scaled) return 1;
    if (!f->mins) {
        w->side = malloc(cols * nb * (size_t)f->side + 1);
    } else {
        w->kd = malloc(cols * nb * sizeof(uint16_t) + 1);
        w->kdmin = malloc(cols * nb * sizeof(uint16_t) + 1);
        w->ksc = malloc(cols * nb * 8 + 1); /* 8 sub-blocks a super-block */
    }
    if (!f->mins ? !!w->side : (w->kd && w->kdmin && w->ksc)) return 1;
    qmoe_error_set(QMOE_ERR_INNER, QMOE_RULE_NONE, "weight", "ggml-qmoe: out of memory");
    return 0;
}

/* A weight of tensor t without its chunks: what every chunk reads (bytes: t's, wherever they are). */
static qg_weight *shell(const struct ggml_tensor *t, const void *bytes, size_t lo, size_t hi)
{
    const qg_format *f = qg_format_of(t->type);
    if (!f || t->ne[0] % f->blk) {
        qmoe_error_set(QMOE_ERR_PARAM_INVALID, QMOE_RULE_DTYPE, "weight",
                       "ggml-qmoe: the weight's type is not taken or its rows are not whole blocks");
        return NULL;
    }
    qg_weight *w = calloc(1, sizeof *w);
    if (!w) {
        qmoe_error_set(QMOE_ERR_INNER, QMOE_RULE_NONE, "weight", "ggml-qmoe: out of memory");
        return NULL;
    }
    if (pthread_mutex_init(&w->run, NULL)) {
        free(w);
        qmoe_error_set(QMOE_ERR_INNER, QMOE_RULE_NONE, "weight", "ggml-qmoe: no mutex");
        return NULL;
    }
    w->run_ready = 1;
    w->data = bytes; /* read by gather */
    w->lo = lo;
    w->hi = hi;
    w->type = t->type;
    w->fmt = f;
    for (int i = 0; i < 4; i++) {
        w->ne[i] = t->ne[i];
        w->nb[i] = t->nb[i];
    }
    w->K = t->ne[0];
    w->N = t->ne[1];
    w->E = t->ne[2] * t->ne[3]; /* ggml's sizes: their product fits in int64 */
    w->G = w->K / f->gs;
    if (!alloc_side(w)) {
        qg_weight_free(w);
        return NULL;
    }
    return w;
}

/* The -0 marks go when there are none (their calloc'ed pages were never touched). */
static void drop_negzero(qg_weight *w)
{
    if (w->n_negzero) return;
    free(w->negzero);
    w->negzero = NULL;
}

static int alloc_chunks(qg_weight *w, int64_t n)
{
    w->chunks = calloc((size_t)(n > 0 ? n : 1), sizeof *w->chunks);
    w->nchunks = w->chunks ? (int)n : 0;
    if (!w->chunks) qmoe_error_set(QMOE_ERR_INNER, QMOE_RULE_NONE, "weight", "ggml-qmoe: out of memory");
    return w->chunks != NULL;
}

static float scale_at(const void *sv, qmoe_dtype dt, int64_t g, int64_t ncp, int64_t cn);

static int f32_same(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

/* The integer sc in [lo, hi] of a group whose scale is s = d sc (exact in float32; q6_K's int8
 * sc, q4_K / q5_K's 6-bit ones) from s and d's bits: 1 when s / d is that integer and d sc gives
 * s back bit for bit, so the object's scales and d give the byte back. */
static int group_sc(float s, uint16_t dbits, int lo, int hi, int *sc)
{
    const float d = qg_half(dbits), r = s / d;
    if (!(r >= (float)lo && r <= (float)hi) || r != (float)(int)r) return 0; /* NaN, d 0 too */
    *sc = (int)r;
    return f32_same(d * (float)*sc, s);
}

/* q4_K / q5_K's dmin bits from the min object's scale -dmin */
static uint16_t kq_dmin(float mdmin) { return qg_half_bits(-mdmin); }

/* Side arrays the objects make redundant, dropped once the weight is built: every block is
 * checked to come back bit for bit (q6_K's sc and q4_K / q5_K's sc_j from the scales over d,
 * q4_K / q5_K's dmin from the min object's scales); any that does not (d 0 with sc not 0, a
 * NaN, ...) keeps them. Out of memory for the check keeps them too. */
static void slim_side(qg_weight *w)
{
    const qg_format *f = w->fmt;
    const int q6 = w->type == GGML_TYPE_Q6_K && w->side, ks = f->mins && w->ksc && w->kd;
    if (!q6 && !ks && !(f->mins && w->kdmin)) return;
    const int64_t nb = w->K / f->blk, N = w->N, J = nb * 8;
    const size_t nbk = (size_t)w->E * (size_t)nb * (size_t)N;
    uint16_t *d6 = q6 ? malloc(nbk * sizeof(uint16_t) + 1) : NULL;
    int kdmin_ok = f->mins && w->kdmin, sc_ok = (q6 && d6) || ks;
    for (int i = 0; i < w->nchunks && (kdmin_ok || sc_ok); i++) {
        const qg_chunk *c = &w->chunks[i];
        const int64_t ncp = qg_chunk_cols(c);
        /* the main object's scales (q6_K's sc, the K-quants' sc_j) and the min object's */
        void *wsv = q6 || ks ? malloc((size_t)(w->G * ncp) * sizeof(float) + 1) : NULL,
             *msv = f->mins ? malloc((size_t)(nb * ncp) * sizeof(float) + 1) : NULL;
        int ok = (!(q6 || ks) || wsv) && (!f->mins || msv);
        for (int64_t m = c->e0; ok && m < c->e0 + c->ne && (kdmin_ok || sc_ok); m++) {
            if ((wsv && qmoe_weights_unpack_scales(c->w, m - c->e0, c->wdt, wsv)) ||
                (msv && qmoe_weights_unpack_scales(c->mw, m - c->e0, c->mdt, msv)))
                ok = 0;
            for (int64_t n = c->n0; ok && n < c->n0 + c->nc; n++) {
                const int64_t cn = c->col + n - c->n0;
                for (int64_t b = 0; b < nb; b++) {
                    const size_t at = ((size_t)m * (size_t)nb + (size_t)b) * (size_t)N + (size_t)n;
                    int sc;
                    if (q6) {
                        const uint8_t *sb = w->side + (((size_t)m * (size_t)N + (size_t)n) * (size_t)nb + (size_t)b) * 18;
                        uint16_t db;
                        memcpy(&db, sb + 16, 2);
                        if (d6) d6[at] = db;
                        for (int g = 0; g < 16 && sc_ok; g++)
                            sc_ok = group_sc(scale_at(wsv, c->wdt, b * 16 + g, ncp, cn), db, -128, 127, &sc) &&
                                    (uint8_t)(int8_t)sc == sb[g];
                        continue;
                    }
                    for (int j = 0; j < 8 && ks && sc_ok; j++)
                        sc_ok = group_sc(scale_at(wsv, c->wdt, b * 8 + j, ncp, cn), w->kd[at], 0, 63, &sc) &&
                                sc == w->ksc[((size_t)m * (size_t)J + (size_t)(b * 8 + j)) * (size_t)N + (size_t)n];
                    if (kdmin_ok) kdmin_ok = kq_dmin(scale_at(msv, c->mdt, b, ncp, cn)) == w->kdmin[at];
                }
            }
        }
        if (!ok) kdmin_ok = sc_ok = 0;
        free(wsv);
        free(msv);
    }
    if (q6 && sc_ok) {
        free(w->side);
        w->side = NULL;
        w->kd = d6;
        d6 = NULL;
    }
    free(d6);
    if (ks && sc_ok) {
        free(w->ksc);
        w->ksc = NULL;
    }
    if (f->mins && kdmin_ok) {
        free(w->kdmin);
        w->kdmin = NULL;
    }
}

qg_weight *qg_weight_build(const struct ggml_tensor *t, const void *bytes, size_t lo, size_t hi)
{
    qg_weight *w = shell(t, bytes, lo, hi);
    int64_t ec = w ? (w->E + QG_MAX_EXPERTS - 1) / QG_MAX_EXPERTS : 0;
    int64_t nc = w ? (w->N + QG_MAX_COLS - 1) / QG_MAX_COLS : 0;
    if (w && !alloc_chunks(w, ec * nc)) {
        qg_weight_free(w);
        return NULL;
    }
    if (!w) return NULL;
    /* gate | up in one tensor (llama.cpp's name): the fused operator may run it */
    const char *gu = strstr(t->name, "ffn_gate_up_exps.weight");
    w->assist = gu && gu[strlen("ffn_gate_up_exps.weight")] == 0;
    int i = 0;
    for (int64_t e0 = 0; e0 < w->E; e0 += QG_MAX_EXPERTS) {
        for (int64_t n0 = 0; n0 < w->N; n0 += QG_MAX_COLS) {
            qg_chunk *c = &w->chunks[i++];
            c->e0 = e0;
            c->ne = w->E - e0 < QG_MAX_EXPERTS ? w->E - e0 : QG_MAX_EXPERTS;
            c->n0 = n0;
            c->nc = w->N - n0 < QG_MAX_COLS ? w->N - n0 : QG_MAX_COLS;
            c->pad = c->nc % 2;
            if (build_chunk(w, c)) {
                qg_weight_free(w);
                return NULL;
            }
        }
    }
    w->data = t->data; /* the weight is t's from now on, wherever its bytes were read */
    drop_negzero(w);
    slim_side(w);
    return w;
}

int qg_pairable(const struct ggml_tensor *a, const struct ggml_tensor *b)
{
    const qg_format *f = qg_format_of(a->type);
    /* no min term (the fused operator cannot add it before its SwiGLU); not mxfp4: gpt-oss, its
     * main model, has bias ADD_IDs between the matmuls and the GLU, so its FFN runs node by node,
     * where a paired half would compute its mate's columns too (pairing is decided at load,
     * before any graph) */
    if (!f || f->mins || a->type == GGML_TYPE_MXFP4 || b->type != a->type || a->ne[0] % f->blk) return 0;
    for (int i = 0; i < 4; i++)
        if (a->ne[i] != b->ne[i] || a->nb[i] != b->nb[i]) return 0;
    return a->ne[3] == 1 && a->ne[1] > 1 && a->ne[2] <= QG_MAX_EXPERTS && 2 * a->ne[1] <= QG_MAX_COLS &&
           ggml_is_contiguous(a) && ggml_is_contiguous(b);
}

int qg_weight_build_pair(const struct ggml_tensor *const t[2], const void *const bytes[2],
                         const size_t lo[2], const size_t hi[2], int own[2], qg_weight *w[2])
{
    if (!qg_pairable(t[0], t[1])) {
        qmoe_error_set(QMOE_ERR_PARAM_INVALID, QMOE_RULE_SHAPE, "weight",
                       "ggml-qmoe: these gate and up weights cannot share one object");
        return 0;
    }
    qg_weight *ws[2] = {NULL, NULL};
    qg_chunk *cs[2];
    int ok = 1;
    for (int p = 0; p < 2 && ok; p++) {
        ok = (ws[p] = shell(t[p], bytes[p], lo[p], hi[p])) && alloc_chunks(ws[p], 1);
        if (!ok) break;
        cs[p] = &ws[p]->chunks[0];
        cs[p]->ne = ws[p]->E;
        cs[p]->nc = ws[p]->N;
        cs[p]->col = p ? ws[p]->N : 0;
        cs[p]->pad = p ? 0 : ws[p]->N;
    }
    if (ok && build_parts(ws, cs, 2, own, 1)) ok = 0;
    if (!ok) {
        if (ws[1] && ws[1]->nchunks) ws[1]->chunks[0].w = NULL; /* the object is the gate's to free */
        qg_weight_free(ws[0]);
        qg_weight_free(ws[1]);
        return 0;
    }
    for (int p = 0; p < 2; p++) {
        ws[p]->data = t[p]->data;
        drop_negzero(ws[p]);
        slim_side(ws[p]);
        ws[p]->mate = ws[1 - p];
        ws[p]->assist = 1;
        w[p] = ws[p];
    }
    return 1;
}

void qg_weight_free(qg_weight *w)
{
    if (!w) return;
    for (int i = 0; i < w->nchunks; i++) {
        qg_chunk *c = &w->chunks[i];
        for (int p = 0; p < QG_PLANS; p++) {
            qmoe_op_destroy(c->plans.p[p].op);
            qmoe_op_destroy(c->mplans.p[p].op);
        }
        for (int p = 0; p < QG_PLANS; p++) qmoe_op_destroy(c->fplans.p[p].op);
        qmoe_tensor_destroy(c->view);
        qmoe_tensor_destroy(c->mview);
        if (!w->mate) qmoe_weights_destroy(c->w); /* a pair's object: the mate's now */
        qmoe_weights_destroy(c->mw);
    }
    if (w->mate) w->mate->mate = NULL;
    free(w->chunks);
    free(w->side);
    free(w->kd);
    free(w->kdmin);
    free(w->ksc);
    free(w->negzero);
    if (w->run_ready) pthread_mutex_destroy(&w->run);
    free(w);
}

int qg_weight_contiguous(const qg_weight *w)
{
    size_t row = (size_t)(w->K / w->fmt->blk) * (size_t)w->fmt->bytes;
    return w->nb[1] == row && w->nb[2] == row * (size_t)w->ne[1] &&
           w->nb[3] == w->nb[2] * (size_t)w->ne[2] && w->hi - w->lo == w->nb[3] * (size_t)w->ne[3];
}

/* Scale g of column cn of an expert's scales [G, ncp] in dtype dt (qmoe_weights_unpack_scales). */
static float scale_at(const void *sv, qmoe_dtype dt, int64_t g, int64_t ncp, int64_t cn)
{
    size_t i = (size_t)g * (size_t)ncp + (size_t)cn;
    if (dt == QMOE_DTYPE_FLOAT32) return ((const float *)sv)[i];
    uint16_t h = ((const uint16_t *)sv)[i];
    if (dt == QMOE_DTYPE_FLOAT16) return qg_half(h);
    uint32_t b = (uint32_t)h << 16;
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

/* Side bytes of row (m, n): the kept ones; a scaled format's from the object's scales, unpacked
 * in sv [G, ncp]; or q4_K / q5_K's rebuilt from d, dmin (kept, or the min object's scales in
 * msv), the m_j of the min object, unpacked in mv [K/32, ncp] (this row's at column cn), and the
 * sc_j (ksc, or the scales in sv over d). */
static void row_side(const qg_weight *w, const qg_chunk *c, int64_t m, int64_t n, const void *sv,
                     const int8_t *mv, const void *msv, int64_t ncp, int64_t cn, uint8_t *out)
{
    const int64_t nb = w->K / w->fmt->blk, N = w->N, J = nb * 8;
    if (w->fmt->scaled) { /* one scale a block: group b */
        for (int64_t b = 0; b < nb; b++)
            qg_side_of_scale(w->type, scale_at(sv, c->wdt, b, ncp, cn), out + b * w->fmt->side);
        return;
    }
    if (w->side) {
        size_t sz = (size_t)(nb * w->fmt->side);
        memcpy(out, w->side + ((size_t)m * (size_t)N + (size_t)n) * sz, sz);
        return;
    }
    for (int64_t b = 0; b < nb; b++) {
        size_t at = ((size_t)m * (size_t)nb + (size_t)b) * (size_t)N + (size_t)n;
        if (!w->fmt->mins) { /* q6_K: sc from the scales over d (slim_side checked each) */
            uint8_t *sb = out + b * 18;
            for (int g = 0; g < 16; g++) {
                int sc = 0;
                (void)group_sc(scale_at(sv, c->wdt, b * 16 + g, ncp, cn), w->kd[at], -128, 127, &sc);
                sb[g] = (uint8_t)(int8_t)sc;
            }
            memcpy(sb + 16, &w->kd[at], 2);
            continue;
        }
        uint8_t *sb = out + b * 16, sc[8], mn[8];
        const uint16_t d = w->kd[at],
                       dmin = w->kdmin ? w->kdmin[at] : kq_dmin(scale_at(msv, c->mdt, b, ncp, cn));
        memcpy(sb, &d, 2);
        memcpy(sb + 2, &dmin, 2);
        for (int j = 0; j < 8; j++) {
            int v = 0; /* without ksc: the scale over d (slim_side checked each) */
            if (w->ksc) v = w->ksc[((size_t)m * (size_t)J + (size_t)(b * 8 + j)) * (size_t)N + (size_t)n];
            else (void)group_sc(scale_at(sv, c->wdt, b * 8 + j, ncp, cn), d, 0, 63, &v);
            sc[j] = (uint8_t)v;
            mn[j] = (uint8_t)mv[(size_t)(b * 8 + j) * (size_t)ncp + (size_t)cn];
        }
        qg_kq_pack(sc, mn, sb + 4);
    }
}

qmoe_status qg_weight_encode(const qg_weight *w, size_t a, size_t z, uint8_t *out)
{
    const size_t rowb = w->nb[1];
    const int64_t K = w->K, N = w->N;
    size_t lo = a > w->lo ? a : w->lo, hi = z < w->hi ? z : w->hi;
    if (lo >= hi) return QMOE_OK;
    int64_t r0 = (int64_t)((lo - w->lo) / rowb), r1 = (int64_t)((hi - w->lo - 1) / rowb) + 1;
    int8_t *vals = NULL, *mv = NULL, *rowq = malloc((size_t)K);
    void *sv = NULL, *msv = NULL;
    /* the object's scales: a scaled format's block scales, q6_K's sc (side dropped), q4_K /
     * q5_K's sc (ksc dropped); the min
     * object's: q4_K / q5_K's d or dmin (dropped) */
    const int want_sv = w->fmt->scaled || (!w->fmt->mins && !w->side) ||
                        (w->fmt->mins && !w->ksc),
              want_msv = w->fmt->mins && !w->kdmin;
    uint8_t *side = malloc((size_t)(K / w->fmt->blk * w->fmt->side)), *row = malloc(rowb);
    qmoe_status st = rowq && side && row ? QMOE_OK
                                          : qmoe_error_set(QMOE_ERR_INNER, QMOE_RULE_NONE, "weight",
                                                           "ggml-qmoe: out of memory reading a weight back");
    /* rows r0 .. r1 - 1, row r = matrix r / N, column r % N; a chunk's expert unpacked once */
    for (int i = 0; !st && i < w->nchunks; i++) {
        const qg_chunk *c = &w->chunks[i];
        const int64_t ncp = qg_chunk_cols(c);
        for (int64_t m = c->e0; !st && m < c->e0 + c->ne; m++) {
            int64_t n0 = m * N + c->n0, n1 = n0 + c->nc; /* this chunk's rows of matrix m */
            if (n1 <= r0 || n0 >= r1) continue;
            if (!vals) { /* K * ncp bytes: at most the chunk's own int8 weight of one expert */
                vals = malloc((size_t)K * (size_t)ncp + 1);
                mv = c->mw ? malloc((size_t)qg_min_rows(K) * (size_t)ncp + 1) : NULL;
                sv = want_sv ? malloc((size_t)w->G * (size_t)ncp * sizeof(float) + 1) : NULL;
                msv = want_msv ? malloc((size_t)(qg_min_rows(K) / 8) * (size_t)ncp * sizeof(float) + 1)
                               : NULL;
                if (!vals || (c->mw && !mv) || (want_sv && !sv) || (want_msv && !msv)) {
                    st = qmoe_error_set(QMOE_ERR_INNER, QMOE_RULE_NONE, "weight",
                                        "ggml-qmoe: out of memory reading a weight back");
                    break;
                }
            }
            if ((st = qmoe_weights_unpack(c->w, m - c->e0, vals))) break;
            if (c->mw && (st = qmoe_weights_unpack(c->mw, m - c->e0, mv))) break;
            if (sv && (st = qmoe_weights_unpack_scales(c->w, m - c->e0, c->wdt, sv))) break;
            if (msv && (st = qmoe_weights_unpack_scales(c->mw, m - c->e0, c->mdt, msv))) break;
            for (int64_t r = n0 > r0 ? n0 : r0; r < (n1 < r1 ? n1 : r1); r++) {
                int64_t n = r - m * N;
                const int64_t cn = c->col + n - c->n0; /* its column in the object */
                for (int64_t k = 0; k < K; k++) rowq[k] = vals[(size_t)k * (size_t)ncp + (size_t)cn];
                row_side(w, c, m, n, sv, mv, msv, ncp, cn, side);
                qg_encode_row(w->type, rowq, side, K, row);
                if (w->negzero) qg_row_put_negative_zeros(w->type, w->negzero + (size_t)r * (size_t)(K / 8), K, row);
                size_t ra = w->lo + (size_t)r * rowb, s = ra > lo ? ra : lo, e = ra + rowb < hi ? ra + rowb : hi;
                memcpy(out + (s - a), row + (s - ra), e - s);
            }
        }
        free(vals); /* chunks differ in width */
        free(mv);
        free(sv);
        free(msv);
        vals = mv = NULL;
        sv = msv = NULL;
    }
    free(rowq);
    free(side);
    free(row);
    return st;
}
