/*
 * Phase one of GroupedMatmul (qmoe/grouped_matmul.h) with arbitrary tensor descriptors, group
 * list type and options: qmoe_grouped_matmul_workspace_size may only answer 0, 161001, 161002 or
 * 561000, never crash, never read tensor data (every data pointer is in a PROT_NONE region),
 * never leak; a refused plan leaves *executor as it was and says why, an accepted one plans a
 * workspace for the group list (2 * (E + 1) int64).
 *
 * Input: the form (first byte: int8 ND / NZ, int4 ND / NZ, int32-packed int4 ND / NZ, unscaled
 * int8, float), a valid template of it (M, K, N, E, G, dtypes, bias), then mutations of one
 * tensor descriptor, the group list type or the options.
 *
 * An accepted plan then runs once (the operator model, qmoe/op.h) over real zeroed buffers with a
 * group list drawn from the rest of the input — counts and ends of any int64 value, INT64_MAX and
 * negative ones included: the run answers a documented status, a refused group list leaves the
 * output untouched, and no size or running total overflows (the sanitizers' builds check).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_input.h"
#include "fuzz_tensor.h"
#include "qmoe/grouped_matmul.h"
#include "qmoe/op.h"

enum { X, W, B, S, P, GL, O, SLOTS, SLOT_BYTES = 1 << 22 };

typedef fz_desc desc;

static void *unreadable_region(int slot) { return fz_unreadable(slot, SLOTS, SLOT_BYTES); }

static void make_template(fz_input *in, desc *t)
{
    for (int i = 0; i < SLOTS; i++) memset(&t[i], 0, sizeof t[i]);
    int form = (int)fz_range(in, 0, 7);
    int64_t M = fz_range(in, 0, 40), E = fz_range(in, 1, 8), K = 16 * fz_range(in, 1, 8);
    int64_t N = 64 * fz_range(in, 1, 4), G = fz_u8(in) & 1 ? 2 : 1;
    static const int fl[] = {QMOE_DTYPE_FLOAT32, QMOE_DTYPE_FLOAT16, QMOE_DTYPE_BFLOAT16};
    int fdt = fl[fz_range(in, 0, 2)];
    int nd = QMOE_FORMAT_ND, nz = QMOE_FORMAT_FRACTAL_NZ;
    fz_desc_set(&t[X], form == 7 ? fdt : QMOE_DTYPE_INT8, nd, 2, (int64_t[]){M, K});
    fz_desc_set(&t[GL], QMOE_DTYPE_INT64, nd, 1, &E);
    switch (form) {
    case 0: fz_desc_set(&t[W], QMOE_DTYPE_INT8, nd, 3, (int64_t[]){E, K, N}); break;
    case 1: fz_desc_set(&t[W], QMOE_DTYPE_INT8, nz, 5, (int64_t[]){E, N / 32, K / 16, 16, 32}); break;
    case 2: fz_desc_set(&t[W], QMOE_DTYPE_INT4, nd, 3, (int64_t[]){E, K, N}); break;
    case 3: fz_desc_set(&t[W], QMOE_DTYPE_INT4, nz, 5, (int64_t[]){E, N / 64, K / 16, 16, 64}); break;
    case 4: fz_desc_set(&t[W], QMOE_DTYPE_INT32, nd, 3, (int64_t[]){E, K, N / 8}); break;
    case 5: fz_desc_set(&t[W], QMOE_DTYPE_INT32, nz, 5, (int64_t[]){E, N / 64, K / 16, 16, 8}); break;
    case 6: fz_desc_set(&t[W], QMOE_DTYPE_INT8, nd, 3, (int64_t[]){E, K, N}); break;
    default: fz_desc_set(&t[W], fdt, nd, 3, (int64_t[]){E, K, N}); break;
    }
    int scaled = form < 6;
    if (scaled) {
        if (G > 1) fz_desc_set(&t[S], QMOE_DTYPE_FLOAT32, nd, 3, (int64_t[]){E, G, N});
        else fz_desc_set(&t[S], QMOE_DTYPE_FLOAT32, nd, 2, (int64_t[]){E, N});
        fz_desc_set(&t[P], QMOE_DTYPE_FLOAT32, nd, 1, &M);
    }
    int odt = form == 7 ? fdt : form == 6 ? QMOE_DTYPE_INT32 : fl[fz_range(in, 0, 2)];
    fz_desc_set(&t[O], odt, nd, 2, (int64_t[]){M, N});
    if (fz_u8(in) & 1)
        fz_desc_set(&t[B], form == 7 ? fdt : form == 6 ? QMOE_DTYPE_INT32 : QMOE_DTYPE_FLOAT32, nd, 2,
            (int64_t[]){E, N});
}

typedef struct grown_options {
    qmoe_grouped_matmul_options o;
    uint8_t tail[24];
} grown_options;

static void mutate(fz_input *in, desc *t, int64_t *glt, grown_options *g, int *null_options)
{
    switch (fz_desc_step(in, t, SLOTS, 2, NULL)) {
    case -1: return; /* a descriptor mutation */
    case 8: *glt = fz_u8(in) & 1 ? fz_dim(in) : fz_range(in, -1, 2); break;
    case 9:
        switch (fz_range(in, 0, 4)) {
        case 0: g->o.threads = (int)fz_dim(in); break;
        case 1: g->o.struct_size = (uint32_t)fz_range(in, 0, sizeof *g); break;
        case 2: *null_options = !*null_options; break;
        case 3: g->tail[fz_range(in, 0, sizeof g->tail - 1)] = fz_u8(in); break;
        case 4: g->o.kernel = (int32_t)fz_range(in, -1, 10); break;
        }
        break;
    }
}

