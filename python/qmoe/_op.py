"""GroupedMatmulSwigluQuant from Python: argument conversion, the two-phase C call, the results."""

from __future__ import annotations

import ctypes
import numbers
import operator
from typing import Any, Optional, Tuple, Union

import numpy as np

from . import _lib
from ._arrays import (Tensors, dtype_code, invalid, is_bfloat16, readable, to_numpy,
                      torch_bfloat16_bits)
from ._errors import QmoeError

ArrayLike = Any  # numpy.ndarray, a CPU torch.Tensor, any __array__ / __dlpack__ object, a list
Result = Tuple[np.ndarray, np.ndarray, None]

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


def _weight_format(value: Optional[str], ndim: int) -> int:
    if value is None:  # as the C API reads a tensor's declared format: 5-D is NZ, else ND
        return _lib.FORMAT_FRACTAL_NZ if ndim == 5 else _lib.FORMAT_ND
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


def _c_int(value: Optional[int], name: str) -> int:
    """A count option as a C int; None means 0 (the library's default). Range checks are the
    library's, so a negative value reaches it and gets its message."""
    if value is None:
        return 0
    try:
        if isinstance(value, bool):
            raise TypeError("a bool")
        v = operator.index(value)
    except TypeError as exc:
        raise invalid(f"{name} = {value!r}: expected an integer or None") from exc
    if not -(2 ** 31) <= v < 2 ** 31:
        raise invalid(f"{name} = {v} does not fit a C int")
    return v


class _Weight:
    """The weight as qmoe sees it: array, dtype, format, element shape/strides, and N if known."""

    def __init__(self, weight: ArrayLike, weight_format: Optional[str], int4_packed: bool) -> None:
        arr = to_numpy(weight, "weight", np.int8)
        self.arr = arr
        self.shape = self.strides = None
        self.N: Optional[int] = None
        if arr is None:
            self.dtype, self.fmt = _lib.DTYPE_INT8, _lib.FORMAT_ND
            return
        self.fmt = _weight_format(weight_format, arr.ndim)
        if int4_packed:
            self._packed_int4(arr)
        else:
            if arr.dtype == np.uint8:
                raise invalid("weight: uint8 holds packed int4 bytes; pass int4_packed=True")
            self.arr = readable(arr)
            self.dtype = dtype_code(self.arr, "weight", _WEIGHT_DTYPES)
        self.N = self._columns()

    def _packed_int4(self, arr: np.ndarray) -> None:
        if arr.dtype not in (np.uint8, np.int8):
            raise invalid(f"weight: int4_packed=True needs uint8 (or int8) bytes, got {arr.dtype}")
        if arr.ndim == 0:
            raise invalid("weight: rank 0, expected rank 5 (NZ) or 3 (ND)")
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
        if self.fmt == _lib.FORMAT_FRACTAL_NZ and len(shape) == 5:
            return shape[1] * tile
        if self.fmt == _lib.FORMAT_ND and len(shape) == 3:
            return shape[2] * word
        return None


def _weight_scale(obj: ArrayLike, flag: Optional[str]) -> Tuple[Optional[np.ndarray], int]:
    if flag not in (None, "bfloat16"):
        raise invalid(f"weight_scale_dtype = {flag!r}: expected None or 'bfloat16'")
    bits = torch_bfloat16_bits(obj)
    if bits is not None:
        return readable(bits), _lib.DTYPE_BFLOAT16
    arr = to_numpy(obj, "weight_scale", np.float32)
    if arr is None:
        return None, _lib.DTYPE_FLOAT32
    if is_bfloat16(arr):
        return readable(arr).view(np.uint16), _lib.DTYPE_BFLOAT16
    if flag == "bfloat16":
        if arr.dtype not in (np.uint16, np.int16):
            raise invalid(f"weight_scale: weight_scale_dtype='bfloat16' needs uint16 bits, got {arr.dtype}")
        return readable(arr.view(np.uint16)), _lib.DTYPE_BFLOAT16
    if arr.dtype == np.uint16:
        raise invalid("weight_scale: uint16 holds bfloat16 bits; pass weight_scale_dtype='bfloat16'")
    arr = readable(arr)
    return arr, dtype_code(arr, "weight_scale", _SCALE_DTYPES)


