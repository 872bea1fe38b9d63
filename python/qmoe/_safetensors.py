"""A strict safetensors reader: the file rules of docs/moe-layer.md "Checkpoint rules", the same
ones tools/safetensors_read.c enforces for `qmoe moe run`, so both accept the same files.

The header is checked here in full (the `safetensors` package takes a repeated name's last
entry, and accepts text the C reader refuses); tensors are then read with plain file reads
(not a mapping), so a file truncated while it is read is an error, not SIGBUS.
"""

from __future__ import annotations

import json
import operator
import os
import re
import stat
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from ._arrays import invalid

MAX_HEADER = 100 << 20  # as the C reader and the safetensors package
MAX_DIMS = 8
MAX_INT = 1 << 62
ITEMSIZE = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "I16": 2, "U16": 2, "F16": 2,
            "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}
_NUMPY = {"BOOL": "?", "U8": "u1", "I8": "i1", "I16": "<i2", "U16": "<u2", "F16": "<f2",
          "I32": "<i4", "U32": "<u4", "F32": "<f4", "I64": "<i8", "U64": "<u8", "F64": "<f8"}
_TEXT = re.compile(rb"[^\x20-\x7e\t\n\r]")  # only printable ASCII and JSON's whitespace
_ESCAPE = re.compile(r'\\(.)', re.S)


class _Bad(Exception):
    """A header rule broken: the message names the rule (and the tensor)."""


def _pairs(pairs: List[Tuple[str, Any]]) -> Dict[str, Any]:
    d = dict(pairs)
    if len(d) != len(pairs):  # the first key given twice, named
        seen = set()
        for k, _ in pairs:
            if k in seen:
                raise _Bad(f"{k} given twice")
            seen.add(k)
    return d


# Strings, to leave the header's structure and numbers; in what remains only whitespace,
# punctuation and digits may appear.
_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"')
_NOT_NUMBER = re.compile(r'[^\s{}\[\]:,"0-9]')


def _not_int(text: str) -> Any:
    raise _Bad(f"{text}: expected a non-negative integer (no fraction, exponent or NaN)")


class TensorInfo:
    __slots__ = ("name", "dtype", "shape", "begin", "end")

    def __init__(self, name: str, dtype: str, shape: Tuple[int, ...], begin: int, end: int):
        self.name, self.dtype, self.shape, self.begin, self.end = name, dtype, shape, begin, end


def _count(name: str, shape: Any) -> int:
    """The element count, checked as the C reader forms it: each step must fit 64 bits / 16."""
    if type(shape) is not list:
        raise _Bad(f"tensor {name}: shape: expected an array of integers")
    if len(shape) > MAX_DIMS:
        raise _Bad(f"tensor {name}: shape: more than {MAX_DIMS} numbers")
    count = 1
    for d in shape:
        if type(d) is not int:  # bool is not int here
            raise _Bad(f"tensor {name}: shape: expected an array of integers")
        if d < 0:
            raise _Bad(f"tensor {name}: {d}: expected a non-negative integer")
        if d > MAX_INT:
            raise _Bad(f"tensor {name}: {d}: integer over 2^62")
        if d and count > _COUNT_MAX // d:
            raise _Bad(f"tensor {name}: shape overflows")
        count *= d
    return count


_COUNT_MAX = (2 ** 64 - 1) // 16
_KEYS = {"dtype", "shape", "data_offsets"}


