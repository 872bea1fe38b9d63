"""The element-wise operators of a quantized MoE layer, with the accelerator framework's names
and signatures: ``npu_dynamic_quant``, ``npu_moe_gating_top_k_softmax``, ``npu_moe_gating_top_k``,
``npu_moe_init_routing_v2``, ``npu_moe_finalize_routing``, ``npu_moe_token_unpermute`` and
``npu_swiglu``.

Inputs are NumPy arrays (bfloat16 through ml_dtypes) or PyTorch CPU tensors; outputs are of the
same kind as the first tensor argument. Each call runs the two C phases of include/qmoe/moe_ops.h
(validate and plan, then compute on all cores). Contracts: docs/ops/.
"""

from __future__ import annotations

import ctypes
import operator
import sys
from ctypes import POINTER, c_double, c_int, c_int64, c_uint32, c_uint64, c_void_p
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from . import _lib
from ._errors import QmoeError

ArrayLike = Any

_P = c_void_p


class _Options(ctypes.Structure):
    _fields_ = [("struct_size", c_uint32), ("threads", c_int)]


class _GatingAttrs(ctypes.Structure):
    _fields_ = [("k", c_int64), ("k_group", c_int64), ("group_count", c_int64),
                ("group_select_mode", c_int64), ("renorm", c_int64), ("norm_type", c_int64),
                ("out_flag", c_int), ("routed_scaling_factor", c_double), ("eps", c_double)]


class _RoutingAttrs(ctypes.Structure):
    _fields_ = [("active_num", c_int64), ("expert_capacity", c_int64), ("expert_num", c_int64),
                ("drop_pad_mode", c_int64), ("tokens_mode", c_int), ("quant_mode", c_int),
                ("expert_start", c_int64), ("expert_end", c_int64), ("row_idx_type", c_int)]


def _declare(lib: ctypes.CDLL) -> None:
    def fn(name, *argtypes):
        f = getattr(lib, name)
        f.restype = c_int
        f.argtypes = list(argtypes)

    tail = (POINTER(_Options), POINTER(c_uint64), POINTER(_P))
    run = (c_void_p, c_uint64, _P, c_void_p)
    fn("qmoe_dynamic_quant_workspace_size", _P, _P, _P, _P, *tail)
    fn("qmoe_moe_gating_top_k_softmax_workspace_size", _P, _P, c_int64, _P, _P, _P, *tail)
    fn("qmoe_moe_gating_top_k_workspace_size", _P, _P, POINTER(_GatingAttrs), _P, _P, _P, *tail)
    fn("qmoe_moe_init_routing_workspace_size", _P, _P, _P, _P, POINTER(_RoutingAttrs), _P, _P,
       _P, _P, *tail)
    fn("qmoe_moe_finalize_routing_workspace_size", _P, _P, _P, _P, _P, _P, _P, c_int64, _P, *tail)
    fn("qmoe_swiglu_workspace_size", _P, c_int64, _P, *tail)
    for op in ("dynamic_quant", "moe_gating_top_k_softmax", "moe_gating_top_k",
               "moe_init_routing", "moe_finalize_routing", "swiglu"):
        fn("qmoe_" + op, *run)
    lib.qmoe_moe_executor_destroy.restype = None
    lib.qmoe_moe_executor_destroy.argtypes = [_P]


_declare(_lib.lib)

_CODES = {np.dtype(np.int8): _lib.DTYPE_INT8, np.dtype(np.int32): _lib.DTYPE_INT32,
          np.dtype(np.int64): _lib.DTYPE_INT64, np.dtype(np.float32): _lib.DTYPE_FLOAT32,
          np.dtype(np.float16): _lib.DTYPE_FLOAT16}


def _invalid(message: str) -> QmoeError:
    return QmoeError(_lib.ERR_PARAM_INVALID, message, _lib.status_name(_lib.ERR_PARAM_INVALID))


def _torch():
    return sys.modules.get("torch")


def _is_torch(obj: Any) -> bool:
    t = _torch()
    return t is not None and isinstance(obj, t.Tensor)


