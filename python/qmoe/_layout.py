"""Weight preparation: ND <-> FRACTAL_NZ, int4 packing, and the A8W4 weight assist matrix.

These call the library's helpers on C-contiguous copies (weights are prepared once, so clarity
beats avoiding a copy here). Shapes are checked here, before the C helpers see raw pointers.
"""

from __future__ import annotations

import sys
from typing import Any, Tuple

import numpy as np

from . import _lib
from ._arrays import invalid, to_numpy, torch_io

ArrayLike = Any


def _int8_values(obj: ArrayLike, name: str) -> np.ndarray:
    """int8 values; other integer arrays are accepted when every value fits int8."""
    arr = to_numpy(obj, name, np.int8)
    if arr is None:
        raise invalid(f"{name} is None")
    if arr.dtype != np.int8:
        if arr.dtype.kind not in "iu":
            raise invalid(f"{name}: dtype {arr.dtype}, expected int8 values")
        if arr.size and (arr.min() < -128 or arr.max() > 127):
            raise invalid(f"{name}: values outside int8")
        arr = arr.astype(np.int8)
    return np.ascontiguousarray(arr)


def _packed_bytes(obj: ArrayLike, name: str) -> np.ndarray:
    """Packed int4 as C-contiguous uint8 bytes; int32 words are viewed as their bytes."""
    arr = to_numpy(obj, name)
    if arr is None:
        raise invalid(f"{name} is None")
    if arr.dtype not in (np.uint8, np.int8, np.int32):
        raise invalid(f"{name}: dtype {arr.dtype}, expected uint8 (or int8) bytes or int32 words "
                      "of packed int4")
    return np.ascontiguousarray(arr)


def _ptr(arr: np.ndarray) -> int:
    return arr.ctypes.data


def _little_endian_words() -> None:
    # The int32 view of packed int4 equals the packed bytes only on little-endian machines.
    if sys.byteorder != "little":
        raise invalid("the int32 view of packed int4 needs a little-endian machine")


def _ekn(w: np.ndarray, name: str) -> Tuple[int, int, int]:
    if w.ndim != 3:
        raise invalid(f"{name}: rank {w.ndim}, expected 3 [E, K, N]")
    return w.shape


