/* A vendor-API program, unchanged: the acl headers come from qmoe's compat folder. */
#include <stdio.h>

#include "acl/acl.h"
#include "aclnnop/aclnn_grouped_matmul_swiglu_quant.h"

int main(void)
{
    if (aclInit(NULL) != ACL_SUCCESS) return 1;
    if (aclrtSetDevice(0) != ACL_SUCCESS) return 1;
    aclrtStream stream = NULL;
    if (aclrtCreateStream(&stream) != ACL_SUCCESS) return 1;
    if (aclrtDestroyStream(stream) != ACL_SUCCESS) return 1;
    if (aclrtResetDevice(0) != ACL_SUCCESS) return 1;
    if (aclFinalize() != ACL_SUCCESS) return 1;
    printf("acl runtime ok\n");
    return 0;
}
