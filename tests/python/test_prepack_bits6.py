"""qmoe.prepack(..., value_bits=6) (since 0.3.6): int8 weights whose values are all in [-32, 31]
(ggml's q6_K integers) keep each in 6 bits, so the object holds a quarter fewer weight bytes and
gives the same operator results, bit for bit, as the plain object and the raw weights, on every
kernel, in both layouts, per channel and per group, whole or appended a slice at a time; unpack
gives the values back. A value outside [-32, 31] raises QmoeError naming its expert, k and
column; so do value_bits other than 0, 6 and 8 and 6 with int4 weights or a codebook."""

import numpy as np
import pytest

import qmoe
import vendor_ref as vr
from conftest import Problem
from test_operator import weight_layouts
from test_prepack_append import E, assert_same, expect_refusal, run
from test_prepack_codes import MXFP4, check_compact_same_results, coded_problem


def six_bit_problem(rng, **kw):
    """An A8W8 Problem whose weights are drawn from [-32, 31], both ends present."""
    p = coded_problem(rng, codebook=list(range(-32, 32)), **kw)
    p.w.flat[0], p.w.flat[1] = -32, 31
    return p


@pytest.mark.parametrize("G", [0, 8], ids=["per-channel", "per-group"])
def test_six_bits_give_the_same_results(rng, kernel, G):
    if kernel == "reference":
        pytest.skip("the reference kernel reads raw weights only")
    # N/2 = 80: a short last panel; an empty expert and uneven groups; groups of 16 (q6_K's)
    p = six_bit_problem(rng, M=40, K=128, N=160, E=E, group_list=[4, 4, 11, 19, 40], G=G)
    # a quarter of the weight bytes: at least E*K*N/4 fewer
    check_compact_same_results(p, kernel, E * p.K * p.N // 4, value_bits=6)


def test_appended_six_bits_equal_the_whole(rng):
    p = six_bit_problem(rng, M=24, K=64, N=128, E=E, group_list=[3, 6, 9, 18, 24], G=4)
    pw = qmoe.prepack(p.w[:2], p.ws[:2], experts=E, value_bits=6)
    pw.append(p.w[2:], p.ws[2:])
    with qmoe.prepack(p.w, p.ws, value_bits=6) as whole:
        assert_same(run(p, pw, "auto", None, None), run(p, whole, "auto", None, None), "appended")
        for e in range(E):
            assert np.array_equal(pw.unpack(e), p.w[e]), e
    pw.close()


def test_refused_six_bits(rng):
    p = six_bit_problem(rng, M=8, K=64, N=64, E=3, group_list=[2, 5, 8])
    invalid = qmoe.ERR_PARAM_INVALID
    bad = p.w.copy()
    bad[2, 33, 17] = 32
    message = expect_refusal(invalid, qmoe.prepack, bad, p.ws, value_bits=6)
    assert "expert 2, k 33, column 17 holds 32, outside [-32, 31]" in message, message
    message = expect_refusal(invalid, qmoe.prepack, vr.nz_from_logical(bad, 32), p.ws,
                             value_bits=6)
    assert "k 33, column 17" in message, message
    for bits in (7, -1, 4, 16):
        assert f"value_bits = {bits}" in expect_refusal(invalid, qmoe.prepack, p.w, p.ws,
                                                         value_bits=bits)
    message = expect_refusal(invalid, qmoe.prepack, np.clip(p.w, -12, 12), p.ws, value_bits=6,
                             codebook=MXFP4)
    assert "codebook" in message, message
    q = Problem(rng, M=8, K=64, N=64, E=2, group_list=[3, 8], int4=True)
    for name, (weight, kw) in weight_layouts(q, True).items():
        message = expect_refusal(invalid, qmoe.prepack, weight, q.ws, bias=q.bias, value_bits=6, **kw)
        assert "int8" in message, (name, message)
