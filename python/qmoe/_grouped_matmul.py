"""``npu_grouped_matmul``: the MoE subset of the accelerator framework's grouped matmul (the
down projection), over include/qmoe/grouped_matmul.h. Contract: docs/ops/grouped-matmul.md.

The framework's list-of-tensors convention: ``x=[x]`` (one [M, K] tensor), ``weight=[w]`` (one
stacked [E, K, N] tensor: int8, int32 holding 8 int4 each ([E, K, N/8]), or float; a 5-D int8
[E, N/32, K/16, 16, 32] / int32 [E, N/64, K/16, 16, 8] weight is FRACTAL_NZ), ``split_item`` 2 or
3, ``group_type`` 0, ``group_list`` the cumulative row ends (``group_list_type=0``) or the counts
(1); returns ``[out]``. int8 x with ``scale`` and ``per_token_scale``: out = acc * pts * scale
(+ bias float32) in ``output_dtype`` (bfloat16 by default, float16, float32); int8 x and weight
without scales: int32 out (+ bias int32); float x and weight: out in x's dtype. Rows past the
group list's total are zeros in the returned tensor. ``weight=[qmoe.prepack(w, scale)]`` (int8
x) uses prepacked weights: ``scale`` may then be omitted; the results are the raw path's bits.
"""

from __future__ import annotations

import contextlib
import ctypes
from ctypes import POINTER, c_int, c_int32, c_int64, c_uint32, c_uint64, c_void_p
from typing import Any, List, Optional, Sequence

import numpy as np

from . import _lib
from ._moe_ops import _Arr, _Call, _give, _invalid, _out, _Stand, _torch

ArrayLike = Any
_P = c_void_p


class _Options(ctypes.Structure):
    _fields_ = [("struct_size", c_uint32), ("threads", c_int), ("kernel", c_int32)]


def _declare(lib: ctypes.CDLL) -> None:
    f = lib.qmoe_grouped_matmul_workspace_size
    f.restype = c_int
    f.argtypes = [_P, _P, _P, _P, _P, _P, c_int64, _P, POINTER(_Options), POINTER(c_uint64),
                  POINTER(_P)]
    lib.qmoe_grouped_matmul.restype = c_int
    lib.qmoe_grouped_matmul.argtypes = [c_void_p, c_uint64, _P, c_void_p]
    lib.qmoe_grouped_matmul_executor_destroy.restype = None
    lib.qmoe_grouped_matmul_executor_destroy.argtypes = [_P]


_declare(_lib.lib)


def _one(arg: Any, name: str, required: bool) -> Optional[Any]:
    """The framework passes lists of tensors; the MoE subset takes exactly one (or none)."""
    if arg is None:
        if required:
            raise _lib_null(name)
        return None
    if isinstance(arg, (list, tuple)):
        if len(arg) == 0 and not required:
            return None
        if len(arg) != 1:
            raise _invalid(f"{name}: a list of {len(arg)} tensors; this layer takes one")
        return arg[0]
    return arg


def _lib_null(name: str) -> Exception:
    from ._errors import QmoeError

    return QmoeError(_lib.ERR_PARAM_NULLPTR, f"{name} is None",
                     _lib.status_name(_lib.ERR_PARAM_NULLPTR))


def _dtype_code(dt: Any) -> int:
    torch = _torch()
    if torch is not None and isinstance(dt, torch.dtype):
        table = {torch.bfloat16: _lib.DTYPE_BFLOAT16, torch.float16: _lib.DTYPE_FLOAT16,
                 torch.float32: _lib.DTYPE_FLOAT32, torch.int32: _lib.DTYPE_INT32}
        if dt in table:
            return table[dt]
        raise _invalid(f"output_dtype {dt} is not supported")
    d = np.dtype(dt)
    if d.name == "bfloat16":
        return _lib.DTYPE_BFLOAT16
    table = {np.dtype(np.float16): _lib.DTYPE_FLOAT16, np.dtype(np.float32): _lib.DTYPE_FLOAT32,
             np.dtype(np.int32): _lib.DTYPE_INT32}
    if d not in table:
        raise _invalid(f"output_dtype {d} is not supported")
    return table[d]


