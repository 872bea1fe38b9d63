"""qmoe.prepack: prepacked weights give the raw weights' results bit for bit in every layout, agree
with the independent NumPy implementation (vendor_ref), and are refused when they do not fit."""

import numpy as np
import pytest

import qmoe
import vendor_ref as vr
from conftest import Problem, assert_accepted
from test_operator import weight_layouts


def run(p, weight, kernel, **kw):
    ws = kw.pop("ws", p.ws)
    bias = kw.pop("bias", p.bias)
    return qmoe.grouped_matmul_swiglu_quant(p.x, weight, p.group_list, ws, p.xs, bias=bias,
                                            group_list_type=p.kind, kernel=kernel, **kw)


@pytest.mark.parametrize("int4", [False, True], ids=["a8w8", "a8w4"])
@pytest.mark.parametrize("G", [0, 4], ids=["per-channel", "per-group"])
def test_prepacked_equals_raw_in_every_layout(rng, kernel, int4, G):
    if kernel == "reference":
        pytest.skip("the reference kernel reads raw weights only (refusal tested below)")
    # N/2 = 80: a short last panel; rows for decode-, mid- and AMX-sized experts
    p = Problem(rng, M=70, K=128, N=160 if not int4 else 192, E=4, group_list=[3, 3, 40, 66],
                int4=int4, G=G)
    ref_out, ref_scale = p.expected()
    for name, (weight, kw) in weight_layouts(p, int4).items():
        raw_out, raw_scale, _ = run(p, weight, kernel, **kw)
        with qmoe.prepack(weight, p.ws, bias=p.bias, kernel=kernel, **kw) as pw:
            assert pw.shape == (p.E, p.K, p.N)
            assert pw.kernel == kernel or kernel == "auto"
            out, scale, _ = run(p, pw, kernel, ws=None, bias=None)
            out2, scale2, _ = run(p, pw, kernel)  # the original scale and bias: checked, not read
        assert np.array_equal(out, raw_out), name
        assert np.array_equal(scale.view(np.uint32), raw_scale.view(np.uint32)), name
        assert np.array_equal(out2, out) and np.array_equal(scale2, scale), name
        assert_accepted(out, scale, ref_out, ref_scale)


def test_prepack_memory_and_refusals(rng):
    p = Problem(rng, M=20, K=256, N=512, E=2, group_list=[8, 20], int4=True, G=0)
    weight = vr.words_from_nibbles(p.w)
    pw = qmoe.prepack(weight, p.ws, bias=p.bias)
    raw_bytes = p.E * p.K * p.N // 2
    assert raw_bytes <= pw.nbytes <= 1.1 * raw_bytes
    # other K
    with pytest.raises(qmoe.QmoeError) as err:
        qmoe.grouped_matmul_swiglu_quant(np.zeros((p.M, p.K + 16), np.int8), pw, p.group_list,
                                         None, p.xs)
    assert err.value.code == qmoe.ERR_PARAM_INVALID and "K" in err.value.message
    # more experts than it holds
    with pytest.raises(qmoe.QmoeError) as err:
        qmoe.grouped_matmul_swiglu_quant(p.x, pw, [5, 10, 20], None, p.xs)
    assert err.value.code == qmoe.ERR_PARAM_INVALID
    # a scale of another dtype
    with pytest.raises(qmoe.QmoeError) as err:
        run(p, pw, "auto", ws=p.ws.astype(np.float16), bias=None)
    assert err.value.code == qmoe.ERR_PARAM_INVALID and "dtype" in err.value.message
    # another kernel than the one it was made for
    other = "portable" if pw.kernel != "portable" else "avx2"
    with pytest.raises(qmoe.QmoeError) as err:
        run(p, pw, other, ws=None, bias=None)
    assert err.value.code == qmoe.ERR_PARAM_INVALID and "kernel" in err.value.message
    with pytest.raises(qmoe.QmoeError) as err:
        qmoe.prepack(weight, p.ws, bias=p.bias, kernel="reference")
    assert err.value.code == qmoe.ERR_PARAM_INVALID
    with pytest.raises(qmoe.QmoeError) as err:  # A8W4 needs its bias
        qmoe.prepack(weight, p.ws)
    assert err.value.code == qmoe.ERR_PARAM_NULLPTR
    pw.close()
    with pytest.raises(qmoe.QmoeError):
        run(p, pw, "auto", ws=None, bias=None)


def test_prepack_threads(rng):
    """threads packs whole experts on each thread: the same results for any count; out of range
    is refused by the library with its message."""
    p = Problem(rng, M=40, K=128, N=192, E=5, group_list=[3, 9, 10, 30, 40], int4=True, G=4)
    weight = vr.words_from_nibbles(p.w)
    outs = []
    for threads in (1, 3, None):
        with qmoe.prepack(weight, p.ws, bias=p.bias, threads=threads) as pw:
            out, scale, _ = run(p, pw, "auto", ws=None, bias=None)
            outs.append((out, scale.view(np.uint32)))
    for out, scale in outs[1:]:
        assert np.array_equal(out, outs[0][0]) and np.array_equal(scale, outs[0][1])
    for bad in (-1, 4097):
        with pytest.raises(qmoe.QmoeError) as err:
            qmoe.prepack(weight, p.ws, bias=p.bias, threads=bad)
        assert err.value.code == qmoe.ERR_PARAM_INVALID and "threads" in err.value.message