def parse_header(text: bytes, data_len: int) -> Tuple[Dict[str, TensorInfo], Dict[str, str]]:
    """The tensors and metadata of a header image, or _Bad naming the broken rule."""
    if _TEXT.search(text):
        raise _Bad("bytes other than printable ASCII and whitespace")
    s = text.decode("ascii")
    if "\\" in s:
        for m in _ESCAPE.finditer(s):
            if m.group(1) not in '"\\/nt':
                raise _Bad("unsupported escape in a string")
    # JSON reads "-0" as 0: the one number the checks after parsing cannot see (a name may hold
    # "-0" too, so the exact scan runs only then)
    if "-0" in s:
        bad = _NOT_NUMBER.search(_STRINGS.sub('""', s))
        if bad:
            raise _Bad(f"{bad.group(0)!r} outside a string: expected a non-negative integer")
    try:
        top = json.loads(s, object_pairs_hook=_pairs, parse_float=_not_int,
                         parse_constant=_not_int)
    except json.JSONDecodeError as exc:
        raise _Bad(f"not the JSON of a header ({exc})") from exc
    if type(top) is not dict:
        raise _Bad("expected '{'")
    meta: Dict[str, str] = {}
    tensors: Dict[str, TensorInfo] = {}
    for name, entry in top.items():
        if name == "__metadata__":
            if type(entry) is not dict or not all(type(v) is str for v in entry.values()):
                raise _Bad("__metadata__: expected an object of strings")
            meta = entry
            continue
        if type(entry) is not dict:
            raise _Bad(f"tensor {name}: expected '{{'")
        if len(entry) != 3 or entry.keys() != _KEYS:
            raise _Bad(f"tensor {name}: needs exactly dtype, shape and data_offsets")
        dtype, shape, off = entry["dtype"], entry["shape"], entry["data_offsets"]
        if type(dtype) is not str or dtype not in ITEMSIZE:
            raise _Bad(f"tensor {name}: unknown dtype {dtype!r}")
        nbytes = _count(name, shape) * ITEMSIZE[dtype]
        if type(off) is not list or len(off) != 2 or type(off[0]) is not int \
                or type(off[1]) is not int:
            raise _Bad(f"tensor {name}: data_offsets needs 2 numbers")
        if off[0] < 0 or off[1] < 0:
            raise _Bad(f"tensor {name}: data_offsets {off}: expected a non-negative integer")
        if off[0] > MAX_INT or off[1] > MAX_INT:
            raise _Bad(f"tensor {name}: data_offsets {off}: integer over 2^62")
        if off[0] > off[1] or off[1] > data_len or off[1] - off[0] != nbytes:
            raise _Bad(f"tensor {name}: data_offsets {off} do not hold {nbytes} bytes inside the "
                       f"{data_len}-byte data section")
        tensors[name] = TensorInfo(name, dtype, tuple(shape), off[0], off[1])
    # the tensors' bytes tile the data section: no overlap, no hole, nothing after
    at = 0
    for t in sorted(tensors.values(), key=_RANGE):
        if t.begin != at:
            how = "overlap the tensor before, which ends at" if t.begin < at else "leave a hole from"
            raise _Bad(f"tensor {t.name}: data_offsets [{t.begin}, {t.end}] {how} {at} (the "
                       "tensors' bytes must tile the data section)")
        at = t.end
    if at != data_len:
        raise _Bad(f"the tensors' bytes end at {at} of a {data_len}-byte data section (bytes after "
                   "the last tensor)")
    return tensors, meta


_RANGE = operator.attrgetter("begin", "end")


class SafetensorsFile:
    """An open checkpoint: names, shapes and dtypes from its checked header; data by read()."""

    def __init__(self, path: Any) -> None:
        self.path = str(path)
        try:
            self._f = open(self.path, "rb")
        except OSError as exc:
            raise invalid(f"{self.path}: cannot be read as safetensors ({exc.strerror})") from exc
        try:
            self._open()
        except BaseException:
            self._f.close()
            raise

    def _open(self) -> None:
        st = os.fstat(self._f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_size < 8:
            self._bad("not a safetensors file (a regular file of at least 8 bytes)")
        self.size = st.st_size
        hlen = int.from_bytes(self._exact(0, 8), "little")
        if hlen > MAX_HEADER or hlen > self.size - 8:
            self._bad(f"header length {hlen} does not fit the {self.size}-byte file")
        self._data = 8 + hlen
        try:
            self.tensors, self.metadata = parse_header(self._exact(8, hlen), self.size - 8 - hlen)
        except _Bad as exc:
            self._bad(str(exc))

    def _bad(self, why: str) -> None:
        raise invalid(f"{self.path}: cannot be read as safetensors ({why})")

    def _exact(self, at: int, n: int, into: Optional[memoryview] = None) -> Any:
        buf = into if into is not None else memoryview(bytearray(n))
        got = 0
        while got < n:
            k = os.preadv(self._f.fileno(), [buf[got:]], at + got) if hasattr(os, "preadv") \
                else self._read_at(buf[got:], at + got)
            if k <= 0:
                self._bad(f"the file ended at byte {at + got} while it was read (it changed "
                          f"after it was opened; {at + n} bytes expected)")
            got += k
        return bytes(buf) if into is None else None

    def _read_at(self, buf: memoryview, at: int) -> int:
        self._f.seek(at)
        return self._f.readinto(buf) or 0

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> "SafetensorsFile":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def keys(self) -> List[str]:
        return list(self.tensors)

    def shape(self, name: str) -> Tuple[int, ...]:
        return self.tensors[name].shape

    def dtype(self, name: str) -> str:
        return self.tensors[name].dtype

    def numpy_dtype(self, name: str) -> np.dtype:
        dt = self.tensors[name].dtype
        if dt == "BF16":
            try:
                import ml_dtypes
            except ImportError as exc:
                raise invalid("bfloat16 tensors need the `ml_dtypes` package (NumPy has no "
                              "bfloat16)") from exc
            return np.dtype(ml_dtypes.bfloat16)
        if dt not in _NUMPY:
            raise invalid(f"{self.path}: tensor {name}: dtype {dt} cannot be read as NumPy")
        return np.dtype(_NUMPY[dt])

    def read(self, name: str, out: Optional[np.ndarray] = None) -> np.ndarray:
        """The tensor's values (native byte order), into `out` when given (C-contiguous, of its
        shape and dtype)."""
        t = self.tensors[name]
        dt = self.numpy_dtype(name)
        if out is None:
            out = np.empty(t.shape, dtype=dt.newbyteorder("="))
        raw = out.reshape(-1).view(np.uint8)
        self._exact(self._data + t.begin, t.end - t.begin, memoryview(raw))
        if not dt.isnative and dt.itemsize > 1:
            out.byteswap(inplace=True)
        return out