static qmoe_tensor *create(const desc *d, int slot) { return fz_tensor(d, unreadable_region(slot)); }

/* Bytes a descriptor's elements span (0: absent or empty; > cap: too large to run here). */
static uint64_t span_bytes(const desc *d, uint64_t cap)
{
    if (!d->present || d->null_data || d->ndim < 0 || d->ndim > QMOE_MAX_DIMS) return 0;
    int bits = d->dtype == QMOE_DTYPE_INT4 ? 4 : d->dtype == QMOE_DTYPE_INT8 ? 8
             : d->dtype == QMOE_DTYPE_FLOAT16 || d->dtype == QMOE_DTYPE_BFLOAT16 ? 16
             : d->dtype == QMOE_DTYPE_INT64 || d->dtype == QMOE_DTYPE_UINT64 ? 64 : 32;
    uint64_t last = 0;
    for (int i = 0; i < d->ndim; i++) {
        if (d->shape[i] <= 0) return 0;
        int64_t st = d->has_strides ? d->strides[i] : 1;
        if (st < 0 || d->shape[i] > 1 << 20 || st > 1 << 20) return cap + 1;
        if (!d->has_strides)
            for (int j = i + 1; j < d->ndim; j++) st *= d->shape[j] > 0 ? d->shape[j] : 1;
        last += (uint64_t)(d->shape[i] - 1) * (uint64_t)st;
        if (last > cap * 8) return cap + 1;
    }
    return ((last + 1) * (uint64_t)bits + 7) / 8;
}

