/*
 * The one operator model behind include/qmoe/op.h: every operator is a descriptor (its type,
 * how data binds into its plan, its device-side check and run) plus a plan that phase one built
 * from shapes only. Phase two is one path for every operator (op.c): workspace checks, binding
 * the data of this run into a copy of the plan, the overlap checks that need addresses, and the
 * submission; on the device the descriptor's check (index data) runs before its run.
 */
#ifndef QMOE_OPS_OP_H
#define QMOE_OPS_OP_H

#include <stddef.h>
#include <stdint.h>

#include "qmoe/op.h"
#include "runtime/device.h"

/* How an argument takes part in a run. */
typedef enum op_role {
    OP_ABSENT = 0,  /* optional and not given at planning: its entry must be NULL */
    OP_IN = 1,      /* read */
    OP_OUT = 2,     /* written: must not overlap another argument or the workspace */
    OP_PLANNED = 3, /* part of the plan (prepacked weights and what they folded in) */
} op_role;

typedef struct op_arg {
    const char *name; /* the vendor's name; static, or in the op's name block */
    int32_t role;     /* op_role */
    int32_t empty;    /* no elements: the entry may be NULL */
    uint64_t bytes;   /* first to last byte it addresses from its data pointer (0: empty) */
    uint64_t align;   /* the plan's split assumed data aligned to this (0: none) */
    const void *planned; /* OP_PLANNED: the pointer given at planning */
} op_arg;

/* What the device runs: the descriptor, the run's workspace and the bound plan. */
typedef struct op_job {
    const struct op_desc *desc;
    void *workspace;
    max_align_t plan[];
} op_job;

typedef struct op_desc {
    qmoe_op_type type;
    const char *name; /* the vendor's operator name */
    /* Writes this run's data pointers into `plan` (a copy of the op's): args[i] is entry i, NULL
     * for absent and empty arguments (then the planned marker stays). May write the workspace
     * (the weight-list tables). */
    void (*bind)(void *plan, const qmoe_op *op, void *const *args, void *workspace);
    /* On the device, before run, after the operators queued before it: the data rules of the
     * index tensors; nothing but the workspace may be written on failure. NULL: none. */
    qmoe_status (*check)(const void *plan, void *workspace);
    /* The device's share of the run (index of count devices of the group). */
    qmoe_status (*run)(const void *plan, void *workspace, qmoe_device *dev, int index, int count);
} op_desc;

struct qmoe_op {
    const op_desc *desc;
    int32_t nargs;
    int32_t devices;       /* devices the plan was made for */
    int32_t kernel;        /* qmoe_kernel of a matmul plan; QMOE_KERNEL_AUTO otherwise */
    int32_t pad;
    uint64_t workspace_bytes;
    uint64_t slice_bytes;  /* per-thread scratch of a device */
    size_t plan_bytes;
    op_arg *args;          /* nargs entries, after the plan in the same block */
    max_align_t plan[];
};

/* The largest plan op_new takes: a run binds into a copy of it on the caller's stack. */
enum { OP_PLAN_MAX = 4096 };

/* A new op of `desc` holding a copy of `plan` and room for nargs argument entries (all absent);
 * QMOE_ERR_INNER when out of memory. */
qmoe_status op_new(const op_desc *desc, const void *plan, size_t plan_bytes, int nargs,
                   qmoe_op **out);
/* Records argument i from the tensor given at planning (NULL: absent). `role` is OP_IN or OP_OUT
 * for a present tensor; a tensor that is a prepacked weight view becomes OP_PLANNED. */
void op_arg_set(qmoe_op *op, int i, const char *name, const qmoe_tensor *t, op_role role);
/* Marks argument i as part of the plan (its entry may be NULL or the planned pointer). */
void op_arg_planned(qmoe_op *op, int i, const void *pointer);

/* The one phase-two path (qmoe_op_execute). */
qmoe_status op_execute(const qmoe_op *op, void *const *args, int nargs, void *workspace,
                       uint64_t workspace_size, qmoe_stream *stream);

/* A two-phase executor (qmoe_grouped_matmul_swiglu_quant_executor, qmoe_grouped_matmul_executor, qmoe_moe_executor): the op
 * plus the data of the tensors given at phase one. */
typedef struct op_bound {
    qmoe_op *op;
    void **args; /* op->nargs entries, in the same block */
} op_bound;

struct qmoe_grouped_matmul_swiglu_quant_executor {
    op_bound b;
};
struct qmoe_grouped_matmul_executor {
    op_bound b;
};
struct qmoe_moe_executor {
    op_bound b;
};

/* A two-phase executor of `head` bytes (a struct whose first member is an op_bound) over `op`,
 * bound to the data of `tensors` (op->nargs entries, NULL: absent) and checked as a run would
 * check them (a descriptor without data is QMOE_ERR_PARAM_NULLPTR). Takes `op` (destroyed on
 * error). *workspace_size gets the op's. */
qmoe_status op_executor_new(size_t head, qmoe_op *op, const qmoe_tensor *const *tensors,
                            uint64_t *workspace_size, void **out);
void op_executor_free(op_bound *b); /* NULL is a no-op */
/* Phase one of a two-phase call: both out-pointers given (messages prefixed "name: " unless
 * name is NULL). */
qmoe_status op_out_pointers(const char *name, const void *workspace_size, const void *executor);
/* Phase two of a two-phase executor ("executor" NULL is QMOE_ERR_PARAM_NULLPTR). */
qmoe_status op_executor_run(const char *name, const op_bound *b, void *workspace,
                            uint64_t workspace_size, qmoe_stream *stream);

/* Checks the arguments of a run against the plan without running it (op_bind_tensors uses it). */
qmoe_status op_check_args(const qmoe_op *op, void *const *args, int nargs,
                          const void *workspace, uint64_t workspace_size);

/* The data pointer of a bound argument: args[i], or the planning marker when it is NULL (an empty
 * tensor keeps a non-NULL base so "present" stays distinct from "absent"). */
static inline void *op_data(void *const *args, int i, void *planned)
{
    return args[i] ? args[i] : planned;
}

#endif
