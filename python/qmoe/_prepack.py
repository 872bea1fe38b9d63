"""Prepacked expert weights (include/qmoe/weights.h): the weights rearranged once into the order
the chosen kernel streams, scales and the A8W4 correction folded in, then passed as the
operator's ``weight`` on every call. A large weight can be prepacked a slice of experts at a
time (``prepack(..., experts=E)``, then :meth:`PrepackedWeights.append`), and the integers and
scales read back out of the object (:meth:`PrepackedWeights.unpack`, ``unpack_scales``)."""

from __future__ import annotations

import ctypes
from ctypes import POINTER, c_int, c_int8, c_int64, c_uint64, c_void_p
from typing import Any, Optional, Tuple, Union

import numpy as np

from . import _lib
from ._arrays import Tensors, invalid
from ._errors import QmoeError
from ._op import ArrayLike, _c_int, _kernel, _plain, _Weight, _weight_scale


class WeightsOptions(ctypes.Structure):
    """struct qmoe_weights_options (the 0.3.6 layout; struct_size tells the library which)."""

    _fields_ = [("struct_size", ctypes.c_uint32), ("kernel", c_int), ("force_weight_nz", c_int),
                ("experts", c_int64), ("scale_block", c_int64), ("codebook", POINTER(c_int8)),
                ("threads", c_int), ("value_bits", c_int64)]


def _codebook(value: Any) -> Optional[np.ndarray]:
    """prepack's ``codebook``: None, or its 16 values as a contiguous int8 array (the library
    copies them; the caller keeps the array alive through the call). Whether it holds 0 and
    whether the weight is int8 are the library's checks, with its messages."""
    if value is None:
        return None
    try:
        arr = np.asarray(value)
    except Exception as exc:  # e.g. a ragged sequence
        raise invalid(f"codebook: expected 16 integers in [-128, 127] or None ({exc})") from exc
    if arr.dtype.kind not in "iu":  # floats, bools, objects (ints past int64) and strings
        raise invalid(f"codebook: expected 16 integers in [-128, 127] or None, "
                      f"got dtype {arr.dtype}")
    if arr.shape != (16,):
        raise invalid(f"codebook: expected 16 integers in [-128, 127], got shape {arr.shape}")
    if arr.min() < -128 or arr.max() > 127:
        bad = int(arr[(arr < -128) | (arr > 127)][0])
        raise invalid(f"codebook: {bad} does not fit int8; expected 16 integers in [-128, 127]")
    return np.ascontiguousarray(arr, dtype=np.int8)


def _declare(lib: ctypes.CDLL) -> None:
    def fn(name, restype, *argtypes):
        f = getattr(lib, name)
        f.restype = restype
        f.argtypes = list(argtypes)

    fn("qmoe_weights_prepack", c_int, c_void_p, c_void_p, c_void_p, POINTER(WeightsOptions),
       POINTER(c_void_p))
    fn("qmoe_weights_append", c_int, c_void_p, c_void_p, c_void_p, c_void_p)
    fn("qmoe_weights_destroy", None, c_void_p)
    fn("qmoe_weights_tensor", c_int, c_void_p, POINTER(c_void_p))
    fn("qmoe_weights_unpack", c_int, c_void_p, c_int64, c_void_p)
    fn("qmoe_weights_unpack_scales", c_int, c_void_p, c_int64, c_int, c_void_p)
    fn("qmoe_weights_bytes", c_uint64, c_void_p)
    fn("qmoe_weights_kernel", c_int, c_void_p)
    fn("qmoe_tensor_dim", c_int64, c_void_p, c_int)


_declare(_lib.lib)

# The dtype the object keeps its scales in (qmoe_weights_unpack_scales), by the source's dtype
# code: 16-bit scales as given, everything else as the float32 values the kernels use.
_KEPT_SCALES = {_lib.DTYPE_FLOAT16: (_lib.DTYPE_FLOAT16, np.float16),
                _lib.DTYPE_BFLOAT16: (_lib.DTYPE_BFLOAT16, np.uint16)}  # NumPy has no bfloat16


