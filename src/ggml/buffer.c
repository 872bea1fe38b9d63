/* The device's buffer type: host memory that holds ggml's bytes until a weight is converted into
 * qmoe's prepacked form, then gives the weight's whole pages back to the system (the prepacked
 * object and the side arrays hold everything; get_tensor regenerates the bytes from them), so a
 * model is not held twice. It says is_host = false so every write comes through set_tensor /
 * memset / clear (llama.cpp reads a host buffer's weights straight into tensor->data, which a
 * converted copy would never see); a write over a converted weight first puts its bytes back,
 * then drops it. A weight written whole in one set_tensor call (what llama.cpp's loader does) is
 * converted from the caller's bytes and never copied in; one loaded in several calls is copied
 * and converted when its whole byte range has arrived. Either way a weight's source pages in a
 * read-only file mapping (llama.cpp's mmap'd model) are dropped from the process once read
 * (source.c). */
#define _DEFAULT_SOURCE /* madvise, MAP_ANONYMOUS */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "qmoe_ggml.h"

#define QG_ALIGN 64
#define QG_PIECES 64 /* pieces of one tensor tracked before it is left to convert on first use */

/* A weight tensor whose bytes are arriving in pieces: the merged ranges received so far. */
typedef struct qg_pending {
    const void *data;
    enum ggml_type type;
    size_t lo, hi;
    int n;
    size_t got[QG_PIECES][2];
    struct qg_pending *next;
} qg_pending;

/* A layer's gate or up expert weight written whole before its mate: its bytes wait in the buffer
 * (its own pages, dropped as the pair is converted), so the two become one prepacked object
 * (qg_weight_build_pair) without a second copy of either. lost: converting the pair failed after
 * some of its pages were dropped; the weight reports that rather than reading zeros. */
typedef struct qg_waiting {
    struct ggml_tensor t; /* a copy of the tensor: name, type, shape, layout, data */
    int role, layer, lost;
    size_t lo, hi;
    struct qg_waiting *next;
} qg_waiting;

static size_t page_size(void)
{
    long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? (size_t)p : 4096;
}

/* Writes the converted weight's bytes back into the buffer where its pages were given back. */
static void restore(qg_buffer *b, qg_weight *w)
{
    if (!w->released) return;
    if (qg_weight_encode(w, w->lo, w->hi, b->base + w->lo))
        qg_log_error("putting a converted weight's bytes back (they read as zeros)");
    w->released = 0;
}

/* Gives back the whole pages of w's bytes when nothing else (a view's weight) reads them. */
static void release(qg_buffer *b, qg_weight *w)
{
    if (!qg_weight_contiguous(w)) return;
    for (qg_weight *o = b->weights; o; o = o->next)
        if (o != w && o->lo < w->hi && w->lo < o->hi) return;
    size_t ps = page_size(), a = (w->lo + ps - 1) / ps * ps, z = w->hi / ps * ps;
    uintptr_t base = (uintptr_t)b->base; /* page aligned: mmap */
    if (z > a && madvise((void *)(base + a), z - a, MADV_DONTNEED) == 0) w->released = 1;
}

static void drop_pending(qg_buffer *b, size_t lo, size_t hi)
{
    qg_pending **p = (qg_pending **)&b->pending;
    while (*p) {
        qg_pending *q = *p;
        if (q->lo < hi && lo < q->hi) {
            *p = q->next;
            free(q);
        } else {
            p = &q->next;
        }
    }
}

static void drop_waiting(qg_buffer *b, size_t lo, size_t hi)
{
    qg_waiting **p = (qg_waiting **)&b->waiting;
    while (*p) {
        qg_waiting *q = *p;
        if (q->lo < hi && lo < q->hi) {
            *p = q->next;
            free(q);
        } else {
            p = &q->next;
        }
    }
}

