/* GroupedMatmul's epilogue on the shared GEMM driver (epilogue_dequant.c): what it writes. */
#ifndef QMOE_KERNELS_EPILOGUE_DEQUANT_H
#define QMOE_KERNELS_EPILOGUE_DEQUANT_H

#include "core/view.h"
#include "kernels/gemm_driver.h"

/* What the dequant epilogue writes (gemm_driver.h's block->out). */
typedef struct gmm_dequant_out {
    moe_view out;  /* [M, N] float32 / float16 / bfloat16 */
    moe_view bias; /* [E, N] float32, or data NULL */
} gmm_dequant_out;

/* The epilogue of the driver for GroupedMatmul: B->out is a gmm_dequant_out. */
void qmoe_epilogue_dequant(const qmoe_gemm_block *B, const qmoe_gemm_tile *t);

#endif