class _Arr:
    """A caller array as qmoe reads it: a NumPy view (bfloat16 as uint16 bits) and its dtype code,
    plus what is needed to hand results back in the caller's kind."""

    def __init__(self, obj: ArrayLike, name: str) -> None:
        self.name = name
        self.torch = _is_torch(obj)
        self.bf16_dtype = None  # the caller's NumPy bfloat16 dtype, to give results back
        if self.torch:
            t = obj.detach()
            if t.device.type != "cpu":
                raise _invalid(f"{name}: a {t.device.type} tensor; qmoe reads CPU tensors")
            if t.dtype == _torch().bfloat16:
                arr, code = t.view(_torch().int16).numpy().view(np.uint16), _lib.DTYPE_BFLOAT16
            elif t.dtype == _torch().bool:
                arr, code = t.numpy().view(np.int8), _lib.DTYPE_INT8
            else:
                arr, code = t.numpy(), None
        else:
            arr, code = np.asarray(obj), None
            if arr.dtype.itemsize == 2 and arr.dtype.name == "bfloat16":
                self.bf16_dtype = arr.dtype
                arr, code = arr.view(np.uint16), _lib.DTYPE_BFLOAT16
            elif arr.dtype == np.bool_:
                arr, code = arr.view(np.int8), _lib.DTYPE_INT8
        # negative or odd strides, byte-swapped or misaligned data: a native contiguous copy
        if (not arr.dtype.isnative or not arr.flags.aligned
                or any(s < 0 or s % arr.itemsize for s in arr.strides)):
            arr = np.array(arr, dtype=arr.dtype.newbyteorder("="), order="C", copy=True)
        if code is None:
            code = _CODES.get(arr.dtype)
            if code is None:
                raise _invalid(f"{name}: dtype {arr.dtype} is not supported")
        self.arr, self.code = arr, code

    @property
    def shape(self) -> Tuple[int, ...]:
        return self.arr.shape

    def as_code(self, code: int) -> "_Arr":
        """This array converted to another dtype code (a copy), for lenient inputs."""
        src = self.values()
        out = object.__new__(_Arr)
        out.name, out.torch, out.bf16_dtype = self.name, self.torch, None
        out.arr, out.code = _np_from_float(src, code), code
        return out

    def values(self) -> np.ndarray:
        """The values as float64/int64 (bfloat16 widened exactly)."""
        if self.code == _lib.DTYPE_BFLOAT16:
            return (self.arr.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
        return self.arr.astype(np.float64 if self.arr.dtype.kind == "f" else np.int64)


def _np_from_float(values: np.ndarray, code: int) -> np.ndarray:
    if code == _lib.DTYPE_BFLOAT16:
        bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
        bits = bits + 0x7FFF + ((bits >> 16) & 1)
        return (bits >> 16).astype(np.uint16)
    dt = {v: k for k, v in _CODES.items()}[code]
    return np.ascontiguousarray(values).astype(dt)


_NP_OF = {_lib.DTYPE_INT8: np.int8, _lib.DTYPE_INT32: np.int32, _lib.DTYPE_INT64: np.int64,
          _lib.DTYPE_FLOAT32: np.float32, _lib.DTYPE_FLOAT16: np.float16,
          _lib.DTYPE_BFLOAT16: np.uint16}


class _Call:
    """The qmoe tensors of one call (destroyed at the end) and the run of its two phases."""

    def __init__(self) -> None:
        self.handles: List[c_void_p] = []
        self.keep: List[np.ndarray] = []  # arrays the tensors point into, alive until the end

    def __enter__(self) -> "_Call":
        return self

    def __exit__(self, *exc: Any) -> None:
        for h in self.handles:
            _lib.lib.qmoe_tensor_destroy(h)
        self.keep.clear()

    def t(self, a: Optional[Any], code: Optional[int] = None) -> Optional[c_void_p]:
        if a is None:
            return None
        if isinstance(a, _Stand):
            return self._make(a.shape, a.code, _PROBE.ctypes.data, [0] * len(a.shape))
        arr = a.arr if isinstance(a, _Arr) else a
        if code is None:
            code = a.code if isinstance(a, _Arr) else _CODES[arr.dtype]
        strides = [s // arr.itemsize for s in arr.strides] if arr.size else None
        self.keep.append(arr)
        return self._make(arr.shape, code, arr.ctypes.data if arr.size else None, strides)

    def _make(self, shape_: Sequence[int], code: int, data: Optional[int],
              strides_: Optional[Sequence[int]]) -> c_void_p:
        n = len(shape_)
        if n > _lib.MAX_DIMS:
            raise _invalid(f"a tensor of rank {n}: qmoe supports at most {_lib.MAX_DIMS}")
        shape = (c_int64 * max(n, 1))(*shape_)
        strides = None if strides_ is None else (c_int64 * max(n, 1))(*strides_)
        h = c_void_p()
        _lib.check(_lib.lib.qmoe_tensor_create(shape, n, strides, code, _lib.FORMAT_ND, data,
                                               ctypes.byref(h)))
        self.handles.append(h)
        return h

    @staticmethod
    def probe(op: str, plan_args: Sequence[Any], outputs: Sequence[str]) -> None:
        """Phase one with stand-ins for the outputs (and for inputs still to be converted):
        tensors of the right shape and dtype over a few bytes (strides 0), so a refused input
        costs no memory, however large its shape. The stand-in outputs share those bytes, which
        only the outputs' own overlap rule refuses (checked after every other rule): that
        refusal, or success, means the arguments passed."""
        lib = _lib.lib
        ws, ex = c_uint64(), c_void_p()
        opts = _Options(ctypes.sizeof(_Options), 0)
        st = getattr(lib, f"qmoe_{op}_workspace_size")(*plan_args, ctypes.byref(opts),
                                                       ctypes.byref(ws), ctypes.byref(ex))
        if st == _lib.OK:
            lib.qmoe_moe_executor_destroy(ex)
            return
        info = lib.qmoe_last_error_info().contents
        if not (st == _lib.ERR_PARAM_INVALID and info.rule == _lib.RULE_OVERLAP
                and info.arg.decode() in outputs):
            _lib.check(st)

    @staticmethod
    def run(op: str, plan_args: Sequence[Any]) -> None:
        lib = _lib.lib
        ws = c_uint64()
        ex = c_void_p()
        opts = _Options(ctypes.sizeof(_Options), 0)
        _lib.check(getattr(lib, f"qmoe_{op}_workspace_size")(*plan_args, ctypes.byref(opts),
                                                               ctypes.byref(ws), ctypes.byref(ex)))
        try:
            buf = np.empty(max(1, (ws.value + 7) // 8), dtype=np.int64)  # 8-byte aligned
            _lib.check(getattr(lib, f"qmoe_{op}")(buf.ctypes.data if ws.value else None,
                                                  ws.value, ex, None))
        finally:
            lib.qmoe_moe_executor_destroy(ex)


# The bytes every stand-in tensor of a probe points at (strides 0: one element each).
_PROBE = np.zeros(8, dtype=np.int64)


class _Stand:
    """A stand-in of `shape` and dtype `code` for a probe (see _Call.probe)."""

    def __init__(self, shape: Sequence[int], code: int) -> None:
        self.shape, self.code = tuple(int(d) for d in shape), code


def _out(shape: Sequence[int], code: int, zero: bool = False) -> np.ndarray:
    """A new output, after the probe accepted the call: out of memory is a QmoeError."""
    try:
        return (np.zeros if zero else np.empty)(tuple(shape), dtype=_NP_OF[code])
    except (MemoryError, ValueError) as exc:
        raise QmoeError(_lib.ERR_INNER, f"out of memory for an output of {list(shape)}",
                        _lib.status_name(_lib.ERR_INNER)) from exc


def _planned(op: str, plan: Any, outputs: Dict[str, Tuple[Sequence[int], int, bool]],
             probe_names: Sequence[str]) -> Dict[str, np.ndarray]:
    """Runs `op` after a probe: plan(call, out) gives phase one's arguments, with out(key) the
    tensor of output `key` (shape, dtype code, zero-filled) and `call.t(_Stand)` where an input
    is converted only once the probe passed (plan(call, out, probing) says which). New outputs
    are allocated only after the library accepted every argument."""
    with _Call() as c:
        _Call.probe(op, plan(c, lambda k: c.t(_Stand(outputs[k][0], outputs[k][1])), True),
                    probe_names)
    made = {k: _out(shape, code, zero) for k, (shape, code, zero) in outputs.items()}
    with _Call() as c:
        c.run(op, plan(c, lambda k: c.t(made[k], outputs[k][1]), False))
    return made


def _i64(value: Any, name: str) -> int:
    """An integer attribute as the C int64 it becomes (bool and out-of-range refused)."""
    try:
        if isinstance(value, bool):
            raise TypeError("a bool")
        v = operator.index(value)
    except TypeError as exc:
        raise _invalid(f"{name} = {value!r}: expected an integer") from exc
    if not -(2 ** 63) <= v < 2 ** 63:
        raise _invalid(f"{name} = {v} does not fit int64")
    return v


def _give(arr: np.ndarray, code: int, like: _Arr) -> Any:
    """A result in the caller's kind: torch for torch inputs, NumPy otherwise (bfloat16 through
    the caller's ml_dtypes dtype, or ml_dtypes when installed)."""
    if like.torch:
        torch = _torch()
        if code == _lib.DTYPE_BFLOAT16:
            return torch.from_numpy(arr.view(np.int16)).view(torch.bfloat16)
        return torch.from_numpy(arr)
    if code == _lib.DTYPE_BFLOAT16:
        dt = like.bf16_dtype
        if dt is None:
            import ml_dtypes  # a bfloat16 result for NumPy callers needs ml_dtypes

            dt = np.dtype(ml_dtypes.bfloat16)
        return arr.view(dt)
    return arr


def _int32(a: _Arr, name: str) -> _Arr:
    """Index tensors are int32 (the vendor's); int64 ones whose values fit are converted."""
    if a.code == _lib.DTYPE_INT32:
        return a
    if a.code != _lib.DTYPE_INT64:
        raise _invalid(f"{name}: dtype must be int32 (or int64 with values that fit)")
    v = a.arr
    if v.size and (v.min() < -(2 ** 31) or v.max() >= 2 ** 31):
        raise _invalid(f"{name}: int64 values do not fit int32")
    out = object.__new__(_Arr)
    out.name, out.torch, out.bf16_dtype = name, a.torch, None
    out.arr, out.code = v.astype(np.int32), _lib.DTYPE_INT32
    return out


def _is_int8_dtype(dst_type: Any) -> bool:
    if dst_type is None:
        return True
    t = _torch()
    if t is not None and dst_type is t.int8:
        return True
    try:
        return np.dtype(dst_type) == np.int8
    except TypeError:
        return False


# ------------------------------------------------------------------------------- operators ----


def npu_dynamic_quant(x: ArrayLike, *, smooth_scales: ArrayLike = None,
                      group_index: ArrayLike = None, dst_type: Any = None) -> Tuple[Any, Any]:
    """Per-token symmetric int8 quantization: ``(y, scale)`` with ``scale = max|x*s| / 127`` per
    row and ``y = round_half_even(x*s / scale)``. ``group_index`` (MoE): cumulative row ends;
    row block i uses ``smooth_scales[i]``. ``dst_type``: None / int8 (torch or NumPy)."""
    if not _is_int8_dtype(dst_type):
        raise _invalid(f"dst_type = {dst_type!r}: only int8 is supported")
    xa = _Arr(x, "x")
    if xa.arr.ndim < 2:
        raise _invalid(f"x: rank {xa.arr.ndim}; expected 2 to 8")
    sm = _Arr(smooth_scales, "smooth_scales") if smooth_scales is not None else None
    if group_index is None:
        made = _planned("dynamic_quant", lambda c, o, probing: [c.t(xa), c.t(sm), o("y"), o("scale")],
                        {"y": (xa.shape, _lib.DTYPE_INT8, False),
                         "scale": (xa.shape[:-1], _lib.DTYPE_FLOAT32, False)}, ("y", "scale"))
        return _give(made["y"], _lib.DTYPE_INT8, xa), _give(made["scale"], _lib.DTYPE_FLOAT32, xa)
    if sm is None or sm.arr.ndim != 2:
        raise _invalid("group_index needs smooth_scales of shape [groups, H]")
    ends = _Arr(group_index, "group_index").values().astype(np.int64).reshape(-1)
    H = xa.shape[-1]
    rows = int(np.prod(xa.shape[:-1]))
    if ends.shape[0] != sm.shape[0]:
        raise _invalid(f"group_index has {ends.shape[0]} entries; smooth_scales has {sm.shape[0]} rows")
    if ends.size and (np.any(np.diff(ends) < 0) or ends[0] < 0 or ends[-1] != rows):
        raise _invalid(f"group_index must be non-decreasing cumulative row ends ending at {rows}")
    if sm.shape[1] != H:
        raise _invalid(f"smooth_scales: shape {list(sm.shape)}, expected [groups, H = {H}]")
    y = _out(xa.shape, _lib.DTYPE_INT8)
    scale = _out(xa.shape[:-1], _lib.DTYPE_FLOAT32)
    x2, y2, s2 = xa.arr.reshape(rows, H), y.reshape(rows, H), scale.reshape(rows)
    start = 0
    for g, end in enumerate(ends):
        if end > start:
            part = object.__new__(_Arr)
            part.name, part.torch, part.bf16_dtype = "x", xa.torch, None
            part.arr, part.code = x2[start:end], xa.code
            smg = object.__new__(_Arr)
            smg.name, smg.torch, smg.bf16_dtype = "smooth_scales", False, None
            smg.arr, smg.code = sm.arr[g], sm.code
            with _Call() as c:
                c.run("dynamic_quant", [c.t(part), c.t(smg), c.t(y2[start:end]), c.t(s2[start:end])])
        start = int(end)
    return _give(y, _lib.DTYPE_INT8, xa), _give(scale, _lib.DTYPE_FLOAT32, xa)


def npu_moe_gating_top_k_softmax(x: ArrayLike, finished: ArrayLike = None,
                                 k: int = 1) -> Tuple[Any, Any, Any]:
    """Softmax over the experts, then the k largest: ``(y, expert_idx, row_idx)``. Ties go to the
    lower expert index; a finished row's expert ids are E; ``row_idx[r, j] = j * rows + r``."""
    xa = _Arr(x, "x")
    k = _i64(k, "k")
    if xa.arr.ndim not in (2, 3) or k < 0:
        raise _invalid(f"x: rank {xa.arr.ndim} (expected 2 or 3) / k = {k}")
    oshape = xa.shape[:-1] + (k,)
    fin = _Arr(finished, "finished") if finished is not None else None
    made = _planned("moe_gating_top_k_softmax",
                    lambda c, o, probing: [c.t(xa), c.t(fin, _lib.DTYPE_INT8) if fin else None, k,
                                           o("y"), o("idx"), o("rows")],
                    {"y": (oshape, xa.code, False), "idx": (oshape, _lib.DTYPE_INT32, False),
                     "rows": (oshape, _lib.DTYPE_INT32, False)},
                    ("yOut", "expertIdxOut", "rowIdxOut"))
    return (_give(made["y"], xa.code, xa), _give(made["idx"], _lib.DTYPE_INT32, xa),
            _give(made["rows"], _lib.DTYPE_INT32, xa))


def npu_moe_gating_top_k(x: ArrayLike, k: int, *, bias: ArrayLike = None, k_group: int = 1,
                         group_count: int = 1, group_select_mode: int = 0, renorm: int = 0,
                         norm_type: int = 1, out_flag: bool = False,
                         routed_scaling_factor: float = 1.0,
                         eps: float = 1e-20) -> Tuple[Any, Any, Any]:
    """DeepSeek-style gating: softmax (norm_type 0) or sigmoid (1), plus bias for the selection,
    the k_group best of group_count groups (group score: max, or sum of the top 2 with
    group_select_mode 1), the k best experts of those groups; ``y = s / (sum(s) + eps) *
    routed_scaling_factor`` of their normalised scores. Returns ``(y, expert_idx, out)``; out is
    the float32 normalised scores with out_flag, else an empty float32 array."""
    xa = _Arr(x, "x")
    if xa.arr.ndim != 2:
        raise _invalid(f"x: rank {xa.arr.ndim}; expected 2")
    R, E = xa.shape
    attrs = _GatingAttrs(_i64(k, "k"), _i64(k_group, "k_group"), _i64(group_count, "group_count"),
                         _i64(group_select_mode, "group_select_mode"), _i64(renorm, "renorm"),
                         _i64(norm_type, "norm_type"), 1 if out_flag else 0,
                         float(routed_scaling_factor), float(eps))
    kk = max(attrs.k, 0)
    b = _Arr(bias, "bias") if bias is not None else None
    made = _planned("moe_gating_top_k",
                    lambda c, o, probing: [c.t(xa), c.t(b), ctypes.byref(attrs), o("y"), o("idx"),
                                           o("out") if out_flag else None],
                    {"y": ((R, kk), xa.code, False), "idx": ((R, kk), _lib.DTYPE_INT32, False),
                     "out": ((R, E) if out_flag else (0,), _lib.DTYPE_FLOAT32, False)},
                    ("yOut", "expertIdxOut", "outOut"))
    return (_give(made["y"], xa.code, xa), _give(made["idx"], _lib.DTYPE_INT32, xa),
            _give(made["out"], _lib.DTYPE_FLOAT32, xa))


def npu_moe_init_routing_v2(x: ArrayLike, expert_idx: ArrayLike, *, scale: ArrayLike = None,
                            offset: ArrayLike = None, active_num: int = -1,
                            expert_capacity: int = -1, expert_num: int = -1,
                            drop_pad_mode: int = 0, expert_tokens_num_type: int = 0,
                            expert_tokens_num_flag: bool = False, quant_mode: int = 0,
                            active_expert_range: Sequence[int] = (),
                            row_idx_type: int = 0) -> Tuple[Any, Any, Any, Any]:
    """Routing: the (token, choice) pairs sorted stably by expert, the tokens gathered (or
    dynamically quantized to int8 with quant_mode 1). Returns ``(expanded_x, expanded_row_idx,
    expert_tokens_count_or_cumsum, expanded_scale)``. quant_mode -1: none, 1: dynamic (0, static,
    is not supported). expert_tokens_num_type 0: cumsum, 1: count (with expert_tokens_num_flag).
    active_expert_range [start, end): the local experts; other pairs get row index -1."""
    xa = _Arr(x, "x")
    ia = _Arr(expert_idx, "expert_idx")  # converted to int32 only once the probe passed
    if xa.arr.ndim != 2 or ia.arr.ndim != 2:
        raise _invalid("x must be [N, H] and expert_idx [N, K]")
    if offset is not None or quant_mode == 0:
        raise _invalid("quant_mode 0 (static quant, with offset) is not supported; use -1 or 1")
    if quant_mode not in (-1, 1):
        raise _invalid(f"quant_mode = {quant_mode}; expected -1 (none) or 1 (dynamic)")
    if expert_tokens_num_flag and expert_tokens_num_type not in (0, 1):
        raise _invalid(f"expert_tokens_num_type = {expert_tokens_num_type}; expected 0 (cumsum) "
                       "or 1 (count); 2 (key_value) is not supported")
    rng = list(active_expert_range) if active_expert_range is not None else []
    if rng and len(rng) != 2:
        raise _invalid("active_expert_range must be [start, end]")
    rng = [_i64(v, "active_expert_range") for v in rng]
    N, H = xa.shape
    K = ia.shape[1]
    active_num = _i64(active_num or 0, "active_num")
    expert_num = _i64(-1 if expert_num is None else expert_num, "expert_num")
    if expert_num <= 0:  # qmoe's reading of "unset": the range, else max + 1
        # (read only when N*K fits the row indices: otherwise the library refuses the shape)
        fits = N * K <= 2 ** 31 - 1
        expert_num = rng[1] if rng else int(ia.arr.max()) + 1 if ia.arr.size and fits else 1
    start, end = (rng[0], rng[1]) if rng else (0, expert_num)
    A = min(N * K, active_num) if active_num > 0 else N * K
    dyn = quant_mode == 1
    attrs = _RoutingAttrs(max(active_num, 0), 0, expert_num, _i64(drop_pad_mode, "drop_pad_mode"),
                          (2 if expert_tokens_num_type == 1 else 1) if expert_tokens_num_flag else 0,
                          1 if dyn else -1, start, end, _c_int32(row_idx_type, "row_idx_type"))
    ecode = _lib.DTYPE_INT8 if dyn else xa.code
    sc = _Arr(scale, "scale") if scale is not None else None
    sshape = None if sc is None else (1, sc.arr.size) if dyn and sc.arr.ndim == 1 else sc.shape

    def plan(c: _Call, o: Any, probing: bool) -> List[Any]:
        if probing:
            ti = c.t(_Stand(ia.shape, _lib.DTYPE_INT32))
            ts = None if sc is None else c.t(_Stand(sshape, _lib.DTYPE_FLOAT32))
        else:
            ti = c.t(_int32(ia, "expert_idx"))
            s32 = None if sc is None else sc if sc.code == _lib.DTYPE_FLOAT32 else \
                sc.as_code(_lib.DTYPE_FLOAT32)
            ts = None
            if s32 is not None:
                c.keep.append(s32.arr)
                ts = c._make(sshape, _lib.DTYPE_FLOAT32, s32.arr.ctypes.data if s32.arr.size
                             else None, _strides_as(s32.arr, sshape))
        return [c.t(xa), ti, ts, None, ctypes.byref(attrs), o("ex"), o("ri"),
                o("tokens") if expert_tokens_num_flag else None,
                o("escale") if (dyn or sc is not None) else None]

    made = _planned("moe_init_routing", plan,
                    {"ex": ((A, H), ecode, True), "ri": ((N * K,), _lib.DTYPE_INT32, False),
                     "tokens": ((max(end - start, 0),) if expert_tokens_num_flag else (0,),
                                _lib.DTYPE_INT64, True),
                     "escale": ((A,), _lib.DTYPE_FLOAT32, True)},
                    ("expandedXOut", "expandedRowIdxOut", "expertTokensCountOrCumsumOut",
                     "expandedScaleOut"))
    return (_give(made["ex"], ecode, xa), _give(made["ri"], _lib.DTYPE_INT32, xa),
            _give(made["tokens"], _lib.DTYPE_INT64, xa), _give(made["escale"], _lib.DTYPE_FLOAT32, xa))


def _strides_as(arr: np.ndarray, shape: Sequence[int]) -> Optional[List[int]]:
    """Element strides of `arr` viewed as `shape` (the same elements: equal shapes, or a 1-D
    array as [1, n])."""
    if not arr.size:
        return None
    st = [s // arr.itemsize for s in arr.strides]
    return st if tuple(arr.shape) == tuple(shape) else [0] + st


def _c_int32(value: Any, name: str) -> int:
    v = _i64(value, name)
    if not -(2 ** 31) <= v < 2 ** 31:
        raise _invalid(f"{name} = {v} does not fit a C int")
    return v


def _finalize(ea: _Arr, ri: _Arr, s1: Optional[_Arr], s2: Optional[_Arr], b: Optional[_Arr],
              sc: Optional[_Arr], ei: Optional[_Arr], mode: int, names: Tuple[str, str]) -> Any:
    """ri and ei as given (any integer dtype): converted to int32, and sc to a dtype the
    library reads, only once the probe accepted their shapes."""
    NK = ri.arr.size
    if sc is not None:
        N = sc.shape[0]
    elif ei is not None:
        N = ei.shape[0]
    elif s1 is not None:
        N = s1.shape[0]
    elif s2 is not None:
        N = s2.shape[0]
    else:
        N = NK
    H = ea.shape[-1] if ea.arr.ndim == 2 else 0
    sc_code = None if sc is None else sc.code if sc.code in (ea.code, _lib.DTYPE_FLOAT32) else \
        _lib.DTYPE_FLOAT32

    def plan(c: _Call, o: Any, probing: bool) -> List[Any]:
        if probing:
            tr = c.t(_Stand((NK,), _lib.DTYPE_INT32))
            te = None if ei is None else c.t(_Stand(ei.shape, _lib.DTYPE_INT32))
            tsc = None if sc is None else c.t(_Stand(sc.shape, sc_code))
        else:
            tr = c.t(_int32(ri, names[0]).arr.reshape(-1), _lib.DTYPE_INT32)
            te = None if ei is None else c.t(_int32(ei, names[1]))
            tsc = None if sc is None else c.t(sc if sc.code == sc_code else sc.as_code(sc_code))
        return [c.t(ea), tr, c.t(s1), c.t(s2), c.t(b), tsc, te, _i64(mode, "drop_pad_mode"),
                o("out")]

    made = _planned("moe_finalize_routing", plan, {"out": ((N, H), ea.code, False)}, ("out",))
    return _give(made["out"], ea.code, ea)


def npu_moe_finalize_routing(expanded_permuted_rows: ArrayLike, skip1: ArrayLike = None,
                             skip2: ArrayLike = None, bias: ArrayLike = None,
                             scales: ArrayLike = None, expanded_src_to_dst_row: ArrayLike = None,
                             export_for_source_row: ArrayLike = None,
                             drop_pad_mode: int = 0) -> Any:
    """Back to token order: ``out[i] = skip1[i] + skip2[i] + sum_j scales[i, j] *
    (rows[r(i, j)] + bias[export_for_source_row[i, j]])`` with ``r(i, j) =
    expanded_src_to_dst_row[j*N + i]`` (drop_pad_mode 0) or ``[i*K + j]`` (2); -1 adds nothing."""
    if expanded_src_to_dst_row is None:
        raise QmoeError(_lib.ERR_PARAM_NULLPTR, "expanded_src_to_dst_row is required",
                        _lib.status_name(_lib.ERR_PARAM_NULLPTR))

    def opt(obj: ArrayLike, name: str) -> Optional[_Arr]:
        return _Arr(obj, name) if obj is not None else None

    ea = _Arr(expanded_permuted_rows, "expanded_permuted_rows")
    ri = _Arr(expanded_src_to_dst_row, "expanded_src_to_dst_row")
    ei = opt(export_for_source_row, "export_for_source_row")
    return _finalize(ea, ri, opt(skip1, "skip1"), opt(skip2, "skip2"), opt(bias, "bias"),
                     opt(scales, "scales"), ei, drop_pad_mode,
                     ("expanded_src_to_dst_row", "export_for_source_row"))


def npu_moe_token_unpermute(permuted_tokens: ArrayLike, sorted_indices: ArrayLike,
                            probs: ArrayLike = None, padded_mode: bool = False,
                            restore_shape: Any = None) -> Any:
    """``out[i] = sum_j permuted_tokens[sorted_indices[i*K + j]] * probs[i, j]`` (K = 1 and weight
    1 without probs): finalize routing in token-major order. padded_mode is not supported."""
    if padded_mode:
        raise _invalid("padded_mode=True is not supported")
    pa = _Arr(permuted_tokens, "permuted_tokens")
    si = _Arr(sorted_indices, "sorted_indices")
    pr = _Arr(probs, "probs") if probs is not None else None
    return _finalize(pa, si, None, None, None, pr, None, 2, ("sorted_indices", ""))


def npu_swiglu(x: ArrayLike, dim: int = -1) -> Any:
    """``silu(a) * b`` with a, b the halves of x along dim."""
    xa = _Arr(x, "x")
    nd = xa.arr.ndim
    if nd < 1 or not -nd <= dim < nd:
        raise _invalid(f"dim = {dim} for x of rank {nd}")
    shape = list(xa.shape)
    shape[dim] //= 2
    made = _planned("swiglu", lambda c, o, probing: [c.t(xa), int(dim), o("out")],
                    {"out": (shape, xa.code, False)}, ("out",))
    return _give(made["out"], xa.code, xa)
