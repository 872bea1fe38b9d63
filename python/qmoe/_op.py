"""GroupedMatmulSwigluQuant from Python: argument conversion, the two-phase C call, the results."""

from __future__ import annotations

import contextlib
import ctypes
import numbers
import operator
import re
from typing import Any, Callable, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _lib
from ._arrays import (Later, Tensors, any_torch, as_torch, dtype_code, dtype_label, invalid,
                      is_bfloat16, readable, to_numpy, torch_bfloat16_bits)
from ._errors import QmoeError

ArrayLike = Any  # numpy.ndarray, a CPU torch.Tensor, any __array__ / __dlpack__ object, a list
Result = Tuple[Any, Any, Any]  # NumPy arrays, or torch tensors for torch inputs

_WEIGHT_DTYPES = "int8 (A8W8), int32 (8 packed int4 per word) or packed int4 bytes with int4_packed=True"
_SCALE_DTYPES = ("float32, float16, bfloat16 (uint16 bits with weight_scale_dtype='bfloat16'), "
                 "uint64 or int64 (A8W4: float32 bits in the low word)")


def _group_list_type(value: Union[str, int]) -> int:
    names = {"cumsum": _lib.GROUP_LIST_CUMSUM, "count": _lib.GROUP_LIST_COUNT}
    if isinstance(value, str) and value.lower() in names:
        return names[value.lower()]
    if not isinstance(value, (bool, str)) and value in (0, 1):
        return int(value)
    raise invalid(f"group_list_type = {value!r}: expected 'cumsum' (0) or 'count' (1)")


def _weight_format(value: Optional[str], ndim: int, nz_rank: int = 5) -> int:
    if value is None:  # as the C API reads a tensor's declared format: NZ by its rank, else ND
        return _lib.FORMAT_FRACTAL_NZ if ndim == nz_rank else _lib.FORMAT_ND
    if isinstance(value, str) and value.lower() in ("nz", "fractal_nz"):
        return _lib.FORMAT_FRACTAL_NZ
    if isinstance(value, str) and value.lower() == "nd":
        return _lib.FORMAT_ND
    raise invalid(f"weight_format = {value!r}: expected 'nz', 'nd' or None")


def _kernel(value: Union[str, int]) -> int:
    if isinstance(value, str) and value.lower() in _lib.KERNELS:
        return _lib.KERNELS[value.lower()]
    if (isinstance(value, numbers.Integral) and not isinstance(value, bool)
            and int(value) in _lib.KERNELS.values()):
        return int(value)
    raise invalid(f"kernel = {value!r}: expected one of {', '.join(_lib.KERNELS)}")


def _c_int(value: Optional[int], name: str, bits: int = 32) -> int:
    """A count option as a C int (bits=64: an int64_t); None means 0 (the library's default).
    Range checks are the library's, so a negative value reaches it and gets its message."""
    if value is None:
        return 0
    try:
        if isinstance(value, bool):
            raise TypeError("a bool")
        v = operator.index(value)
    except TypeError as exc:
        raise invalid(f"{name} = {value!r}: expected an integer or None") from exc
    if not -(2 ** (bits - 1)) <= v < 2 ** (bits - 1):
        raise invalid(f"{name} = {v} does not fit {'a C int' if bits == 32 else 'int64'}")
    return v


# The C library names arguments as the vendor's C API does; Python callers know them by the
# argument names of the function they called.
_PY_NAMES = {"xScale": "x_scale", "weightScales": "weight_scale", "weightScale": "weight_scale",
             "weights": "weight", "groupList": "group_list", "outputScale": "output_scale",
             "outputOffset": "output_offset", "workspaceSize": "workspace_size",
             "swigluLimit": "swiglu_limit"}
_PY_NAMES_RE = re.compile(r"\b(" + "|".join(sorted(_PY_NAMES, key=len, reverse=True)) + r")\b")


def _check(status: int) -> None:
    """_lib.check with the message in the Python argument names."""
    try:
        _lib.check(status)
    except QmoeError as err:
        message = _PY_NAMES_RE.sub(lambda m: _PY_NAMES[m.group(1)], err.message)
        raise QmoeError(err.code, message, err.name, err.rule,
                        _PY_NAMES.get(err.arg, err.arg)) from None


