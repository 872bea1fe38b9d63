/* qmoe moe run's layer from a safetensors file (moe_run_layer.h). */
#define _POSIX_C_SOURCE 200809L
#include "moe_run_layer.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static int role_of(const char *p)
{
    static const char *const names[6] = {"gate_proj", "up_proj", "down_proj", "w1", "w3", "w2"};
    for (int k = 0; k < 6; k++)
        if (!strcmp(p, names[k])) return k % 3;
    return -1;
}

/* "experts.{e}.{proj}.weight" -> e and role; -1 otherwise. */
static int expert_name(const char *rest, int64_t *e, int *role)
{
    if (strncmp(rest, "experts.", 8)) return -1;
    const char *s = rest + 8;
    char *end;
    if (*s < '0' || *s > '9' || (s[0] == '0' && s[1] != '.')) return -1; /* no leading zero */
    long long v = strtoll(s, &end, 10);
    if (*end != '.' || v < 0 || v > 1000000) return -1;
    char proj[16];
    const char *dot = strchr(end + 1, '.');
    if (!dot || dot - end - 1 >= (long)sizeof proj || strcmp(dot, ".weight")) return -1;
    memcpy(proj, end + 1, (size_t)(dot - end - 1));
    proj[dot - end - 1] = 0;
    *role = role_of(proj);
    *e = v;
    return *role < 0 ? -1 : 0;
}

static int known_other(const char *rest)
{
    static const char *const ok[] = {
        "gate.weight", "gate.e_score_correction_bias", "shared_expert_gate.weight",
        "shared_experts.gate_proj.weight", "shared_experts.up_proj.weight", "shared_experts.down_proj.weight",
        "shared_expert.gate_proj.weight", "shared_expert.up_proj.weight", "shared_expert.down_proj.weight"};
    for (size_t k = 0; k < sizeof ok / sizeof ok[0]; k++)
        if (!strcmp(rest, ok[k])) return 1;
    return 0;
}

static int float_dtype(const char *d, qmoe_dtype *out)
{
    if (!strcmp(d, "F32")) *out = QMOE_DTYPE_FLOAT32;
    else if (!strcmp(d, "F16")) *out = QMOE_DTYPE_FLOAT16;
    else if (!strcmp(d, "BF16")) *out = QMOE_DTYPE_BFLOAT16;
    else return -1;
    return 0;
}

/* Which of the two namings a name under the prefix uses (docs/moe-layer.md "Checkpoint rules"):
 * experts 1 gate_proj/up_proj/down_proj, 2 w1/w3/w2; shared 1 shared_experts., 2 shared_expert.;
 * 0 for the other names. */
static int naming(const char *rest, int expert)
{
    if (expert) return strstr(rest, ".w1.") || strstr(rest, ".w2.") || strstr(rest, ".w3.") ? 2 : 1;
    return !strncmp(rest, "shared_experts.", 15) ? 1 : !strncmp(rest, "shared_expert.", 14) ? 2 : 0;
}

/* The fused names (transformers 5 with save_original_format=False, and gpt-oss's). */
static int fused_name(const char *rest)
{
    static const char *const ok[] = {"experts.gate_up_proj", "experts.down_proj", "experts.gate_up_proj_bias",
                                     "experts.down_proj_bias", "router.weight", "router.bias"};
    for (size_t k = 0; k < sizeof ok / sizeof ok[0]; k++)
        if (!strcmp(rest, ok[k])) return 1;
    return 0;
}

/* t's data, or an aligned copy the layer owns (the format does not promise alignment). */
static const void *aligned(layer_in *L, const str_tensor *t, char *err)
{
    if ((uintptr_t)t->data % t->itemsize == 0) return t->data;
    void *c = malloc(t->nbytes ? t->nbytes : 1);
    if (!c) return snprintf(err, RUN_ERR_LEN, "out of memory"), NULL;
    memcpy(c, t->data, t->nbytes);
    L->copies[L->ncopies++] = c;
    return c;
}

static const str_tensor *find(const str_file *f, const char *prefix, const char *rest)
{
    char name[NAME_MAX_LEN];
    snprintf(name, sizeof name, "%s.%s", prefix, rest);
    return str_find(f, name);
}