/* Drops the converted weights (and pieces) that overlap [lo, hi), their bytes put back first. */
static void drop_range(qg_buffer *b, size_t lo, size_t hi)
{
    qg_weight **p = &b->weights;
    while (*p) {
        qg_weight *w = *p;
        if (w->lo < hi && lo < w->hi) {
            if (w->lo < lo || hi < w->hi) restore(b, w); /* bytes the write leaves stay valid */
            *p = w->next;
            qg_weight_free(w);
        } else {
            p = &w->next;
        }
    }
    drop_waiting(b, lo, hi);
}

static void buf_free(ggml_backend_buffer_t buffer)
{
    qg_buffer *b = buffer->context;
    while (b->weights) { /* the bytes go too: nothing to put back */
        qg_weight *w = b->weights;
        b->weights = w->next;
        qg_weight_free(w);
    }
    drop_pending(b, 0, SIZE_MAX);
    drop_waiting(b, 0, SIZE_MAX);
    pthread_mutex_destroy(&b->lock);
    munmap(b->base, b->mapped);
    free(b);
}

static void *buf_base(ggml_backend_buffer_t buffer) { return ((qg_buffer *)buffer->context)->base; }

static size_t offset_of(const qg_buffer *b, const struct ggml_tensor *t)
{
    return (size_t)((const uint8_t *)t->data - b->base);
}

static int whole_weight(const struct ggml_tensor *t)
{
    const qg_format *f = qg_format_of(t->type);
    return f && t->ne[0] % f->blk == 0 && t->ne[1] > 1 && ggml_is_contiguous(t);
}

static void buf_memset(ggml_backend_buffer_t buffer, struct ggml_tensor *t, uint8_t value,
                       size_t offset, size_t size)
{
    qg_buffer *b = buffer->context;
    size_t at = offset_of(b, t) + offset;
    pthread_mutex_lock(&b->lock);
    drop_range(b, at, at + size);
    drop_pending(b, at, at + size);
    memset(b->base + at, value, size);
    pthread_mutex_unlock(&b->lock);
}

/* Records piece [lo, hi) of tensor t; 1 when t's whole range has now arrived. */
static int piece_arrived(qg_buffer *b, const struct ggml_tensor *t, size_t lo, size_t hi)
{
    size_t tlo = offset_of(b, t), thi = tlo + ggml_nbytes(t);
    qg_pending *q = b->pending;
    while (q && !(q->data == t->data && q->type == t->type && q->lo == tlo && q->hi == thi)) q = q->next;
    if (!q) {
        drop_pending(b, tlo, thi); /* pieces of another tensor over these bytes: stale */
        if (!(q = calloc(1, sizeof *q))) return 0; /* left to convert on first use */
        q->data = t->data;
        q->type = t->type;
        q->lo = tlo;
        q->hi = thi;
        q->next = b->pending;
        b->pending = q;
    }
    /* merge [lo, hi) into the sorted, disjoint ranges */
    size_t nlo = lo, nhi = hi;
    int k = 0;
    size_t keep[QG_PIECES][2];
    for (int i = 0; i < q->n; i++) {
        if (q->got[i][1] < nlo || q->got[i][0] > nhi) {
            keep[k][0] = q->got[i][0];
            keep[k++][1] = q->got[i][1];
        } else {
            nlo = q->got[i][0] < nlo ? q->got[i][0] : nlo;
            nhi = q->got[i][1] > nhi ? q->got[i][1] : nhi;
        }
    }
    if (nlo == tlo && nhi == thi) {
        drop_pending(b, tlo, thi);
        return 1;
    }
    if (k == QG_PIECES) { /* too scattered: convert on first use */
        drop_pending(b, tlo, thi);
        return 0;
    }
    int at = 0;
    while (at < k && keep[at][0] < nlo) at++;
    memmove(&keep[at + 1], &keep[at], (size_t)(k - at) * sizeof keep[0]);
    keep[at][0] = nlo;
    keep[at][1] = nhi;
    memcpy(q->got, keep, (size_t)(k + 1) * sizeof keep[0]);
    q->n = k + 1;
    return 0;
}

static qg_weight *weight_locked(ggml_backend_buffer_t buffer, const struct ggml_tensor *t);

