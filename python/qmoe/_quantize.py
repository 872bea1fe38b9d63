"""Float expert weights (checkpoint convention) -> the operators' quantized weights and scales.

One call quantizes a whole MoE layer's experts with the library's qmoe_quant_gate_up /
qmoe_quant_linear (include/qmoe/quantize.h; the scheme is docs/moe-layer.md).
"""

from __future__ import annotations

import ctypes
from collections import namedtuple
from ctypes import POINTER, c_int, c_int64, c_uint32, c_void_p
from typing import Any, Optional

import numpy as np

from . import _lib
from ._arrays import any_torch, as_torch, invalid, to_numpy, torch_bfloat16_bits
from ._errors import QmoeError

ArrayLike = Any

_MODES = {"a8w8": 0, "a8w4": 1}
_FORMATS = {"nz": 0, "nd": 1}


class _QuantOptions(ctypes.Structure):
    """struct qmoe_quant_options (include/qmoe/quantize.h)."""

    _fields_ = [
        ("struct_size", c_uint32),
        ("mode", c_int),
        ("weight_nd", c_int),
        ("clip_search", c_int),
        ("group_size", c_int64),
        ("threads", c_int),
    ]


class _QuantSizes(ctypes.Structure):
    _fields_ = [("weight_bytes", c_int64), ("groups", c_int64), ("scale_count", c_int64),
                ("bias_count", c_int64)]


def _declare() -> None:
    lib = _lib.lib
    lib.qmoe_quant_sizes_of.restype = c_int
    lib.qmoe_quant_sizes_of.argtypes = [POINTER(_QuantOptions), c_int64, c_int64, c_int64,
                                        POINTER(_QuantSizes)]
    lib.qmoe_quant_linear.restype = c_int
    lib.qmoe_quant_linear.argtypes = [POINTER(c_void_p), c_int, c_int64, c_int64, c_int64,
                                         POINTER(_QuantOptions), c_void_p, c_void_p, c_void_p]
    lib.qmoe_quant_gate_up.restype = c_int
    lib.qmoe_quant_gate_up.argtypes = [POINTER(c_void_p), POINTER(c_void_p), c_int, c_int64,
                                          c_int64, c_int64, POINTER(_QuantOptions), c_void_p,
                                          c_void_p, c_void_p]


_declare()

QuantizedExperts = namedtuple("QuantizedExperts", [
    "gate_up_weight", "gate_up_scale", "gate_up_bias",
    "down_weight", "down_scale", "down_bias",
])
QuantizedExperts.__doc__ = """The operators' weights of one MoE layer (see quantize_experts).

gate_up_*: GroupedMatmulSwigluQuant's weight (K = H, N = 2I; gate_proj in columns [0, I), the
activated half), scale and, for A8W4, bias (the weight assist matrix; None for A8W8).
down_*: the down projection's (K = I, N = H)."""


def _float_view(obj: ArrayLike, name: str):
    """(the caller's array as NumPy, uncopied (bfloat16 as its uint16 bits), qmoe dtype code):
    shapes can be checked on it before anything is copied."""
    arr = to_numpy(obj, name, np.float32)
    if arr is None:
        raise invalid(f"{name} is None")
    if arr.ndim != 3:
        raise invalid(f"{name}: rank {arr.ndim}, expected 3 ({name} [E, out, in])")
    bf16_torch = torch_bfloat16_bits(obj) is not None
    if bf16_torch or (arr.dtype.itemsize == 2 and arr.dtype.name == "bfloat16"):
        code, arr = _lib.DTYPE_BFLOAT16, arr.view(np.uint16)
    elif arr.dtype == np.float16:
        code = _lib.DTYPE_FLOAT16
    elif arr.dtype.kind == "f" and arr.dtype.itemsize in (4, 8):
        code = _lib.DTYPE_FLOAT32
    else:
        raise invalid(f"{name}: dtype {arr.dtype} is not supported; expected float32, float16 or "
                      "bfloat16")
    return arr, code


def _float_ready(arr: np.ndarray, code: int):
    """_float_view's array as the library reads it: native float32 (float64 rounded), float16
    or bfloat16 bits, each expert's matrix C-contiguous (a copy only where needed)."""
    try:
        if code == _lib.DTYPE_FLOAT32:
            arr = arr.astype(np.dtype(np.float32).newbyteorder("="), copy=False)
        elif not arr.dtype.isnative:
            arr = arr.astype(arr.dtype.newbyteorder("="))
        if arr.strides[1] != arr.shape[2] * arr.itemsize or arr.strides[2] != arr.itemsize:
            arr = np.ascontiguousarray(arr)
    except MemoryError as exc:
        raise QmoeError(_lib.ERR_INNER, f"out of memory for a copy of the weights "
                        f"{list(arr.shape)}", _lib.status_name(_lib.ERR_INNER)) from exc
    return arr, code


def _pointers(arr: np.ndarray):
    E = arr.shape[0]
    ptrs = (c_void_p * max(E, 1))()
    for e in range(E):
        ptrs[e] = arr.ctypes.data + e * arr.strides[0]
    return ptrs


