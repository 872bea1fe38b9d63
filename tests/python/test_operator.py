"""qmoe.grouped_matmul_swiglu_quant against the independent NumPy implementation (vendor_ref)."""

import numpy as np
import pytest

import qmoe
import vendor_ref as vr
from conftest import Problem, assert_accepted

def weight_layouts(p, int4):
    """Every layout the operator accepts for p.w, as (weight, keyword arguments)."""
    if not int4:
        return {
            "int8-nz": (vr.nz_from_logical(p.w, 32), {}),
            "int8-nd": (p.w, {}),
        }
    nz_values = vr.nz_from_logical(p.w, 64)
    nz_bytes = vr.pack_nibbles(nz_values.reshape(p.E, -1)).reshape(p.E, p.N // 64, p.K // 16, 16, 32)
    return {
        "int32-nz": (vr.words_from_nibbles(nz_values.reshape(p.E, -1)).reshape(
            p.E, p.N // 64, p.K // 16, 16, 8), {}),
        "uint8-nz": (nz_bytes, {"int4_packed": True}),
        "int32-nd": (vr.words_from_nibbles(p.w), {}),
        "uint8-nd": (vr.pack_nibbles(p.w), {"int4_packed": True}),
    }


def run(p, weight, kernel="auto", **kw):
    return qmoe.grouped_matmul_swiglu_quant(p.x, weight, p.group_list, kw.pop("ws", p.ws), p.xs,
                                            bias=p.bias, group_list_type=p.kind, kernel=kernel,
                                            **kw)


@pytest.mark.parametrize("int4", [False, True], ids=["a8w8", "a8w4"])
@pytest.mark.parametrize("G", [0, 4], ids=["per-channel", "per-group"])
def test_matches_vendor_formulas_in_every_layout(rng, kernel, int4, G):
    # empty groups (0 rows, then 10..10), E' < E, and tail rows 45..47 that no expert owns
    p = Problem(rng, M=48, K=128, N=128, E=6, group_list=[0, 10, 10, 31, 45], int4=int4, G=G)
    ref_out, ref_scale = p.expected()
    assert np.all(ref_scale[:45] > 0)
    for name, (weight, kw) in weight_layouts(p, int4).items():
        out, scale, offset = run(p, weight, kernel, **kw)
        assert offset.shape == () and offset.dtype == np.float32 and offset == 0
        assert_accepted(out, scale, ref_out, ref_scale)
        assert not out[45:].any() and not scale[45:].any(), name  # tail rows stay zero


@pytest.mark.parametrize("G", [0, 2], ids=["per-channel", "per-group"])
def test_a8w4_honours_an_opaque_bias(rng, kernel, G):
    p = Problem(rng, M=40, K=64, N=128, E=3, group_list=[12, 30, 40], int4=True, G=G,
                opaque_bias=True)
    ref_out, ref_scale = p.expected()
    simplified_out, _ = p.expected(bias=vr.vendor_bias(p.w, p.ws))
    assert np.count_nonzero(ref_out != simplified_out) > ref_out.size // 4  # the bias matters
    out, scale, _ = run(p, vr.words_from_nibbles(p.w), kernel)
    assert_accepted(out, scale, ref_out, ref_scale)


def test_count_group_list(rng, kernel):
    p = Problem(rng, M=30, K=32, N=64, E=4, group_list=[7, 0, 13, 5], kind="count")
    ref_out, ref_scale = p.expected()
    out, scale, _ = run(p, vr.nz_from_logical(p.w, 32), kernel)
    assert_accepted(out, scale, ref_out, ref_scale)
    cum = qmoe.grouped_matmul_swiglu_quant(p.x, p.w, np.cumsum(p.group_list), p.ws, p.xs,
                                           kernel=kernel)
    out1, scale1, _ = qmoe.grouped_matmul_swiglu_quant(p.x, p.w, p.group_list, p.ws, p.xs,
                                                       group_list_type=1, kernel=kernel)
    np.testing.assert_array_equal(cum[0], out1)
    np.testing.assert_array_equal(cum[1], scale1)


@pytest.mark.parametrize("int4", [False, True], ids=["a8w8", "a8w4"])
def test_non_contiguous_inputs_read_in_place(rng, kernel, int4):
    p = Problem(rng, M=24, K=64, N=64, E=2, group_list=[9, 20], int4=int4, G=2)
    ref_out, ref_scale = p.expected()
    big = np.zeros((2 * p.M, 3 * p.K), dtype=np.int8)
    big[::2, 1::3] = p.x
    x = big[::2, 1::3]
    xs_big = np.zeros(3 * p.M, dtype=np.float32)
    xs_big[::3] = p.xs
    ws_t = np.ascontiguousarray(np.swapaxes(p.ws, 1, 2)).swapaxes(1, 2)  # transposed strides
    xf = np.asfortranarray(p.x)
    weight = vr.words_from_nibbles(p.w) if int4 else p.w
    for xv in (x, xf):
        assert not xv.flags.c_contiguous
        out, scale, _ = qmoe.grouped_matmul_swiglu_quant(xv, weight, p.group_list, ws_t,
                                                         xs_big[::3], bias=p.bias, kernel=kernel)
        assert_accepted(out, scale, ref_out, ref_scale)


def test_weight_scale_dtypes(rng, kernel):
    p8 = Problem(rng, M=20, K=32, N=64, E=2, group_list=[8, 20])
    f16 = p8.ws.astype(np.float16)
    out, scale, _ = run(p8, p8.w, kernel, ws=f16)
    assert_accepted(out, scale, *p8.expected(ws=f16.astype(np.float32)))
    bits = vr.bf16_bits(p8.ws)
    out, scale, _ = run(p8, p8.w, kernel, ws=bits, weight_scale_dtype="bfloat16")
    assert_accepted(out, scale, *p8.expected(ws=vr.bf16_to_f32(bits)))

    p4 = Problem(rng, M=20, K=32, N=64, E=2, group_list=[8, 20], int4=True, G=2)
    words = vr.u64_with_f32(p4.ws, rng)
    for ws in (words, words.view(np.int64)):
        out, scale, _ = run(p4, vr.words_from_nibbles(p4.w), kernel, ws=ws)
        assert_accepted(out, scale, *p4.expected())


@pytest.mark.parametrize("int4", [False, True], ids=["a8w8", "a8w4"])
def test_larger_problem_with_ragged_groups(rng, kernel, int4):
    # group sizes that are not multiples of any row or column tile, N beyond one tile row
    p = Problem(rng, M=203, K=320, N=640, E=5, group_list=[1, 38, 38, 141, 197], int4=int4,
                G=5, opaque_bias=int4)
    weight = vr.words_from_nibbles(p.w) if int4 else vr.nz_from_logical(p.w, 32)
    out, scale, _ = run(p, weight, kernel)
    assert_accepted(out, scale, *p.expected())


def test_results_do_not_depend_on_threads_or_devices(rng, kernel):
    p = Problem(rng, M=64, K=64, N=128, E=4, group_list=[5, 30, 30, 61], int4=True)
    w = vr.words_from_nibbles(p.w)
    base = run(p, w, kernel)
    assert_accepted(base[0], base[1], *p.expected())
    for threads, devices in ((1, 1), (2, 1), (3, 2), (None, 2)):
        out, scale, _ = run(p, w, kernel, threads=threads, devices=devices)
        np.testing.assert_array_equal(out, base[0])
        np.testing.assert_array_equal(scale.view(np.uint32), base[1].view(np.uint32))


def test_reference_and_npu_alias(rng):
    p = Problem(rng, M=16, K=32, N=64, E=2, group_list=[6, 16], int4=True)
    w = vr.words_from_nibbles(p.w)

    def op(**kw):
        return qmoe.grouped_matmul_swiglu_quant(p.x, w, p.group_list, p.ws, p.xs, bias=p.bias, **kw)

    pairs = [
        (qmoe.reference(p.x, w, p.group_list, p.ws, p.xs, bias=p.bias), op(kernel="reference")),
        (op(kernel=np.int32(1)), op(kernel="reference")),  # 1 is QMOE_KERNEL_REFERENCE
        (qmoe.npu_grouped_matmul_swiglu_quant(p.x, w, p.group_list, p.ws, p.xs, bias=p.bias,
                                              offset=None), op()),
    ]
    for got, want in pairs:
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
        assert got[2].shape == () and got[2].dtype == np.float32
        assert_accepted(got[0], got[1], *p.expected())


def test_out_arrays_keep_rows_past_the_last_group(rng):
    p = Problem(rng, M=20, K=32, N=64, E=2, group_list=[4, 15])
    out = np.full((p.M, p.N // 2), 99, dtype=np.int8)
    scale = np.full(p.M, -1.0, dtype=np.float32)
    got = run(p, p.w, out=(out, scale))
    assert got[0] is out and got[1] is scale
    ref_out, ref_scale = p.expected()
    assert_accepted(out[:15], scale[:15], ref_out[:15], ref_scale[:15])
    assert np.all(out[15:] == 99) and np.all(scale[15:] == -1.0)
    # strided outputs: every other column of a wider buffer, every other scale
    wide = np.zeros((p.M, p.N), dtype=np.int8)
    scales = np.zeros(2 * p.M, dtype=np.float32)
    run(p, p.w, out=(wide[:, ::2], scales[::2]))
    assert_accepted(wide[:, ::2], scales[::2], ref_out, ref_scale)
    assert not wide[:, 1::2].any() and not scales[1::2].any()


def test_empty_and_degenerate_problems(rng):
    p = Problem(rng, M=8, K=32, N=64, E=2, group_list=[0, 0])
    out, scale, _ = run(p, p.w)
    assert not out.any() and not scale.any()
    out, scale, _ = qmoe.grouped_matmul_swiglu_quant(p.x, p.w, np.zeros(0, np.int64), p.ws, p.xs)
    assert out.shape == (8, 32) and not out.any()
    out, scale, _ = qmoe.grouped_matmul_swiglu_quant(p.x[:0], p.w, [0, 0], p.ws, p.xs[:0])
    assert out.shape == (0, 32) and scale.shape == (0,)


def test_zero_and_non_finite_rows(rng):
    p = Problem(rng, M=6, K=32, N=64, E=1, group_list=[6])
    p.x[1] = 0  # S == 0: scale 0, output 0 (the spec's definition)
    p.xs[3] = np.inf  # non-finite S: scale as computed (not finite), output row 0
    out, scale, _ = run(p, p.w)
    assert scale[1] == 0 and not out[1].any()
    assert not np.isfinite(scale[3]) and not out[3].any()
    ref_out, ref_scale = p.expected()
    keep = [0, 2, 4, 5]
    assert_accepted(out[keep], scale[keep], ref_out[keep], ref_scale[keep])


def test_lists_are_accepted(rng):
    p = Problem(rng, M=4, K=16, N=32, E=1, group_list=[4])
    out, scale, _ = qmoe.grouped_matmul_swiglu_quant(p.x.tolist(), p.w, [4], p.ws.tolist(),
                                                     p.xs.tolist())
    assert_accepted(out, scale, *p.expected())