@torch_io
def nd_to_nz(weight_nd: ArrayLike, *, int4: bool = False, as_int32: bool = False) -> np.ndarray:
    """Logical ``[E, K, N]`` weights (int8 values) to FRACTAL_NZ.

    Args:
        weight_nd: int8 ``[E, K, N]``; ``K % 16 == 0`` and ``N % 32 == 0`` (``N % 64`` for int4).
        int4: the values are int4 (in [-8, 7]): pack them two per byte.
        as_int32: with ``int4``, return the int32 view (8 int4 per word).

    Returns:
        int8 ``[E, N/32, K/16, 16, 32]``; with ``int4``: uint8 ``[E, N/64, K/16, 16, 32]``
        packed bytes, or int32 ``[E, N/64, K/16, 16, 8]`` with ``as_int32``.
    """
    w = _int8_values(weight_nd, "weight_nd")
    E, K, N = _ekn(w, "weight_nd")
    if not int4:
        nz = np.empty(E * K * N, dtype=np.int8)
        _lib.check(_lib.lib.qmoe_layout_nd_to_nz_int8(_ptr(w), E, K, N, _ptr(nz)))
        return nz.reshape(E, N // 32, K // 16, 16, 32)
    nz = np.empty((E * K * N + 1) // 2, dtype=np.uint8)
    _lib.check(_lib.lib.qmoe_layout_nd_to_nz_int4(_ptr(w), E, K, N, _ptr(nz)))
    nz = nz.reshape(E, N // 64, K // 16, 16, 32)
    if as_int32:
        _little_endian_words()
        return nz.view(np.int32)
    return nz


@torch_io
def nz_to_nd(weight_nz: ArrayLike, *, int4_packed: bool = False) -> np.ndarray:
    """FRACTAL_NZ weights back to logical ``[E, K, N]`` int8 values.

    Args:
        weight_nz: int8 ``[E, N/32, K/16, 16, 32]``; or packed int4: uint8
            ``[E, N/64, K/16, 16, 32]`` bytes or int32 ``[E, N/64, K/16, 16, 8]`` words.
        int4_packed: an int8-typed array holds packed int4 bytes (uint8 and int32 always do).

    Returns:
        int8 ``[E, K, N]`` (int4 values in [-8, 7]).
    """
    arr = to_numpy(weight_nz, "weight_nz")
    if arr is None:
        raise invalid("weight_nz is None")
    int4 = int4_packed or arr.dtype in (np.uint8, np.int32)
    if not int4:
        w = _int8_values(arr, "weight_nz")
        if w.ndim != 5 or w.shape[3:] != (16, 32):
            raise invalid(f"weight_nz: shape {w.shape}, expected [E, N/32, K/16, 16, 32]")
        E, K, N = w.shape[0], w.shape[2] * 16, w.shape[1] * 32
        nd = np.empty((E, K, N), dtype=np.int8)
        _lib.check(_lib.lib.qmoe_layout_nz_to_nd_int8(_ptr(w), E, K, N, _ptr(nd)))
        return nd
    b = _packed_bytes(arr, "weight_nz")
    if b.dtype == np.int32:
        inner = (16, 8)
        _little_endian_words()
    else:
        inner = (16, 32)
    if b.ndim != 5 or b.shape[3:] != inner:
        raise invalid(f"weight_nz: shape {b.shape}, expected [E, N/64, K/16, 16, {inner[1]}]")
    E, K, N = b.shape[0], b.shape[2] * 16, b.shape[1] * 64
    nd = np.empty((E, K, N), dtype=np.int8)
    _lib.check(_lib.lib.qmoe_layout_nz_to_nd_int4(_ptr(b), E, K, N, _ptr(nd)))
    return nd


@torch_io
def pack_int4(values: ArrayLike, *, as_int32: bool = False) -> np.ndarray:
    """Packs int4 values (int8 in [-8, 7]) along the last axis.

    Two per byte, element ``i`` in byte ``i/2``, low nibble when ``i`` is even: ``[..., n]``
    becomes uint8 ``[..., n/2]`` (``n`` even). With ``as_int32``: int32 ``[..., n/8]`` words,
    element ``j`` of a word in bits ``[4j, 4j+4)`` (``n % 8 == 0``).
    """
    v = _int8_values(values, "values")
    if v.ndim == 0:
        raise invalid("values: rank 0, expected at least one axis")
    n = v.shape[-1]
    per = 8 if as_int32 else 2
    if n % per:
        raise invalid(f"values: last dimension {n} is not a multiple of {per}")
    if as_int32:
        out = np.empty(v.shape[:-1] + (n // 8,), dtype=np.int32)
        _lib.check(_lib.lib.qmoe_layout_int4_pack_int32(_ptr(v), v.size, _ptr(out)))
    else:
        out = np.empty(v.shape[:-1] + (n // 2,), dtype=np.uint8)
        _lib.check(_lib.lib.qmoe_layout_int4_pack(_ptr(v), v.size, _ptr(out)))
    return out


@torch_io
def pack_int4_int32(values: ArrayLike) -> np.ndarray:
    """:func:`pack_int4` into int32 words (``as_int32=True``)."""
    return pack_int4(values, as_int32=True)


@torch_io
def unpack_int4(packed: ArrayLike) -> np.ndarray:
    """Unpacks int4 along the last axis: uint8 (or int8) bytes ``[..., b]`` to int8
    ``[..., 2b]``, or int32 words ``[..., w]`` to int8 ``[..., 8w]``; values in [-8, 7]."""
    p = _packed_bytes(packed, "packed")
    if p.ndim == 0:
        raise invalid("packed: rank 0, expected at least one axis")
    if p.dtype == np.int32:
        out = np.empty(p.shape[:-1] + (8 * p.shape[-1],), dtype=np.int8)
        _lib.check(_lib.lib.qmoe_layout_int4_unpack_int32(_ptr(p), out.size, _ptr(out)))
    else:
        out = np.empty(p.shape[:-1] + (2 * p.shape[-1],), dtype=np.int8)
        _lib.check(_lib.lib.qmoe_layout_int4_unpack(_ptr(p), out.size, _ptr(out)))
    return out


@torch_io
def unpack_int4_int32(words: ArrayLike) -> np.ndarray:
    """:func:`unpack_int4` of int32 words (8 int4 per word)."""
    arr = to_numpy(words, "words")
    if arr is None or arr.dtype != np.int32:
        raise invalid("words: expected an int32 array")
    return unpack_int4(arr)


def _scale_f32(obj: ArrayLike) -> np.ndarray:
    arr = to_numpy(obj, "scale", np.float32)
    if arr is None:
        raise invalid("scale is None")
    if arr.dtype in (np.uint64, np.int64):  # A8W4 scales: float32 bits in the low word
        arr = (np.ascontiguousarray(arr).view(np.uint64) & np.uint64(0xFFFFFFFF))
        return arr.astype(np.uint32).view(np.float32)
    if arr.dtype.kind != "f":
        raise invalid(f"scale: dtype {arr.dtype}, expected float32/float16/float64 or uint64/int64")
    return np.ascontiguousarray(arr, dtype=np.float32)


@torch_io
def weight_assist_matrix(weight_nd_values: ArrayLike, scale: ArrayLike, groups: int = 0) -> np.ndarray:
    """The A8W4 ``bias`` (weight assist matrix) as real callers build it.

    ``bias[e, n] = 8 * sum_k W[e, k, n] * scale[e, g(k), n]`` with ``g(k) = k // (K / G)``,
    accumulated in double and rounded to float32.

    Args:
        weight_nd_values: int8 ``[E, K, N]`` logical int4 values (``nz_to_nd`` / ``unpack_int4``
            turn packed weights into these).
        scale: per-channel ``[E, N]`` or per-group ``[E, G, N]``: float32 (float16/float64 are
            converted) or uint64/int64 with float32 bits in the low word.
        groups: ``G`` for a per-group scale; 0 means per-channel for a 2-D scale and
            ``scale.shape[1]`` for a 3-D one.

    Returns:
        float32 ``[E, N]``.
    """
    w = _int8_values(weight_nd_values, "weight_nd_values")
    E, K, N = _ekn(w, "weight_nd_values")
    s = _scale_f32(scale)
    if isinstance(groups, bool) or not isinstance(groups, (int, np.integer)):
        raise invalid(f"groups = {groups!r}: expected an integer")
    groups = int(groups)
    if groups == 0 and s.ndim == 3:
        groups = s.shape[1]
    want = (E, N) if groups == 0 else (E, groups, N)
    if s.shape != want:
        raise invalid(f"scale: shape {s.shape}, expected {list(want)} for groups = {groups}")
    bias = np.empty((E, N), dtype=np.float32)
    _lib.check(_lib.lib.qmoe_layout_weight_assist_matrix(_ptr(w), E, K, N, _ptr(s), groups, _ptr(bias)))
    return bias
