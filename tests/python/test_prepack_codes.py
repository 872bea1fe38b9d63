"""qmoe.prepack(..., codebook=...) (since 0.3.3): int8 weights whose values are all among 16 keep
each as the 4-bit index of its first equal entry, so the object holds half the weight bytes and
gives the same operator results, bit for bit, as the plain object and the raw weights, on every
kernel, in both layouts, per channel and per group, whole or appended a slice at a time;
unpack gives the values back. A weight value outside the codebook raises QmoeError naming its
expert, k and column; so do a codebook without 0 and a codebook for int4 weights, and Python
refuses a codebook that is not 16 integers in [-128, 127] before the call."""

import numpy as np
import pytest

import qmoe
import vendor_ref as vr
from conftest import Problem, assert_accepted
from test_operator import weight_layouts
from test_prepack_append import E, SLICES, assert_same, expect_refusal, run

# MXFP4's E2M1 values times 2: index i is the format's own 4-bit code (8 is -0)
MXFP4 = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12]


def coded_problem(rng, codebook=MXFP4, **kw):
    """An A8W8 Problem whose weights are drawn from `codebook`, scales sized for their range."""
    p = Problem(rng, **kw)
    p.w = np.asarray(codebook, np.int8)[rng.integers(0, len(codebook), p.w.shape)]
    p.ws = (p.ws * 70.0 / 6.0).astype(np.float32)  # Problem sizes int8 scales for |w| ~ 70
    return p


def check_compact_same_results(p, kernel, fewer, **option):
    """`p`'s weights prepacked with `option` (a compact form: codes, 6 bits) against the plain
    object and the raw weights on `kernel`, every layout: the same shape and kernel, at least
    `fewer` bytes fewer, the values and scales back as given, the same output bits."""
    ref_out, ref_scale = p.expected()
    for name, (weight, kw) in weight_layouts(p, False).items():
        raw = run(p, weight, kernel, p.ws, None, **kw)
        with qmoe.prepack(weight, p.ws, kernel=kernel, **kw) as plain, \
                qmoe.prepack(weight, p.ws, kernel=kernel, **option, **kw) as compact:
            assert compact.shape == plain.shape == (E, p.K, p.N), name
            assert compact.kernel == plain.kernel, name
            assert plain.nbytes - compact.nbytes >= fewer, (name, plain.nbytes, compact.nbytes)
            for e in range(E):
                values = compact.unpack(e)
                assert values.dtype == np.int8 and values.shape == (p.K, p.N), (name, e)
                assert np.array_equal(values, p.w[e]), (name, e)
                assert compact.unpack_scales(e).tobytes() == p.ws[e].tobytes(), (name, e)
            got = run(p, compact, kernel, None, None)
            assert_same(got, run(p, plain, kernel, None, None), name)
            assert_same(got, raw, name)
        assert_accepted(got[0], got[1], ref_out, ref_scale)


