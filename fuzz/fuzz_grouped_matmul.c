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
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_input.h"
#include "fuzz_tensor.h"
#include "qmoe/grouped_matmul.h"

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
    } else {
        fz_require(ex == sentinel, "a refused plan changed *executor");
        fz_require(qmoe_last_error()[0] != '\0', "a refused plan gave no message");
    }
    for (int i = 0; i < SLOTS; i++) qmoe_tensor_destroy(ts[i]);
    return 0;
}