/* A fused tensor of the experts' dtype and shape d0 x d1 (x d2 when d2 > 0). */
static int fused_check(const str_tensor *t, qmoe_dtype dt, int64_t d0, int64_t d1, int64_t d2, char *err)
{
    qmoe_dtype d;
    int nd = d2 > 0 ? 3 : 2;
    if (float_dtype(t->dtype, &d) || d != dt)
        return snprintf(err, RUN_ERR_LEN, "tensor %.400s: dtype %s; expected the experts' float dtype", t->name,
                        t->dtype), -1;
    if (t->ndim != nd || t->shape[0] != d0 || t->shape[1] != d1 || (nd == 3 && t->shape[2] != d2)) {
        char got[96] = "", want[96];
        for (int k = 0; k < t->ndim && k < 4; k++) /* as Python prints a shape */
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%" PRId64, k ? ", " : "", t->shape[k]);
        if (nd == 3) snprintf(want, sizeof want, "%" PRId64 ", %" PRId64 ", %" PRId64, d0, d1, d2);
        else snprintf(want, sizeof want, "%" PRId64 ", %" PRId64, d0, d1);
        return snprintf(err, RUN_ERR_LEN, "tensor %.400s: shape [%s%s], expected [%s]", t->name, got,
                        t->ndim > 4 ? ", ..." : "", want), -1;
    }
    return 0;
}

/* Fused experts: transformers 5's gate_up_proj [E, 2I, H] (gate rows first) and down_proj
 * [E, H, I] point into the file; gpt-oss's [E, H, 2I] (interleaved) and [E, I, H] are copied
 * into the checkpoint convention, its biases de-interleaved. */
static int load_fused(const str_file *f, const char *prefix, const char *seen, layer_in *L, char *err)
{
    const str_tensor *gu = find(f, prefix, "experts.gate_up_proj"), *dn = find(f, prefix, "experts.down_proj"),
                     *gub = find(f, prefix, "experts.gate_up_proj_bias"), *dnb = find(f, prefix, "experts.down_proj_bias");
    L->gpt_oss = gub || dnb || find(f, prefix, "router.weight") || find(f, prefix, "router.bias");
    if (!gu || !dn)
        return snprintf(err, RUN_ERR_LEN, "tensor %.400s.experts.%s is missing (fused experts: saw %.400s)", prefix,
                        gu ? "down_proj" : "gate_up_proj", seen), -1;
    qmoe_dtype dt;
    if (float_dtype(gu->dtype, &dt))
        return snprintf(err, RUN_ERR_LEN, "tensor %.400s: dtype %s; expected F32, F16 or BF16", gu->name, gu->dtype), -1;
    if (gu->ndim != 3 || !gu->shape[0] || !gu->shape[1] || !gu->shape[2] || gu->shape[L->gpt_oss ? 2 : 1] % 2)
        return snprintf(err, RUN_ERR_LEN, "tensor %.400s: expected %s", gu->name,
                        L->gpt_oss ? "[E, H, 2I] (gpt-oss)" : "[E, 2I, H] (transformers)"), -1;
    int64_t E = gu->shape[0], H = L->gpt_oss ? gu->shape[1] : gu->shape[2], I = gu->shape[L->gpt_oss ? 2 : 1] / 2;
    if (fused_check(gu, dt, E, gu->shape[1], gu->shape[2], err) ||
        fused_check(dn, dt, E, L->gpt_oss ? I : H, L->gpt_oss ? H : I, err) ||
        (gub && fused_check(gub, dt, E, 2 * I, 0, err)) || (dnb && fused_check(dnb, dt, E, H, 0, err)))
        return -1;
    L->E = E, L->I = I, L->H = H, L->dtype = dt;
    size_t item = gu->itemsize;
    for (int r = 0; r < 3; r++)
        if (!(L->w[r] = calloc((size_t)E, sizeof(void *)))) return snprintf(err, RUN_ERR_LEN, "out of memory"), -1;
    if (!(L->copies = calloc(16, sizeof(void *)))) return snprintf(err, RUN_ERR_LEN, "out of memory"), -1;
    const char *g = aligned(L, gu, err), *d = aligned(L, dn, err);
    if (!g || !d) return -1;
    if (!L->gpt_oss) {
        for (int64_t e = 0; e < E; e++) {
            L->w[0][e] = g + (size_t)(e * 2 * I * H) * item;
            L->w[1][e] = g + (size_t)((e * 2 + 1) * I * H) * item;
            L->w[2][e] = d + (size_t)(e * H * I) * item;
        }
        return 0;
    }
    /* gpt-oss: gate[e][i][h] = gu[e][h][2i], up[e][i][h] = gu[e][h][2i + 1], down[e][h][i] = dn[e][i][h] */
    size_t n = (size_t)(E * I * H) * item;
    char *cg = malloc(n), *cu = malloc(n), *cd = malloc(n), *cb = gub ? malloc((size_t)(E * 2 * I) * item) : NULL;
    L->copies[L->ncopies++] = cg, L->copies[L->ncopies++] = cu, L->copies[L->ncopies++] = cd;
    L->copies[L->ncopies++] = cb;
    if (!cg || !cu || !cd || (gub && !cb)) return snprintf(err, RUN_ERR_LEN, "out of memory"), -1;
    for (int64_t e = 0; e < E; e++) {
        for (int64_t i = 0; i < I; i++)
            for (int64_t h = 0; h < H; h++) {
                size_t at = (size_t)((e * I + i) * H + h) * item, from = (size_t)((e * H + h) * 2 * I + 2 * i) * item;
                memcpy(cg + at, g + from, item), memcpy(cu + at, g + from + item, item);
            }
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < I; i++)
                memcpy(cd + (size_t)((e * H + h) * I + i) * item, d + (size_t)((e * I + i) * H + h) * item, item);
        L->w[0][e] = cg + (size_t)(e * I * H) * item, L->w[1][e] = cu + (size_t)(e * I * H) * item;
        L->w[2][e] = cd + (size_t)(e * H * I) * item;
    }
    if (gub) {
        const char *b = aligned(L, gub, err);
        if (!b) return -1;
        for (int64_t e = 0; e < E; e++)
            for (int64_t i = 0; i < I; i++) {
                memcpy(cb + (size_t)(e * 2 * I + i) * item, b + (size_t)(e * 2 * I + 2 * i) * item, item);
                memcpy(cb + (size_t)(e * 2 * I + I + i) * item, b + (size_t)(e * 2 * I + 2 * i + 1) * item, item);
            }
        L->gate_up_bias = cb;
    }
    if (dnb && !(L->down_bias = aligned(L, dnb, err))) return -1;
    return 0;
}

