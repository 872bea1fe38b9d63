"""The MoE expert layer (include/qmoe/moe_layer.h): experts quantized and prepacked once, then
``layer(hidden, router_logits)`` runs gating, routing, the two grouped matmuls and finalize in
the C library (the GIL is released while it runs: ctypes drops it around the call)."""

from __future__ import annotations

import contextlib
import ctypes
import threading
from ctypes import POINTER, c_double, c_float, c_int, c_int64, c_uint32, c_uint64, c_void_p
from typing import Any, Iterator, Optional, Tuple

import numpy as np

from . import _lib
from ._arrays import Tensors, invalid, is_torch, torch_bfloat16_bits
from ._errors import QmoeError
from ._omp import OmpDevice
from ._quantize import _float_ready, _float_view, _pointers

ArrayLike = Any

_MODES = {"a8w8": 0, "a8w4": 1}
_GATINGS = {"softmax": 0, "sigmoid": 1}
_DTYPE_NAMES = {_lib.DTYPE_FLOAT32: "float32", _lib.DTYPE_FLOAT16: "float16",
                _lib.DTYPE_BFLOAT16: "bfloat16"}


class _LayerConfig(ctypes.Structure):
    """struct qmoe_moe_layer_config (include/qmoe/moe_layer.h)."""

    _fields_ = [
        ("struct_size", c_uint32),
        ("hidden_size", c_int64),
        ("intermediate_size", c_int64),
        ("num_experts", c_int64),
        ("top_k", c_int64),
        ("gating", c_int),
        ("renormalize", c_int),
        ("group_count", c_int64),
        ("k_group", c_int64),
        ("routed_scaling_factor", c_double),
        ("correction_bias", c_void_p),
        ("mode", c_int),
        ("group_size", c_int64),
        ("clip_search", c_int),
        ("threads", c_int),
        ("shared_intermediate_size", c_int64),
        ("shared_gate", c_void_p),
        ("shared_up", c_void_p),
        ("shared_down", c_void_p),
        ("shared_expert_gate", c_void_p),
        ("gate_up_bias", c_void_p),
        ("down_bias", c_void_p),
        ("swiglu_limit", c_float),
        ("swiglu_alpha", c_float),
    ]


def _declare(lib: ctypes.CDLL) -> None:
    def fn(name, restype, *argtypes):
        f = getattr(lib, name)
        f.restype = restype
        f.argtypes = list(argtypes)

    fn("qmoe_moe_layer_create_from_float", c_int, POINTER(_LayerConfig), POINTER(c_void_p),
       POINTER(c_void_p), POINTER(c_void_p), c_int, POINTER(c_void_p))
    fn("qmoe_moe_layer_destroy", None, c_void_p)
    fn("qmoe_moe_layer_workspace_size", c_int, c_void_p, c_int64, c_int, POINTER(c_uint64))
    fn("qmoe_moe_layer_forward", c_int, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p,
       c_uint64, c_void_p)
    fn("qmoe_moe_layer_forward_routed", c_int, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p,
       c_void_p, c_uint64, c_void_p)
    fn("qmoe_moe_layer_weight_bytes", c_uint64, c_void_p)
    fn("qmoe_moe_layer_route", c_int, c_void_p, c_void_p, c_void_p, c_void_p)


_declare(_lib.lib)


def _np3(obj: ArrayLike) -> Any:
    """A [rows, cols] weight as [1, rows, cols] (NumPy or torch)."""
    return obj[None] if hasattr(obj, "ndim") and obj.ndim == 2 else obj


