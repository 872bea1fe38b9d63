/* The device's buffer type: host memory that keeps ggml's bytes as they were set (get_tensor
 * returns them) and, beside them, the prepacked form of the q8_0 / q4_0 weights read from it.
 * It says is_host = false so every write comes through set_tensor / memset / clear, which drop
 * the converted weights that overlap the bytes written (llama.cpp reads a host buffer's weights
 * straight into tensor->data, which a converted copy would never see). */
#include <stdlib.h>
#include <string.h>

#include "qmoe_ggml.h"

#define QG_ALIGN 64


static void drop_range(qg_buffer *b, size_t lo, size_t hi)
{
    qg_weight **p = &b->weights;
    while (*p) {
        qg_weight *w = *p;
        if (w->lo < hi && lo < w->hi) {
            *p = w->next;
            qg_weight_free(w);
        } else {
            p = &w->next;
        }
    }
}

static void buf_free(ggml_backend_buffer_t buffer)
{
    qg_buffer *b = buffer->context;
    drop_range(b, 0, SIZE_MAX);
    pthread_mutex_destroy(&b->lock);
    free(b->base);
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
    return f && t->ne[0] % f->blk == 0 && t->ne[1] > 1;
}

static void buf_memset(ggml_backend_buffer_t buffer, struct ggml_tensor *t, uint8_t value,
                       size_t offset, size_t size)
{
    qg_buffer *b = buffer->context;
    size_t at = offset_of(b, t) + offset;
    pthread_mutex_lock(&b->lock);
    drop_range(b, at, at + size);
    pthread_mutex_unlock(&b->lock);
    memset(b->base + at, value, size);
}

static void buf_set(ggml_backend_buffer_t buffer, struct ggml_tensor *t, const void *data,
                    size_t offset, size_t size)
{
    qg_buffer *b = buffer->context;
    size_t at = offset_of(b, t) + offset;
    pthread_mutex_lock(&b->lock);
    drop_range(b, at, at + size);
    pthread_mutex_unlock(&b->lock);
    memcpy(b->base + at, data, size);
    /* A model's weights are converted once, here, as they are loaded; anything else on first use */
    if (buffer->usage == GGML_BACKEND_BUFFER_USAGE_WEIGHTS && offset == 0 &&
        size == ggml_nbytes(t) && whole_weight(t) && !qg_buffer_weight(buffer, t))
        qg_log_error("converting a weight at load (retried on first use)");
}

static void buf_get(ggml_backend_buffer_t buffer, const struct ggml_tensor *t, void *data,
                    size_t offset, size_t size)
{
    qg_buffer *b = buffer->context;
    memcpy(data, b->base + offset_of(b, t) + offset, size);
}

static void buf_clear(ggml_backend_buffer_t buffer, uint8_t value)
{
    qg_buffer *b = buffer->context;
    pthread_mutex_lock(&b->lock);
    drop_range(b, 0, SIZE_MAX);
    pthread_mutex_unlock(&b->lock);
    memset(b->base, value, b->size);
}

static void buf_reset(ggml_backend_buffer_t buffer)
{
    qg_buffer *b = buffer->context;
    pthread_mutex_lock(&b->lock);
    drop_range(b, 0, SIZE_MAX);
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

qg_weight *qg_buffer_weight(ggml_backend_buffer_t buffer, const struct ggml_tensor *t)
{
    qg_buffer *b = buffer->context;
    size_t lo = offset_of(b, t), hi = lo + ggml_nbytes(t);
    pthread_mutex_lock(&b->lock);
    qg_weight *w = b->weights;
    for (; w; w = w->next) {
        int same = w->data == t->data && w->type == t->type;
        for (int i = 0; same && i < 4; i++) same = w->ne[i] == t->ne[i] && w->nb[i] == t->nb[i];
        if (same) break;
    }
    if (!w && (w = qg_weight_build(t, lo, hi))) {
        w->next = b->weights;
        b->weights = w;
    }
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
    size_t n = size ? size : 1;
    if (n > SIZE_MAX - QG_ALIGN) n = 0;
    n = (n + QG_ALIGN - 1) / QG_ALIGN * QG_ALIGN;
    if (!b || !n || !(b->base = aligned_alloc(QG_ALIGN, n))) {
        free(b);
        qmoe_error_set(QMOE_ERR_INNER, QMOE_RULE_NONE, "buffer", "out of memory for a buffer");
        qg_log_error("allocating a buffer");
        return NULL;
    }
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