/* 0: a layer's ffn_gate_exps, 1: its ffn_up_exps (llama.cpp's names), -1: neither. */
static int pair_role(const struct ggml_tensor *t, int *layer)
{
    int n = 0;
    if (sscanf(t->name, "blk.%d.%n", layer, &n) != 1 || n == 0) return -1;
    if (strcmp(t->name + n, "ffn_gate_exps.weight") == 0) return 0;
    return strcmp(t->name + n, "ffn_up_exps.weight") == 0 ? 1 : -1;
}

static void add_weight(qg_buffer *b, qg_weight *w)
{
    w->next = b->weights;
    b->weights = w;
}

/* Tensor t (role 0 / 1 of a layer) written whole from `data`: paired with its waiting mate, or
 * left waiting for it; 1 when done, 0 to convert it alone. */
static int set_paired(qg_buffer *b, const struct ggml_tensor *t, const void *data, size_t at, size_t size)
{
    int layer, role = pair_role(t, &layer);
    if (role < 0 || !qg_pairable(t, t)) return 0;
    qg_waiting **p = (qg_waiting **)&b->waiting, *q;
    while ((q = *p) && !(q->layer == layer && q->role == 1 - role && !q->lost &&
                         qg_pairable(role ? &q->t : t, role ? t : &q->t)))
        p = &q->next;
    if (!q) { /* the first of the two */
        if (!(q = calloc(1, sizeof *q))) return 0;
        /* copied in a piece at a time, each piece's source pages dropped once copied (a file
         * mapping's: source.c), so the tensor is not held twice while it is copied */
        const size_t piece = (size_t)16 << 20;
        for (size_t o = 0; o < size; o += piece) {
            size_t n = size - o < piece ? size - o : piece;
            memcpy(b->base + at + o, (const uint8_t *)data + o, n);
            qg_source_release((const uint8_t *)data + o, n);
        }
        q->t = *t;
        q->role = role;
        q->layer = layer;
        q->lo = at;
        q->hi = at + size;
        q->next = b->waiting;
        b->waiting = q;
        return 1;
    }
    const int g = role; /* the waiting one is the gate when this is the up */
    const struct ggml_tensor *ts[2] = {g ? &q->t : t, g ? t : &q->t};
    const void *bytes[2] = {g ? b->base + q->lo : data, g ? data : b->base + q->lo};
    const size_t lo[2] = {g ? q->lo : at, g ? at : q->lo}, hi[2] = {g ? q->hi : at + size, g ? at + size : q->hi};
    int own[2] = {g, !g}; /* the waiting one's pages are the buffer's: own[1 - g] */
    qg_weight *w[2];
    if (!qg_weight_build_pair(ts, bytes, lo, hi, own, w)) {
        qg_log_error("pairing a layer's gate and up weights (each converted alone)");
        q->lost = own[1 - g] == 2; /* some of its pages went before the failure */
        return 0;
    }
    for (int i = 0; i < 2; i++) {
        add_weight(b, w[i]);
        if (i == g) release(b, w[i]); /* pages of the caller's one written before, if any */
        w[i]->released = 1;           /* neither's bytes are held: get_tensor encodes them */
    }
    qg_log_debug("gate and up paired: GroupedMatmulSwigluQuant runs them", ts[0]->name);
    /* freed last: ts[] may point at the waiting one's copy of its tensor */
    *p = q->next;
    free(q);
    return 1;
}

/* A whole weight in one write, over bytes no other weight or piece shares: converted straight from
 * the caller's bytes, so its pages in the buffer are never written (no copy, no page faults, one
 * tensor less at the load's peak); 1 when done. (mxfp4's -0 codes, which the integers cannot
 * hold, are marked in the weight: qg_weight_encode writes them back.) */