def _int(value: Any, name: str, lo: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < lo:
        raise invalid(f"{name} = {value!r}: expected an integer >= {lo}")
    return int(value)


def _view(obj: ArrayLike) -> np.ndarray:
    """The caller's array as NumPy without copying (a torch tensor through .numpy())."""
    return np.asarray(obj.detach().cpu().numpy() if is_torch(obj) else obj)


def _check_2d(arr: np.ndarray, name: str, rows: int, cols: int) -> None:
    """The layer's shape rule (the C layer's words), checked on the caller's array before any
    copy: a broadcast array of the wrong shape costs nothing, however large it claims to be."""
    if arr.ndim != 2 or arr.shape[1] != cols or (rows >= 0 and arr.shape[0] != rows):
        dims = list(arr.shape[:2]) + [0] * (2 - min(arr.ndim, 2))
        raise invalid(f"{name} must be [{rows}, {cols}] (rank {arr.ndim}, {dims} given)")


def _native(arr: np.ndarray, dtype: Any) -> np.ndarray:
    """A C-contiguous native-order copy (or the array itself), out of memory as QmoeError."""
    try:
        return np.ascontiguousarray(arr, dtype=np.dtype(dtype).newbyteorder("="))
    except MemoryError as exc:
        raise _lib_oom(f"a copy of {list(arr.shape)} {np.dtype(dtype).name}") from exc


def _lib_oom(what: str) -> QmoeError:
    return QmoeError(_lib.ERR_INNER, f"out of memory for {what}", _lib.status_name(_lib.ERR_INNER))


def _activations(obj: ArrayLike, name: str, H: int):
    """(C-contiguous array, dtype code, how to wrap the output) for hidden states [T, H]; the
    shape is checked before anything is copied. Any byte order is read (as the operator
    functions do): a big-endian array is converted to native order."""
    bits = torch_bfloat16_bits(obj)
    if bits is not None:
        _check_2d(bits, name, -1, H)
        return _native(bits, np.uint16), _lib.DTYPE_BFLOAT16, "torch-bf16"
    torch_in = is_torch(obj)
    arr = _view(obj)
    wrap = "torch" if torch_in else "numpy"
    if arr.dtype.name == "bfloat16":  # ml_dtypes
        _check_2d(arr, name, -1, H)
        return _native(arr, arr.dtype).view(np.uint16), _lib.DTYPE_BFLOAT16, ("ml-bf16", arr.dtype)
    if arr.dtype.kind == "f" and arr.dtype.itemsize in (2, 4, 8):
        _check_2d(arr, name, -1, H)
        if arr.dtype.itemsize == 2:
            return _native(arr, np.float16), _lib.DTYPE_FLOAT16, wrap
        return _native(arr, np.float32), _lib.DTYPE_FLOAT32, wrap
    raise invalid(f"{name}: dtype {arr.dtype} is not supported; expected float32, float16 or "
                  "bfloat16")


def _float32(obj: ArrayLike, name: str, shape: Optional[Tuple[int, int]] = None) -> np.ndarray:
    """float32 values of `obj`; with `shape` (rows, cols) the 2-D shape is checked first."""
    bits = torch_bfloat16_bits(obj)
    arr = bits if bits is not None else _view(obj)
    if shape is not None:
        _check_2d(arr, name, *shape)
    if bits is not None:
        return (_native(bits, np.uint16).astype(np.uint32) << 16).view(np.float32)
    if arr.dtype.kind != "f":
        raise invalid(f"{name}: dtype {arr.dtype} is not a float type")
    return _native(arr, np.float32)


def _bias_like(obj: Optional[ArrayLike], name: str, shape: Tuple[int, int],
               code: int) -> Optional[np.ndarray]:
    """An expert bias [rows, cols] as the library reads it, in the experts' dtype (code)."""
    if obj is None:
        return None
    arr, bcode = _float_view(obj[None] if getattr(obj, "ndim", 0) == 2 else obj, name)
    if arr.shape != (1,) + tuple(shape):
        raise invalid(f"{name}: shape {list(arr.shape[1:])}; expected {list(shape)}")
    if bcode != code:
        raise invalid(f"{name}: dtype {_DTYPE_NAMES[bcode]} differs from the experts' "
                      f"{_DTYPE_NAMES[code]}")
    return np.ascontiguousarray(_float_ready(arr, code)[0])


def _swiglu_number(value: Any, name: str) -> float:
    v = float(value)
    if not (0.0 <= v < float("inf")):
        raise invalid(f"{name} = {value!r}: expected 0 or a positive finite number")
    return v


def _split_fused(gate_up: ArrayLike, down: ArrayLike, layout: str,
                 gate_up_bias: Optional[ArrayLike]):
    """(gate, up [E, I, H], down [E, H, I], gate_up_bias [E, 2I] gate first) from a fused
    layout, as views where the layout allows (NumPy arrays or torch tensors)."""
    if layout not in ("transformers", "gpt_oss"):
        raise invalid(f"layout = {layout!r}: expected 'transformers' or 'gpt_oss'")
    if getattr(gate_up, "ndim", 0) != 3 or getattr(down, "ndim", 0) != 3:
        raise invalid(f"gate_up and down must be rank 3 (ranks {getattr(gate_up, 'ndim', None)}, "
                      f"{getattr(down, 'ndim', None)} given)")
    E = int(gate_up.shape[0])
    if layout == "transformers":  # gate_up [E, 2I, H] gate rows first, down [E, H, I]
        n2 = int(gate_up.shape[1])
        if n2 % 2:
            raise invalid(f"gate_up: shape {list(gate_up.shape)}; expected [E, 2I, H]")
        gate, up, dn, b = gate_up[:, :n2 // 2], gate_up[:, n2 // 2:], down, gate_up_bias
    else:  # gpt-oss: gate_up [E, H, 2I] interleaved (gate even columns), down [E, I, H]
        n2 = int(gate_up.shape[2])
        if n2 % 2:
            raise invalid(f"gate_up: shape {list(gate_up.shape)}; expected [E, H, 2I]")
        gate, up = gate_up[:, :, 0::2].swapaxes(1, 2), gate_up[:, :, 1::2].swapaxes(1, 2)
        dn = down.swapaxes(1, 2)
        b = gate_up_bias
        if b is not None:
            if getattr(b, "ndim", 0) != 2 or tuple(b.shape) != (E, n2):
                raise invalid(f"gate_up_bias: shape {list(getattr(b, 'shape', []))}; expected "
                              f"[{E}, {n2}]")
            b = _cat(b[:, 0::2], b[:, 1::2])
    return gate, up, dn, b


def _cat(a: Any, b: Any) -> Any:
    """[a | b] along the last axis, NumPy or torch."""
    if is_torch(a):
        import torch

        return torch.cat([a, b], dim=-1)
    return np.concatenate([a, b], axis=-1)


def _hidden_rows(hidden: ArrayLike) -> int:
    """T of hidden [T, H] (its rank checked), read without copying."""
    bits = torch_bfloat16_bits(hidden)
    arr = bits if bits is not None else _view(hidden)
    if arr.ndim != 2:
        raise invalid(f"hidden: rank {arr.ndim}, expected 2 ([T, H])")
    return int(arr.shape[0])


def _wrap(out: np.ndarray, wrap: Any) -> Any:
    if wrap == "numpy":
        return out
    if isinstance(wrap, tuple):
        return out.view(wrap[1])
    import torch

    t = torch.from_numpy(out)
    return t.view(torch.bfloat16) if wrap == "torch-bf16" else t


@contextlib.contextmanager
def _device_stream(device: Any) -> Iterator[Optional[c_void_p]]:
    """The calling thread's stream on `device` (held open for the block), None for none."""
    if device is None:
        yield None
        return
    if not isinstance(device, OmpDevice):
        raise invalid(f"device: {type(device).__name__}; expected None or a qmoe.omp_device()")
    with device._use() as dev:
        yield device._stream(dev)


class MoELayer(_lib.Owned):
    """A MoE expert layer: E SwiGLU experts quantized (A8W8 or A8W4) and prepacked once.

    Make it with :meth:`from_float` or :meth:`from_safetensors`; call it as
    ``layer(hidden [T, H], router_logits [T, E]) -> out [T, H]`` (hidden's dtype: float32,
    float16 or bfloat16; NumPy arrays or PyTorch CPU tensors, the output of the same kind), or
    :meth:`forward_routed` with precomputed top-k ids and weights. Safe to call from several
    Python threads at once (each thread keeps its own workspace, grown as needed and reused, so
    repeated calls do not fault fresh pages in); :meth:`close` waits for the calls
    in flight, and a call after it raises :class:`QmoeError` (161001).
    """

    def __init__(self, handle: c_void_p, config: _LayerConfig, bias: Optional[np.ndarray]):
        self._own(handle)
        self.hidden_size = int(config.hidden_size)
        self.intermediate_size = int(config.intermediate_size)
        self.num_experts = int(config.num_experts)
        self.top_k = int(config.top_k)
        self._bias = bias
        self._workspaces = threading.local()
        # None: the layer's own device (config threads); a qmoe.omp_device(): its OpenMP team
        self.device: Any = None

    @classmethod
    def from_float(cls, gate: ArrayLike, up: ArrayLike, down: ArrayLike, *, top_k: int,
                   mode: str = "a8w8", group_size: Optional[int] = None,
                   renormalize: bool = True, gating: str = "softmax", group_count: int = 1,
                   k_group: int = 1, routed_scaling_factor: float = 1.0,
                   correction_bias: Optional[ArrayLike] = None, clip_search: bool = False,
                   threads: Optional[int] = None, shared_gate: Optional[ArrayLike] = None,
                   shared_up: Optional[ArrayLike] = None,
                   shared_down: Optional[ArrayLike] = None,
                   shared_expert_gate: Optional[ArrayLike] = None,
                   gate_up_bias: Optional[ArrayLike] = None,
                   down_bias: Optional[ArrayLike] = None, swiglu_limit: float = 0.0,
                   swiglu_alpha: float = 0.0) -> "MoELayer":
        """From float experts in the checkpoint convention: gate, up ``[E, I, H]``, down
        ``[E, H, I]`` (float32, float16 or bfloat16). ``gating="sigmoid"`` is DeepSeek-style:
        sigmoid scores, ``group_count`` groups of which ``k_group`` are kept. With either
        gating, ``correction_bias [E]`` is added to the scores for selection only (the weights
        are the scores without it), ``renormalize`` divides the top-k weights by their sum, and
        ``routed_scaling_factor`` multiplies them. A shared expert every token passes:
        ``shared_gate``, ``shared_up [Is, H]``, ``shared_down [H, Is]`` (Is a multiple of I),
        with weight 1, or ``sigmoid(hidden . shared_expert_gate)`` per token with
        ``shared_expert_gate [H]`` or ``[1, H]`` (Qwen2-MoE; the experts' dtype). gpt-oss:
        expert biases ``gate_up_bias [E, 2I]`` (gate's I, then up's I; added before SwiGLU)
        and ``down_bias [E, H]`` in the experts' dtype, and the SwiGLU variant
        ``swiglu_limit``, ``swiglu_alpha`` (docs/ops/grouped-matmul-swiglu-quant.md; gpt-oss:
        7.0, 1.702). Quantization: docs/moe-layer.md."""
        if mode not in _MODES:
            raise invalid(f"mode = {mode!r}: expected 'a8w8' or 'a8w4'")
        if gating not in _GATINGS:
            raise invalid(f"gating = {gating!r}: expected 'softmax' or 'sigmoid'")
        # shapes checked on the caller's arrays; copies (if any) only of weights that fit
        g, code = _float_view(gate, "gate")
        u, ucode = _float_view(up, "up")
        d, dcode = _float_view(down, "down")
        if g.ndim != 3 or u.shape != g.shape or code != ucode or dcode != code:
            raise invalid(f"gate {list(g.shape)} ({g.dtype}), up {list(u.shape)} ({u.dtype}) and "
                          f"down {list(d.shape)} ({d.dtype}) must be [E, I, H], [E, I, H], "
                          "[E, H, I] of one dtype")
        E, I, H = g.shape
        if d.shape != (E, H, I):
            raise invalid(f"down: shape {list(d.shape)}, expected [E, H, I] = {[E, H, I]}")
        (g, _), (u, _), (d, _) = _float_ready(g, code), _float_ready(u, code), _float_ready(d, code)
        bias = None
        if correction_bias is not None:
            bias = _float32(correction_bias, "correction_bias").reshape(-1)
            if bias.shape != (E,):
                raise invalid(f"correction_bias: shape {list(bias.shape)}, expected [{E}]")
        shared = [sh for sh in (shared_gate, shared_up, shared_down) if sh is not None]
        Is, keep = 0, []
        if shared:
            if len(shared) != 3:
                raise invalid("shared_gate, shared_up and shared_down go together")
            sg, sc = _float_view(_np3(shared_gate), "shared_gate")
            su, uc = _float_view(_np3(shared_up), "shared_up")
            sd, dc = _float_view(_np3(shared_down), "shared_down")
            Is = sg.shape[1]
            if (sg.shape != (1, Is, H) or su.shape != (1, Is, H) or sd.shape != (1, H, Is)
                    or {sc, uc, dc} != {code}):
                raise invalid(f"shared expert: expected [Is, H], [Is, H], [H, Is] with H = {H} in "
                              "the experts' dtype")
            keep = [np.ascontiguousarray(_float_ready(a, code)[0]) for a in (sg, su, sd)]
        sgate = None
        if shared_expert_gate is not None:
            if not shared:
                raise invalid("shared_expert_gate needs a shared expert (shared_gate, shared_up, "
                              "shared_down)")
            gobj = shared_expert_gate
            nd = getattr(gobj, "ndim", 0)
            gv, gc = _float_view(gobj[None, None] if nd == 1 else _np3(gobj), "shared_expert_gate")
            if gv.shape != (1, 1, H) or gc != code:
                raise invalid(f"shared_expert_gate: shape {list(gv.shape)[3 - max(nd, 1):]} "
                              f"({gv.dtype}); expected [{H}] or [1, {H}] in the experts' dtype")
            sgate = np.ascontiguousarray(_float_ready(gv, code)[0]).reshape(-1)
            keep.append(sgate)
        biases = [_bias_like(b, name, shape, code) for b, name, shape in
                  ((gate_up_bias, "gate_up_bias", (E, 2 * I)), (down_bias, "down_bias", (E, H)))]
        limit, alpha = _swiglu_number(swiglu_limit, "swiglu_limit"), \
            _swiglu_number(swiglu_alpha, "swiglu_alpha")
        cfg = _LayerConfig(ctypes.sizeof(_LayerConfig), H, I, E, _int(top_k, "top_k", 1),
                           _GATINGS[gating], int(bool(renormalize)), _int(group_count, "group_count", 1),
                           _int(k_group, "k_group", 1), float(routed_scaling_factor),
                           None if bias is None else bias.ctypes.data, _MODES[mode],
                           _int(group_size or 0, "group_size", 0), int(bool(clip_search)),
                           min(_int(threads or 0, "threads", 0), 4096), Is,
                           *(a.ctypes.data for a in keep[:3]) if keep else (None, None, None),
                           None if sgate is None else sgate.ctypes.data,
                           *(None if b is None else b.ctypes.data for b in biases), limit, alpha)
        handle = c_void_p()
        _lib.check(_lib.lib.qmoe_moe_layer_create_from_float(
            ctypes.byref(cfg), _pointers(g), _pointers(u), _pointers(d), code,
            ctypes.byref(handle)))
        return cls(handle, cfg, bias)

    @classmethod
    def from_fused(cls, gate_up: ArrayLike, down: ArrayLike, *, layout: str = "transformers",
                   gate_up_bias: Optional[ArrayLike] = None, **kwargs: Any) -> "MoELayer":
        """From experts kept fused, as transformers holds them: ``layout="transformers"``
        (transformers 5: ``gate_up_proj [E, 2I, H]``, gate rows first; ``down_proj [E, H, I]``)
        or ``layout="gpt_oss"`` (``gate_up_proj [E, H, 2I]`` with gate and up interleaved,
        gate the even columns; ``down_proj [E, I, H]``; ``gate_up_proj_bias [E, 2I]``
        interleaved as well). Split and transposed into :meth:`from_float`'s convention as
        views (copied only where the library needs contiguous rows); other keywords
        (``top_k``, ``down_bias [E, H]``, ``swiglu_alpha``, ``swiglu_limit``, ...) as
        :meth:`from_float`."""
        gate, up, dn, b = _split_fused(gate_up, down, layout, gate_up_bias)
        return cls.from_float(gate, up, dn, gate_up_bias=b, **kwargs)

    @classmethod
    def from_safetensors(cls, path: str, prefix: str, *, top_k: int,
                         num_experts: Optional[int] = None, **kwargs: Any) -> "MoELayer":
        """From a safetensors checkpoint (:func:`qmoe.load_experts`: ``{prefix}.experts.{e}.
        gate_proj.weight`` etc.; a missing, extra or mis-shaped tensor is refused by name). The
        file's ``gate.e_score_correction_bias`` is the correction bias (with either gating)
        unless one is given, its shared expert and ``shared_expert_gate.weight`` (Qwen2-MoE) the
        shared expert unless one is given. A fused file (transformers 5's ``experts.gate_up_proj``
        / ``experts.down_proj``, or gpt-oss's, with its expert biases) loads the same way; for
        gpt-oss ``swiglu_limit`` and ``swiglu_alpha`` default to its 7.0 and 1.702 (the router's
        ``router.bias`` belongs to the logits: :func:`qmoe.load_experts` returns it). Other
        keywords as :meth:`from_float`."""
        from ._checkpoint import load_experts

        ck = load_experts(path, prefix, num_experts=num_experts)
        if kwargs.get("correction_bias") is None and ck.router_bias is not None:
            kwargs["correction_bias"] = ck.router_bias
        if ck.shared_gate is not None and "shared_gate" not in kwargs:
            kwargs.update(shared_gate=ck.shared_gate, shared_up=ck.shared_up,
                          shared_down=ck.shared_down)
            if ck.shared_expert_gate is not None and "shared_expert_gate" not in kwargs:
                kwargs["shared_expert_gate"] = ck.shared_expert_gate
        elif ck.shared_expert_gate is not None and "shared_gate" not in kwargs:
            raise invalid(f"{path}: {prefix}.shared_expert_gate.weight without a shared expert")
        if ck.gate_up_bias is not None and "gate_up_bias" not in kwargs:
            kwargs["gate_up_bias"] = ck.gate_up_bias
        if ck.down_bias is not None and "down_bias" not in kwargs:
            kwargs["down_bias"] = ck.down_bias
        if ck.layout == "gpt_oss":  # its config's values (config.json), unless given
            kwargs.setdefault("swiglu_limit", 7.0)
            kwargs.setdefault("swiglu_alpha", 1.702)
        return cls.from_float(ck.gate, ck.up, ck.down, top_k=top_k, **kwargs)

    _closed_what = "MoELayer"

    @property
    def nbytes(self) -> int:
        """Bytes of the prepacked weights."""
        with self._use() as handle:
            return int(_lib.lib.qmoe_moe_layer_weight_bytes(handle))

    def _run(self, x: np.ndarray, code: int, wrap: Any, route: Any, routed: bool) -> Any:
        T = x.shape[0]
        try:
            out = np.empty_like(x)
        except MemoryError as exc:
            raise _lib_oom(f"an output of {list(x.shape)}") from exc
        # Held from the first call to the last: close() on another thread waits for this call,
        # and a call after close() raises QmoeError instead of using a freed layer.
        device = self.device
        with self._use() as handle, Tensors() as ts, _device_stream(device) as stream:
            size = c_uint64()
            _lib.check(_lib.lib.qmoe_moe_layer_workspace_size(handle, T, code, ctypes.byref(size)))
            ws = self._workspace(size.value)
            th = ts.create(x, code)
            to = ts.create(out, code)
            wsp = ws.ctypes.data if size.value else None
            if routed:
                ids, wts = route
                ti, tw = ts.create(ids, _lib.DTYPE_INT32), ts.create(wts, _lib.DTYPE_FLOAT32)
                _lib.check(_lib.lib.qmoe_moe_layer_forward_routed(handle, th, ti, tw, to, wsp,
                                                                  size.value, stream))
            else:
                tl = ts.create(route, _lib.DTYPE_FLOAT32)
                _lib.check(_lib.lib.qmoe_moe_layer_forward(handle, th, tl, to, wsp, size.value,
                                                           stream))
            if stream is not None:  # runs the queued chain here, its parts on the device
                _lib.check(_lib.lib.qmoe_stream_synchronize(stream))
        return _wrap(out, wrap)

    def _workspace(self, size: int) -> np.ndarray:
        # One buffer per calling thread, kept: a fresh one per call costs its page faults at
        # every forward (tens of MB at T = 512), which is as much as the experts' work at T = 1.
        raw = getattr(self._workspaces, "raw", None)
        if raw is None or raw.size < size + 64:
            try:
                raw = np.empty(size + 64, np.uint8)
            except MemoryError as exc:
                raise _lib_oom(f"a workspace of {size} bytes") from exc
            self._workspaces.raw = raw
        skip = (-raw.ctypes.data) % 64
        return raw[skip:skip + size]

    def __call__(self, hidden: ArrayLike, router_logits: ArrayLike) -> Any:
        """out [T, H] = the layer applied to hidden [T, H] routed by router_logits [T, E]."""
        T = _hidden_rows(hidden)
        logits = _float32(router_logits, "router_logits", (T, self.num_experts))
        return self._run(*_activations(hidden, "hidden", self.hidden_size), logits, False)

    def route(self, router_logits: ArrayLike) -> Tuple[Any, Any]:
        """The layer's own gating and top-k (qmoe_moe_layer_route, the bits the forward routes
        by): router_logits [T, E] (read as float32, as by calling the layer) -> topk_ids int32
        [T, k] and topk_weights float32 [T, k]; torch tensors for a torch input."""
        torch_in = is_torch(router_logits)
        bits = torch_bfloat16_bits(router_logits)
        arr = bits if bits is not None else _view(router_logits)
        if arr.ndim != 2:
            raise invalid(f"router_logits: rank {arr.ndim}, expected 2 ([T, E])")
        logits = _float32(router_logits, "router_logits", (int(arr.shape[0]), self.num_experts))
        T = logits.shape[0]
        try:
            ids = np.empty((T, self.top_k), np.int32)
            wts = np.empty((T, self.top_k), np.float32)
        except MemoryError as exc:
            raise _lib_oom(f"routing of {T} tokens") from exc
        with self._use() as handle, Tensors() as ts:
            tl = ts.create(logits, _lib.DTYPE_FLOAT32)
            ti, tw = ts.create(ids, _lib.DTYPE_INT32), ts.create(wts, _lib.DTYPE_FLOAT32)
            _lib.check(_lib.lib.qmoe_moe_layer_route(handle, tl, ti, tw))
        if torch_in:
            import torch

            return torch.from_numpy(ids), torch.from_numpy(wts)
        return ids, wts

    def forward_routed(self, hidden: ArrayLike, topk_ids: ArrayLike,
                       topk_weights: ArrayLike) -> Any:
        """As calling the layer, with the routing given: topk_ids [T, k] (int, in [0, E)) and
        topk_weights [T, k] (used as given)."""
        T = _hidden_rows(hidden)
        ids_in = _view(topk_ids)
        _check_2d(ids_in, "topk_ids", T, self.top_k)
        if ids_in.dtype.kind not in "iu":
            raise invalid(f"topk_ids: dtype {ids_in.dtype} is not an integer type")
        if ids_in.size and (ids_in.min() < -(2 ** 31) or ids_in.max() >= 2 ** 31):
            raise invalid("topk_ids: values outside int32")
        ids = _native(ids_in, np.int32)
        wts = _float32(topk_weights, "topk_weights", (T, self.top_k))
        return self._run(*_activations(hidden, "hidden", self.hidden_size), (ids, wts), True)

    def _destroy(self, handle: c_void_p) -> None:
        _lib.lib.qmoe_moe_layer_destroy(handle)
        self._workspaces = threading.local()  # every thread's buffer goes with the layer

    def __repr__(self) -> str:
        return (f"MoELayer(H={self.hidden_size}, I={self.intermediate_size}, E={self.num_experts}, "
                f"top_k={self.top_k}{', closed' if self._handle is None else ''})")