def _options(mode: str, group_size: Optional[int], clip_search: bool, weight_format: str,
             threads: Optional[int]) -> _QuantOptions:
    if mode not in _MODES:
        raise invalid(f"mode = {mode!r}: expected 'a8w8' or 'a8w4'")
    if weight_format not in _FORMATS:
        raise invalid(f"weight_format = {weight_format!r}: expected 'nz' or 'nd'")
    for label, value in (("group_size", group_size), ("threads", threads)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer))
                                  or value < 0):
            raise invalid(f"{label} = {value!r}: expected a non-negative integer or None")
    if not isinstance(clip_search, (bool, np.bool_)):
        raise invalid(f"clip_search = {clip_search!r}: expected True or False")
    return _QuantOptions(ctypes.sizeof(_QuantOptions), _MODES[mode], _FORMATS[weight_format],
                         int(bool(clip_search)), int(group_size or 0),
                         min(int(threads or 0), 1 << 30))


def _outputs(opts: _QuantOptions, E: int, K: int, N: int):
    """Zeroed (weight, scale, bias) in the operators' shapes, sized by the library's rules."""
    sizes = _QuantSizes()
    _lib.check(_lib.lib.qmoe_quant_sizes_of(ctypes.byref(opts), E, K, N, ctypes.byref(sizes)))
    a8w4, nd = opts.mode == 1, opts.weight_nd == 1
    if not a8w4:
        shape = (E, K, N) if nd else (E, N // 32, K // 16, 16, 32)
        weight = np.zeros(shape, np.int8)
    elif nd:
        weight = np.zeros((E, K, N // 8), np.int32) if N % 8 == 0 else \
            np.zeros((E, K, N // 2), np.uint8)
    else:
        weight = np.zeros((E, N // 64, K // 16, 16, 8), np.int32)
    scale = np.zeros((E, N) if sizes.groups == 0 else (E, sizes.groups, N), np.float32)
    bias = np.zeros((E, N), np.float32) if a8w4 else None
    return weight, scale, bias


def _ptr(a: Optional[np.ndarray]):
    return None if a is None else a.ctypes.data


def quantize_experts(gate: ArrayLike, up: ArrayLike, down: ArrayLike, *, mode: str = "a8w8",
                     group_size: Optional[int] = None, clip_search: bool = False,
                     weight_format: str = "nz", threads: Optional[int] = None) -> QuantizedExperts:
    """Quantize a MoE layer's float experts into the operators' weights and scales.

    Args:
        gate, up: ``[E, I, H]`` (each expert's ``gate_proj`` / ``up_proj`` weight as a checkpoint
            stores it, nn.Linear ``[out, in]``); float32, float16 or bfloat16 (float64 is rounded
            to float32 first). NumPy arrays or PyTorch CPU tensors.
        down: ``[E, H, I]`` (``down_proj``).
        mode: ``"a8w8"`` (int8, scale amax/127) or ``"a8w4"`` (int4, scale amax/7, plus the
            assist matrix).
        group_size: None or 0 for one scale per output channel; else one per group of
            ``group_size`` inputs (e.g. 128): scales ``[E, K/group_size, N]``.
        clip_search: A8W4 only: each group's scale minimises its squared error over clipping
            ratios 1.00, 0.99, ..., 0.50 (docs/moe-layer.md).
        weight_format: ``"nz"`` (FRACTAL_NZ: int8 ``[E, N/32, K/16, 16, 32]``, int4 as int32
            ``[E, N/64, K/16, 16, 8]``) or ``"nd"`` (int8 ``[E, K, N]``, int4 as int32
            ``[E, K, N/8]``, or uint8 ``[E, K, N/2]`` bytes when N % 8 != 0).
        threads: worker threads (None: every online core); results do not depend on it.

    Returns:
        QuantizedExperts(gate_up_weight, gate_up_scale, gate_up_bias, down_weight, down_scale,
        down_bias): the GroupedMatmulSwigluQuant weight (K = H, N = 2I, gate_proj in columns
        [0, I): the activated half) and the down projection's (K = I, N = H); biases are None
        for A8W8. PyTorch tensors when any input is one.
    """
    opts = _options(mode, group_size, clip_search, weight_format, threads)
    g, gcode = _float_view(gate, "gate")  # shapes first: a copy only of weights that fit
    u, ucode = _float_view(up, "up")
    d, dcode = _float_view(down, "down")
    if g.shape != u.shape:
        raise invalid(f"up: shape {list(u.shape)} differs from gate's {list(g.shape)} [E, I, H]")
    if gcode != ucode:
        raise invalid(f"up: dtype {u.dtype} differs from gate's {g.dtype}")
    E, I, H = g.shape
    if d.shape != (E, H, I):
        raise invalid(f"down: shape {list(d.shape)}, expected [E, H, I] = {[E, H, I]}")
    (g, _), (u, _), (d, _) = _float_ready(g, gcode), _float_ready(u, ucode), _float_ready(d, dcode)
    try:
        w13, s13, b13 = _outputs(opts, E, H, 2 * I)
        w2, s2, b2 = _outputs(opts, E, I, H)
    except MemoryError as exc:
        raise QmoeError(_lib.ERR_INNER, f"out of memory for the quantized weights of E = {E}, "
                        f"I = {I}, H = {H}", _lib.status_name(_lib.ERR_INNER)) from exc
    _lib.check(_lib.lib.qmoe_quant_gate_up(_pointers(g), _pointers(u), gcode, E, I, H,
                                              ctypes.byref(opts), _ptr(w13), _ptr(s13), _ptr(b13)))
    _lib.check(_lib.lib.qmoe_quant_linear(_pointers(d), dcode, E, H, I, ctypes.byref(opts),
                                             _ptr(w2), _ptr(s2), _ptr(b2)))
    result = QuantizedExperts(w13, s13, b13, w2, s2, b2)
    if any_torch(gate, up, down):
        result = QuantizedExperts(*(None if r is None else as_torch(r) for r in result))
    return result
