"""qmoe.prepack(..., experts=E), then PrepackedWeights.append: weights prepacked a slice of experts
at a time give back the source's integers (unpack) and scales (unpack_scales, bit for bit) for every
expert, and the operator's results of the whole object, bit for bit, in every weight layout, for
float32 / float16 / bfloat16 scales per channel and per group. Refused appends (more experts than
are left, other K, N, dtypes or groups) raise QmoeError and leave the object as it was; the
operator refuses an object whose experts are not all in."""

import ctypes
import threading

import numpy as np
import pytest

import qmoe
import vendor_ref as vr
from conftest import Problem, assert_accepted
from qmoe import _prepack
from test_operator import weight_layouts

E = 5
SLICES = [(0, 2), (2, 3), (3, E)]  # the first slice prepacked, the others appended in turn


def scales_as(ws, dtype):
    """(weight_scale, keyword arguments, the float32 values the operator uses) in `dtype`."""
    if dtype == "float32":
        return ws, {}, ws
    if dtype == "float16":
        h = ws.astype(np.float16)
        return h, {}, h.astype(np.float32)
    bits = vr.bf16_bits(ws)
    return bits, {"weight_scale_dtype": "bfloat16"}, vr.bf16_to_f32(bits)


def part(a, lo, hi):
    return None if a is None else a[lo:hi]


def run(p, weight, kernel, ws, bias, **kw):
    return qmoe.grouped_matmul_swiglu_quant(p.x, weight, p.group_list, ws, p.xs, bias=bias,
                                            group_list_type=p.kind, kernel=kernel, **kw)


def assert_same(a, b, what):
    (out_a, scale_a, _), (out_b, scale_b, _) = a, b
    assert np.array_equal(out_a, out_b), what
    assert np.array_equal(scale_a.view(np.uint32), scale_b.view(np.uint32)), what


def sliced(weight, ws, bias, kw, kernel):
    """The object prepacked from SLICES[0] with experts=E, the other slices appended."""
    (lo, hi), rest = SLICES[0], SLICES[1:]
    pw = qmoe.prepack(weight[lo:hi], ws[lo:hi], bias=part(bias, lo, hi), kernel=kernel,
                      experts=E, **kw)
    for lo, hi in rest:
        pw.append(weight[lo:hi], ws[lo:hi], bias=part(bias, lo, hi), **kw)
    return pw


