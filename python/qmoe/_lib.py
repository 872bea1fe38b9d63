"""The ctypes declarations of libqmoe's public C API (include/qmoe/qmoe.h), all in one place.

ctypes.CDLL releases the GIL for the duration of every foreign call, so other Python threads run
while the operator computes; no call here holds the GIL inside C.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
from ctypes import POINTER, c_char_p, c_float, c_int, c_int64, c_uint32, c_uint64, c_void_p
from typing import Any, Iterator

from ._errors import QmoeError

# Numbers from qmoe.h (tests/python/test_header_sync.py checks they still match the header).
OK = 0
ERR_PARAM_NULLPTR = 161001
ERR_PARAM_INVALID = 161002
ERR_RUNTIME = 361001
ERR_INNER = 561000

DTYPE_INT8 = 0
DTYPE_INT4 = 1
DTYPE_INT32 = 2
DTYPE_INT64 = 3
DTYPE_UINT64 = 4
DTYPE_FLOAT32 = 5
DTYPE_FLOAT16 = 6
DTYPE_BFLOAT16 = 7

FORMAT_ND = 0
FORMAT_FRACTAL_NZ = 1

GROUP_LIST_CUMSUM = 0
GROUP_LIST_COUNT = 1

# KERNELS (name -> qmoe_kernel) comes from the library itself, below.

MAX_DIMS = 8


class OpOptions(ctypes.Structure):
    """struct qmoe_grouped_matmul_swiglu_quant_options (C enums are int-sized); struct_size 0 means the 0.2 layout."""

    _fields_ = [
        ("struct_size", c_uint32),
        ("group_list_type", c_int),
        ("force_weight_nz", c_int),
        ("kernel", c_int),
        ("threads", c_int),
        ("devices", c_int),
        ("swiglu_limit", ctypes.c_float),
        ("swiglu_alpha", ctypes.c_float),
        ("swiglu_bias", ctypes.c_void_p),
    ]


class ErrorInfo(ctypes.Structure):
    """struct qmoe_error_info: the structured last error (which rule, which argument)."""

    _fields_ = [("status", c_int), ("rule", c_int), ("arg", c_char_p), ("message", c_char_p)]


RULE_OVERLAP = 8  # QMOE_RULE_OVERLAP


def _library_path() -> str:
    # QMOE_LIBRARY points at a libqmoe.so of a build tree (development without reinstalling);
    # otherwise the copy the wheel installed next to this file.
    override = os.environ.get("QMOE_LIBRARY")
    if override:
        return override
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "libqmoe.so")


def _load() -> ctypes.CDLL:
    path = _library_path()
    try:
        lib = ctypes.CDLL(path)
    except OSError as exc:
        raise ImportError(
            f"qmoe: cannot load the C library {path!r} ({exc}); reinstall the package with "
            "`pip install .` or set QMOE_LIBRARY to a built libqmoe.so"
        ) from exc
    _declare(lib)
    return lib


_P_TENSOR = c_void_p  # qmoe_tensor * (opaque)
_P_EXECUTOR = c_void_p  # qmoe_grouped_matmul_swiglu_quant_executor * (opaque)
_P_I64 = POINTER(c_int64)


def _declare(lib: ctypes.CDLL) -> None:
    def fn(name, restype, *argtypes):
        f = getattr(lib, name)
        f.restype = restype
        f.argtypes = list(argtypes)

    fn("qmoe_version", c_char_p)
    fn("qmoe_last_error", c_char_p)
    fn("qmoe_last_error_info", POINTER(ErrorInfo))
    fn("qmoe_error_rule_name", c_char_p, c_int)
    fn("qmoe_status_name", c_char_p, c_int)
    fn("qmoe_kernel_name", c_char_p, c_int)

    fn("qmoe_tensor_create", c_int, _P_I64, c_int, _P_I64, c_int, c_int, c_void_p,
       POINTER(_P_TENSOR))
    fn("qmoe_tensor_destroy", None, _P_TENSOR)

    fn("qmoe_grouped_matmul_swiglu_quant_workspace_size", c_int,
       _P_TENSOR, _P_TENSOR, _P_TENSOR, _P_TENSOR, _P_TENSOR, _P_TENSOR, _P_TENSOR,
       _P_TENSOR, _P_TENSOR, _P_TENSOR, POINTER(OpOptions), POINTER(c_uint64),
       POINTER(_P_EXECUTOR))
    fn("qmoe_grouped_matmul_swiglu_quant", c_int, c_void_p, c_uint64, _P_EXECUTOR, c_void_p)
    fn("qmoe_grouped_matmul_swiglu_quant_weight_list_workspace_size", c_int,
       _P_TENSOR, POINTER(_P_TENSOR), POINTER(_P_TENSOR), c_int64, _P_TENSOR, _P_TENSOR, c_float,
       _P_TENSOR, _P_TENSOR, POINTER(OpOptions), POINTER(c_uint64), POINTER(_P_EXECUTOR))
    fn("qmoe_grouped_matmul_swiglu_quant_executor_destroy", None, _P_EXECUTOR)
    fn("qmoe_grouped_matmul_swiglu_quant_executor_kernel", c_int, _P_EXECUTOR)

    fn("qmoe_layout_nd_to_nz_int8", c_int, c_void_p, c_int64, c_int64, c_int64, c_void_p)
    fn("qmoe_layout_nz_to_nd_int8", c_int, c_void_p, c_int64, c_int64, c_int64, c_void_p)
    fn("qmoe_layout_nd_to_nz_int4", c_int, c_void_p, c_int64, c_int64, c_int64, c_void_p)
    fn("qmoe_layout_nz_to_nd_int4", c_int, c_void_p, c_int64, c_int64, c_int64, c_void_p)
    fn("qmoe_layout_int4_pack", c_int, c_void_p, c_int64, c_void_p)
    fn("qmoe_layout_int4_unpack", c_int, c_void_p, c_int64, c_void_p)
    fn("qmoe_layout_int4_pack_int32", c_int, c_void_p, c_int64, c_void_p)
    fn("qmoe_layout_int4_unpack_int32", c_int, c_void_p, c_int64, c_void_p)
    fn("qmoe_layout_weight_assist_matrix", c_int, c_void_p, c_int64, c_int64, c_int64, c_void_p,
       c_int64, c_void_p)


lib = _load()


def status_name(code: int) -> str:
    return lib.qmoe_status_name(code).decode()


def check(status: int) -> None:
    """Raises QmoeError for a failed call, with the message the library left for this thread.

    qmoe_last_error is thread-local and ctypes calls run on the calling thread, so reading it
    right after the failing call gets that call's message even while other threads use qmoe.
    """
    if status != OK:
        info = lib.qmoe_last_error_info().contents
        raise QmoeError(status, lib.qmoe_last_error().decode(errors="replace"),
                        status_name(status), rule=lib.qmoe_error_rule_name(info.rule).decode(),
                        arg=info.arg.decode(errors="replace"))


def version() -> str:
    return lib.qmoe_version().decode()


def package_version() -> str:
    """The installed distribution's version (pyproject.toml takes it from CMakeLists.txt's
    project(VERSION), as the library does); the library's when running from a source tree."""
    try:
        from importlib.metadata import PackageNotFoundError
        from importlib.metadata import version as dist_version
    except ImportError:  # Python < 3.8 has no importlib.metadata
        return version()
    try:
        return dist_version("qmoe")
    except PackageNotFoundError:
        return version()