def npu_grouped_matmul(x: Sequence[ArrayLike], weight: Sequence[ArrayLike], *,
                       bias: Optional[Sequence[ArrayLike]] = None,
                       scale: Optional[Sequence[ArrayLike]] = None,
                       offset: Optional[Sequence[ArrayLike]] = None,
                       antiquant_scale: Optional[Sequence[ArrayLike]] = None,
                       antiquant_offset: Optional[Sequence[ArrayLike]] = None,
                       per_token_scale: Optional[Sequence[ArrayLike]] = None,
                       group_list: Optional[ArrayLike] = None,
                       activation_input: Optional[Sequence[ArrayLike]] = None,
                       activation_quant_scale: Optional[Sequence[ArrayLike]] = None,
                       activation_quant_offset: Optional[Sequence[ArrayLike]] = None,
                       split_item: int = 0, group_type: Optional[int] = None,
                       group_list_type: int = 0, act_type: int = 0,
                       output_dtype: Any = None) -> List[Any]:
    """Grouped matmul of x's row segments with the experts' weights (see the module doc)."""
    for name, v in (("offset", offset), ("antiquant_scale", antiquant_scale),
                    ("antiquant_offset", antiquant_offset), ("activation_input", activation_input),
                    ("activation_quant_scale", activation_quant_scale),
                    ("activation_quant_offset", activation_quant_offset)):
        if _one(v, name, False) is not None:
            raise _invalid(f"{name} is not supported by this layer")
    if split_item not in (2, 3):
        raise _invalid(f"split_item = {split_item}; this layer takes 2 or 3 (one x, one out)")
    if group_type not in (0, None) or (group_type is None and split_item not in (2, 3)):
        raise _invalid(f"group_type = {group_type}; this layer takes 0 (split on M)")
    if act_type != 0:
        raise _invalid(f"act_type = {act_type}; this layer takes 0")
    if group_list is None:
        raise _lib_null("group_list")
    xa = _Arr(_one(x, "x", True), "x")
    wobj = _one(weight, "weight", True)
    pre = wobj if getattr(wobj, "_qmoe_prepacked", False) else None  # qmoe.prepack(...)
    wa = None if pre is not None else _Arr(wobj, "weight")
    b = _one(bias, "bias", False)
    s = _one(scale, "scale", False)
    p = _one(per_token_scale, "per_token_scale", False)
    ba = _Arr(b, "bias") if b is not None else None
    sa = _Arr(s, "scale") if s is not None else None
    pa = _Arr(p, "per_token_scale") if p is not None else None
    if isinstance(group_list, (list, tuple)):
        ga = _Arr(np.asarray(group_list, dtype=np.int64), "group_list")
    else:
        ga = _Arr(group_list, "group_list")
        if ga.code != _lib.DTYPE_INT64:
            ga = _Arr(ga.values().astype(np.int64), "group_list")
    if len(xa.shape) != 2:
        raise _invalid(f"x: rank {len(xa.shape)}, expected 2 [M, K]")
    M = xa.shape[0]
    wnd = 3 if pre is not None else len(wa.shape)
    nz = wnd == 5
    if pre is not None:
        N = pre.N
    elif wa.code == _lib.DTYPE_INT32 and wnd == 3:
        N = wa.shape[2] * 8
    elif nz:
        N = wa.shape[1] * (32 if wa.code == _lib.DTYPE_INT8 else 64)
    elif wnd == 3:
        N = wa.shape[2]
    else:
        raise _invalid(f"weight: rank {wnd}, expected 3 [E, K, N] (or 5, FRACTAL_NZ)")
    if xa.code in (_lib.DTYPE_FLOAT32, _lib.DTYPE_FLOAT16, _lib.DTYPE_BFLOAT16):
        code = xa.code
    elif sa is None and pa is None:
        code = _lib.DTYPE_INT32
    else:
        code = _dtype_code(output_dtype) if output_dtype is not None else _lib.DTYPE_BFLOAT16
    # A prepacked weight is held for the whole call: close() on another thread waits for it.
    with pre._use() if pre is not None else contextlib.nullcontext() as handle:
        # First with a stand-in out ([M, N] over a few bytes, strides 0), which only out's own
        # overlap rule refuses (after every input's): out is allocated once the inputs passed.
        out = _Stand((M, N), code)
        for probing in (True, False):
            if not probing:
                out = _out((M, N), code, zero=True)
            with _Call() as c:
                _plan_run(c, pre, handle, wa, nz, xa, ba, sa, pa, ga, group_list_type, out, code,
                          probing)
    return [_give(out, code, xa)]


def _plan_run(c: _Call, pre: Any, handle: Any, wa: Any, nz: bool, xa: Any, ba: Any, sa: Any,
              pa: Any, ga: Any, group_list_type: int, out: Any, code: int, probing: bool) -> None:
    """Phase one over `out` (a stand-in when probing: then only planned), then the run."""
    if pre is not None:
        wh = c_void_p()
        _lib.check(_lib.lib.qmoe_weights_tensor(handle, ctypes.byref(wh)))
        c.handles.append(wh)
    else:
        wh = c.t(wa)
    if nz:  # the same memory, declared FRACTAL_NZ
        arr = wa.arr
        shape = (c_int64 * 5)(*arr.shape)
        strides = (c_int64 * 5)(*[st // arr.itemsize for st in arr.strides])
        wh = c_void_p()
        _lib.check(_lib.lib.qmoe_tensor_create(shape, 5, strides, wa.code,
                                               _lib.FORMAT_FRACTAL_NZ,
                                               arr.ctypes.data if arr.size else None,
                                               ctypes.byref(wh)))
        c.handles.append(wh)
    args = [c.t(xa), wh, c.t(ba), c.t(sa), c.t(pa), c.t(ga), int(group_list_type),
            c.t(out, code)]
    lib = _lib.lib
    ws = c_uint64()
    ex = c_void_p()
    opts = _Options(ctypes.sizeof(_Options), 0, 0)
    st = lib.qmoe_grouped_matmul_workspace_size(*args, ctypes.byref(opts),
                                                ctypes.byref(ws), ctypes.byref(ex))
    if probing:
        info = lib.qmoe_last_error_info().contents
        if st == _lib.OK:
            lib.qmoe_grouped_matmul_executor_destroy(ex)
        elif not (st == _lib.ERR_PARAM_INVALID and info.rule == _lib.RULE_OVERLAP
                  and info.arg == b"out"):
            _lib.check(st)
        return
    _lib.check(st)
    try:
        buf = np.empty(max(1, (ws.value + 7) // 8), dtype=np.int64)
        _lib.check(lib.qmoe_grouped_matmul(buf.ctypes.data, ws.value, ex, None))
    finally:
        lib.qmoe_grouped_matmul_executor_destroy(ex)
