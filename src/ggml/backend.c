/* The registry, the device and the backend of libggml-qmoe.so: one ACCEL device named QMOE whose
 * buffer type holds the MoE experts as qmoe prepacked weights and whose backend runs the
 * MUL_MAT_ID / MUL_MAT nodes over them. Loaded with GGML_BACKEND_PATH or ggml_backend_load(). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "qmoe_ggml.h"

#define QG_EXPORT __attribute__((visibility("default")))


/* ---- the backend ---- */

static const char *be_name(ggml_backend_t backend)
{
    (void)backend;
    return QG_NAME;
}

static void be_free(ggml_backend_t backend)
{
    qg_context *ctx = backend->context;
    qg_context_release(ctx);
    qg_pool_destroy(ctx->pool); /* after the device that ran on it */
    free(ctx);
    free(backend);
}

static int is_layout_only(const struct ggml_tensor *t)
{
    return t->op == GGML_OP_NONE || t->op == GGML_OP_VIEW || t->op == GGML_OP_RESHAPE ||
           t->op == GGML_OP_PERMUTE || t->op == GGML_OP_TRANSPOSE;
}

static enum ggml_status be_compute(ggml_backend_t backend, struct ggml_cgraph *graph)
{
    qg_context *ctx = backend->context;
    for (int i = 0; i < ggml_graph_n_nodes(graph); i++) {
        struct ggml_tensor *node = ggml_graph_node(graph, i);
        if (is_layout_only(node) || ggml_is_empty(node)) continue;
        enum ggml_status st = GGML_STATUS_SUCCESS;
        int taken = node->op == GGML_OP_MUL_MAT_ID ? qg_compute_moe_ffn(ctx, graph, i, &st) : 0;
        if (taken) {
            if (st != GGML_STATUS_SUCCESS) return st;
            i += taken - 1;
            continue;
        }
        if (node->op == GGML_OP_MUL_MAT || node->op == GGML_OP_MUL_MAT_ID) {
            /* the experts' weighting after it, written by the matmul's scatter */
            struct ggml_tensor *mul = ctx->fuse ? qg_mul_after(graph, i) : NULL;
            st = qg_compute_matmul(ctx, node, mul);
            i += mul != NULL;
        } else if (node->op == GGML_OP_GLU || node->op == GGML_OP_ADD || node->op == GGML_OP_MUL ||
                   node->op == GGML_OP_ADD_ID) {
            st = qg_compute_elementwise(ctx, node);
        } else {
            qmoe_error_set(QMOE_ERR_PARAM_INVALID, QMOE_RULE_UNSUPPORTED, "graph",
                           "the node's op is not one the backend takes");
            qg_log_error(ggml_op_desc(node));
            return GGML_STATUS_FAILED;
        }
        if (st != GGML_STATUS_SUCCESS) return st;
    }
    return GGML_STATUS_SUCCESS;
}

static ggml_guid_t be_guid(void)
{
    static ggml_guid guid = {0x71, 0x6d, 0x6f, 0x65, 0x2d, 0x67, 0x67, 0x6d,
                             0x6c, 0x2d, 0x62, 0x61, 0x63, 0x6b, 0x65, 0x6e};
    return &guid;
}

static const struct ggml_backend_i backend_iface = {
    .get_name = be_name,
    .free = be_free,
    .graph_compute = be_compute,
};

/* ggml_backend_set_n_threads, found through get_proc_address: the qmoe device is made again
 * with this many threads before the next op, so qmoe uses as many cores as ggml's CPU backend. */
static void set_n_threads(ggml_backend_t backend, int n_threads)
{
    if (!backend || backend->iface.get_name != be_name || n_threads < 1) return;
    ((qg_context *)backend->context)->n_threads = n_threads;
}

/* ---- the device ---- */

static const char *dev_name(ggml_backend_dev_t dev)
{
    (void)dev;
    return QG_NAME;
}

static const char *dev_description(ggml_backend_dev_t dev)
{
    (void)dev;
    static char text[160];
    if (!text[0])
        snprintf(text, sizeof text, "qmoe %s int8 grouped matmul, kernel %s", qmoe_version(),
                 qmoe_kernel_name(qg_kernel()));
    return text;
}

