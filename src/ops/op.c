/*
 * The one phase-two path of every operator (ops/op.h): argument and workspace checks, binding
 * this run's data into a copy of the plan, and the submission; on the device the descriptor's
 * data check, then its run. Also the public accessors of qmoe/op.h.
 */
#include "ops/op.h"

#include <stdalign.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "core/tensor.h"
#include "runtime/stream.h"

qmoe_status op_new(const op_desc *desc, const void *plan, size_t plan_bytes, int nargs,
                   qmoe_op **out)
{
    if (plan_bytes > OP_PLAN_MAX || nargs < 0)
        return qmoe_fail(QMOE_ERR_INNER, "%s: plan of %zu bytes is larger than %d", desc->name,
                         plan_bytes, OP_PLAN_MAX);
    size_t at = (sizeof(qmoe_op) + plan_bytes + alignof(op_arg) - 1) / alignof(op_arg) *
                alignof(op_arg);
    qmoe_op *op = calloc(1, at + (size_t)nargs * sizeof(op_arg));
    if (!op) return qmoe_fail(QMOE_ERR_INNER, "%s: out of memory for the plan", desc->name);
    op->desc = desc;
    op->nargs = nargs;
    op->devices = 1;
    op->kernel = QMOE_KERNEL_AUTO;
    op->plan_bytes = plan_bytes;
    memcpy(op->plan, plan, plan_bytes);
    op->args = (op_arg *)(void *)((char *)op + at);
    *out = op;
    return QMOE_OK;
}

void op_arg_set(qmoe_op *op, int i, const char *name, const qmoe_tensor *t, op_role role)
{
    op_arg *a = &op->args[i];
    a->name = name;
    if (!t) {
        a->role = OP_ABSENT;
        return;
    }
    if (t->packed) {
        op_arg_planned(op, i, t->data);
        return;
    }
    a->role = role;
    a->empty = t->numel == 0;
    a->bytes = qmoe_tensor_span_bytes(t);
}

void op_arg_planned(qmoe_op *op, int i, const void *pointer)
{
    op->args[i].role = OP_PLANNED;
    op->args[i].planned = pointer;
    op->args[i].empty = 0;
    op->args[i].bytes = 0;
}

/* [lo, hi) of entry i; empty for an argument without bytes or data. */
static void span(const op_arg *a, const void *data, uintptr_t *lo, uintptr_t *hi)
{
    *lo = (uintptr_t)data;
    *hi = data && a->role != OP_PLANNED ? *lo + (uintptr_t)a->bytes : *lo;
}

static int overlaps(uintptr_t alo, uintptr_t ahi, uintptr_t blo, uintptr_t bhi)
{
    return alo < ahi && blo < bhi && alo < bhi && blo < ahi;
}

/* The workspace rules of a run. */
static qmoe_status check_workspace(const qmoe_op *op, const void *workspace, uint64_t size)
{
    const char *name = op->desc->name;
    if (size < op->workspace_bytes)
        return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_WORKSPACE, "workspaceSize",
                             "%s: workspaceSize = %llu is less than the %llu bytes phase one asked "
                             "for", name, (unsigned long long)size,
                             (unsigned long long)op->workspace_bytes);
    if (!workspace && op->workspace_bytes)
        return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, "workspace",
                             "%s: workspace is a null pointer", name);
    /* the drivers keep int64 and float tables there: misaligned is undefined behaviour */
    if (op->workspace_bytes && (uintptr_t)workspace % alignof(int64_t))
        return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_WORKSPACE, "workspace",
                             "%s: workspace %p is not aligned for int64", name, workspace);
    return QMOE_OK;
}

qmoe_status op_check_args(const qmoe_op *op, void *const *args, int nargs,
                          const void *workspace, uint64_t workspace_size)
{
    const char *name = op->desc->name;
    if (nargs != op->nargs)
        return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_VALUE, "args",
                             "%s: %d arguments given, the plan has %d", name, nargs, op->nargs);
    if (nargs && !args)
        return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, "args",
                             "%s: args is a null pointer", name);
    for (int i = 0; i < nargs; i++) {
        const op_arg *a = &op->args[i];
        if (a->role == OP_ABSENT && args[i])
            return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_RESERVED, a->name,
                                 "%s: %s was absent at planning; its argument must be NULL", name,
                                 a->name);
        if (a->role == OP_PLANNED && args[i] && args[i] != a->planned)
            return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_VALUE, a->name,
                                 "%s: %s is part of the plan (prepacked); pass NULL or the "
                                 "planned pointer", name, a->name);
        if ((a->role == OP_IN || a->role == OP_OUT) && !a->empty && !args[i])
            return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, a->name,
                                 "%s: %s data is a null pointer", name, a->name);
        if (a->align && (uintptr_t)args[i] % a->align)
            return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_VALUE, a->name,
                                 "%s: %s at %p: the plan splits its rows over devices in whole "
                                 "%llu-byte lines, so its data must be aligned to them", name,
                                 a->name, args[i], (unsigned long long)a->align);
    }
    /* No output shares memory with another argument, another output or the workspace: it would
     * be read after it was written (no in-place execution). */
    uintptr_t wlo = (uintptr_t)workspace, whi = workspace ? wlo + (uintptr_t)workspace_size : wlo;
    for (int o = 0; o < nargs; o++) {
        const op_arg *a = &op->args[o];
        if (a->role != OP_OUT || a->empty) continue;
        uintptr_t olo, ohi;
        span(a, args[o], &olo, &ohi);
        for (int i = 0; i < nargs; i++) {
            const op_arg *b = &op->args[i];
            if (i == o || b->role == OP_ABSENT || b->empty) continue;
            uintptr_t ilo, ihi;
            span(b, b->role == OP_PLANNED ? NULL : args[i], &ilo, &ihi);
            if (overlaps(olo, ohi, ilo, ihi))
                return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_OVERLAP, a->name,
                                     "%s: output %s shares memory with %s %s (no in-place "
                                     "execution)", name, a->name,
                                     b->role == OP_OUT ? "output" : "input", b->name);
        }
        if (overlaps(olo, ohi, wlo, whi))
            return qmoe_fail_arg(QMOE_ERR_PARAM_INVALID, QMOE_RULE_OVERLAP, a->name,
                                 "%s: output %s shares memory with the workspace", name, a->name);
    }
    return QMOE_OK;
}