@pytest.mark.parametrize("scale_dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("int4", [False, True], ids=["a8w8", "a8w4"])
@pytest.mark.parametrize("G", [0, 4], ids=["per-channel", "per-group"])
def test_appended_equals_whole(rng, kernel, int4, G, scale_dtype):
    if kernel == "reference":
        pytest.skip("the reference kernel reads raw weights only")
    # N/2 = 80 or 96: a short last panel; an empty expert and uneven groups
    p = Problem(rng, M=40, K=128, N=160 if not int4 else 192, E=E, group_list=[4, 4, 11, 19, 40],
                int4=int4, G=G)
    ws, ws_kw, ws_values = scales_as(p.ws, scale_dtype)
    ref_out, ref_scale = p.expected(ws=ws_values)
    for name, (weight, kw) in weight_layouts(p, int4).items():
        kw = dict(kw, **ws_kw)
        raw = run(p, weight, kernel, ws, p.bias, **kw)
        with qmoe.prepack(weight, ws, bias=p.bias, kernel=kernel, **kw) as whole, \
                sliced(weight, ws, p.bias, kw, kernel) as pw:
            assert pw.shape == whole.shape == (E, p.K, p.N), name
            assert pw.nbytes == whole.nbytes and pw.kernel == whole.kernel, name
            for e in range(E):
                values = pw.unpack(e)
                assert values.dtype == np.int8 and values.shape == (p.K, p.N), name
                assert np.array_equal(values, p.w[e]), (name, e)
                assert np.array_equal(whole.unpack(e), p.w[e]), (name, e)
                s = pw.unpack_scales(e)
                assert s.dtype == ws.dtype and s.shape == ws[e].shape, (name, e)
                assert s.tobytes() == np.ascontiguousarray(ws[e]).tobytes(), (name, e)
                assert whole.unpack_scales(e).tobytes() == s.tobytes(), (name, e)
            appended = run(p, pw, kernel, None, None)
            assert_same(appended, run(p, whole, kernel, None, None), name)
            assert_same(appended, raw, name)
            # the scales and bias it was made from are accepted beside it (checked, not read)
            assert_same(run(p, pw, kernel, ws, p.bias, **ws_kw), appended, name)
        assert_accepted(appended[0], appended[1], ref_out, ref_scale)


def expect_refusal(code, fn, *args, **kw):
    with pytest.raises(qmoe.QmoeError) as err:
        fn(*args, **kw)
    assert err.value.code == code, err.value.message
    return err.value.message


def test_refused_appends_leave_the_object_as_it_was(rng):
    p = Problem(rng, M=30, K=128, N=128, E=E, group_list=[3, 3, 9, 20, 30], G=4)
    whole = qmoe.prepack(p.w, p.ws)
    expected = run(p, whole, "auto", None, None)
    invalid = qmoe.ERR_PARAM_INVALID

    # fewer experts than the first slice's; experts=0 / None are the weight's E
    expect_refusal(invalid, qmoe.prepack, p.w[:2], p.ws[:2], experts=1)
    for n in (True, 2.0, "5"):
        expect_refusal(invalid, qmoe.prepack, p.w[:2], p.ws[:2], experts=n)
    for n in (None, 0, 2):
        with qmoe.prepack(p.w[:2], p.ws[:2], experts=n) as two:
            assert two.shape == (2, p.K, p.N)
            expect_refusal(invalid, two.append, p.w[2:3], p.ws[2:3])  # none are left

    pw = qmoe.prepack(p.w[:2], p.ws[:2], experts=E)
    assert pw.shape == (E, p.K, p.N)
    # unusable before every expert is in: the operator and the experts not packed yet
    message = expect_refusal(invalid, run, p, pw, "auto", None, None)
    assert "append" in message
    expect_refusal(invalid, pw.unpack, 2)
    expect_refusal(invalid, pw.unpack_scales, E - 1)
    for e in (-1, E):
        expect_refusal(invalid, pw.unpack, e)
        expect_refusal(invalid, pw.unpack_scales, e)
    expect_refusal(invalid, pw.unpack, 2 ** 70)
    expect_refusal(invalid, pw.unpack, "0")
    assert np.array_equal(pw.unpack(1), p.w[1])

    # slices that do not match, each refused with the object left as it was
    expect_refusal(invalid, pw.append, p.w[1:5], p.ws[1:5])  # 4 experts, 3 left
    other = Problem(rng, M=30, K=p.K + 32, N=p.N, E=E, group_list=[30] * E, G=4)
    assert "K" in expect_refusal(invalid, pw.append, other.w[2:], other.ws[2:])  # other K
    other = Problem(rng, M=30, K=p.K, N=p.N + 64, E=E, group_list=[30] * E, G=4)
    assert "N" in expect_refusal(invalid, pw.append, other.w[2:], other.ws[2:])  # other N
    expect_refusal(invalid, pw.append, p.w[2:], p.ws[2:].astype(np.float16))  # scale dtype
    expect_refusal(invalid, pw.append, p.w[2:], p.ws[2:, :2])  # 2 groups, the object's 4
    expect_refusal(invalid, pw.append, p.w[2:], p.ws[2:, 0])  # per channel
    expect_refusal(invalid, pw.append, vr.nz_from_logical(p.w[2:], 32), p.ws[2:])  # other layout
    expect_refusal(invalid, pw.append, p.w[2:], p.ws[2:], bias=np.zeros((3, p.N), np.float32))
    expect_refusal(qmoe.ERR_PARAM_NULLPTR, pw.append, p.w[2:], None)
    expect_refusal(invalid, pw.append, pw, p.ws[2:])  # prepacked weights are no slice
    expect_refusal(invalid, run, p, pw, "auto", None, None)  # still 2 of 5

    pw.append(p.w[2:4], p.ws[2:4])
    expect_refusal(invalid, pw.append, p.w[3:5], p.ws[3:5])  # 2 experts, 1 left
    expect_refusal(invalid, run, p, pw, "auto", None, None)
    pw.append(p.w[4:], p.ws[4:])
    expect_refusal(invalid, pw.append, p.w[4:], p.ws[4:])  # full
    assert_same(run(p, pw, "auto", None, None), expected, "after the refusals")
    for e in range(E):
        assert np.array_equal(pw.unpack(e), p.w[e])
        assert np.array_equal(pw.unpack_scales(e).view(np.uint32), p.ws[e].view(np.uint32))
    pw.close()
    for fn, args in ((pw.append, (p.w[4:], p.ws[4:])), (pw.unpack, (0,)), (pw.unpack_scales, (0,))):
        expect_refusal(qmoe.ERR_PARAM_NULLPTR, fn, *args)  # closed
    whole.close()


def test_a8w4_slices_need_their_bias(rng):
    p = Problem(rng, M=16, K=64, N=128, E=E, group_list=[2, 4, 8, 12, 16], int4=True)
    weight = vr.words_from_nibbles(p.w)
    pw = qmoe.prepack(weight[:3], p.ws[:3], bias=p.bias[:3], experts=E)
    expect_refusal(qmoe.ERR_PARAM_NULLPTR, pw.append, weight[3:], p.ws[3:])  # as phase one
    expect_refusal(qmoe.ERR_PARAM_INVALID, pw.append, p.w[3:], p.ws[3:], bias=p.bias[3:])  # int8
    # int4 bytes are another layout than the first slice's int32 words
    expect_refusal(qmoe.ERR_PARAM_INVALID, pw.append, vr.pack_nibbles(p.w[3:]), p.ws[3:],
                   bias=p.bias[3:], int4_packed=True)
    pw.append(weight[3:], p.ws[3:], bias=p.bias[3:])
    with qmoe.prepack(weight, p.ws, bias=p.bias) as whole:
        assert_same(run(p, pw, "auto", None, None), run(p, whole, "auto", None, None), "a8w4")
    for e in range(E):
        assert np.array_equal(pw.unpack(e), p.w[e])
    pw.close()


def test_uint64_scales_come_back_as_their_float32_values(rng):
    p = Problem(rng, M=16, K=64, N=128, E=2, group_list=[8, 16], int4=True)
    ws64 = vr.u64_with_f32(p.ws, rng)
    with qmoe.prepack(vr.words_from_nibbles(p.w), ws64, bias=p.bias) as pw:
        for e in range(p.E):
            s = pw.unpack_scales(e)
            assert s.dtype == np.float32 and s.shape == (p.N,)
            assert np.array_equal(s.view(np.uint32), p.ws[e].view(np.uint32))


def test_append_waits_for_the_calls_in_flight(rng):
    # weights.h: append is not concurrent with any other use of the object
    p = Problem(rng, M=8, K=64, N=64, E=2, group_list=[4, 8])
    pw = qmoe.prepack(p.w[:1], p.ws[:1], experts=2)
    done = threading.Event()
    with pw._use():  # a call in flight
        worker = threading.Thread(target=lambda: (pw.append(p.w[1:], p.ws[1:]), done.set()))
        worker.start()
        worker.join(0.3)
        assert not done.is_set() and worker.is_alive()
    worker.join(30)
    assert done.is_set()
    with qmoe.prepack(p.w, p.ws) as whole:
        assert_same(run(p, pw, "auto", None, None), run(p, whole, "auto", None, None), "waited")
    pw.close()


def test_options_layout_is_the_headers():
    # the 0.3.6 layout: experts and scale_block (int64_t) after force_weight_nz (the first
    # layout's 12 bytes), aligned as int64_t is (offset 16), then codebook (const int8_t *)
    # aligned as a pointer is (offset 32), then threads (int, offset 40), then value_bits
    # (int64_t, aligned: offset 48, past the 48 bytes of the 0.3.5 layout's struct_size, whose
    # tail padding it must not reuse; 56 bytes in all on x86-64 and arm64)
    names = [n for n, _ in _prepack.WeightsOptions._fields_]
    assert names[-5:] == ["experts", "scale_block", "codebook", "threads", "value_bits"]
    assert _prepack.WeightsOptions.force_weight_nz.offset == 8
    a = ctypes.alignment(ctypes.c_int64)
    experts = (12 + a - 1) // a * a
    assert _prepack.WeightsOptions.experts.offset == experts
    assert _prepack.WeightsOptions.scale_block.offset == experts + 8
    pa, psize = ctypes.alignment(ctypes.c_void_p), ctypes.sizeof(ctypes.c_void_p)
    codebook = (experts + 16 + pa - 1) // pa * pa
    assert _prepack.WeightsOptions.codebook.offset == codebook
    threads = codebook + psize
    assert _prepack.WeightsOptions.threads.offset == threads
    size_align = max(a, pa)
    old_size = (threads + 4 + size_align - 1) // size_align * size_align
    value_bits = (threads + 4 + a - 1) // a * a
    assert _prepack.WeightsOptions.value_bits.offset == value_bits >= old_size
    assert ctypes.sizeof(_prepack.WeightsOptions) == \
        (value_bits + 8 + size_align - 1) // size_align * size_align
    if ctypes.sizeof(ctypes.c_void_p) == 8:
        assert (experts, codebook, threads, value_bits, ctypes.sizeof(_prepack.WeightsOptions)) == \
            (16, 32, 40, 48, 56)
    assert not _prepack.WeightsOptions().codebook  # zeroed: NULL, no codebook
    assert _prepack.WeightsOptions().threads == 0  # zeroed: every online core
    assert _prepack.WeightsOptions().value_bits == 0  # zeroed: a byte a value


def test_scale_blocks_give_the_same_results(rng):
    # scales d * sc (d per block of 4 groups, sc integers): kept as blocks, fewer bytes, the raw
    # weights' outputs (and the reference's), the scales back as given; scales that are not
    # such products are refused
    p = Problem(rng, M=9, K=256, N=128, E=E, group_list=[2, 4, 5, 7, 9], int4=True, G=8)
    d = np.ldexp(rng.integers(1024, 2048, (E, 2, 128)), -22).astype(np.float32)
    ws = (np.repeat(d, 4, axis=1) * rng.integers(0, 64, (E, 8, 128))).astype(np.float32)
    weight, kw = weight_layouts(p, True)["int32-nz"]
    raw = run(p, weight, "auto", ws, p.bias, **kw)
    with qmoe.prepack(weight, ws, bias=p.bias, **kw) as plain, \
            qmoe.prepack(weight, ws, bias=p.bias, scale_block=4, **kw) as blocks:
        assert blocks.nbytes < plain.nbytes
        got = run(p, blocks, "auto", None, None)
        assert_same(got, raw, "blocks")
        assert_same(got, run(p, plain, "auto", None, None), "blocks")
        for e in range(E):
            assert blocks.unpack_scales(e).tobytes() == ws[e].tobytes(), e
    assert_accepted(got[0], got[1], *p.expected(ws=ws))
    bad = ws.copy()
    bad[3, 5, 77] = np.float32(0.123456)
    message = expect_refusal(161002, qmoe.prepack, weight, bad, bias=p.bias, scale_block=4, **kw)
    assert "column 77" in message, message
