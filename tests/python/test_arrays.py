"""Input handling: no copies for arrays qmoe can read, other array objects (PyTorch-style
__array__ and DLPack producers) accepted, and docs for every argument."""

import inspect

import numpy as np
import pytest

import qmoe
from qmoe import _arrays
from conftest import Problem, assert_accepted, need_torch, need_ml_dtypes


def test_readable_arrays_are_not_copied(rng):
    x = rng.integers(-128, 128, size=(8, 12), dtype=np.int8)
    for view in (x, x[::2], x[:, 1::3], x.T, np.broadcast_to(x[0], (8, 12))):
        assert _arrays.readable(view) is view
    for view in (x[::-1], x.astype(">i4"), np.frombuffer(b"\0" + bytes(16), np.float32, 4, 1)):
        copy = _arrays.readable(view)
        assert copy is not view and copy.flags.c_contiguous and copy.dtype.isnative
        np.testing.assert_array_equal(copy, view)


class ArrayInterfaceTensor:
    """Stands for a CPU torch.Tensor: exposes its memory through __array__."""

    def __init__(self, a):
        self.a = a

    def __array__(self, dtype=None, copy=None):
        return self.a


class DLPackTensor:
    """A DLPack producer with no __array__."""

    def __init__(self, a):
        self.a = a

    def __dlpack__(self, **kw):
        return self.a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


@pytest.mark.parametrize("wrap", [ArrayInterfaceTensor, DLPackTensor])
def test_array_objects_are_accepted(rng, wrap):
    p = Problem(rng, M=12, K=32, N=64, E=2, group_list=[5, 12], int4=True)
    from vendor_ref import words_from_nibbles
    w = words_from_nibbles(p.w)
    view = _arrays.to_numpy(wrap(p.x), "x")
    assert np.shares_memory(view, p.x)
    out, scale, _ = qmoe.grouped_matmul_swiglu_quant(
        wrap(p.x), wrap(w), wrap(p.group_list), wrap(p.ws), wrap(p.xs), bias=wrap(p.bias))
    assert_accepted(out, scale, *p.expected())


def test_torch_tensors_when_installed(rng):
    torch = need_torch()
    p = Problem(rng, M=12, K=32, N=64, E=2, group_list=[5, 12], int4=True)
    from vendor_ref import bf16_bits, bf16_to_f32, words_from_nibbles
    bf = torch.from_numpy(p.ws).to(torch.bfloat16)
    out, scale, offset = qmoe.npu_grouped_matmul_swiglu_quant(
        torch.from_numpy(p.x), torch.from_numpy(words_from_nibbles(p.w)),
        torch.from_numpy(p.group_list), bf, torch.from_numpy(p.xs),
        bias=torch.from_numpy(p.bias))
    assert all(isinstance(t, torch.Tensor) for t in (out, scale, offset))
    assert out.dtype == torch.int8 and scale.dtype == torch.float32
    assert_accepted(out.numpy(), scale.numpy(), *p.expected(ws=bf16_to_f32(bf16_bits(p.ws))))


def test_help_explains_every_argument():
    for fn in (qmoe.grouped_matmul_swiglu_quant, qmoe.reference, qmoe.nd_to_nz, qmoe.nz_to_nd,
               qmoe.weight_assist_matrix, qmoe.grouped_matmul_swiglu_quant_weight_nz_tensor_list):
        doc = inspect.getdoc(fn)
        params = inspect.signature(fn).parameters
        documented = doc if fn is not qmoe.reference else inspect.getdoc(
            qmoe.grouped_matmul_swiglu_quant)
        for name in params:
            assert f"{name}:" in documented, f"{fn.__name__}: {name} is not documented"


def test_ml_dtypes_bfloat16_scale_when_installed(rng):
    ml_dtypes = need_ml_dtypes()
    from vendor_ref import bf16_bits, bf16_to_f32
    p = Problem(rng, M=12, K=32, N=64, E=2, group_list=[5, 12])
    bf = p.ws.astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(bf.view(np.uint16), bf16_bits(p.ws))
    out, scale, _ = qmoe.grouped_matmul_swiglu_quant(p.x, p.w, p.group_list, bf, p.xs,
                                                     kernel="reference")
    assert_accepted(out, scale, *p.expected(ws=bf16_to_f32(bf16_bits(p.ws))))