static int shared_and_bias(const str_file *f, const char *prefix, layer_in *L, char *err);

int moe_run_load_layer(const str_file *f, const char *prefix, layer_in *L, char *err)
{
    size_t plen = strlen(prefix);
    int64_t max_e = -1;
    const char *first_expert = NULL, *first_fused = NULL;
    int named[2] = {0, 0}; /* the naming of the first expert / shared tensor, in name order */
    for (size_t k = 0; k < f->n; k++) {
        const char *n = f->by_name[k]->name; /* name order: the tensor named is Python's too */
        if (strncmp(n, prefix, plen) || n[plen] != '.') continue;
        int64_t e = -1;
        int role, expert = !expert_name(n + plen + 1, &e, &role);
        if (fused_name(n + plen + 1)) {
            if (!first_fused) first_fused = n;
            continue;
        }
        if (expert) {
            if (e > max_e) max_e = e;
            if (!first_expert) first_expert = n;
        } else if (!known_other(n + plen + 1)) {
            snprintf(err, RUN_ERR_LEN, "tensor %.400s: not a MoE layer tensor under prefix %.200s (extra)", n, prefix);
            return -1;
        }
        int kind = naming(n + plen + 1, expert), *seen = &named[expert ? 0 : 1];
        if (kind && *seen && kind != *seen) {
            snprintf(err, RUN_ERR_LEN, "tensor %.400s: %s naming beside the layer's other one (one naming per layer) (extra)",
                     n, expert ? (kind == 2 ? "Mixtral's w1/w3/w2" : "a gate_proj/up_proj/down_proj")
                               : (kind == 2 ? "a shared_expert." : "a shared_experts."));
            return -1;
        }
        if (kind) *seen = kind;
    }
    char name[NAME_MAX_LEN];
    static const char *const hf[3] = {"gate_proj", "up_proj", "down_proj"}, *const mx[3] = {"w1", "w3", "w2"};
    const char *const *proj = named[0] == 2 ? mx : hf;
    snprintf(name, sizeof name, "%s.gate.weight", prefix);
    const str_tensor *router = str_find(f, name);
    if (first_fused) {
        const str_tensor *r2 = find(f, prefix, "router.weight");
        if (first_expert)
            return snprintf(err, RUN_ERR_LEN, "tensor %.400s: one tensor per expert beside the fused %.300s (one "
                            "layout per layer) (extra)", first_expert, first_fused), -1;
        if (router && r2)
            return snprintf(err, RUN_ERR_LEN, "tensor %.400s: a router beside %.300s (extra)", router->name, r2->name), -1;
        if (load_fused(f, prefix, first_fused, L, err)) return -1;
        const str_tensor *rt = router ? router : r2, *rb = find(f, prefix, "router.bias");
        qmoe_dtype rd;
        if (rt && (rt->ndim != 2 || rt->shape[0] != L->E || rt->shape[1] != L->H || float_dtype(rt->dtype, &rd)))
            return snprintf(err, RUN_ERR_LEN, "tensor %.400s: expected a float [%" PRId64 ", %" PRId64 "]", rt->name,
                            L->E, L->H), -1;
        if (rb && (rb->ndim != 1 || rb->shape[0] != L->E || float_dtype(rb->dtype, &rd)))
            return snprintf(err, RUN_ERR_LEN, "tensor %.400s: expected a float [%" PRId64 "]", rb->name, L->E), -1;
        return shared_and_bias(f, prefix, L, err);
    }
    if (max_e < 0) {
        snprintf(err, RUN_ERR_LEN, "tensor %.400s.experts.0.gate_proj.weight is missing (no experts under the prefix)", prefix);
        return -1;
    }
    snprintf(name, sizeof name, "%s.experts.0.%s.weight", prefix, proj[0]);
    const str_tensor *g0 = str_find(f, name);
    if (!g0) return snprintf(err, RUN_ERR_LEN, "tensor %.400s is missing", name), -1;
    if (g0->ndim != 2 || !g0->shape[0] || !g0->shape[1])
        return snprintf(err, RUN_ERR_LEN, "tensor %.400s: expected a non-empty [I, H] matrix", name), -1;
    if (router) { /* checked before E is used: a router [2^40, 0] is a shape error, not E */
        qmoe_dtype rd;
        if (router->ndim != 2 || router->shape[1] != g0->shape[1] || router->shape[0] < 1)
            return snprintf(err, RUN_ERR_LEN, "tensor %.400s: shape [%" PRId64 ", %" PRId64 "%s], expected [E, H = %" PRId64 "]",
                            router->name, router->ndim > 0 ? router->shape[0] : 0, router->ndim > 1 ? router->shape[1] : 0,
                            router->ndim > 2 ? ", ..." : "", g0->shape[1]), -1;
        if (float_dtype(router->dtype, &rd))
            return snprintf(err, RUN_ERR_LEN, "tensor %.400s: dtype %s; expected F32, F16 or BF16", router->name,
                            router->dtype), -1;
    }
    L->E = router && router->ndim == 2 ? router->shape[0] : max_e + 1;
    if (max_e >= L->E) {
        snprintf(err, RUN_ERR_LEN, "expert %" PRId64 " under %.400s is beyond E = %" PRId64 " (extra)", max_e, prefix, L->E);
        return -1;
    }
    /* the first missing expert tensor, before E sizes any allocation (a router may claim 2^40) */
    for (int64_t e = 0; e < L->E && e <= max_e + 1; e++)
        for (int r = 0; r < 3; r++) {
            snprintf(name, sizeof name, "%s.experts.%" PRId64 ".%s.weight", prefix, e, proj[r]);
            if (!str_find(f, name)) return snprintf(err, RUN_ERR_LEN, "tensor %.400s is missing", name), -1;
        }
    for (int r = 0; r < 3; r++) {
        L->w[r] = calloc((size_t)L->E, sizeof(void *));
        if (!L->w[r]) return snprintf(err, RUN_ERR_LEN, "out of memory"), -1;
    }
    L->copies = calloc((size_t)L->E * 3 + 8, sizeof(void *));
    if (!L->copies) return snprintf(err, RUN_ERR_LEN, "out of memory"), -1;
    for (int64_t e = 0; e < L->E; e++)
        for (int r = 0; r < 3; r++) {
            snprintf(name, sizeof name, "%s.experts.%" PRId64 ".%s.weight", prefix, e, proj[r]);
            const str_tensor *t = str_find(f, name);
            if (!t) return snprintf(err, RUN_ERR_LEN, "tensor %.400s is missing", name), -1;
            qmoe_dtype d;
            if (float_dtype(t->dtype, &d))
                return snprintf(err, RUN_ERR_LEN, "tensor %.400s: dtype %s; expected F32, F16 or BF16", name, t->dtype), -1;
            if (e == 0 && r == 0) {
                if (t->ndim != 2 || !t->shape[0] || !t->shape[1])
                    return snprintf(err, RUN_ERR_LEN, "tensor %.400s: expected a non-empty [I, H] matrix", name), -1;
                L->I = t->shape[0], L->H = t->shape[1], L->dtype = d;
            }
            int64_t want0 = r < 2 ? L->I : L->H, want1 = r < 2 ? L->H : L->I;
            if (t->ndim != 2 || t->shape[0] != want0 || t->shape[1] != want1)
                return snprintf(err, RUN_ERR_LEN, "tensor %.400s: shape mismatch; expected [%" PRId64 ", %" PRId64 "]",
                                name, want0, want1), -1;
            if (d != L->dtype)
                return snprintf(err, RUN_ERR_LEN, "tensor %.400s: dtype %s differs from the other experts'", name, t->dtype), -1;
            const void *p = t->data;
            if ((uintptr_t)p % t->itemsize) { /* the format does not promise alignment */
                void *c = malloc(t->nbytes ? t->nbytes : 1);
                if (!c) return snprintf(err, RUN_ERR_LEN, "out of memory"), -1;
                memcpy(c, p, t->nbytes);
                L->copies[L->ncopies++] = c;
                p = c;
            }
            L->w[r][e] = p;
        }
    if (router && (router->ndim != 2 || router->shape[1] != L->H))
        return snprintf(err, RUN_ERR_LEN, "tensor %.400s: shape mismatch; expected [%" PRId64 ", %" PRId64 "]",
                        router->name, L->E, L->H), -1;
    return shared_and_bias(f, prefix, L, err);
}