# (NZ tile columns, NZ innermost extent, logical columns per element) by weight dtype code.
_NZ_TILES = {_lib.DTYPE_INT8: (32, 32, 1), _lib.DTYPE_INT32: (64, 8, 8), _lib.DTYPE_INT4: (64, 32, 2)}


def _nz_from_logical(arr: np.ndarray, dtype: int, name: str) -> np.ndarray:
    """A FRACTAL_NZ weight described by its logical shape ([..., K, N], [..., K, N/8] int32 words,
    [..., K, N/2] packed int4 bytes), as framework NZ tensors report it: the memory holds the NZ
    tiles, so it is viewed with the NZ shape [..., N/tile, K/16, 16, inner]."""
    tile, inner, per = _NZ_TILES[dtype]
    *lead, K, cols = arr.shape
    N = cols * per
    if K % 16 or N % tile:
        raise invalid(f"{name}: a FRACTAL_NZ weight given with its logical shape needs K % 16 == 0 "
                      f"and N % {tile} == 0, got K = {K}, N = {N}")
    if not arr.flags.c_contiguous:
        raise invalid(f"{name}: a FRACTAL_NZ weight given with its logical shape must be "
                      "contiguous (its memory holds the NZ tiles in order)")
    return arr.reshape(*lead, N // tile, K // 16, 16, inner)


class _Weight:
    """The weight as qmoe sees it: array, dtype, format, element shape/strides, and N if known.
    `nz_rank` is the rank of the NZ shape (5 for a stacked weight, 4 for one expert)."""

    def __init__(self, weight: ArrayLike, weight_format: Optional[str], int4_packed: bool,
                 name: str = "weight", nz_rank: int = 5) -> None:
        arr = to_numpy(weight, name, np.int8)
        self.arr = arr
        self.shape = self.strides = None
        self.N: Optional[int] = None
        self.nz_rank = nz_rank
        if arr is None:
            self.dtype, self.fmt = _lib.DTYPE_INT8, _lib.FORMAT_ND
            return
        self.fmt = _weight_format(weight_format, arr.ndim, nz_rank)
        logical_nz = self.fmt == _lib.FORMAT_FRACTAL_NZ and arr.ndim == nz_rank - 2
        if int4_packed:
            if logical_nz and arr.dtype in (np.uint8, np.int8):
                arr = _nz_from_logical(arr, _lib.DTYPE_INT4, name)
            self._packed_int4(arr, name, nz_rank)
        else:
            if arr.dtype == np.uint8:
                raise invalid(f"{name}: uint8 holds packed int4 bytes; pass int4_packed=True")
            self.arr = readable(arr)
            self.dtype = dtype_code(self.arr, name, _WEIGHT_DTYPES, weight)
            if logical_nz and self.dtype in (_lib.DTYPE_INT8, _lib.DTYPE_INT32):
                self.arr = _nz_from_logical(self.arr, self.dtype, name)
        self.N = self._columns()

    def _packed_int4(self, arr: np.ndarray, name: str, nz_rank: int) -> None:
        if arr.dtype not in (np.uint8, np.int8):
            raise invalid(f"{name}: int4_packed=True needs uint8 (or int8) bytes, got {arr.dtype}")
        if arr.ndim == 0:
            raise invalid(f"{name}: rank 0, expected rank {nz_rank} (NZ) or {nz_rank - 2} (ND)")
        arr = readable(arr.view(np.uint8))
        if arr.shape[-1] > 1 and arr.strides[-1] != 1:
            arr = np.ascontiguousarray(arr)  # nibbles of one byte must stay neighbours
        self.arr, self.dtype = arr, _lib.DTYPE_INT4
        self.shape = arr.shape[:-1] + (2 * arr.shape[-1],)
        self.strides = [2 * s for s in arr.strides[:-1]] + [1]

    def _columns(self) -> Optional[int]:
        shape = self.shape if self.shape is not None else self.arr.shape
        per = {_lib.DTYPE_INT8: (32, 1), _lib.DTYPE_INT4: (64, 1), _lib.DTYPE_INT32: (64, 8)}
        if self.dtype not in per:
            return None
        tile, word = per[self.dtype]
        if self.fmt == _lib.FORMAT_FRACTAL_NZ and len(shape) == self.nz_rank:
            return shape[-4] * tile
        if self.fmt == _lib.FORMAT_ND and len(shape) == self.nz_rank - 2:
            return shape[-1] * word
        return None


def _weight_scale(obj: ArrayLike, flag: Optional[str],
                  name: str = "weight_scale") -> Tuple[Optional[np.ndarray], int]:
    if flag not in (None, "bfloat16"):
        raise invalid(f"weight_scale_dtype = {flag!r}: expected None or 'bfloat16'")
    bits = torch_bfloat16_bits(obj)
    if bits is not None:
        return readable(bits), _lib.DTYPE_BFLOAT16
    arr = to_numpy(obj, name, np.float32)
    if arr is None:
        return None, _lib.DTYPE_FLOAT32
    if is_bfloat16(arr):
        return readable(arr).view(np.uint16), _lib.DTYPE_BFLOAT16
    if flag == "bfloat16":
        if arr.dtype not in (np.uint16, np.int16):
            raise invalid(f"{name}: weight_scale_dtype='bfloat16' needs uint16 bits, got {arr.dtype}")
        return readable(arr.view(np.uint16)), _lib.DTYPE_BFLOAT16
    if arr.dtype == np.uint16:
        raise invalid(f"{name}: uint16 holds bfloat16 bits; pass weight_scale_dtype='bfloat16'")
    arr = readable(arr)
    return arr, dtype_code(arr, name, _SCALE_DTYPES)


def _x_scale(obj: ArrayLike) -> Tuple[Any, int]:
    """x_scale as float32 [M]: float16 and bfloat16 (the framework accepts them) are widened,
    which is exact, once the library accepted the call's shapes (a Later); [M, 1] is viewed as
    [M]."""
    bits = torch_bfloat16_bits(obj)
    arr = bits if bits is not None else to_numpy(obj, "x_scale", np.float32)
    if arr is None:
        return None, _lib.DTYPE_FLOAT32
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr[:, 0]
    if bits is not None:
        return Later(arr.shape, lambda: (arr.astype(np.uint32) << 16).view(np.float32)), \
            _lib.DTYPE_FLOAT32
    if is_bfloat16(arr) or arr.dtype == np.float16:
        return Later(arr.shape, lambda: arr.astype(np.float32)), _lib.DTYPE_FLOAT32
    arr = readable(arr)
    return arr, dtype_code(arr, "x_scale", "float32, float16 or bfloat16, shaped [M] or [M, 1]")


def _group_list(obj: ArrayLike) -> Tuple[Optional[np.ndarray], int]:
    """group_list as int64: int32 (and other integer types) are widened; floats are refused."""
    arr = to_numpy(obj, "group_list", np.int64)
    if arr is None:
        return None, _lib.DTYPE_INT64
    if arr.dtype == np.int64:
        return readable(arr), _lib.DTYPE_INT64
    if arr.dtype.kind in "iu" and torch_bfloat16_bits(obj) is None:
        def widened() -> np.ndarray:
            if arr.size and arr.dtype == np.uint64 and arr.max() > np.iinfo(np.int64).max:
                raise invalid(f"group_list: value {int(arr.max())} does not fit int64")
            return arr.astype(np.int64)

        return Later(arr.shape, widened), _lib.DTYPE_INT64
    raise invalid(f"group_list: dtype {dtype_label(obj, arr)} is not supported; expected int64 "
                  "or int32 (row ends or counts)")


def _plain(obj: ArrayLike, name: str, default: Any, accepted: str) -> Tuple[Optional[np.ndarray], int]:
    arr = to_numpy(obj, name, default)
    if arr is None:
        return None, _lib.DTYPE_FLOAT32
    arr = readable(arr)
    return arr, dtype_code(arr, name, accepted, obj)


def _outputs(out: Optional[Tuple[ArrayLike, ArrayLike]]) -> Tuple[np.ndarray, np.ndarray]:
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise invalid("out: expected a pair (output, output_scale)")
    arrays = []
    for obj, name in zip(out, ("output", "output_scale")):
        arr = to_numpy(obj, name)
        if arr is None:
            raise QmoeError(_lib.ERR_PARAM_NULLPTR, f"{name} (in out=) is None",
                            _lib.status_name(_lib.ERR_PARAM_NULLPTR))
        if not arr.flags.writeable:
            raise invalid(f"{name}: the array is read-only")
        if readable(arr) is not arr:
            raise invalid(f"{name}: qmoe cannot write it in place (negative, misaligned or "
                          "non-native strides/byte order)")
        arrays.append(arr)
    return arrays[0], arrays[1]


def _alloc_workspace(size: int) -> Tuple[Optional[np.ndarray], int]:
    if size == 0:
        return None, 0
    try:
        buf = np.empty(size + 64, dtype=np.uint8)
    except (MemoryError, ValueError) as exc:
        raise QmoeError(_lib.ERR_INNER, f"out of memory for a workspace of {size} bytes",
                        _lib.status_name(_lib.ERR_INNER)) from exc
    addr = buf.ctypes.data
    return buf, addr + (-addr) % 64  # 64-byte aligned, as kernels' vector rows want


PhaseOne = Callable[[Tensors, Any, Any, Any, Any], int]


def _execute(phase_one: PhaseOne, M: int, N2: int,
             out: Optional[Tuple[ArrayLike, ArrayLike]]) -> Tuple[np.ndarray, np.ndarray]:
    """Plans with phase_one(tensors, output, output_scale, &workspace_size, &executor) and runs.

    New outputs are allocated only after the library has accepted every input (the operator's
    phase one), so a refused input never costs output memory, however large its shape: the first
    plan sees outputs of the right shape over a few bytes (strides 0), which only the outputs'
    own no-overlap rule refuses (QMOE_RULE_OVERLAP on output/outputScale, checked after every
    input rule); that refusal, and nothing else, means the inputs passed.
    """
    size = ctypes.c_uint64()
    executor = ctypes.c_void_p()
    with Tensors() as t:
        if out is None:
            probe = np.zeros(8, dtype=np.float32)
            t.probing = True  # inputs still to be widened stand in (Later)
            st = phase_one(t, t.create(probe.view(np.int8), _lib.DTYPE_INT8, shape=(M, N2),
                                       strides=(0, 0)),
                           t.create(probe, _lib.DTYPE_FLOAT32, shape=(M,), strides=(0,)),
                           ctypes.byref(size), ctypes.byref(executor))
            info = _lib.lib.qmoe_last_error_info().contents
            t.probing = False
            if st == _lib.OK:
                _lib.lib.qmoe_grouped_matmul_swiglu_quant_executor_destroy(executor)
            elif not (st == _lib.ERR_PARAM_INVALID and info.rule == _lib.RULE_OVERLAP
                      and info.arg in (b"output", b"outputScale")):
                _check(st)
            # Zero-filled: rows at and past the last group's end are not written by the operator.
            try:
                output, output_scale = np.zeros((M, N2), np.int8), np.zeros((M,), np.float32)
            except (MemoryError, ValueError) as exc:
                raise QmoeError(_lib.ERR_INNER, f"out of memory for outputs of [{M}, {N2}] and [{M}]",
                                _lib.status_name(_lib.ERR_INNER)) from exc
        else:
            output, output_scale = _outputs(out)
        st = phase_one(t, t.create(output, dtype_code(output, "output", "int8", out and out[0])),
                       t.create(output_scale, dtype_code(output_scale, "output_scale", "float32",
                                                         out and out[1])),
                       ctypes.byref(size), ctypes.byref(executor))
        _check(st)
        try:
            buf, ptr = _alloc_workspace(size.value)  # buf owns the memory until we return
            # The GIL is released for this call (ctypes.CDLL), so other threads keep running.
            _check(_lib.lib.qmoe_grouped_matmul_swiglu_quant(ptr, size.value, executor, None))
        finally:
            _lib.lib.qmoe_grouped_matmul_swiglu_quant_executor_destroy(executor)
    return output, output_scale


def _results(output: np.ndarray, output_scale: np.ndarray, offset_shape: Tuple[int, ...],
             out: Optional[Tuple[ArrayLike, ArrayLike]], torch_in: bool) -> Result:
    """(output, output_scale, output_offset) as the framework returns them: output_offset a
    float32 array (0-dim for the stacked operator), torch tensors for torch inputs, and the
    caller's own objects for out=."""
    offset = np.zeros(offset_shape, dtype=np.float32)
    if out is not None:
        return out[0], out[1], as_torch(offset) if torch_in else offset
    if torch_in:
        return as_torch((output, output_scale, offset))
    return output, output_scale, offset


def _run(x: ArrayLike, weight: ArrayLike, group_list: ArrayLike, weight_scale: ArrayLike,
         x_scale: ArrayLike, bias: Optional[ArrayLike], offset: Optional[ArrayLike],
         group_list_type: Union[str, int], weight_format: Optional[str], int4_packed: bool,
         weight_scale_dtype: Optional[str], threads: Optional[int], devices: Optional[int],
         kernel: Union[str, int], out: Optional[Tuple[ArrayLike, ArrayLike]]) -> Result:
    if offset is not None:
        raise invalid("offset is reserved and must be None")
    torch_in = any_torch(x, weight, group_list, weight_scale, x_scale, bias)
    opts = _lib.OpOptions(group_list_type=_group_list_type(group_list_type),
                          kernel=_kernel(kernel), threads=_c_int(threads, "threads"),
                          devices=_c_int(devices, "devices"))
    x_arr, x_dt = _plain(x, "x", np.int8, "int8")
    # qmoe.prepack's objects (qmoe/_prepack.py) carry their scales and bias folded in
    pre = weight if getattr(weight, "_qmoe_prepacked", False) else None
    w = None if pre is not None else _Weight(weight, weight_format, int4_packed)
    ws_arr, ws_dt = _weight_scale(weight_scale, weight_scale_dtype)
    xs_arr, xs_dt = _x_scale(x_scale)
    gl_arr, gl_dt = _group_list(group_list)
    b_arr, b_dt = _plain(bias, "bias", np.float32, "float32")

    M = x_arr.shape[0] if x_arr is not None and x_arr.ndim >= 1 else 0
    # Unknown or impossible N: the library rejects the weight before it looks at the outputs.
    wN = pre.N if pre is not None else w.N
    N2 = wN // 2 if wN is not None and 0 <= wN <= 10240 else 0

    # The prepacked object is held from the first view to the last executor's end, so a
    # close() on another thread waits for this call (or this call refuses a closed object).
    with pre._use() if pre is not None else contextlib.nullcontext() as handle:
        def phase_one(t: Tensors, output: Any, output_scale: Any, size: Any, executor: Any) -> int:
            return _lib.lib.qmoe_grouped_matmul_swiglu_quant_workspace_size(
                t.create(x_arr, x_dt),
                pre._view(t, handle) if pre is not None else
                t.create(w.arr, w.dtype, w.fmt, shape=w.shape, strides=w.strides),
                t.create(b_arr, b_dt), None, t.create(ws_arr, ws_dt), t.create(xs_arr, xs_dt),
                t.create(gl_arr, gl_dt), output, output_scale, None, ctypes.byref(opts), size,
                executor)

        output, output_scale = _execute(phase_one, M, N2, out)
    return _results(output, output_scale, (), out, torch_in)


def grouped_matmul_swiglu_quant(
    x: ArrayLike,
    weight: ArrayLike,
    group_list: ArrayLike,
    weight_scale: ArrayLike,
    x_scale: ArrayLike,
    *,
    bias: Optional[ArrayLike] = None,
    offset: Optional[ArrayLike] = None,
    group_list_type: Union[str, int] = "cumsum",
    weight_format: Optional[str] = None,
    int4_packed: bool = False,
    weight_scale_dtype: Optional[str] = None,
    threads: Optional[int] = None,
    devices: Optional[int] = None,
    kernel: Union[str, int] = "auto",
    out: Optional[Tuple[ArrayLike, ArrayLike]] = None,
) -> Result:
    """Grouped int8 matmul per expert, SwiGLU, and per-token int8 quantization (one MoE step).

    For every expert ``e`` the token rows it owns (from ``group_list``) are multiplied by that
    expert's weight, dequantized with ``x_scale`` and ``weight_scale``, passed through
    ``SwiGLU(C)[j] = Swish(C[j]) * C[j + N/2]`` and quantized to int8 per row.

    Args:
        x: int8 ``[M, K]`` activations, already quantized per token. May be non-contiguous
            (a slice): it is read in place through its strides.
        weight: the logical ``[E, K, N]`` expert weights: a :func:`qmoe.prepack` object
            (then ``weight_scale`` and ``bias`` may be None), or one of
            int8 FRACTAL_NZ ``[E, N/32, K/16, 16, 32]`` or ND ``[E, K, N]`` (A8W8);
            int32 words of 8 int4, NZ ``[E, N/64, K/16, 16, 8]`` or ND ``[E, K, N/8]`` (A8W4);
            packed int4 bytes (uint8, two per byte, low nibble first) with ``int4_packed=True``,
            NZ ``[E, N/64, K/16, 16, 32]`` or ND ``[E, K, N/2]`` (A8W4).
            :func:`qmoe.nd_to_nz` and :func:`qmoe.pack_int4` make these from int8 values.
        group_list: int64 (or int32) ``[E']`` with ``E' <= E``: cumulative end rows of the experts
            (``group_list_type="cumsum"``, the default) or rows per expert (``"count"``).
            Empty groups are allowed. Decreasing or negative values, or more than ``M`` rows,
            raise :class:`QmoeError` (161002) before anything is written.
        weight_scale: per-channel ``[E, N]`` or per-group ``[E, G, N]`` (``K % G == 0``) scales:
            float32, float16, bfloat16 (a uint16 array of the bits with
            ``weight_scale_dtype="bfloat16"``, an ml_dtypes bfloat16 array, or a torch bfloat16
            tensor), or for A8W4 uint64/int64 whose low 32 bits hold a float32.
        x_scale: ``[M]`` (or ``[M, 1]``), the per-token dequantization scale of ``x``: float32,
            or float16/bfloat16 (widened to float32, exactly).
        bias: float32 ``[E, N]``, A8W4 only and required there: the weight assist matrix
            (:func:`qmoe.weight_assist_matrix`). It is honoured as given (the vendor formula
            ``(16*C_high + C_low + bias) * x_scale``). Must be None for A8W8.
        offset: reserved; must be None.
        group_list_type: ``"cumsum"`` (or 0) or ``"count"`` (or 1), see ``group_list``.
        weight_format: ``"nz"``, ``"nd"`` or None to infer it from the weight's rank
            (5-D is FRACTAL_NZ, 3-D is ND). ``"nz"`` with a 3-D weight: a FRACTAL_NZ weight
            described by its logical shape (``[E, K, N]`` int8, ``[E, K, N/8]`` int32,
            ``[E, K, N/2]`` packed bytes), as framework NZ tensors report it; it must be
            contiguous (its memory holds the NZ tiles).
        int4_packed: the weight is a uint8 (or int8) array of packed int4 bytes.
        weight_scale_dtype: ``"bfloat16"`` when ``weight_scale`` is a uint16 array holding
            bfloat16 bits; otherwise None (the dtype says it).
        threads: at most this many worker threads (None or 0: all threads of the device).
        devices: split the rows over this many devices (None, 0 or 1: one device).
            Results are bit-identical for any ``threads`` and ``devices``.
        kernel: ``"auto"`` (fastest this CPU runs), ``"reference"``, ``"portable"``, ``"avx2"``,
            ``"avx_vnni"``, ``"avx512_vnni"``, ``"amx_int8"`` (x86-64), ``"neon_dot"`` or
            ``"neon_i8mm"`` (ARM64). A kernel the CPU lacks raises
            QmoeError.
        out: optional ``(output, output_scale)`` arrays to write instead of new ones (int8
            ``[M, N/2]`` and float32 ``[M]``, writable, any non-negative strides). Rows at and
            past the last group's end keep their contents.

    Returns:
        ``(output, output_scale, output_offset)``: int8 ``[M, N/2]``, float32 ``[M]`` and a
        0-dim float32 zero (the framework's reserved output, shape ``()``). New arrays are
        zero-filled, so rows at and past the last group's end are 0 with scale 0. A row whose
        SwiGLU is all zero gets scale 0 and zeros; a row with a non-finite value gets its scale
        as computed (NaN/Inf) and zeros. With ``out=`` the first two are the caller's objects.

    Inputs that already have a dtype qmoe reads are not copied. PyTorch CPU tensors and other
    ``__array__``/``__dlpack__`` objects are accepted; when any input is a PyTorch tensor the
    results are PyTorch tensors (over the result memory, no copy), otherwise NumPy arrays.
    Every rule that needs no data is checked before any output is allocated. The GIL is
    released while the operator runs.

    Raises:
        QmoeError: (a ValueError) with ``.code`` 161001 when a required argument is None
            (including ``bias`` for A8W4), 161002 for a wrong rank, shape, dtype, format,
            limit (``N`` odd or > 10240, ``K`` >= 65536 for A8W8 or >= 20000 for A8W4,
            ``E' > E``) or group_list value, a value that does not fit its dtype (a list with
            ``x`` 300 or a group-list entry ``2**70``) or a non-integer group list, and a
            message that names the argument as this function does (``x_scale``). Nothing is
            returned on error.
    """
    return _run(x, weight, group_list, weight_scale, x_scale, bias, offset, group_list_type,
                weight_format, int4_packed, weight_scale_dtype, threads, devices, kernel, out)


def reference(
    x: ArrayLike,
    weight: ArrayLike,
    group_list: ArrayLike,
    weight_scale: ArrayLike,
    x_scale: ArrayLike,
    *,
    bias: Optional[ArrayLike] = None,
    offset: Optional[ArrayLike] = None,
    group_list_type: Union[str, int] = "cumsum",
    weight_format: Optional[str] = None,
    int4_packed: bool = False,
    weight_scale_dtype: Optional[str] = None,
    threads: Optional[int] = None,
    devices: Optional[int] = None,
    out: Optional[Tuple[ArrayLike, ArrayLike]] = None,
) -> Result:
    """:func:`grouped_matmul_swiglu_quant` through the C reference kernel (the plainly written
    oracle that follows the operator's formulas literally). Same arguments, without ``kernel``."""
    return _run(x, weight, group_list, weight_scale, x_scale, bias, offset, group_list_type,
                weight_format, int4_packed, weight_scale_dtype, threads, devices, "reference", out)


def npu_grouped_matmul_swiglu_quant(
    x: ArrayLike,
    weight: ArrayLike,
    group_list: ArrayLike,
    weight_scale: ArrayLike,
    x_scale: ArrayLike,
    *,
    bias: Optional[ArrayLike] = None,
    offset: Optional[ArrayLike] = None,
    **options: Any,
) -> Result:
    """The accelerator framework's call, ``npu_grouped_matmul_swiglu_quant(x, weight,
    group_list, weight_scale, x_scale, *, bias=None, offset=None)`` returning ``(output,
    output_scale, output_offset)`` with ``output_offset`` a 0-dim float32 (tensors for torch
    inputs). Extra keyword options are those of :func:`grouped_matmul_swiglu_quant`."""
    return grouped_matmul_swiglu_quant(x, weight, group_list, weight_scale, x_scale, bias=bias,
                                       offset=offset, **options)


def grouped_matmul_swiglu_quant_weight_nz_tensor_list(
    x: ArrayLike,
    weight: Sequence[ArrayLike],
    weight_scale: Sequence[ArrayLike],
    x_scale: ArrayLike,
    group_list: ArrayLike,
    bias: Optional[ArrayLike] = None,
    offset: Optional[ArrayLike] = None,
    swiglu_limit: float = 0.0,
    *,
    group_list_type: Union[str, int] = "cumsum",
    weight_format: Optional[str] = None,
    threads: Optional[int] = None,
    devices: Optional[int] = None,
    kernel: Union[str, int] = "auto",
    out: Optional[Tuple[ArrayLike, ArrayLike]] = None,
) -> Result:
    """The per-expert weight-list operator, in the framework's argument order
    ``(x, weight, weight_scale, x_scale, group_list, bias=None, offset=None, swiglu_limit=0.0)``.

    The same operator as :func:`grouped_matmul_swiglu_quant` (A8W8), with every expert's weight
    and scale its own array (read where it lies; no stacking copy) and the ``swiglu_limit``
    clamp: when ``swiglu_limit > 1e-8`` the dequantized ``C`` is clamped before SwiGLU, the
    activated half ``C[:, :N/2]`` to at most ``swiglu_limit`` and the linear half
    ``C[:, N/2:]`` to ``[-swiglu_limit, swiglu_limit]`` (NaN stays NaN).

    Args:
        x: int8 ``[M, K]``.
        weight: a list of E int8 weights, all of one layout: FRACTAL_NZ ``[N/32, K/16, 16, 32]``,
            or ``[K, N]`` (ND, or with ``weight_format="nz"`` FRACTAL_NZ given with its logical
            shape, as framework NZ tensors report it).
        weight_scale: a list of E scales ``[N]`` (or per-group ``[G, N]``): float32, float16 or
            bfloat16, all of one dtype and shape.
        x_scale: ``[M]`` or ``[M, 1]``, float32/float16/bfloat16.
        group_list: int64 or int32 ``[E']``, ``E' <= E``.
        bias: must be None (the framework's list operator takes no bias).
        offset: reserved; must be None.
        swiglu_limit: the clamp (0: none). A clamp runs on the reference kernel (``kernel``
            "auto" picks it; another explicit kernel raises QmoeError). NaN or negative raises.
        group_list_type: ``"cumsum"`` or ``"count"``, as for :func:`grouped_matmul_swiglu_quant`.
        weight_format: ``"nz"``, ``"nd"`` or None (4-D is FRACTAL_NZ, 2-D is ND).
        threads: as for :func:`grouped_matmul_swiglu_quant`.
        devices: as for :func:`grouped_matmul_swiglu_quant`.
        kernel: as for :func:`grouped_matmul_swiglu_quant`.
        out: optional ``(output, output_scale)`` to write instead of new arrays.

    Returns:
        ``(output, output_scale, output_offset)``: int8 ``[M, N/2]``, float32 ``[M]`` and
        float32 ``[M]`` zeros (the framework's list operator returns output_offset shaped
        ``[M]``); torch tensors for torch inputs.
    """
    if bias is not None:
        raise invalid("bias: the weight-list operator takes no bias (A8W8); pass None")
    if offset is not None:
        raise invalid("offset is reserved and must be None")
    if not isinstance(weight, (list, tuple)) or not isinstance(weight_scale, (list, tuple)):
        raise invalid("weight and weight_scale: expected lists (one tensor per expert)")
    if len(weight) != len(weight_scale):
        raise invalid(f"weight_scale: {len(weight_scale)} entries for {len(weight)} weights")
    if isinstance(swiglu_limit, bool) or not isinstance(swiglu_limit, numbers.Real):
        raise invalid(f"swiglu_limit = {swiglu_limit!r}: expected a number")
    torch_in = any_torch(x, weight, weight_scale, x_scale, group_list)
    opts = _lib.OpOptions(group_list_type=_group_list_type(group_list_type),
                          kernel=_kernel(kernel), threads=_c_int(threads, "threads"),
                          devices=_c_int(devices, "devices"))
    x_arr, x_dt = _plain(x, "x", np.int8, "int8")
    ws = [_Weight(w, weight_format, False, f"weight[{e}]", nz_rank=4) for e, w in enumerate(weight)]
    ss = [_weight_scale(sc, None, f"weight_scale[{e}]") for e, sc in enumerate(weight_scale)]
    xs_arr, xs_dt = _x_scale(x_scale)
    gl_arr, gl_dt = _group_list(group_list)
    E = len(ws)
    M = x_arr.shape[0] if x_arr is not None and x_arr.ndim >= 1 else 0
    N = ws[0].N if ws else None
    N2 = N // 2 if N is not None and 0 <= N <= 10240 else 0

    def phase_one(t: Tensors, output: Any, output_scale: Any, size: Any, executor: Any) -> int:
        w_handles = (ctypes.c_void_p * max(E, 1))(*[t.create(w.arr, w.dtype, w.fmt) for w in ws])
        s_handles = (ctypes.c_void_p * max(E, 1))(*[t.create(a, dt) for a, dt in ss])
        return _lib.lib.qmoe_grouped_matmul_swiglu_quant_weight_list_workspace_size(
            t.create(x_arr, x_dt), w_handles if E else None, s_handles if E else None, E,
            t.create(xs_arr, xs_dt), t.create(gl_arr, gl_dt), float(swiglu_limit), output,
            output_scale, ctypes.byref(opts), size, executor)

    output, output_scale = _execute(phase_one, M, N2, out)
    return _results(output, output_scale, (M,), out, torch_in)
