/*
 * qmoe's source-compatible AscendCL entry header: process initialization plus the base and runtime
 * subsets. Programs written for the vendor's runtime include this and link against qmoe_acl
 * (`pkg-config --cflags --libs qmoe-acl`). Signatures follow the published API
 * (hicann/runtime docs/api_docs/aclInit.md, aclFinalize.md).
 */
#ifndef QMOE_ACL_ACL_H
#define QMOE_ACL_ACL_H

#include "acl/acl_base.h"
#include "acl/acl_rt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Initializes the runtime once per process (ACL_ERROR_REPEAT_INITIALIZE when already done).
 * `configPath` may be NULL or ""; otherwise the file must be readable (its content is not used). */
ACL_FUNC_VISIBILITY aclError aclInit(const char *configPath);

/* Releases everything the runtime still holds: streams, executors never executed, and memory not
 * yet freed. ACL_ERROR_REPEAT_FINALIZE when not initialized. */
ACL_FUNC_VISIBILITY aclError aclFinalize(void);

#ifdef __cplusplus
}
#endif

#endif /* QMOE_ACL_ACL_H */
