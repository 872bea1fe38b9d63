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

int moe_run_load_layer(const str_file *f, const char *prefix, layer_in *L, char *err)
{
    size_t plen = strlen(prefix);
    int64_t max_e = -1;
    int named[2] = {0, 0}; /* the naming of the first expert / shared tensor, in name order */
    for (size_t k = 0; k < f->n; k++) {
        const char *n = f->by_name[k]->name; /* name order: the tensor named is Python's too */
        if (strncmp(n, prefix, plen) || n[plen] != '.') continue;
        int64_t e;
        int role, expert = !expert_name(n + plen + 1, &e, &role);
        if (expert) {
            if (e > max_e) max_e = e;
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
    L->copies = calloc((size_t)L->E * 3 + 3, sizeof(void *));
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
    snprintf(name, sizeof name, "%s.shared_expert_gate.weight", prefix);
    if (str_find(f, name))
        return snprintf(err, RUN_ERR_LEN, "tensor %.400s: a gated shared expert (Qwen2-MoE) is not supported", name), -1;
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