def kernel_name(kernel: int) -> str:
    return lib.qmoe_kernel_name(kernel).decode()


def _kernels() -> dict:
    """Kernel name -> qmoe_kernel number, as the library names them (its one list of instruction
    sets, src/kernels/isa_list.h): the numbers are dense from 0 (auto), the first unnamed one
    ends them."""
    names = {}
    for kernel in range(256):
        name = kernel_name(kernel)
        if name == "unknown":
            break
        names[name] = kernel
    return names


KERNELS = _kernels()


class Owned:
    """Base of the objects that own a library handle: usable as a context manager, closed when
    garbage-collected, and safe to close while other threads call with it.

    Every call that passes the handle to the library holds it through :meth:`_use` for as long
    as the library may touch it; :meth:`close` waits for the calls in flight, then frees the
    handle, and a call that starts after ``close()`` began raises :class:`QmoeError` (161001).
    The C objects leave that to the caller (destroying one in use is undefined behaviour), so
    this is where a Python program gets it.
    """

    _closed_what = "object"  # named in the error of a call after close()
    _handle: Any = None

    def _own(self, handle: Any) -> None:
        self._calls = 0  # calls holding the handle (in _use)
        self._closing = False  # close() began: new calls are refused
        self._cond = threading.Condition()
        self._handle = handle

    def _destroy(self, handle: Any) -> None:  # pragma: no cover - every subclass frees its own
        raise NotImplementedError

    def _closed(self) -> QmoeError:
        return QmoeError(ERR_PARAM_NULLPTR, f"{self._closed_what}: closed",
                         status_name(ERR_PARAM_NULLPTR), arg="self")

    @contextlib.contextmanager
    def _use(self) -> Iterator[Any]:
        """The live handle, held for the block: close() waits until the block ends."""
        with self._cond:
            if self._handle is None or self._closing:
                raise self._closed()
            self._calls += 1
            handle = self._handle
        try:
            yield handle
        finally:
            with self._cond:
                self._calls -= 1
                if not self._calls:
                    self._cond.notify_all()

    @contextlib.contextmanager
    def _use_alone(self) -> Iterator[Any]:
        """The live handle with no other call in flight, held for the block: calls and close()
        that start meanwhile wait for it (for C functions not concurrent with any other use)."""
        with self._cond:
            if self._handle is None or self._closing:
                raise self._closed()
            while self._calls:  # notified when the last call in flight ends
                self._cond.wait()
                if self._handle is None or self._closing:
                    raise self._closed()
            yield self._handle

    def close(self) -> None:
        """Frees the handle once no call holds it (idempotent; later calls raise QmoeError)."""
        cond = getattr(self, "_cond", None)
        if cond is None:  # the constructor failed before the handle was owned
            return
        with cond:
            self._closing = True
            while self._calls:  # (a close() inside a call's own block would wait for itself)
                cond.wait()
            handle, self._handle = self._handle, None
        if handle is not None:
            self._destroy(handle)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: the library may be gone already
            pass
