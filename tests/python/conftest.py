"""Shared helpers of the qmoe pytest suite: random problems and the spec's acceptance check."""

import functools
import os

import numpy as np
import pytest

import qmoe
import vendor_ref as vr

KERNELS = ["reference", "auto", "portable", "avx2", "avx_vnni", "avx512_vnni", "amx_int8"]

TORCH_SKIP = ("PyTorch is not installed in this virtual environment (its PyPI wheel is large, so "
              "`make test` leaves it out); `make test-torch` runs these tests with PyTorch")


def need_torch():
    """The torch module, or a skip that says how to run the test (a failure under
    `make test-torch`, which sets QMOE_REQUIRE_TORCH=1: there every torch test must run)."""
    if os.environ.get("QMOE_REQUIRE_TORCH") == "1":
        import torch
        return torch
    return pytest.importorskip("torch", reason=TORCH_SKIP)


def need_ml_dtypes():
    """ml_dtypes (NumPy's bfloat16), or a skip; required under `make test-torch`, which installs it."""
    if os.environ.get("QMOE_REQUIRE_TORCH") == "1":
        import ml_dtypes
        return ml_dtypes
    return pytest.importorskip("ml_dtypes", reason="ml_dtypes (NumPy's bfloat16) is not installed "
                               "here; `make test-torch` installs it and runs these tests")


def as_np(value):
    """A result as NumPy (torch tensors through .numpy(), which shares their memory)."""
    return value.numpy() if hasattr(value, "numpy") and not isinstance(value, np.ndarray) else value


@pytest.fixture(params=["numpy", "torch"])
def backend(request):
    """Each test once with NumPy arrays and once with PyTorch tensors: `wrap` turns a NumPy
    input into the backend's type (torch.from_numpy shares the memory)."""
    if request.param == "numpy":
        return "numpy", (lambda a: a)
    torch = need_torch()
    return "torch", (lambda a: torch.from_numpy(np.ascontiguousarray(a)) if isinstance(a, np.ndarray) else a)


@functools.lru_cache(maxsize=None)
def kernel_runs_here(kernel):
    """Whether this CPU runs `kernel` (the library refuses, with 161002, one it cannot)."""
    try:
        qmoe.grouped_matmul_swiglu_quant(np.zeros((1, 16), np.int8), np.zeros((1, 16, 32), np.int8),
                                         [1], np.ones((1, 32), np.float32), np.ones(1, np.float32),
                                         kernel=kernel)
    except qmoe.QmoeError as err:
        if err.code == qmoe.ERR_PARAM_INVALID and "kernel" in err.message:
            return False
        raise
    return True


@pytest.fixture(params=KERNELS)
def kernel(request):
    """Each kernel in turn: the tests hold every kernel to the same independent reference."""
    if not kernel_runs_here(request.param):
        pytest.skip(f"this CPU does not run the {request.param} kernel")
    return request.param


@pytest.fixture
def rng():
    return np.random.default_rng(20261130)


def assert_accepted(out, scale, ref_out, ref_scale):
    """The spec's acceptance: output within +-1 and identical in >= 99.9% of elements,
    output_scale within 1e-6 relative."""
    assert out.shape == ref_out.shape and out.dtype == np.int8
    assert scale.shape == ref_scale.shape and scale.dtype == np.float32
    diff = np.abs(out.astype(np.int32) - ref_out.astype(np.int32))
    assert diff.max(initial=0) <= 1, f"output differs by {diff.max()}"
    if diff.size:
        assert np.count_nonzero(diff == 0) / diff.size >= 0.999
    np.testing.assert_allclose(scale, ref_scale, rtol=1e-6, atol=0)


class Problem:
    """A random operator instance with logical weights and every layout of them."""

    def __init__(self, rng, M, K, N, E, group_list, *, int4=False, G=0, kind="cumsum",
                 opaque_bias=False):
        self.M, self.K, self.N, self.E, self.kind = M, K, N, E, kind
        self.group_list = np.asarray(group_list, dtype=np.int64)
        self.x = rng.integers(-128, 128, size=(M, K), dtype=np.int8)
        lo, hi = (-8, 8) if int4 else (-128, 128)
        self.w = rng.integers(lo, hi, size=(E, K, N), dtype=np.int8)
        shape = (E, G, N) if G else (E, N)
        # scales sized so that C lands around [-10, 10]: SwiGLU's interesting range
        mag = 1.0 / (np.sqrt(K) * (4.0 if int4 else 70.0) * 40.0)
        self.ws = (rng.uniform(0.5, 1.5, size=shape) * mag).astype(np.float32)
        self.xs = rng.uniform(0.5, 1.5, size=M).astype(np.float32)
        self.bias = None
        if int4:
            self.bias = vr.vendor_bias(self.w, self.ws)
            if opaque_bias:
                spread = float(np.abs(self.bias).mean()) + 1e-3
                self.bias = rng.normal(0.0, spread, size=(E, N)).astype(np.float32)

    def expected(self, ws=None, bias=None):
        return vr.operator(self.x, self.w, self.ws if ws is None else ws, self.xs,
                           self.group_list, self.bias if bias is None else bias, self.kind)