class _Source:
    """The weight, weight_scale and bias of prepack / append, converted as the operator
    functions convert them; tensors() makes their qmoe tensors for one call."""

    def __init__(self, weight: ArrayLike, weight_scale: ArrayLike, bias: Optional[ArrayLike],
                 weight_format: Optional[str], int4_packed: bool,
                 weight_scale_dtype: Optional[str]) -> None:
        self.w = _Weight(weight, weight_format, int4_packed)
        self.ws, self.ws_dtype = _weight_scale(weight_scale, weight_scale_dtype)
        self.b, self.b_dtype = _plain(bias, "bias", np.float32, "float32")

    def tensors(self, t: Tensors) -> Tuple[Optional[c_void_p], ...]:
        w = self.w
        return (t.create(w.arr, w.dtype, w.fmt, shape=w.shape, strides=w.strides),
                t.create(self.ws, self.ws_dtype), t.create(self.b, self.b_dtype))


class PrepackedWeights(_lib.Owned):
    """Expert weights prepacked by :func:`qmoe.prepack`; pass it as ``weight`` to
    :func:`qmoe.grouped_matmul_swiglu_quant` (``weight_scale`` and ``bias`` may then be None).

    Holds its own copy (about the raw weight bytes, see :attr:`nbytes`); the arrays it was made
    from are not referenced. Freed when garbage-collected or by :meth:`close`.

    :attr:`shape` is the logical ``(E, K, N)`` of all its experts, also while an object made
    with ``prepack(..., experts=E)`` still waits for :meth:`append` (the operator refuses it
    until every expert is in). :meth:`unpack` and :meth:`unpack_scales` give an expert's
    integers and scales back, so a caller need not keep the raw weights beside it.
    """

    _qmoe_prepacked = True  # how the operator functions recognise it

    _closed_what = "prepacked weights"

    def __init__(self, handle: c_void_p, scale_shape: Tuple[int, ...] = (),
                 scale_dtype: int = _lib.DTYPE_FLOAT32) -> None:
        self._own(handle)
        # one expert's weight_scale shape ([N] or [G, N]) and the dtype code the object was made
        # from: the library reports neither, unpack_scales needs both
        self._scale_shape = tuple(scale_shape)
        self._scale_dtype = scale_dtype
        view = c_void_p()
        # the view's shape is the object's E (options.experts), filled or not
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

    def append(self, weight: ArrayLike, weight_scale: ArrayLike, *,
               bias: Optional[ArrayLike] = None, weight_format: Optional[str] = None,
               int4_packed: bool = False, weight_scale_dtype: Optional[str] = None) -> None:
        """Packs the next experts of an object made with ``prepack(..., experts=E)``.

        ``weight``, ``weight_scale`` and ``bias`` are a slice of E' experts given as the first
        slice was (same K, N, groups, dtypes and layout; the arguments as in :func:`prepack`);
        they become experts ``[n, n + E')`` where ``n`` were packed before. The object is usable
        once all its experts are in. A slice that does not match, or of more experts than are
        left, raises :class:`QmoeError` (161002) and leaves the object as it was; so does, for an
        object made with a ``codebook``, a slice holding a value that is not in it. Waits for the
        calls using the object in flight; calls from other threads wait for the append.
        """
        src = _Source(weight, weight_scale, bias, weight_format, int4_packed, weight_scale_dtype)
        with Tensors() as t:
            tensors = src.tensors(t)
            with self._use_alone() as handle:  # not concurrent with any other use (weights.h)
                _lib.check(_lib.lib.qmoe_weights_append(handle, *tensors))

    def unpack(self, expert: int) -> np.ndarray:
        """The integer weights of one expert: a new int8 array ``[K, N]`` (``W[expert]``, the
        logical weight; int4 weights as values in [-8, 7]), exactly those it was made from.
        An expert outside ``[0, E)`` or not appended yet raises :class:`QmoeError` (161002)."""
        e = _c_int(expert, "expert", 64)
        _, K, N = self.shape
        values = np.empty((K, N), np.int8)
        with self._use() as handle:
            _lib.check(_lib.lib.qmoe_weights_unpack(handle, e, values.ctypes.data))
        return values

    def unpack_scales(self, expert: int) -> np.ndarray:
        """The weight scales of one expert, shaped as ``weight_scale[expert]`` was (``[N]`` per
        channel, ``[G, N]`` per group), in the dtype the object keeps them: float16 for float16
        scales, bfloat16 as its uint16 bits (as ``weight_scale_dtype="bfloat16"`` takes them;
        ``.view(ml_dtypes.bfloat16)`` for the type), the bits given; float32 otherwise (the
        values the kernels use, e.g. the low words of uint64/int64 A8W4 scales). An expert
        outside ``[0, E)`` or not appended yet raises :class:`QmoeError` (161002)."""
        e = _c_int(expert, "expert", 64)
        code, dtype = _KEPT_SCALES.get(self._scale_dtype, (_lib.DTYPE_FLOAT32, np.float32))
        scales = np.empty(self._scale_shape, dtype)
        with self._use() as handle:
            _lib.check(_lib.lib.qmoe_weights_unpack_scales(handle, e, code, scales.ctypes.data))
        return scales

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
    experts: Optional[int] = None,
    scale_block: int = 0,
    codebook: Optional[ArrayLike] = None,
    threads: Optional[int] = None,
    value_bits: int = 0,
) -> PrepackedWeights:
    """Prepacks expert weights once for the fused operator.

    ``weight``, ``weight_scale``, ``bias`` (A8W4, required there), ``weight_format``,
    ``int4_packed`` and ``weight_scale_dtype`` are those of
    :func:`qmoe.grouped_matmul_swiglu_quant`; ``kernel`` is the kernel the operator will run
    (``"auto"``: the fastest this CPU runs; not ``"reference"``). Results with the returned
    object are bit-identical to the raw weights'. Using it with another K, N, E, scale dtype or
    kernel raises :class:`QmoeError` (161002).

    ``experts``: the object's number of experts; None (or 0) is the weight's E. More than that
    makes an object of ``experts`` experts whose first E are ``weight``'s: the rest are given
    with :meth:`PrepackedWeights.append`, a slice at a time (so a large weight needs the
    staging of one slice only), and the operator refuses the object until they are all in.
    Fewer than the weight's E raises :class:`QmoeError` (161002).

    ``scale_block``: B > 0 keeps each column's scales in blocks of B groups as one float32 base
    and int8 multipliers (1 byte a group instead of 4, the same results) when every scale is
    exactly base x multiplier (e.g. ggml K-quants' d x sc); other scales raise
    :class:`QmoeError` (161002). :meth:`PrepackedWeights.unpack_scales` then gives float32.

    ``codebook``: None, or 16 integers in [-128, 127] that include 0 (int8 weights only, e.g.
    MXFP4's values times 2: ``[0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12]``). Every
    weight value must be one of them; the object keeps each as the 4-bit index of its first
    equal entry (half the weight bytes, the same results) and :meth:`PrepackedWeights.unpack`
    gives the values back. A value outside it (here or in a slice given to
    :meth:`PrepackedWeights.append`) raises :class:`QmoeError` (161002) naming its expert, k
    and column; so do a codebook without 0 and one for int4 weights. Not 16 integers in
    [-128, 127]: :class:`QmoeError` (161002) too.

    ``threads``: threads that pack the experts, here and in every
    :meth:`PrepackedWeights.append` (None or 0: every online core; 1: the calling thread), the
    same object for any count; outside [0, 4096] raises :class:`QmoeError` (161002).

    ``value_bits``: 0 (or 8) keeps int8 weights a byte a value; 6 (int8 weights without a
    codebook, e.g. ggml's q6_K integers) keeps each in 6 bits, 0.75 bytes a value, the same
    results. A value outside [-32, 31] (here or in an appended slice) raises
    :class:`QmoeError` (161002) naming its expert, k and column; so do other values of
    ``value_bits`` and 6 with int4 weights or a codebook.
    """
    src = _Source(weight, weight_scale, bias, weight_format, int4_packed, weight_scale_dtype)
    book = _codebook(codebook)  # referenced until the call returns (the library copies it)
    opts = WeightsOptions(struct_size=ctypes.sizeof(WeightsOptions), kernel=_kernel(kernel),
                          force_weight_nz=0, experts=_c_int(experts, "experts", 64),
                          scale_block=_c_int(scale_block, "scale_block", 64),
                          codebook=None if book is None else book.ctypes.data_as(POINTER(c_int8)),
                          threads=_c_int(threads, "threads"),
                          value_bits=_c_int(value_bits, "value_bits", 64))
    handle = c_void_p()
    with Tensors() as t:
        _lib.check(_lib.lib.qmoe_weights_prepack(*src.tensors(t), ctypes.byref(opts),
                                                 ctypes.byref(handle)))
    # accepted, so weight_scale is [E, N] or [E, G, N]
    # scale blocks are kept (and unpacked) as float32 whatever the source's dtype
    return PrepackedWeights(handle, src.ws.shape[1:], _lib.DTYPE_FLOAT32 if scale_block else src.ws_dtype)
