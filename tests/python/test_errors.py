"""Every error class raises QmoeError (a ValueError) with the library's code and message, and
nothing is written on failure."""

import numpy as np
import pytest

import qmoe
import vendor_ref as vr
from conftest import Problem

NULLPTR, INVALID = 161001, 161002


@pytest.fixture
def a8w8(rng):
    return Problem(rng, M=8, K=32, N=64, E=2, group_list=[3, 8])


@pytest.fixture
def a8w4(rng):
    return Problem(rng, M=8, K=32, N=64, E=2, group_list=[3, 8], int4=True)


def call(p, **changes):
    args = dict(x=p.x, weight=p.w, group_list=p.group_list, weight_scale=p.ws, x_scale=p.xs,
                bias=p.bias)
    if p.bias is not None:
        args["weight"] = vr.words_from_nibbles(p.w)
    args.update(changes)
    return qmoe.grouped_matmul_swiglu_quant(args.pop("x"), args.pop("weight"),
                                            args.pop("group_list"), args.pop("weight_scale"),
                                            args.pop("x_scale"), **args)


def expect(code, fn, *args, match=None, **kw):
    with pytest.raises(qmoe.QmoeError, match=match) as info:
        fn(*args, **kw)
    assert isinstance(info.value, ValueError)
    assert info.value.code == code
    assert info.value.message and info.value.name.startswith("QMOE_ERR_")
    return info.value


@pytest.mark.parametrize("name", ["x", "weight", "group_list", "weight_scale", "x_scale"])
def test_missing_required_tensor(a8w8, name):
    expect(NULLPTR, call, a8w8, **{name: None})


def test_missing_bias_for_a8w4(a8w4):
    expect(NULLPTR, call, a8w4, bias=None, match="bias")


def test_missing_output_in_out(a8w8):
    expect(NULLPTR, call, a8w8, out=(None, np.zeros(8, np.float32)))


INVALID_CASES = {
    "x dtype": lambda p: dict(x=p.x.astype(np.float32)),
    "x rank": lambda p: dict(x=p.x[None]),
    "x unsupported dtype": lambda p: dict(x=p.x.astype(np.float64)),
    "weight dtype": lambda p: dict(weight=p.w.astype(np.int64)),
    "weight rank": lambda p: dict(weight=p.w[0]),
    "weight uint8 without flag": lambda p: dict(weight=p.w.view(np.uint8)),
    "NZ inner dims": lambda p: dict(weight=p.w.reshape(2, 2, 4, 8, 32), weight_format="nz"),
    "K mismatch": lambda p: dict(x=p.x[:, :16]),
    "N odd": lambda p: dict(weight=p.w[:, :, :63], weight_scale=p.ws[:, :63]),
    "E' > E": lambda p: dict(group_list=[1, 2, 8]),
    "bias for A8W8": lambda p: dict(bias=np.zeros((2, 64), np.float32)),
    "offset": lambda p: dict(offset=np.zeros(1, np.float32)),
    "weight_scale shape": lambda p: dict(weight_scale=p.ws[:, :32]),
    "K % G": lambda p: dict(weight_scale=np.ones((2, 3, 64), np.float32)),
    "uint64 scale for A8W8": lambda p: dict(weight_scale=p.ws.astype(np.uint64)),
    "uint16 scale without flag": lambda p: dict(weight_scale=vr.bf16_bits(p.ws)),
    "x_scale shape": lambda p: dict(x_scale=p.xs[:4]),
    "x_scale dtype": lambda p: dict(x_scale=p.xs.astype(np.float64)),
    "group_list dtype": lambda p: dict(group_list=p.group_list.astype(np.float32)),
    "output shape": lambda p: dict(out=(np.zeros((8, 31), np.int8), np.zeros(8, np.float32))),
    "output_scale dtype": lambda p: dict(out=(np.zeros((8, 32), np.int8), np.zeros(8))),
    "read-only output": lambda p: dict(out=(np.broadcast_to(np.int8(0), (8, 32)),
                                            np.zeros(8, np.float32))),
    "group_list_type": lambda p: dict(group_list_type="prefix"),
    "weight_format": lambda p: dict(weight_format="zn"),
    "kernel name": lambda p: dict(kernel="gpu"),
    "threads negative": lambda p: dict(threads=-1),
    "devices not an int": lambda p: dict(devices=1.5),
    "weight_scale_dtype": lambda p: dict(weight_scale_dtype="float8"),
}


@pytest.mark.parametrize("case", sorted(INVALID_CASES))
def test_invalid_argument(a8w8, case):
    err = expect(INVALID, call, a8w8, **INVALID_CASES[case](a8w8))
    assert str(err).startswith("[161002 QMOE_ERR_PARAM_INVALID] ")


def test_limits(rng):
    x = np.zeros((1, 16), np.int8)
    expect(INVALID, qmoe.grouped_matmul_swiglu_quant, x, np.zeros((1, 16, 10242), np.int8), [1],
           np.ones((1, 10242), np.float32), np.ones(1, np.float32), match="10240")
    x = np.zeros((1, 65536), np.int8)
    expect(INVALID, qmoe.grouped_matmul_swiglu_quant, x, np.zeros((1, 65536, 2), np.int8), [1],
           np.ones((1, 2), np.float32), np.ones(1, np.float32), match="65536")
    x = np.zeros((1, 20000), np.int8)
    expect(INVALID, qmoe.grouped_matmul_swiglu_quant, x, np.zeros((1, 20000, 1), np.int32), [1],
           np.ones((1, 8), np.float32), np.ones(1, np.float32),
           bias=np.zeros((1, 8), np.float32), match="20000")


@pytest.mark.parametrize("group_list,kind", [
    ([5, 3], "cumsum"),   # decreasing
    ([-1, 3], "cumsum"),  # negative
    ([3, 9], "cumsum"),   # past M
    ([5, 4], "count"),    # adds up past M
    ([2, -1], "count"),
])
def test_bad_group_list_values_leave_outputs_untouched(a8w4, group_list, kind):
    out = np.full((8, 32), 55, np.int8)
    scale = np.full(8, -3.0, np.float32)
    expect(INVALID, call, a8w4, group_list=np.array(group_list, np.int64),
           group_list_type=kind, out=(out, scale), match="group_list")
    assert np.all(out == 55) and np.all(scale == -3.0)


def test_layout_helper_errors(rng):
    w = rng.integers(-8, 8, size=(1, 24, 64), dtype=np.int8)
    expect(INVALID, qmoe.nd_to_nz, w, match="K % 16")
    expect(INVALID, qmoe.nd_to_nz, w[:, :16, :48], int4=True)
    expect(INVALID, qmoe.nd_to_nz, w[0])
    expect(INVALID, qmoe.nz_to_nd, np.zeros((1, 2, 2, 16, 16), np.int8))
    expect(INVALID, qmoe.pack_int4, np.array([1, 8], np.int8), match="int4")
    expect(INVALID, qmoe.pack_int4, np.array([1, 2, 3], np.int8))
    expect(INVALID, qmoe.pack_int4, np.arange(4), as_int32=True)
    expect(INVALID, qmoe.pack_int4, np.array([0.5, 1.0]))
    expect(INVALID, qmoe.unpack_int4, np.zeros(4, np.float32))
    expect(INVALID, qmoe.weight_assist_matrix, w, np.ones((1, 32), np.float32))
    expect(INVALID, qmoe.weight_assist_matrix, w, np.ones((1, 5, 64), np.float32), match="groups")