static qmoe_status job_run(const void *data, qmoe_device *dev, int index, int count)
{
    const op_job *j = data;
    if (j->desc->check) {
        /* every device checks the same data, so all refuse or none does */
        qmoe_status st = j->desc->check(j->plan, j->workspace);
        if (st) return st;
    }
    return j->desc->run(j->plan, j->workspace, dev, index, count);
}

qmoe_status op_execute(const qmoe_op *op, void *const *args, int nargs, void *workspace,
                       uint64_t workspace_size, qmoe_stream *stream)
{
    if (!op)
        return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, "op", "op is a null pointer");
    qmoe_status st = check_workspace(op, workspace, workspace_size);
    if (!st) st = op_check_args(op, args, nargs, workspace, workspace_size);
    if (st) return st;
    /* the bound copy lives on this stack until the submission has copied it */
    union {
        max_align_t align;
        unsigned char bytes[sizeof(op_job) + OP_PLAN_MAX];
    } buf;
    op_job *j = (op_job *)(void *)&buf;
    j->desc = op->desc;
    j->workspace = workspace;
    memcpy(j->plan, op->plan, op->plan_bytes);
    op->desc->bind(j->plan, op, args, workspace);
    st = qmoe_stream_submit(stream, op->devices, job_run, j, sizeof *j + op->plan_bytes,
                            op->slice_bytes);
    if (st == QMOE_OK) qmoe_clear_error();
    return st;
}

/* ---------------------------------------------------------------- two-phase executors --------- */

qmoe_status op_executor_new(size_t head, qmoe_op *op, const qmoe_tensor *const *tensors,
                            uint64_t *workspace_size, void **out)
{
    op_bound *b = calloc(1, head + (size_t)op->nargs * sizeof(void *));
    if (!b) {
        qmoe_status st = qmoe_fail(QMOE_ERR_INNER, "%s: out of memory for the executor",
                                   op->desc->name);
        qmoe_op_destroy(op);
        return st;
    }
    b->op = op;
    b->args = (void **)(void *)((char *)b + head);
    for (int i = 0; i < op->nargs; i++) {
        int role = op->args[i].role;
        if (role == OP_IN || role == OP_OUT) b->args[i] = tensors[i]->data;
    }
    /* what a run would refuse, refused now, as phase one always did (the workspace comes later) */
    qmoe_status st = op_check_args(op, b->args, op->nargs, NULL, 0);
    if (st) {
        op_executor_free(b);
        return st;
    }
    *workspace_size = op->workspace_bytes;
    *out = b;
    qmoe_clear_error();
    return QMOE_OK;
}

qmoe_status op_out_pointers(const char *name, const void *workspace_size, const void *executor)
{
    const char *sep = name ? ": " : "";
    if (!name) name = "";
    if (!workspace_size)
        return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, "workspaceSize",
                             "%s%sworkspaceSize is a null pointer", name, sep);
    if (!executor)
        return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, "executor",
                             "%s%sexecutor is a null pointer", name, sep);
    return QMOE_OK;
}

void op_executor_free(op_bound *b)
{
    if (!b) return;
    qmoe_op_destroy(b->op);
    free(b);
}

qmoe_status op_executor_run(const char *name, const op_bound *b, void *workspace,
                            uint64_t workspace_size, qmoe_stream *stream)
{
    if (!b)
        return qmoe_fail_arg(QMOE_ERR_PARAM_NULLPTR, QMOE_RULE_NULL, "executor",
                             "%s: executor is a null pointer", name);
    return op_execute(b->op, b->args, b->op->nargs, workspace, workspace_size, stream);
}

/* ---------------------------------------------------------------- public accessors ------------ */

qmoe_status qmoe_op_execute(const qmoe_op *op, void *const *args, int nargs, void *workspace,
                            uint64_t workspace_size, qmoe_stream *stream)
{
    return op_execute(op, args, nargs, workspace, workspace_size, stream);
}

void qmoe_op_destroy(qmoe_op *op) { free(op); }

uint64_t qmoe_op_workspace_size(const qmoe_op *op) { return op ? op->workspace_bytes : 0; }

qmoe_op_type qmoe_op_type_of(const qmoe_op *op) { return op ? op->desc->type : (qmoe_op_type)0; }

const char *qmoe_op_name(const qmoe_op *op) { return op ? op->desc->name : ""; }

int qmoe_op_arg_count(const qmoe_op *op) { return op ? op->nargs : -1; }

const char *qmoe_op_arg_name(const qmoe_op *op, int index)
{
    if (!op || index < 0 || index >= op->nargs) return NULL;
    return op->args[index].name;
}

qmoe_kernel qmoe_op_kernel(const qmoe_op *op)
{
    return op ? (qmoe_kernel)op->kernel : QMOE_KERNEL_AUTO;
}
