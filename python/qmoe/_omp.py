"""Devices whose worker threads are the process's OpenMP team (libqmoe_omp, src/omp).

torch's wheel runs its CPU ops on GNU libgomp; after each op its idle team threads spin on the
cores for a while. A qmoe layer on the default device then competes with them for the same
cores. A device made by :func:`omp_device` runs the layer's parts inside
``omp parallel num_threads(n)`` on libgomp.so.1 - the one torch already loaded (the dynamic
loader reuses a loaded soname) - so the team that torch's last op left spinning takes them: qmoe
and torch take turns on the same threads. The layer's operators run on the calling thread (the
one that calls the layer) and its results are bit-identical to the default device's.
"""

from __future__ import annotations

import ctypes
import os
import threading
from ctypes import POINTER, c_int, c_uint32, c_uint64, c_void_p
from typing import Any, Dict, List, Optional, Tuple

from . import _lib
from ._arrays import invalid

_lock = threading.Lock()
_omp_lib: Optional[ctypes.CDLL] = None
_omp_error: Optional[str] = None


class _DeviceOptions(ctypes.Structure):
    """struct qmoe_device_options (include/qmoe/runtime.h)."""

    _fields_ = [("struct_size", c_uint32), ("threads", c_int), ("cpus", POINTER(c_int)),
                ("ncpus", c_int), ("scratch_bytes", c_uint64)]


def _declare(lib: ctypes.CDLL) -> None:
    def fn(name, restype, *argtypes):
        f = getattr(lib, name)
        f.restype = restype
        f.argtypes = list(argtypes)

    fn("qmoe_device_create_external", c_int, POINTER(_DeviceOptions), c_void_p, c_void_p,
       POINTER(c_void_p))
    fn("qmoe_device_destroy", None, c_void_p)
    fn("qmoe_device_threads", c_int, c_void_p)
    fn("qmoe_stream_create", c_int, c_void_p, POINTER(c_void_p))
    fn("qmoe_stream_synchronize", c_int, c_void_p)
    fn("qmoe_stream_destroy", None, c_void_p)


_declare(_lib.lib)


def omp_library_path() -> str:
    """Where libqmoe_omp is looked for: $QMOE_OMP_LIBRARY, else beside the libqmoe loaded."""
    override = os.environ.get("QMOE_OMP_LIBRARY")
    if override:
        return override
    return os.path.join(os.path.dirname(os.path.abspath(_lib._library_path())), "libqmoe_omp.so")


def _load_omp() -> Tuple[Optional[ctypes.CDLL], Optional[str]]:
    """(the library, None) or (None, why it cannot be had); loaded once."""
    global _omp_lib, _omp_error
    with _lock:
        if _omp_lib is None and _omp_error is None:
            path = omp_library_path()
            try:
                lib = ctypes.CDLL(path)
                lib.qmoe_omp_parallel.restype = None
                lib.qmoe_omp_short_teams.restype = c_uint64
                lib.qmoe_omp_short_teams.argtypes = []
                lib.qmoe_omp_max_threads.restype = c_int
                lib.qmoe_omp_max_threads.argtypes = []
                _omp_lib = lib
            except (OSError, AttributeError) as exc:
                _omp_error = (f"cannot load {path!r} ({exc}): the library was built without "
                              "OpenMP, or set QMOE_OMP_LIBRARY to a built libqmoe_omp.so")
        return _omp_lib, _omp_error


def omp_available() -> Tuple[bool, str]:
    """(True, the OpenMP runtime's path) when :func:`omp_device` can be made, else (False, why)."""
    lib, why = _load_omp()
    if lib is None:
        return False, str(why)
    gomp = openmp_runtimes()
    return True, ", ".join(gomp) if gomp else "an OpenMP runtime"


def openmp_runtimes() -> List[str]:
    """The OpenMP runtime files mapped into this process (Linux: /proc/self/maps), e.g. torch's
    torch/lib/libgomp.so.1; empty where that cannot be read."""
    found: List[str] = []
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split(None, 5)[-1].strip() if line.count(" ") >= 5 else ""
                base = os.path.basename(path)
                if base.startswith(("libgomp", "libiomp", "libomp")) and path not in found:
                    found.append(path)
    except OSError:
        pass
    return found


def omp_max_threads() -> int:
    """omp_get_max_threads() on the calling thread (torch.get_num_threads() where torch runs
    on the same libgomp)."""
    lib, why = _load_omp()
    if lib is None:
        raise invalid(f"qmoe.omp_device: {why}")
    return int(lib.qmoe_omp_max_threads())


def omp_short_teams() -> int:
    """Regions that got a smaller OpenMP team than asked (each one failed its operator)."""
    lib, why = _load_omp()
    if lib is None:
        raise invalid(f"qmoe.omp_device: {why}")
    return int(lib.qmoe_omp_short_teams())


class OmpDevice(_lib.Owned):
    """A qmoe device on the process's OpenMP team (qmoe_device_create_external with
    libqmoe_omp's parallel function). Set it as a layer's ``device``; each calling thread gets a
    stream of its own, and the layer's operators run on that thread while its parts run on the
    thread's OpenMP team. A team smaller than asked (OMP_THREAD_LIMIT, a call from inside a
    parallel region) fails the call with QmoeError 361001, never a wrong result."""

    _closed_what = "OmpDevice"

    def __init__(self, threads: Optional[int] = None):
        lib, why = _load_omp()
        if lib is None:
            raise invalid(f"qmoe.omp_device: {why}")
        if threads is None:
            threads = int(lib.qmoe_omp_max_threads())
        if isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= 4096:
            raise invalid(f"threads = {threads!r}: expected an int in 1..4096 (None: OpenMP's "
                          "omp_get_max_threads())")
        opts = _DeviceOptions(ctypes.sizeof(_DeviceOptions), threads, None, 0, 0)
        handle = c_void_p()
        fn = ctypes.cast(lib.qmoe_omp_parallel, c_void_p)
        _lib.check(_lib.lib.qmoe_device_create_external(ctypes.byref(opts), fn, None,
                                                        ctypes.byref(handle)))
        self._streams: Dict[int, c_void_p] = {}
        self._streams_lock = threading.Lock()
        self.threads = threads
        self._own(handle)

    def _stream(self, handle: Any) -> c_void_p:
        """The calling thread's stream on the device (made on its first call, kept)."""
        key = threading.get_ident()
        with self._streams_lock:
            stream = self._streams.get(key)
            if stream is None:
                stream = c_void_p()
                _lib.check(_lib.lib.qmoe_stream_create(handle, ctypes.byref(stream)))
                self._streams[key] = stream
        return stream

    def _destroy(self, handle: Any) -> None:
        with self._streams_lock:
            streams, self._streams = list(self._streams.values()), {}
        for stream in streams:  # the streams before their device (runtime.h)
            _lib.lib.qmoe_stream_destroy(stream)
        _lib.lib.qmoe_device_destroy(handle)

    def __repr__(self) -> str:
        return f"OmpDevice(threads={self.threads}{', closed' if self._handle is None else ''})"


def omp_device(threads: Optional[int] = None) -> OmpDevice:
    """A device whose parts run on the calling thread's OpenMP team (``threads``; None:
    omp_get_max_threads(), which is torch.get_num_threads() when torch shares the runtime)."""
    return OmpDevice(threads)
