"""Turning caller arrays (NumPy, PyTorch CPU tensors, DLPack producers, lists) into qmoe tensors.

Arrays that already have a dtype qmoe reads are passed as they are — no copy — with their strides
converted to elements. Only arrays qmoe cannot describe (negative strides, byte strides that are not
a multiple of the item size, misaligned or byte-swapped data) are copied first.
"""

from __future__ import annotations

import ctypes
import functools
import sys
from typing import Any, Callable, List, Optional, Sequence

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


def is_torch(obj: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Tensor)


def any_torch(*objs: Any) -> bool:
    """Whether any argument (or an item of a list/tuple argument) is a PyTorch tensor."""
    for obj in objs:
        if isinstance(obj, (list, tuple)):
            if any_torch(*obj):
                return True
        elif is_torch(obj):
            return True
    return False


def as_torch(result: Any) -> Any:
    """NumPy results as PyTorch tensors over the same memory (tuples and lists item by item)."""
    if isinstance(result, np.ndarray):
        return sys.modules["torch"].from_numpy(result)
    if isinstance(result, (tuple, list)):
        return type(result)(as_torch(r) for r in result)
    return result


def torch_io(fn: Callable[..., Any]) -> Callable[..., Any]:
    """PyTorch tensors in, PyTorch tensors out: results of a call with any torch argument are
    wrapped with torch.from_numpy (no copy)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        result = fn(*args, **kwargs)
        return as_torch(result) if any_torch(*args, *kwargs.values()) else result

    return wrapper


def dtype_label(obj: Any, arr: np.ndarray) -> str:
    """The caller's name for the dtype: a torch bfloat16 tensor is bfloat16, not its uint16 bits."""
    return "bfloat16" if torch_bfloat16_bits(obj) is not None else str(arr.dtype)


def _from_sequence(obj: Any, name: str, want: Any) -> np.ndarray:
    """A plain sequence as an array of `want`, refusing what would change a value: integers that
    do not fit (checked on the exact Python values, before NumPy could widen them to float) and,
    where integers are expected, anything that is not an integer."""
    try:
        exact = np.asarray(obj, dtype=object)
        arr = np.asarray(obj) if want is None or np.dtype(want).kind not in "iu" else None
    except (TypeError, ValueError, OverflowError) as exc:
        raise invalid(f"{name}: cannot be read as an array ({exc})") from exc
    if want is None:
        return arr
    want = np.dtype(want)
    if want.kind not in "iu":
        if arr.size and (arr.dtype == object or arr.dtype.kind not in "biuf"):
            raise invalid(f"{name}: values are not numbers")
        return arr.astype(want)
    info = np.iinfo(want)
    for v in exact.flat:
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
            what = repr(float(v)) if isinstance(v, (float, np.floating)) else repr(v)
            raise invalid(f"{name}: {what} is not an integer; expected {want} values")
        if not info.min <= int(v) <= info.max:
            raise invalid(f"{name}: value {int(v)} does not fit {want} [{info.min}, {info.max}]")
    return np.array(exact.tolist() if exact.ndim else int(exact), dtype=want).reshape(exact.shape)


def to_numpy(obj: Any, name: str, default_dtype: Any = None) -> Optional[np.ndarray]:
    """A NumPy view of `obj` without copying when the object allows it.

    NumPy arrays pass through; objects with __array__ (PyTorch CPU tensors) or __dlpack__ are
    viewed in place (a torch bfloat16 tensor as its uint16 bits); plain sequences are converted
    to `default_dtype`, refusing values that would change (QmoeError naming `name`).
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
    except (TypeError, ValueError, RuntimeError, BufferError) as exc:
        raise invalid(f"{name}: cannot be read as a host array ({exc})") from exc
    return _from_sequence(obj, name, default_dtype)


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


def dtype_code(arr: np.ndarray, name: str, accepted: str, obj: Any = None) -> int:
    code = _DTYPES.get(arr.dtype)
    if code is None or torch_bfloat16_bits(obj) is not None:
        raise invalid(f"{name}: dtype {dtype_label(obj, arr)} is not supported; expected {accepted}")
    return code


class Later:
    """An input converted (widened) only when the call runs: while Tensors.probing, a tensor
    of its shape over a few bytes stands in, so an input of an impossible size is refused by the
    library before it is copied. The converted array is kept here for the call's duration."""

    _STAND = np.zeros(8, dtype=np.int64)

    def __init__(self, shape: Sequence[int], make: Callable[[], np.ndarray]) -> None:
        self.shape = tuple(int(d) for d in shape)
        self.size = int(np.prod(self.shape, dtype=object)) if self.shape else 1
        self._make, self._arr = make, None

    def get(self) -> np.ndarray:
        if self._arr is None:
            try:
                self._arr = self._make()
            except MemoryError as exc:
                raise QmoeError(_lib.ERR_INNER, f"out of memory for a converted copy of "
                                f"{list(self.shape)}", _lib.status_name(_lib.ERR_INNER)) from exc
        return self._arr


class Tensors:
    """Owns the qmoe_tensor handles of one call and destroys them when the block ends."""

    def __init__(self) -> None:
        self._handles: List[ctypes.c_void_p] = []
        self.probing = False  # Later inputs are stand-ins (see Later)

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
        if isinstance(arr, Later):
            if self.probing:
                return self._stand(arr.shape, dtype, fmt)
            arr = arr.get()
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

    def _stand(self, shape: Sequence[int], dtype: int, fmt: int) -> ctypes.c_void_p:
        n = len(shape)
        if n > _lib.MAX_DIMS:
            raise invalid(f"tensor of rank {n}: qmoe supports at most {_lib.MAX_DIMS}")
        c_shape = (ctypes.c_int64 * max(n, 1))(*shape)
        c_strides = (ctypes.c_int64 * max(n, 1))(*([0] * n))
        handle = ctypes.c_void_p()
        _lib.check(_lib.lib.qmoe_tensor_create(c_shape, n, c_strides, dtype, fmt,
                                               Later._STAND.ctypes.data, ctypes.byref(handle)))
        self._handles.append(handle)
        return handle
