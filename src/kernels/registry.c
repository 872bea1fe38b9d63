/* Kernel selection by request and CPU features. */
#include "kernels/kernel.h"
#include "qmoe/qmoe.h"

const qmoe_kernel_ops *qmoe_kernel_lookup(int32_t requested)
{
    switch (requested) {
    case QMOE_KERNEL_AUTO:
    case QMOE_KERNEL_REFERENCE: return &qmoe_kernel_reference;
    default: return NULL;
    }
}

const char *qmoe_kernel_name(qmoe_kernel kernel)
{
    switch (kernel) {
    case QMOE_KERNEL_AUTO: return "auto";
    case QMOE_KERNEL_REFERENCE: return "reference";
    case QMOE_KERNEL_PORTABLE: return "portable";
    case QMOE_KERNEL_AVX2: return "avx2";
    case QMOE_KERNEL_AVX_VNNI: return "avx_vnni";
    case QMOE_KERNEL_AVX512_VNNI: return "avx512_vnni";
    }
    return "unknown";
}