static int set_converted(qg_buffer *b, const struct ggml_tensor *t, const void *data, size_t at,
                         size_t size)
{
    size_t hi = at + size;
    for (qg_weight *o = b->weights; o; o = o->next)
        if (o->lo < hi && at < o->hi) return 0;
    for (qg_pending *q = b->pending; q; q = q->next)
        if (q->lo < hi && at < q->hi) return 0;
    if (set_paired(b, t, data, at, size)) return 1;
    qg_weight *w = qg_weight_build(t, data, at, hi);
    if (!w) return 0;
    w->next = b->weights;
    b->weights = w;
    if (!qg_weight_contiguous(w)) {
        memcpy(b->base + at, data, size);
        return 1;
    }
    release(b, w);    /* pages written before this weight arrived, if any */
    w->released = 1; /* the buffer does not hold the bytes: get_tensor and restore encode them */
    return 1;
}

static void buf_set(ggml_backend_buffer_t buffer, struct ggml_tensor *t, const void *data,
                    size_t offset, size_t size)
{
    qg_buffer *b = buffer->context;
    size_t at = offset_of(b, t) + offset;
    pthread_mutex_lock(&b->lock);
    drop_range(b, at, at + size);
    if (buffer->usage == GGML_BACKEND_BUFFER_USAGE_WEIGHTS && whole_weight(t) && offset == 0 &&
        size == ggml_nbytes(t) && set_converted(b, t, data, at, size)) {
        pthread_mutex_unlock(&b->lock);
        qg_source_release(data, size);
        return;
    }
    memcpy(b->base + at, data, size);
    if (buffer->usage == GGML_BACKEND_BUFFER_USAGE_WEIGHTS) qg_source_release(data, size);
    /* A model's weights are converted once, here, when the whole tensor has arrived (llama.cpp
     * may load it in pieces); anything else on first use */
    if (buffer->usage == GGML_BACKEND_BUFFER_USAGE_WEIGHTS && whole_weight(t) &&
        piece_arrived(b, t, at, at + size) && !weight_locked(buffer, t))
        qg_log_error("converting a weight at load (retried on first use)");
    else if (buffer->usage != GGML_BACKEND_BUFFER_USAGE_WEIGHTS)
        drop_pending(b, at, at + size);
    pthread_mutex_unlock(&b->lock);
}

static void buf_get(ggml_backend_buffer_t buffer, const struct ggml_tensor *t, void *data,
                    size_t offset, size_t size)
{
    qg_buffer *b = buffer->context;
    size_t at = offset_of(b, t) + offset;
    pthread_mutex_lock(&b->lock);
    memcpy(data, b->base + at, size); /* given-back pages read as zeros: patched below */
    for (qg_weight *w = b->weights; w; w = w->next)
        if (w->released && w->lo < at + size && at < w->hi && qg_weight_encode(w, at, at + size, data))
            qg_log_error("reading a converted weight back");
    pthread_mutex_unlock(&b->lock);
}

static void buf_clear(ggml_backend_buffer_t buffer, uint8_t value)
{
    qg_buffer *b = buffer->context;
    pthread_mutex_lock(&b->lock);
    drop_range(b, 0, SIZE_MAX);
    drop_pending(b, 0, SIZE_MAX);
    memset(b->base, value, b->size);
    pthread_mutex_unlock(&b->lock);
}

static void buf_reset(ggml_backend_buffer_t buffer)
{
    qg_buffer *b = buffer->context;
    pthread_mutex_lock(&b->lock);
    drop_range(b, 0, SIZE_MAX);
    drop_pending(b, 0, SIZE_MAX);
    pthread_mutex_unlock(&b->lock);
}

static const struct ggml_backend_buffer_i buffer_iface = {
    .free_buffer = buf_free,
    .get_base = buf_base,
    .init_tensor = NULL,
    .memset_tensor = buf_memset,
    .set_tensor = buf_set,
    .get_tensor = buf_get,
    .set_tensor_2d = NULL,
    .get_tensor_2d = NULL,
    .cpy_tensor = NULL,
    .clear = buf_clear,
    .reset = buf_reset,
};