def _plain(obj: ArrayLike, name: str, default: Any, accepted: str) -> Tuple[Optional[np.ndarray], int]:
    arr = to_numpy(obj, name, default)
    if arr is None:
        return None, _lib.DTYPE_FLOAT32
    arr = readable(arr)
    return arr, dtype_code(arr, name, accepted)


def _outputs(out: Optional[Tuple[ArrayLike, ArrayLike]], M: int, N2: int) -> Tuple[np.ndarray, np.ndarray]:
    if out is None:
        # Zero-filled: rows at and past the last group's end are not written by the operator.
        return np.zeros((M, N2), dtype=np.int8), np.zeros((M,), dtype=np.float32)
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


def _run(x: ArrayLike, weight: ArrayLike, group_list: ArrayLike, weight_scale: ArrayLike,
         x_scale: ArrayLike, bias: Optional[ArrayLike], offset: Optional[ArrayLike],
         group_list_type: Union[str, int], weight_format: Optional[str], int4_packed: bool,
         weight_scale_dtype: Optional[str], threads: Optional[int], devices: Optional[int],
         kernel: Union[str, int], out: Optional[Tuple[ArrayLike, ArrayLike]]) -> Result:
    if offset is not None:
        raise invalid("offset is reserved and must be None")
    opts = _lib.OpOptions(group_list_type=_group_list_type(group_list_type),
                          kernel=_kernel(kernel), threads=_c_int(threads, "threads"),
                          devices=_c_int(devices, "devices"))
    x_arr, x_dt = _plain(x, "x", np.int8, "int8")
    # qmoe.prepack's objects (qmoe/_prepack.py) carry their scales and bias folded in
    pre = weight if getattr(weight, "_qmoe_prepacked", False) else None
    w = None if pre is not None else _Weight(weight, weight_format, int4_packed)
    ws_arr, ws_dt = _weight_scale(weight_scale, weight_scale_dtype)
    xs_arr, xs_dt = _plain(x_scale, "x_scale", np.float32, "float32")
    gl_arr, gl_dt = _plain(group_list, "group_list", np.int64, "int64")
    b_arr, b_dt = _plain(bias, "bias", np.float32, "float32")

    M = x_arr.shape[0] if x_arr is not None and x_arr.ndim >= 1 else 0
    # Unknown or impossible N: the library rejects the weight before it looks at the outputs.
    wN = pre.N if pre is not None else w.N
    N2 = wN // 2 if wN is not None and 0 <= wN <= 10240 else 0
    output, output_scale = _outputs(out, M, N2)

    with Tensors() as t:
        args = (
            t.create(x_arr, x_dt),
            pre._view(t) if pre is not None else
            t.create(w.arr, w.dtype, w.fmt, shape=w.shape, strides=w.strides),
            t.create(b_arr, b_dt),
            None,  # offset
            t.create(ws_arr, ws_dt),
            t.create(xs_arr, xs_dt),
            t.create(gl_arr, gl_dt),
            t.create(output, dtype_code(output, "output", "int8")),
            t.create(output_scale, dtype_code(output_scale, "output_scale", "float32")),
            None,  # output_offset
        )
        size = ctypes.c_uint64()
        executor = ctypes.c_void_p()
        _lib.check(_lib.lib.qmoe_gmm_swiglu_quant_workspace_size(
            *args, ctypes.byref(opts), ctypes.byref(size), ctypes.byref(executor)))
        try:
            buf, ptr = _alloc_workspace(size.value)  # buf owns the memory until we return
            # The GIL is released for this call (ctypes.CDLL), so other threads keep running.
            _lib.check(_lib.lib.qmoe_gmm_swiglu_quant(ptr, size.value, executor, None))
        finally:
            _lib.lib.qmoe_executor_destroy(executor)
    return output, output_scale, None


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
        group_list: int64 ``[E']`` with ``E' <= E``: cumulative end rows of the experts
            (``group_list_type="cumsum"``, the default) or rows per expert (``"count"``).
            Empty groups are allowed. Decreasing or negative values, or more than ``M`` rows,
            raise :class:`QmoeError` (161002) before anything is written.
        weight_scale: per-channel ``[E, N]`` or per-group ``[E, G, N]`` (``K % G == 0``) scales:
            float32, float16, bfloat16 (a uint16 array of the bits with
            ``weight_scale_dtype="bfloat16"``, an ml_dtypes bfloat16 array, or a torch bfloat16
            tensor), or for A8W4 uint64/int64 whose low 32 bits hold a float32.
        x_scale: float32 ``[M]``, the per-token dequantization scale of ``x``.
        bias: float32 ``[E, N]``, A8W4 only and required there: the weight assist matrix
            (:func:`qmoe.weight_assist_matrix`). It is honoured as given (the vendor formula
            ``(16*C_high + C_low + bias) * x_scale``). Must be None for A8W8.
        offset: reserved; must be None.
        group_list_type: ``"cumsum"`` (or 0) or ``"count"`` (or 1), see ``group_list``.
        weight_format: ``"nz"``, ``"nd"`` or None to infer it from the weight's rank
            (5-D is FRACTAL_NZ, 3-D is ND).
        int4_packed: the weight is a uint8 (or int8) array of packed int4 bytes.
        weight_scale_dtype: ``"bfloat16"`` when ``weight_scale`` is a uint16 array holding
            bfloat16 bits; otherwise None (the dtype says it).
        threads: at most this many worker threads (None or 0: all threads of the device).
        devices: split the rows over this many devices (None, 0 or 1: one device).
            Results are bit-identical for any ``threads`` and ``devices``.
        kernel: ``"auto"`` (fastest this CPU runs), ``"reference"``, ``"portable"``, ``"avx2"``,
            ``"avx_vnni"``, ``"avx512_vnni"`` or ``"amx_int8"``. A kernel the CPU lacks raises
            QmoeError.
        out: optional ``(output, output_scale)`` arrays to write instead of new ones (int8
            ``[M, N/2]`` and float32 ``[M]``, writable, any non-negative strides). Rows at and
            past the last group's end keep their contents.

    Returns:
        ``(output, output_scale, output_offset)``: int8 ``[M, N/2]``, float32 ``[M]`` and None
        (reserved, always None). New arrays are zero-filled, so rows at and past the last
        group's end are 0 with scale 0. A row whose SwiGLU is all zero gets scale 0 and zeros;
        a row with a non-finite value gets its scale as computed (NaN/Inf) and zeros.

    Inputs that already have a dtype qmoe reads are not copied. PyTorch CPU tensors and other
    ``__array__``/``__dlpack__`` objects are accepted; results are NumPy arrays
    (``torch.from_numpy`` wraps them without a copy). The GIL is released while the operator
    runs.

    Raises:
        QmoeError: (a ValueError) with ``.code`` 161001 when a required argument is None
            (including ``bias`` for A8W4), 161002 for a wrong rank, shape, dtype, format,
            limit (``N`` odd or > 10240, ``K`` >= 65536 for A8W8 or >= 20000 for A8W4,
            ``E' > E``) or group_list value, and the library's message. Nothing is returned
            on error.
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
    output_scale, output_offset)`` with ``output_offset`` None. Extra keyword options are those
    of :func:`grouped_matmul_swiglu_quant`."""
    return grouped_matmul_swiglu_quant(x, weight, group_list, weight_scale, x_scale, bias=bias,
                                       offset=offset, **options)