/* The accepted plan over real buffers with a drawn group list (see the top of the file). */
static void run_once(fz_input *in, const desc *t, qmoe_tensor *const *ts, int64_t glt,
                     const qmoe_grouped_matmul_options *o)
{
    enum { CAP = 1 << 22 };
    void *buf[SLOTS] = {0};
    qmoe_op *op = NULL;
    if (qmoe_op_create_grouped_matmul(ts[X], ts[W], ts[B], ts[S], ts[P], ts[GL], glt, ts[O], o,
                                      &op) != QMOE_OK)
        return; /* phase one said yes above: only a later-checked option differs */
    int ok = 1;
    uint64_t bytes[SLOTS];
    for (int i = 0; i < SLOTS && ok; i++) {
        bytes[i] = ts[i] ? span_bytes(&t[i], CAP) : 0; /* a refused descriptor is absent */
        ok = bytes[i] <= CAP;
        if (ok && bytes[i]) ok = (buf[i] = calloc(1, bytes[i])) != NULL;
    }
    if (ok && buf[GL]) {
        static const int64_t extreme[] = {INT64_MAX, INT64_MIN, -1, 0, INT64_MAX - 1, 1};
        int64_t n = (int64_t)(bytes[GL] / 8), *gl = buf[GL];
        for (int64_t e = 0; e < n; e++)
            gl[e] = fz_u8(in) & 1 ? extreme[fz_range(in, 0, 5)] : fz_range(in, -2, 64);
        if (buf[O]) memset(buf[O], 0x5A, bytes[O]);
        uint64_t wsz = qmoe_op_workspace_size(op);
        void *ws = aligned_alloc(64, (wsz + 63) / 64 * 64 + 64);
        void *args[SLOTS];
        for (int i = 0; i < SLOTS; i++) args[i] = ts[i] ? buf[i] : NULL;
        qmoe_status st = ws ? qmoe_op_execute(op, args, SLOTS, ws, wsz, NULL) : QMOE_OK;
        fz_require(fz_documented(st), "execute returned an undocumented status");
        if (st == QMOE_ERR_PARAM_INVALID && qmoe_last_error_info()->rule == QMOE_RULE_VALUE) {
            const uint8_t *out = buf[O];
            for (uint64_t i = 0; i < bytes[O]; i++)
                fz_require(out[i] == 0x5A, "a refused group list wrote the output");
        }
        free(ws);
    }
    for (int i = 0; i < SLOTS; i++) free(buf[i]);
    qmoe_op_destroy(op);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_input in = {data, size, 0};
    desc t[SLOTS];
    make_template(&in, t);
    int64_t glt = fz_range(&in, 0, 1);
    grown_options g = {QMOE_GROUPED_MATMUL_OPTIONS_INIT, {0}};
    g.o.threads = (int)fz_range(&in, 0, 8);
    int null_options = 0;
    int mutations = (int)fz_range(&in, 0, 7);
    for (int i = 0; i < mutations; i++) mutate(&in, t, &glt, &g, &null_options);
    int null_size_ptr = fz_u8(&in) == 0x5A, null_ex_ptr = fz_u8(&in) == 0xA5;
    qmoe_tensor *ts[SLOTS];
    for (int i = 0; i < SLOTS; i++) ts[i] = create(&t[i], i);
    qmoe_grouped_matmul_executor *const sentinel = (qmoe_grouped_matmul_executor *)(uintptr_t)0x5e5e5e50;
    qmoe_grouped_matmul_executor *ex = sentinel;
    uint64_t ws = 0;
    qmoe_status st = qmoe_grouped_matmul_workspace_size(
        ts[X], ts[W], ts[B], ts[S], ts[P], ts[GL], glt, ts[O], null_options ? NULL : &g.o,
        null_size_ptr ? NULL : &ws, null_ex_ptr ? NULL : &ex);
    fz_require(fz_documented(st), "workspace_size returned an undocumented status");
    if (st == QMOE_OK) {
        fz_require(ex != sentinel && ex != NULL, "success without an executor");
        fz_require(qmoe_last_error()[0] == '\0', "success left an error message");
        fz_require(ws > 0 && ws <= 2 * (1024 + 1) * sizeof(int64_t), "a workspace of the wrong size");
        qmoe_grouped_matmul_executor_destroy(ex);
        if (in.pos < in.size) run_once(&in, t, ts, glt, null_options ? NULL : &g.o);
    } else {
        fz_require(ex == sentinel, "a refused plan changed *executor");
        fz_require(qmoe_last_error()[0] != '\0', "a refused plan gave no message");
    }
    for (int i = 0; i < SLOTS; i++) qmoe_tensor_destroy(ts[i]);
    return 0;
}
