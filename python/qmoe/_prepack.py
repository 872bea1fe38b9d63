"""Prepacked expert weights (include/qmoe/weights.h): the weights rearranged once into the order
the chosen kernel streams, scales and the A8W4 correction folded in, then passed as the
operator's ``weight`` on every call."""

from __future__ import annotations

import ctypes
from ctypes import POINTER, c_int, c_int64, c_uint64, c_void_p
from typing import Optional, Union

import numpy as np

from . import _lib
from ._arrays import Tensors
from ._errors import QmoeError
from ._op import ArrayLike, _kernel, _plain, _Weight, _weight_scale


class WeightsOptions(ctypes.Structure):
    """struct qmoe_weights_options."""

    _fields_ = [("struct_size", ctypes.c_uint32), ("kernel", c_int), ("force_weight_nz", c_int)]


def _declare(lib: ctypes.CDLL) -> None:
    def fn(name, restype, *argtypes):
        f = getattr(lib, name)
        f.restype = restype
        f.argtypes = list(argtypes)

    fn("qmoe_weights_prepack", c_int, c_void_p, c_void_p, c_void_p, POINTER(WeightsOptions),
       POINTER(c_void_p))
    fn("qmoe_weights_destroy", None, c_void_p)
    fn("qmoe_weights_tensor", c_int, c_void_p, POINTER(c_void_p))
    fn("qmoe_weights_bytes", c_uint64, c_void_p)
    fn("qmoe_weights_kernel", c_int, c_void_p)
    fn("qmoe_tensor_dim", c_int64, c_void_p, c_int)


_declare(_lib.lib)


class PrepackedWeights(_lib.Owned):
    """Expert weights prepacked by :func:`qmoe.prepack`; pass it as ``weight`` to
    :func:`qmoe.grouped_matmul_swiglu_quant` (``weight_scale`` and ``bias`` may then be None).

    Holds its own copy (about the raw weight bytes, see :attr:`nbytes`); the arrays it was made
    from are not referenced. Freed when garbage-collected or by :meth:`close`.
    """

    _qmoe_prepacked = True  # how the operator functions recognise it

    _closed_what = "prepacked weights"

    def __init__(self, handle: c_void_p) -> None:
        self._own(handle)
        view = c_void_p()
        _lib.check(_lib.lib.qmoe_weights_tensor(handle, ctypes.byref(view)))
        try:
            self.shape = tuple(int(_lib.lib.qmoe_tensor_dim(view, i)) for i in range(3))
        finally:
            _lib.lib.qmoe_tensor_destroy(view)

    @property
    def N(self) -> int:
        return self.shape[2]

    @property
    def nbytes(self) -> int:
        """Bytes held: the packed weights, their scales and corrections."""
        with self._use() as handle:
            return int(_lib.lib.qmoe_weights_bytes(handle))

    @property
    def kernel(self) -> str:
        """The kernel the weights were prepacked for (the operator must run it)."""
        with self._use() as handle:
            return _lib.kernel_name(_lib.lib.qmoe_weights_kernel(handle))

    def _view(self, tensors: Tensors, handle: c_void_p) -> c_void_p:
        """A qmoe_tensor view for one call, destroyed with the call's other tensors; the caller
        holds `handle` through self._use() until the call's executor is destroyed."""
        view = c_void_p()
        _lib.check(_lib.lib.qmoe_weights_tensor(handle, ctypes.byref(view)))
        tensors._handles.append(view)
        return view

    def _destroy(self, handle: c_void_p) -> None:
        _lib.lib.qmoe_weights_destroy(handle)

    def __repr__(self) -> str:
        try:
            state = f"{self.nbytes} bytes, kernel {self.kernel}"
        except QmoeError:
            state = "closed"
        return f"PrepackedWeights(shape={self.shape}, {state})"


def prepack(
    weight: ArrayLike,
    weight_scale: ArrayLike,
    *,
    bias: Optional[ArrayLike] = None,
    weight_format: Optional[str] = None,
    int4_packed: bool = False,
    weight_scale_dtype: Optional[str] = None,
    kernel: Union[str, int] = "auto",
) -> PrepackedWeights:
    """Prepacks expert weights once for the fused operator.

    ``weight``, ``weight_scale``, ``bias`` (A8W4, required there), ``weight_format``,
    ``int4_packed`` and ``weight_scale_dtype`` are those of
    :func:`qmoe.grouped_matmul_swiglu_quant`; ``kernel`` is the kernel the operator will run
    (``"auto"``: the fastest this CPU runs; not ``"reference"``). Results with the returned
    object are bit-identical to the raw weights'. Using it with another K, N, E, scale dtype or
    kernel raises :class:`QmoeError` (161002).
    """
    w = _Weight(weight, weight_format, int4_packed)
    ws_arr, ws_dt = _weight_scale(weight_scale, weight_scale_dtype)
    b_arr, b_dt = _plain(bias, "bias", np.float32, "float32")
    opts = WeightsOptions(struct_size=ctypes.sizeof(WeightsOptions), kernel=_kernel(kernel),
                          force_weight_nz=0)
    handle = c_void_p()
    with Tensors() as t:
        _lib.check(_lib.lib.qmoe_weights_prepack(
            t.create(w.arr, w.dtype, w.fmt, shape=w.shape, strides=w.strides),
            t.create(ws_arr, ws_dt), t.create(b_arr, b_dt), ctypes.byref(opts),
            ctypes.byref(handle)))
    return PrepackedWeights(handle)
