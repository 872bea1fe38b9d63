"""npu_grouped_matmul (MoE subset) against NumPy float64: A8W8 per-channel, A8W4 (int32-packed
int4) per-channel and per-group, bf16/fp16/fp32 outputs, the int32 form, the float path, cumsum
and count group lists, empty experts, M = 0 and 1, non-contiguous x, FRACTAL_NZ weights, the
framework's list arguments and refusals, PyTorch tensors in and out."""

import ml_dtypes
import numpy as np
import pytest

import qmoe
from conftest import need_torch

BF16 = np.dtype(ml_dtypes.bfloat16)
EPS = {np.dtype(np.float32): 2e-6, np.dtype(np.float16): 2 ** -10, BF16: 2 ** -7}


def f64(a):
    return np.asarray(a).astype(np.float64)


def segments(counts):
    return np.repeat(np.arange(len(counts)), counts)


def problem(rng, counts, K, N, int4=False, G=1, tail=2, strided=False):
    E, M = len(counts), int(sum(counts)) + tail
    xb = rng.integers(-128, 128, size=(M, K + (5 if strided else 0))).astype(np.int8)
    x = xb[:, :K] if strided else xb
    w = rng.integers(-8, 8, size=(E, K, N)) if int4 else rng.integers(-128, 128, size=(E, K, N))
    w = w.astype(np.int8)
    scale = rng.uniform(0.001, 0.02, size=(E, G, N) if G > 1 else (E, N)).astype(np.float32)
    pts = rng.uniform(0.001, 0.05, size=M).astype(np.float32)
    return x, w, scale, pts


