/*
 * Internals of the vendor-compatible layer (libqmoe_acl): the process state behind aclInit, the
 * handle registry that makes every handle checkable (memory, streams, executors, tensors), and the
 * thread's error message for aclGetRecentErrMsg.
 */
#ifndef QMOE_COMPAT_COMPAT_H
#define QMOE_COMPAT_COMPAT_H

#include "acl/acl.h"
#include "aclnnop/aclnn_base.h"
#include "qmoe/grouped_matmul.h"
#include "qmoe/moe_ops.h"
#include "qmoe/qmoe.h"

#if defined(__GNUC__)
#define COMPAT_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define COMPAT_PRINTF(a, b)
#endif

/* Records the message for aclGetRecentErrMsg and returns `code`. */
int compat_fail(int code, const char *fmt, ...) COMPAT_PRINTF(2, 3);

/* ------------------------------------------------------------------ process state -------------- */

enum { COMPAT_MAX_DEVICES = 64 };

/* Everything below is guarded by compat_lock()/compat_unlock(). */
void compat_lock(void);
void compat_unlock(void);
int compat_initialized(void); /* may be read without the lock */

/* The calling thread's current device, or -1 (call with the lock held). */
int compat_current_device(void);
/* Threads a device's operators use (QMOE_ACL_THREADS, default all cores). */
int compat_device_threads(void);
/* Records `status` as the first launch failure of the stream (NULL: the current device's default
 * stream) when the stream is still live and has none yet. Takes the lock. */
void compat_record_status(aclrtStream stream, aclError status);
/* The native stream behind `stream` (NULL: the current device's default stream, created on first
 * use); NULL with *err set (ACLNN_ERR_PARAM_INVALID for an unknown stream, ACLNN_ERR_RUNTIME_ERROR
 * when the device cannot start). Lock held. */
typedef struct qmoe_stream qmoe_stream;
qmoe_stream *compat_native_stream(aclrtStream stream, aclnnStatus *err);

/* ------------------------------------------------------------------ handle registry ------------ */

typedef enum compat_kind {
    COMPAT_DEVICE_MEM = 1,
    COMPAT_HOST_MEM = 2,
    COMPAT_STREAM = 3,
    COMPAT_EXECUTOR = 4,
    COMPAT_TENSOR = 5, /* kept across aclFinalize: tensors do not need aclInit */
} compat_kind;

/* How a handle's owner releases it (the registry calls it; it never calls its owners by name). */
typedef void (*compat_release_fn)(void *ptr);

/* All with the lock held. add returns 0 when out of memory; remove returns 0 when `ptr` is not a
 * live handle of `kind` (and then leaves the registry as it was). */
int compat_registry_add(void *ptr, compat_kind kind, int device, compat_release_fn release);
int compat_registry_has(const void *ptr, compat_kind kind);
int compat_registry_remove(void *ptr, compat_kind kind);
/* Removes and releases every handle but the tensors (streams first: destroying one waits for its
 * work), or the streams of one device. */
void compat_registry_release_all(void);
void compat_registry_release_streams(int device);

/* Releases a stream handle (waits for its work in flight). */
void compat_stream_release(void *stream);

/* ------------------------------------------------------------------ objects -------------------- */

typedef struct compat_stream {
    qmoe_stream *native;
    int device;
    aclError status; /* first launch failure since the last synchronization */
} compat_stream;

/* Which operator an executor belongs to (acl_executor.c): phase two refuses another's. */
typedef enum compat_op {
    COMPAT_OP_GMM_SWIGLU_QUANT = 1, /* the fused operator and its weight-list form: `native` */
    COMPAT_OP_MOE = 2,              /* the MoE pipeline operators (aclnn_moe_ops.c) */
    COMPAT_OP_GROUPED_MATMUL = 3,   /* aclnnGroupedMatmulV4 (aclnn_grouped_matmul_v4.c) */
} compat_op;

/* The vendor's executor: the operator's native two-phase executor (public API, qmoe/op.h's model
 * underneath), one of the three by `op`. */
struct aclOpExecutor {
    compat_op op;
    qmoe_grouped_matmul_swiglu_quant_executor *native;             /* COMPAT_OP_GMM_SWIGLU_QUANT */
    qmoe_moe_executor *moe;            /* COMPAT_OP_MOE */
    qmoe_grouped_matmul_executor *gmm; /* COMPAT_OP_GROUPED_MATMUL */
};

void compat_executor_free(aclOpExecutor *executor); /* NULL is a no-op */

/* Phase one's end: registers `ex` (its `op` set; NULL when the caller ran out of memory) and
 * returns it with the workspace size; on failure frees it and returns
 * ACLNN_ERR_INNER_CREATE_EXECUTOR with nothing written. */
aclnnStatus compat_executor_publish(const char *api, aclOpExecutor *ex, uint64_t size,
                                    uint64_t *workspace_size, aclOpExecutor **executor);

/* Phase two's start: checks that `executor` is live and belongs to `op`, claims it (one-shot) and
 * finds the native stream. On failure a claimed executor is freed and the status returned. */
aclnnStatus compat_executor_claim(const char *api, aclOpExecutor *executor, compat_op op,
                                  aclrtStream stream, qmoe_stream **native);

/* Phase two's end, after launching with status `st`: frees the executor, waits for the default
 * stream (synchronous there), records a failure on the stream, returns the final status. */
aclnnStatus compat_executor_finish(const char *api, aclOpExecutor *executor, aclnnStatus st,
                                   aclrtStream stream, qmoe_stream *native);

/* Phase two of a GroupedMatmulSwigluQuant executor (aclnn_gmm_swiglu_quant.c): claims it, runs it
 * on `stream`, always frees it; `api` names the caller in messages. */
aclnnStatus compat_gmm_execute(const char *api, void *workspace, uint64_t workspace_size,
                               aclOpExecutor *executor, aclrtStream stream);

/* ------------------------------------------------------------------ tensors -------------------- */

/* aclCreateTensorList's list (aclnn_gmm_swiglu_quant_tensor_list.c makes it; the list operators
 * read it). */
struct aclTensorList {
    uint64_t size;
    const aclTensor **items;
};

/* How a tensor argument is read: as its view (ND-family formats), or as a FRACTAL_NZ weight whose
 * storage shape is the 5-D NZ shape. */
typedef enum compat_tensor_role {
    COMPAT_AS_VIEW = 0,
    COMPAT_AS_NZ_WEIGHT = 1,
} compat_tensor_role;

/* Translates `t` (non-NULL) into a native tensor over the same memory (offset applied). On error
 * returns an aclnn code with the message recorded, and *out is untouched. */
aclnnStatus compat_tensor_to_native(const char *api, const char *name, const aclTensor *t,
                                    compat_tensor_role role, qmoe_tensor **out);
/* ACL_DT_UNDEFINED / ACL_FORMAT_UNDEFINED for a tensor that is not live (destroyed or never
 * created by aclCreateTensor); compat_tensor_to_native then refuses it. */
aclDataType compat_tensor_dtype(const aclTensor *t);
aclFormat compat_tensor_format(const aclTensor *t);

#endif