/* The shared expert (and Qwen2-MoE's gate of it) and the selection bias, after the experts. */
static int shared_and_bias(const str_file *f, const char *prefix, layer_in *L, char *err)
{
    char name[NAME_MAX_LEN];
    static const char *const hf[3] = {"gate_proj", "up_proj", "down_proj"};
    for (int style = 0; style < 2 && !L->Is; style++)
        for (int r = 0; r < 3; r++) {
            snprintf(name, sizeof name, "%s.%s.%s.weight", prefix, style ? "shared_expert" : "shared_experts", hf[r]);
            const str_tensor *t = str_find(f, name);
            if (!t) {
                if (r) return snprintf(err, RUN_ERR_LEN, "tensor %.400s is missing", name), -1;
                break;
            }
            qmoe_dtype d;
            if (r == 0) L->Is = t->ndim == 2 ? t->shape[0] : -1;
            int64_t want0 = r < 2 ? L->Is : L->H, want1 = r < 2 ? L->H : L->Is;
            if (float_dtype(t->dtype, &d) || d != L->dtype || t->ndim != 2 || t->shape[0] != want0 ||
                t->shape[1] != want1 || L->Is < 1)
                return snprintf(err, RUN_ERR_LEN, "tensor %.400s: shape mismatch or dtype; expected %s [%" PRId64 ", %" PRId64
                                "]", name, t->dtype, want0, want1), -1;
            const void *p = t->data;
            if ((uintptr_t)p % t->itemsize) {
                void *c = malloc(t->nbytes ? t->nbytes : 1);
                if (!c) return snprintf(err, RUN_ERR_LEN, "out of memory"), -1;
                memcpy(c, p, t->nbytes);
                L->copies[L->ncopies++] = c;
                p = c;
            }
            L->shared[r] = p;
        }
    const str_tensor *sgw = find(f, prefix, "shared_expert_gate.weight");
    if (sgw) {
        if (!L->Is)
            return snprintf(err, RUN_ERR_LEN, "tensor %.400s without a shared expert", sgw->name), -1;
        if (fused_check(sgw, L->dtype, 1, L->H, 0, err) || !(L->shared_gate_w = aligned(L, sgw, err))) return -1;
    }
    snprintf(name, sizeof name, "%s.gate.e_score_correction_bias", prefix);
    const str_tensor *b = str_find(f, name);
    if (b) {
        if (strcmp(b->dtype, "F32") || b->ndim != 1 || b->shape[0] != L->E || (uintptr_t)b->data % 4)
            return snprintf(err, RUN_ERR_LEN, "tensor %.400s: expected F32 [%" PRId64 "]", name, L->E), -1;
        L->bias = b->data;
    }
    return 0;
}

void moe_run_free_layer(layer_in *L)
{
    for (int r = 0; r < 3; r++) free(L->w[r]);
    for (size_t k = 0; k < L->ncopies; k++) free(L->copies[k]);
    free(L->copies);
}