def reference(x, w, scale, pts, counts, bias=None):
    M, K = x.shape
    N = w.shape[2]
    out = np.zeros((M, N))
    rows = segments(counts)
    sc = scale if scale.ndim == 3 else scale[:, None, :]
    G = sc.shape[1]
    for m, e in enumerate(rows):
        xs = f64(x[m]).reshape(G, K // G)
        ws = f64(w[e]).reshape(G, K // G, N)
        acc = np.einsum("gk,gkn->gn", xs, ws)
        out[m] = (acc * sc[e]).sum(0) * pts[m]
        if bias is not None:
            out[m] += bias[e]
    return out


def pack_int32(w):
    """[E, K, N] int4 values -> int32 [E, K, N/8], element j in bits [4j, 4j + 4)."""
    u = (w.astype(np.int64) & 0xF).reshape(w.shape[0], w.shape[1], -1, 8)
    words = np.zeros(u.shape[:3], dtype=np.int64)
    for j in range(8):
        words |= u[..., j] << (4 * j)
    return words.astype(np.uint32).view(np.int32)


@pytest.mark.parametrize("out_dtype", [BF16, np.dtype(np.float16), np.dtype(np.float32)])
@pytest.mark.parametrize("mode", ["a8w8", "a8w8_nz", "a8w4", "a8w4_group"])
@pytest.mark.parametrize("glt", [0, 1])
def test_quantized(mode, out_dtype, glt):
    rng = np.random.default_rng(len(mode) * 7 + glt)
    counts = [5, 0, 19, 1]
    int4 = mode.startswith("a8w4")
    G = 4 if mode == "a8w4_group" else 1
    x, w, scale, pts = problem(rng, counts, 128, 128, int4=int4, G=G, strided=glt == 1)
    bias = rng.uniform(-1, 1, size=(4, 128)).astype(np.float32) if glt else None
    if mode == "a8w8_nz":
        wt = qmoe.nd_to_nz(w)
    elif int4:
        wt = pack_int32(w)
    else:
        wt = w
    gl = np.array(counts) if glt else np.cumsum(counts)
    out = qmoe.npu_grouped_matmul([x], [wt], bias=None if bias is None else [bias], scale=[scale],
                                  per_token_scale=[pts], group_list=gl, split_item=3,
                                  group_type=0, group_list_type=glt, output_dtype=out_dtype)[0]
    assert out.dtype == out_dtype and out.shape == (x.shape[0], 128)
    ref = reference(x, w, scale, pts, counts, bias)
    tot = sum(counts)
    tol = EPS[out_dtype] * np.abs(ref) + 1e-6 * np.abs(ref).max() + (6e-8 if out_dtype == np.float16 else 0)
    assert np.all(np.abs(f64(out)[:tot] - ref[:tot]) <= tol[:tot])
    assert np.all(f64(out)[tot:] == 0)


def test_int32_and_edges():
    rng = np.random.default_rng(3)
    x, w, _, _ = problem(rng, [3, 4], 64, 48, tail=0)
    bias = rng.integers(-1000, 1000, size=(2, 48)).astype(np.int32)
    out = qmoe.npu_grouped_matmul([x], [w], bias=[bias], group_list=[3, 7], split_item=2,
                                  group_type=0)[0]
    rows = segments([3, 4])
    ref = np.einsum("mk,mkn->mn", x.astype(np.int64), w[rows].astype(np.int64)) + bias[rows]
    assert out.dtype == np.int32 and np.array_equal(out, ref)
    # M = 0 and M = 1
    for M in (0, 1):
        xm = x[:M]
        o = qmoe.npu_grouped_matmul([xm], [w], scale=[np.ones((2, 48), np.float32)],
                                    per_token_scale=[np.ones(M, np.float32)],
                                    group_list=[M, M], split_item=3, group_type=0,
                                    output_dtype=np.float32)[0]
        assert o.shape == (M, 48)
        if M:
            assert np.allclose(o[0], x[0].astype(np.float64) @ w[0].astype(np.float64), rtol=1e-6)


@pytest.mark.parametrize("dt", [np.dtype(np.float32), np.dtype(np.float16), BF16])
def test_float(dt):
    rng = np.random.default_rng(9)
    x = rng.uniform(-2, 2, size=(9, 40)).astype(dt)
    w = rng.uniform(-2, 2, size=(3, 40, 24)).astype(dt)
    b = rng.uniform(-2, 2, size=(3, 24)).astype(dt)
    out = qmoe.npu_grouped_matmul([x], [w], bias=[b], group_list=[2, 2, 8], split_item=3,
                                  group_type=0)[0]
    rows = segments([2, 0, 6])
    ref = np.einsum("mk,mkn->mn", f64(x[:8]), f64(w)[rows]) + f64(b)[rows]
    mag = np.einsum("mk,mkn->mn", np.abs(f64(x[:8])), np.abs(f64(w))[rows]) + np.abs(f64(b)[rows])
    assert out.dtype == dt
    assert np.all(np.abs(f64(out)[:8] - ref) <= EPS[dt] * np.abs(ref) + 50 * 6e-8 * mag)


def test_refusals():
    rng = np.random.default_rng(1)
    x, w, s, p = problem(rng, [2, 2], 32, 32, tail=0)
    base = dict(scale=[s], per_token_scale=[p], group_list=[2, 4], group_type=0)
    with pytest.raises(qmoe.QmoeError) as e:
        qmoe.npu_grouped_matmul([x], [w], split_item=0, **base)
    assert e.value.code == qmoe.ERR_PARAM_INVALID
    with pytest.raises(qmoe.QmoeError) as e:
        qmoe.npu_grouped_matmul([x, x], [w], split_item=3, **base)
    assert e.value.code == qmoe.ERR_PARAM_INVALID
    with pytest.raises(qmoe.QmoeError) as e:
        qmoe.npu_grouped_matmul([x], [w], split_item=3, offset=[s], **base)
    assert e.value.code == qmoe.ERR_PARAM_INVALID
    with pytest.raises(qmoe.QmoeError) as e:  # decreasing cumsum: phase two, nothing written
        qmoe.npu_grouped_matmul([x], [w], split_item=3, scale=[s], per_token_scale=[p],
                                group_list=[3, 2], group_type=0)
    assert e.value.code == qmoe.ERR_PARAM_INVALID
    with pytest.raises(qmoe.QmoeError) as e:
        qmoe.npu_grouped_matmul([x], [w], split_item=3, scale=[s], group_list=[2, 4],
                                group_type=0)
    assert e.value.code == qmoe.ERR_PARAM_NULLPTR


def test_torch():
    torch = need_torch()
    rng = np.random.default_rng(2)
    x, w, s, p = problem(rng, [3, 3], 64, 32, tail=0)
    out = qmoe.npu_grouped_matmul([torch.from_numpy(x)], [torch.from_numpy(w)],
                                  scale=[torch.from_numpy(s)], per_token_scale=[torch.from_numpy(p)],
                                  group_list=torch.tensor([3, 6]), split_item=3, group_type=0,
                                  output_dtype=torch.bfloat16)[0]
    assert out.dtype == torch.bfloat16 and tuple(out.shape) == (6, 32)
    ref = reference(x, w, s, p, [3, 3])
    assert np.allclose(out.float().numpy(), ref, rtol=2 ** -7, atol=1e-6)


def test_prepacked_bits():
    rng = np.random.default_rng(4)
    counts = [7, 0, 20]
    x, w, s, p = problem(rng, counts, 128, 192, tail=1)
    gl = np.cumsum(counts)
    raw = qmoe.npu_grouped_matmul([x], [w], scale=[s], per_token_scale=[p], group_list=gl,
                                  split_item=3, group_type=0)[0]
    pw = qmoe.prepack(w, s, weight_format="nd")
    pre = qmoe.npu_grouped_matmul([x], [pw], per_token_scale=[p], group_list=gl, split_item=3,
                                  group_type=0)[0]
    assert np.array_equal(np.asarray(raw).view(np.uint16), np.asarray(pre).view(np.uint16))
    pw.close()
