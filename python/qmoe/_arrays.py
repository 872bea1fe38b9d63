"""Turning caller arrays (NumPy, PyTorch CPU tensors, DLPack producers, lists) into qmoe tensors.

Arrays that already have a dtype qmoe reads are passed as they are — no copy — with their strides
converted to elements. Only arrays qmoe cannot describe (negative strides, byte strides that are not
a multiple of the item size, misaligned or byte-swapped data) are copied first.
"""

from __future__ import annotations

import ctypes
import sys
from typing import Any, List, Optional, Sequence

import numpy as np

from . import _lib
from ._errors import QmoeError

_DTYPES = {
    np.dtype(np.int8): _lib.DTYPE_INT8,
    np.dtype(np.int32): _lib.DTYPE_INT32,
    np.dtype(np.int64): _lib.DTYPE_INT64,
    np.dtype(np.uint64): _lib.DTYPE_UINT64,
    np.dtype(np.float32): _lib.DTYPE_FLOAT32,
    np.dtype(np.float16): _lib.DTYPE_FLOAT16,
}


def invalid(message: str) -> QmoeError:
    return QmoeError(_lib.ERR_PARAM_INVALID, message, _lib.status_name(_lib.ERR_PARAM_INVALID))


def torch_bfloat16_bits(obj: Any) -> Optional[np.ndarray]:
    """The uint16 bits of a PyTorch bfloat16 tensor (NumPy has no bfloat16), else None."""
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(obj, torch.Tensor) or obj.dtype != torch.bfloat16:
        return None
    return np.asarray(obj.detach().view(torch.int16)).view(np.uint16)


def to_numpy(obj: Any, name: str, default_dtype: Any = None) -> Optional[np.ndarray]:
    """A NumPy view of `obj` without copying when the object allows it.

    NumPy arrays pass through; objects with __array__ (PyTorch CPU tensors) or __dlpack__ are
    viewed in place; plain sequences are converted with `default_dtype`.
    """
    if obj is None or isinstance(obj, np.ndarray):
        return obj
    bits = torch_bfloat16_bits(obj)
    if bits is not None:
        return bits
    try:
        if hasattr(obj, "detach"):  # a tensor that requires grad refuses __array__
            obj = obj.detach()
        if hasattr(obj, "__array__"):
            return np.asarray(obj)
        if hasattr(obj, "__dlpack__"):
            return np.from_dlpack(obj)
        return np.asarray(obj, dtype=default_dtype)
    except (TypeError, ValueError, RuntimeError, BufferError) as exc:
        raise invalid(f"{name}: cannot be read as a host array ({exc})") from exc


def is_bfloat16(arr: np.ndarray) -> bool:
    """ml_dtypes' bfloat16 (a 2-byte NumPy dtype named 'bfloat16')."""
    return arr.dtype.itemsize == 2 and arr.dtype.name == "bfloat16"


def describable(arr: np.ndarray) -> bool:
    """Whether qmoe can read `arr` in place: native byte order, aligned, strides in whole items."""
    if not arr.dtype.isnative or not arr.flags.aligned:
        return False
    return all(s >= 0 and s % arr.itemsize == 0 for s in arr.strides)


def readable(arr: np.ndarray) -> np.ndarray:
    """`arr` itself when qmoe can describe it, else a C-contiguous native copy."""
    if describable(arr):
        return arr
    return np.array(arr, dtype=arr.dtype.newbyteorder("="), order="C", copy=True)


def dtype_code(arr: np.ndarray, name: str, accepted: str) -> int:
    code = _DTYPES.get(arr.dtype)
    if code is None:
        raise invalid(f"{name}: dtype {arr.dtype} is not supported; expected {accepted}")
    return code


class Tensors:
    """Owns the qmoe_tensor handles of one call and destroys them when the block ends."""

    def __init__(self) -> None:
        self._handles: List[ctypes.c_void_p] = []

    def __enter__(self) -> "Tensors":
        return self

    def __exit__(self, *exc: Any) -> None:
        for h in self._handles:
            _lib.lib.qmoe_tensor_destroy(h)
        self._handles.clear()

    def create(self, arr: Optional[np.ndarray], dtype: int, fmt: int = _lib.FORMAT_ND, *,
               shape: Optional[Sequence[int]] = None,
               strides: Optional[Sequence[int]] = None) -> Optional[ctypes.c_void_p]:
        """A tensor over `arr`'s memory (None -> NULL). `shape`/`strides` in elements of `dtype`
        default to the array's own, with byte strides divided by the item size."""
        if arr is None:
            return None
        if shape is None:
            shape = arr.shape
        if len(shape) > _lib.MAX_DIMS:
            raise invalid(f"tensor of rank {len(shape)}: qmoe supports at most {_lib.MAX_DIMS}")
        n = len(shape)
        c_shape = (ctypes.c_int64 * max(n, 1))(*shape)
        c_strides = None  # NULL: row-major (NumPy reports strides of 0 for empty arrays)
        if arr.size:
            if strides is None:
                strides = [s // arr.itemsize for s in arr.strides]
            c_strides = (ctypes.c_int64 * max(n, 1))(*strides)
        handle = ctypes.c_void_p()
        _lib.check(_lib.lib.qmoe_tensor_create(c_shape, n, c_strides, dtype, fmt,
                                               arr.ctypes.data, ctypes.byref(handle)))
        self._handles.append(handle)
        return handle