static void dev_memory(ggml_backend_dev_t dev, size_t *free_bytes, size_t *total)
{
    (void)dev;
    long pages = sysconf(_SC_PHYS_PAGES), avail = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    *total = pages > 0 && page > 0 ? (size_t)pages * (size_t)page : 0;
    *free_bytes = avail > 0 && page > 0 ? (size_t)avail * (size_t)page : 0;
}

static enum ggml_backend_dev_type dev_type(ggml_backend_dev_t dev)
{
    (void)dev;
    return GGML_BACKEND_DEVICE_TYPE_ACCEL;
}

static void dev_props(ggml_backend_dev_t dev, struct ggml_backend_dev_props *props)
{
    props->name = dev_name(dev);
    props->description = dev_description(dev);
    props->type = dev_type(dev);
    props->device_id = NULL;
    dev_memory(dev, &props->memory_free, &props->memory_total);
    props->caps.async = false;
    props->caps.host_buffer = false;
    props->caps.buffer_from_host_ptr = false;
    props->caps.events = false;
}

static ggml_backend_t dev_init(ggml_backend_dev_t dev, const char *params)
{
    (void)params;
    ggml_backend_t backend = calloc(1, sizeof *backend);
    qg_context *ctx = calloc(1, sizeof *ctx);
    if (!backend || !ctx) {
        free(backend);
        free(ctx);
        return NULL;
    }
    backend->guid = be_guid();
    backend->iface = backend_iface;
    backend->device = dev;
    backend->context = ctx;
    ctx->fuse = qg_fuse_moe(); /* once: graph_compute never reads the environment */
    return backend;
}

static ggml_backend_buffer_type_t dev_buft(ggml_backend_dev_t dev)
{
    (void)dev;
    return qg_buffer_type();
}

static bool dev_supports_op(ggml_backend_dev_t dev, const struct ggml_tensor *op)
{
    (void)dev;
    if (is_layout_only(op)) return true;
    return qg_supports_matmul(op) || qg_supports_elementwise(op);
}

static bool dev_supports_buft(ggml_backend_dev_t dev, ggml_backend_buffer_type_t buft)
{
    (void)dev;
    return buft == qg_buffer_type() || ggml_backend_buft_is_host(buft);
}

/* ---- the registry ---- */

static const char *reg_name(ggml_backend_reg_t reg)
{
    (void)reg;
    return QG_NAME;
}

static size_t reg_count(ggml_backend_reg_t reg)
{
    (void)reg;
    return 1;
}

static struct ggml_backend_reg qg_reg;
static struct ggml_backend_device qg_dev = {
    .iface = {
        .get_name = dev_name,
        .get_description = dev_description,
        .get_memory = dev_memory,
        .get_type = dev_type,
        .get_props = dev_props,
        .init_backend = dev_init,
        .get_buffer_type = dev_buft,
        .supports_op = dev_supports_op,
        .supports_buft = dev_supports_buft,
    },
    .reg = &qg_reg,
    .context = NULL,
};


static ggml_backend_dev_t reg_device(ggml_backend_reg_t reg, size_t index)
{
    (void)reg;
    return index == 0 ? &qg_dev : NULL;
}

static void *reg_proc(ggml_backend_reg_t reg, const char *name)
{
    (void)reg;
    if (name && strcmp(name, "ggml_backend_set_n_threads") == 0) {
        ggml_backend_set_n_threads_t fn = set_n_threads;
        void *p;
        memcpy(&p, &fn, sizeof p); /* a function as void *, as ggml's interface wants it */
        return p;
    }
    return NULL;
}

static struct ggml_backend_reg qg_reg = {
    .api_version = GGML_BACKEND_API_VERSION,
    .iface = {
        .get_name = reg_name,
        .get_device_count = reg_count,
        .get_device = reg_device,
        .get_proc_address = reg_proc,
    },
    .context = NULL,
};

QG_EXPORT ggml_backend_reg_t ggml_backend_init(void);
QG_EXPORT int ggml_backend_score(void);

ggml_backend_reg_t ggml_backend_init(void)
{
    qg_buffer_type()->device = &qg_dev; /* set here: buffer.c does not call back into this file */
    return &qg_reg;
}

/* 0 (refuse) where qmoe has none of its fast kernels here: the portable one would be slower
 * than ggml's own CPU code. */
int ggml_backend_score(void)
{
    qmoe_kernel k = qg_kernel();
    return k != QMOE_KERNEL_PORTABLE && k != QMOE_KERNEL_REFERENCE && k != QMOE_KERNEL_AUTO ? 50 : 0;
}
