/*
 * The 0.2 names of the public API, as macros for the 0.3 names (docs/api.md, "Migration to
 * 0.3.0"), so 0.2 sources build unchanged against 0.3; define QMOE_NO_DEPRECATED before including
 * qmoe to leave them out. They are source names only: the library exports the 0.3 symbols (the
 * soname changed with the minor version, libqmoe.so.0.3). qmoe_mpi_last_error() stays a function:
 * it is qmoe_last_error() since the one error channel.
 */
#ifndef QMOE_DEPRECATED_H
#define QMOE_DEPRECATED_H

#define qmoe_gmm_swiglu_quant_weight_list_workspace_size qmoe_grouped_matmul_swiglu_quant_weight_list_workspace_size
#define qmoe_gmm_swiglu_quant_workspace_size qmoe_grouped_matmul_swiglu_quant_workspace_size
#define qmoe_gmm_swiglu_quant qmoe_grouped_matmul_swiglu_quant
#define qmoe_executor_destroy qmoe_grouped_matmul_swiglu_quant_executor_destroy
#define qmoe_executor_kernel qmoe_grouped_matmul_swiglu_quant_executor_kernel
#define qmoe_executor qmoe_grouped_matmul_swiglu_quant_executor
#define qmoe_op_options_init qmoe_grouped_matmul_swiglu_quant_options_init
#define qmoe_op_options qmoe_grouped_matmul_swiglu_quant_options
#define QMOE_OP_OPTIONS_INIT QMOE_GROUPED_MATMUL_SWIGLU_QUANT_OPTIONS_INIT
#define qmoe_quantize_linear qmoe_quant_linear
#define qmoe_quantize_gate_up qmoe_quant_gate_up
#define qmoe_moe_layer_get_config qmoe_moe_layer_config_of
#define qmoe_nd_to_nz_int8 qmoe_layout_nd_to_nz_int8
#define qmoe_nz_to_nd_int8 qmoe_layout_nz_to_nd_int8
#define qmoe_nd_to_nz_int4 qmoe_layout_nd_to_nz_int4
#define qmoe_nz_to_nd_int4 qmoe_layout_nz_to_nd_int4
#define qmoe_pack_int4_int32 qmoe_layout_int4_pack_int32
#define qmoe_unpack_int4_int32 qmoe_layout_int4_unpack_int32
#define qmoe_pack_int4 qmoe_layout_int4_pack
#define qmoe_unpack_int4 qmoe_layout_int4_unpack
#define qmoe_weight_assist_matrix qmoe_layout_weight_assist_matrix
#define qmoe_default_device qmoe_device_default
#define qmoe_online_cores qmoe_device_online_cores

#endif /* QMOE_DEPRECATED_H */
