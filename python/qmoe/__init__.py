"""qmoe — the fused MoE operator GroupedMatmulSwigluQuant on CPUs, from Python.

Grouped int8 x int8 (A8W8) or int8 x int4 (A8W4) matmul per expert, SwiGLU and per-token int8
re-quantization, with the API and numerics of the accelerator operator, on NumPy arrays (and
PyTorch CPU tensors). The C library libqmoe.so is bound with ctypes.

    import numpy as np, qmoe
    out, scale, _ = qmoe.grouped_matmul_swiglu_quant(x, qmoe.nd_to_nz(w), group_list, ws, xs)

Operator: :func:`grouped_matmul_swiglu_quant`, :func:`npu_grouped_matmul_swiglu_quant`
(the framework's argument order), :func:`grouped_matmul_swiglu_quant_weight_nz_tensor_list`
(per-expert weight lists, with the swiglu_limit clamp), :func:`reference` (the C reference
kernel); :func:`prepack` makes weights the operator reads without repacking them on every
call. PyTorch tensors in, PyTorch tensors out, for every function.
Weights: :func:`nd_to_nz`, :func:`nz_to_nd`, :func:`pack_int4`, :func:`unpack_int4`,
:func:`weight_assist_matrix`. Errors: :class:`QmoeError`.
"""

from __future__ import annotations

from . import _lib
from ._errors import QmoeError
from ._layout import (nd_to_nz, nz_to_nd, pack_int4, pack_int4_int32, unpack_int4,
                      unpack_int4_int32, weight_assist_matrix)
from ._op import (grouped_matmul_swiglu_quant, grouped_matmul_swiglu_quant_weight_nz_tensor_list,
                  npu_grouped_matmul_swiglu_quant, reference)
from ._moe_ops import (npu_dynamic_quant, npu_moe_finalize_routing, npu_moe_gating_top_k,
                       npu_moe_gating_top_k_softmax, npu_moe_init_routing_v2,
                       npu_moe_token_unpermute, npu_swiglu)
from ._grouped_matmul import npu_grouped_matmul
from ._quantize import QuantizedExperts, quantize_experts
from ._checkpoint import load_experts
from ._prepack import PrepackedWeights, prepack
from ._moe_layer import MoELayer
from ._omp import OmpDevice, omp_available, omp_device

__version__ = _lib.package_version()

ERR_PARAM_NULLPTR = _lib.ERR_PARAM_NULLPTR
ERR_PARAM_INVALID = _lib.ERR_PARAM_INVALID
ERR_RUNTIME = _lib.ERR_RUNTIME
ERR_INNER = _lib.ERR_INNER


def library_version() -> str:
    """The version of the loaded libqmoe (qmoe_version())."""
    return _lib.version()


def library_path() -> str:
    """The path libqmoe was loaded from."""
    return _lib.lib._name


__all__ = [
    "MoELayer",
    "OmpDevice",
    "omp_device",
    "omp_available",
    "QmoeError",
    "ERR_PARAM_NULLPTR",
    "ERR_PARAM_INVALID",
    "ERR_RUNTIME",
    "ERR_INNER",
    "grouped_matmul_swiglu_quant",
    "npu_grouped_matmul_swiglu_quant",
    "grouped_matmul_swiglu_quant_weight_nz_tensor_list",
    "reference",
    "prepack",
    "PrepackedWeights",
    "nd_to_nz",
    "nz_to_nd",
    "pack_int4",
    "pack_int4_int32",
    "unpack_int4",
    "unpack_int4_int32",
    "weight_assist_matrix",
    "library_version",
    "library_path",
    "npu_dynamic_quant",
    "npu_grouped_matmul",
    "npu_moe_gating_top_k_softmax",
    "npu_moe_gating_top_k",
    "npu_moe_init_routing_v2",
    "npu_moe_finalize_routing",
    "npu_moe_token_unpermute",
    "npu_swiglu",
    "quantize_experts",
    "QuantizedExperts",
    "load_experts",
]