/* qg_buffer_weight with the buffer's lock held. */
static qg_weight *weight_locked(ggml_backend_buffer_t buffer, const struct ggml_tensor *t)
{
    qg_buffer *b = buffer->context;
    size_t lo = offset_of(b, t), hi = lo + ggml_nbytes(t);
    qg_weight *w = b->weights;
    for (; w; w = w->next) {
        int same = w->data == t->data && w->type == t->type;
        for (int i = 0; same && i < 4; i++) same = w->ne[i] == t->ne[i] && w->nb[i] == t->nb[i];
        if (same) return w;
    }
    /* a waiting half whose mate has not come is converted alone now, from its bytes here */
    for (qg_waiting *q = b->waiting; q; q = q->next)
        if (q->lo < hi && lo < q->hi && q->lost) {
            qmoe_error_set(QMOE_ERR_INNER, QMOE_RULE_NONE, "weight",
                           "ggml-qmoe: the weight's bytes were dropped while pairing it failed; load it again");
            return NULL;
        }
    drop_waiting(b, lo, hi);
    /* converting reads the bytes: those of a converted weight it overlaps (a view) come back */
    for (qg_weight *o = b->weights; o; o = o->next)
        if (o->lo < hi && lo < o->hi) restore(b, o);
    if ((w = qg_weight_build(t, t->data, lo, hi))) {
        w->next = b->weights;
        b->weights = w;
        release(b, w);
    }
    return w;
}

qg_weight *qg_buffer_weight(ggml_backend_buffer_t buffer, const struct ggml_tensor *t)
{
    qg_buffer *b = buffer->context;
    pthread_mutex_lock(&b->lock);
    qg_weight *w = weight_locked(buffer, t);
    pthread_mutex_unlock(&b->lock);
    return w;
}

static const char *buft_name(ggml_backend_buffer_type_t buft)
{
    (void)buft;
    return QG_NAME;
}

static ggml_backend_buffer_t buft_alloc(ggml_backend_buffer_type_t buft, size_t size)
{
    qg_buffer *b = calloc(1, sizeof *b);
    size_t ps = page_size(), n = size ? size : 1;
    n = n > SIZE_MAX - ps ? 0 : (n + ps - 1) / ps * ps;
    /* anonymous pages: untouched ones cost nothing, given-back ones (madvise) read as zeros */
    void *p = b && n ? mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) : MAP_FAILED;
    if (p == MAP_FAILED) {
        free(b);
        qmoe_error_set(QMOE_ERR_INNER, QMOE_RULE_NONE, "buffer", "out of memory for a buffer");
        qg_log_error("allocating a buffer");
        return NULL;
    }
    b->base = p;
    b->mapped = n;
    b->size = size;
    pthread_mutex_init(&b->lock, NULL);
    return ggml_backend_buffer_init(buft, buffer_iface, b, size);
}

static size_t buft_alignment(ggml_backend_buffer_type_t buft)
{
    (void)buft;
    return QG_ALIGN;
}

static bool buft_is_host(ggml_backend_buffer_type_t buft)
{
    (void)buft;
    return false;
}

ggml_backend_buffer_type_t qg_buffer_type(void)
{
    static struct ggml_backend_buffer_type buft = {
        .iface = {
            .get_name = buft_name,
            .alloc_buffer = buft_alloc,
            .get_alignment = buft_alignment,
            .get_max_size = NULL,
            .get_alloc_size = NULL,
            .is_host = buft_is_host,
        },
        .device = NULL, /* set by ggml_backend_init (backend.c) */
        .context = NULL,
    };
    return &buft;
}

/* ggml makes a zero-byte buffer itself, without calling alloc_buffer (no context, no interface):
 * llama.cpp's loader probes supports_op with one, so the type alone says "ours" */
int qg_buffer_is_ours(ggml_backend_buffer_t buffer)
{
    return buffer && buffer->buft == qg_buffer_type();
}

int qg_buffer_holds_data(ggml_backend_buffer_t buffer)
{
    return qg_buffer_is_ours(buffer) && buffer->iface.get_base == buf_base && buffer->context;
}