@pytest.mark.parametrize("G", [0, 4], ids=["per-channel", "per-group"])
def test_codes_give_the_same_results(rng, kernel, G):
    if kernel == "reference":
        pytest.skip("the reference kernel reads raw weights only")
    # N/2 = 80: a short last panel; an empty expert and uneven groups
    p = coded_problem(rng, M=40, K=128, N=160, E=E, group_list=[4, 4, 11, 19, 40], G=G)
    # half the weight bytes: at least E*K*N/2 fewer (the plain object's weights are E*K*N
    # bytes or more, padded to its panels)
    check_compact_same_results(p, kernel, E * p.K * p.N // 2, codebook=MXFP4)


def test_appended_codes_equal_the_whole(rng):
    # the object remembers its codebook: append takes slices as given, coded like the first
    p = coded_problem(rng, M=24, K=64, N=128, E=E, group_list=[3, 6, 9, 18, 24], G=2)
    (lo, hi), rest = SLICES[0], SLICES[1:]
    pw = qmoe.prepack(p.w[lo:hi], p.ws[lo:hi], experts=E, codebook=np.array(MXFP4, np.int8))
    bad = p.w[2:3].copy()
    bad[0, 9, 100] = 7  # not in MXFP4 (values times 2)
    message = expect_refusal(qmoe.ERR_PARAM_INVALID, pw.append, bad, p.ws[2:3])
    assert "k 9, column 100 holds 7" in message, message
    for lo, hi in rest:
        pw.append(p.w[lo:hi], p.ws[lo:hi])
    with qmoe.prepack(p.w, p.ws, codebook=MXFP4) as whole, qmoe.prepack(p.w, p.ws) as plain:
        assert pw.nbytes == whole.nbytes < plain.nbytes
        got = run(p, pw, "auto", None, None)
        assert_same(got, run(p, whole, "auto", None, None), "appended")
        assert_same(got, run(p, plain, "auto", None, None), "appended")
    for e in range(E):
        assert np.array_equal(pw.unpack(e), p.w[e]), e
    pw.close()


def test_any_codebook_of_16_int8_values_with_0(rng):
    # not MXFP4: the int8 extremes, duplicates (each value kept as its first entry's index),
    # given as a list, an int64 array or a strided view
    book = [-128, 127, 0, 5, 5, -7, 0, 100, -100, 33, 1, -1, 64, -64, 2, 0]
    p = coded_problem(rng, codebook=book, M=12, K=64, N=64, E=2, group_list=[5, 12])
    for given in (book, np.array(book, np.int64), np.repeat(np.array(book, np.int16), 2)[::2]):
        with qmoe.prepack(p.w, p.ws, codebook=given) as codes, qmoe.prepack(p.w, p.ws) as plain:
            assert codes.nbytes < plain.nbytes
            assert_same(run(p, codes, "auto", None, None), run(p, plain, "auto", None, None),
                        type(given).__name__)
            for e in range(p.E):
                assert np.array_equal(codes.unpack(e), p.w[e]), e


def test_refused_codebooks(rng):
    p = coded_problem(rng, M=8, K=64, N=64, E=3, group_list=[2, 5, 8])
    invalid = qmoe.ERR_PARAM_INVALID

    # a weight value outside the codebook: named by expert, k and column (either layout)
    bad = p.w.copy()
    bad[2, 33, 17] = 5
    message = expect_refusal(invalid, qmoe.prepack, bad, p.ws, codebook=MXFP4)
    assert "expert 2, k 33, column 17 holds 5" in message and "codebook" in message, message
    message = expect_refusal(invalid, qmoe.prepack, vr.nz_from_logical(bad, 32), p.ws,
                             codebook=MXFP4)
    assert "k 33, column 17" in message, message

    # no 0 in it; the library's check
    no_zero = [v if v else 3 for v in MXFP4]
    assert "no 0" in expect_refusal(invalid, qmoe.prepack, p.w, p.ws, codebook=no_zero)

    # not 16 integers in [-128, 127]: refused before the call
    for book in (MXFP4[:15], MXFP4 + [0], [], np.array(MXFP4).reshape(4, 4), 0,
                 [128] + MXFP4[1:], [-129] + MXFP4[1:], [float(v) for v in MXFP4],
                 [bool(v) for v in MXFP4], [2 ** 70] + MXFP4[1:], "0123456789abcdef",
                 [[0]] + MXFP4[1:]):
        message = expect_refusal(invalid, qmoe.prepack, p.w, p.ws, codebook=book)
        assert "codebook" in message, (book, message)

    # int4 weights take no codebook
    q = Problem(rng, M=8, K=64, N=64, E=2, group_list=[3, 8], int4=True)
    for name, (weight, kw) in weight_layouts(q, True).items():
        message = expect_refusal(invalid, qmoe.prepack, weight, q.ws, bias=q.bias,
                                 codebook=MXFP4, **kw)
        assert "int8" in message, (name, message)
