"""The element-wise MoE operators from Python against NumPy float64 references: every dtype
(float32, float16, bfloat16 through ml_dtypes), the attributes of docs/ops/, ties, empty experts,
tokens routed to no local expert, k = 1 and 8, M = 0 and 1, non-contiguous inputs, errors, PyTorch
tensors in and out, and a routing round trip through gating, init routing and finalize."""

import ml_dtypes
import numpy as np
import pytest

import qmoe
from conftest import need_torch

BF16 = np.dtype(ml_dtypes.bfloat16)
DTYPES = [np.dtype(np.float32), np.dtype(np.float16), BF16]
# relative precision of one rounding to each output dtype
EPS = {np.dtype(np.float32): 2e-6, np.dtype(np.float16): 2 ** -10, BF16: 2 ** -7}


def f64(a):
    return np.asarray(a).astype(np.float64)


def rand(rng, shape, dtype, lo=-3.0, hi=3.0):
    return rng.uniform(lo, hi, size=shape).astype(dtype)


def grid(rng, shape, dtype, levels=24, step=0.125):
    """Values on a coarse grid: many exact ties within a row."""
    return (rng.integers(-levels, levels + 1, size=shape) * step).astype(dtype)


def quant_ref(v):
    """Per-row symmetric int8: scale = amax / 127, q = round half to even (np.rint)."""
    amax = np.abs(v).max(axis=-1, keepdims=True) if v.shape[-1] else np.zeros(v.shape[:-1] + (1,))
    scale = amax / 127.0
    with np.errstate(invalid="ignore", divide="ignore"):
        q = np.where(scale > 0, np.rint(v / np.where(scale > 0, scale, 1)), 0)
    return q, scale[..., 0]


def check_quant(y, scale, v):
    q, sref = quant_ref(v)
    assert y.dtype == np.int8 and scale.dtype == np.float32
    np.testing.assert_allclose(scale, sref, rtol=1e-6, atol=0)
    diff = np.abs(y.astype(np.int64) - q)
    assert diff.max(initial=0) <= 1
    assert (diff != 0).sum() <= max(1, q.size // 100)


# ------------------------------------------------------------------------------ dynamic quant --

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("smooth", [False, True])
@pytest.mark.parametrize("shape", [(0, 16), (1, 7168), (7, 33), (2, 3, 20)])
def test_dynamic_quant(dtype, smooth, shape):
    rng = np.random.default_rng(1)
    x = rand(rng, shape, dtype)
    s = rand(rng, shape[-1:], dtype, 0.25, 2.0) if smooth else None
    y, scale = qmoe.npu_dynamic_quant(x, smooth_scales=s)
    assert y.shape == shape and scale.shape == shape[:-1]
    v = f64(x) * (f64(s) if smooth else 1.0)
    check_quant(y, scale, v)


def test_dynamic_quant_strided_and_rounding():
    rng = np.random.default_rng(2)
    big = rand(rng, (9, 80), np.float32)
    x = big[:, ::2]  # non-contiguous
    y, scale = qmoe.npu_dynamic_quant(x)
    check_quant(y, scale, f64(x))
    halves = np.array([[127.0, 0.5, 1.5, 2.5, -2.5, -0.5], [0, 0, 0, 0, 0, 0]], np.float32)
    y, scale = qmoe.npu_dynamic_quant(halves)
    assert y.tolist() == [[127, 0, 2, 2, -2, 0], [0, 0, 0, 0, 0, 0]]
    assert scale.tolist() == [1.0, 0.0]


def test_dynamic_quant_group_index():
    rng = np.random.default_rng(3)
    x = rand(rng, (10, 24), np.float16)
    sm = rand(rng, (3, 24), np.float16, 0.5, 2.0)
    ends = np.array([4, 4, 10], np.int32)  # the middle group is empty
    y, scale = qmoe.npu_dynamic_quant(x, smooth_scales=sm, group_index=ends)
    rows = np.repeat(np.arange(3), np.diff(np.concatenate([[0], ends])))
    check_quant(y, scale, f64(x) * f64(sm)[rows])


def test_dynamic_quant_errors():
    x = np.ones((4, 8), np.float32)
    with pytest.raises(qmoe.QmoeError) as e:
        qmoe.npu_dynamic_quant(x.astype(np.int8))
    assert e.value.code == qmoe.ERR_PARAM_INVALID
    with pytest.raises(qmoe.QmoeError):
        qmoe.npu_dynamic_quant(x, smooth_scales=np.ones(7, np.float32))
    with pytest.raises(qmoe.QmoeError):
        qmoe.npu_dynamic_quant(x, dst_type=np.int32)
    with pytest.raises(qmoe.QmoeError):
        qmoe.npu_dynamic_quant(x[0])


# ------------------------------------------------------------------------------ gating ---------

def topk_ref(scores, k, allowed=None):
    """Indices of the k largest per row; ties: the lower index (a stable sort of -scores)."""
    s = np.where(allowed, scores, -np.inf) if allowed is not None else scores
    return np.argsort(-s, axis=-1, kind="stable")[..., :k]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("rows,E,k", [(0, 16, 4), (1, 8, 1), (13, 256, 8), (5, 1024, 32),
                                      (4, 64, 64)])
def test_gating_top_k_softmax(dtype, rows, E, k):
    rng = np.random.default_rng(4)
    x = grid(rng, (rows, E), dtype)
    finished = (np.arange(rows) % 3 == 1)
    y, idx, ridx = qmoe.npu_moe_gating_top_k_softmax(x, finished, k=k)
    xv = f64(x)
    p = np.exp(xv - xv.max(axis=-1, keepdims=True)) if rows else xv
    p = p / p.sum(axis=-1, keepdims=True) if rows else p
    ids = topk_ref(xv, k)
    want_idx = np.where(finished[:, None], E, ids)
    np.testing.assert_array_equal(idx, want_idx.astype(np.int32))
    np.testing.assert_allclose(f64(y), np.take_along_axis(p, ids, -1), rtol=EPS[dtype] * 4, atol=1e-9)
    np.testing.assert_array_equal(ridx, np.arange(k)[None, :] * rows + np.arange(rows)[:, None])
    assert y.dtype == dtype and idx.dtype == np.int32


def test_gating_top_k_softmax_3d_and_ties():
    x = np.zeros((2, 3, 16), np.float32)  # all tied: experts 0..k-1 in order
    y, idx, ridx = qmoe.npu_moe_gating_top_k_softmax(x, k=5)
    np.testing.assert_array_equal(idx, np.broadcast_to(np.arange(5), (2, 3, 5)))
    np.testing.assert_allclose(y, 1 / 16, rtol=1e-6)
    assert ridx.shape == (2, 3, 5) and ridx[1, 2, 4] == 4 * 6 + 5


def gating_ref(x, bias, k, k_group, group_count, mode, norm_type, factor, eps):
    xv = f64(x)
    if norm_type == 0:
        e = np.exp(xv - xv.max(axis=-1, keepdims=True))
        norm = e / e.sum(axis=-1, keepdims=True)
    else:
        norm = 1 / (1 + np.exp(-xv))
    val = norm + (f64(bias) if bias is not None else 0)
    R, E = x.shape
    allowed = np.ones((R, E), bool)
    if group_count > 1:
        g = val.reshape(R, group_count, -1)
        top = -np.sort(-g, axis=-1)
        score = top[..., 0] + (top[..., 1] if mode == 1 else 0)
        keep = topk_ref(score, k_group)
        allowed = np.zeros((R, group_count), bool)
        np.put_along_axis(allowed, keep, True, axis=-1)
        allowed = np.repeat(allowed, E // group_count, axis=-1)
    ids = topk_ref(val, k, allowed)
    y = np.take_along_axis(norm, ids, -1)
    return y / (y.sum(axis=-1, keepdims=True) + eps) * factor, ids, norm


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("rows,E,k,kg,G,mode,norm,bias,out_flag", [
    (9, 256, 8, 4, 8, 1, 1, True, False),   # DeepSeek-V3
    (1, 256, 8, 4, 8, 1, 1, True, True),
    (0, 64, 2, 1, 1, 0, 1, False, False),
    (7, 64, 6, 2, 4, 0, 0, False, True),
    (5, 1024, 1, 1, 1, 0, 1, True, True),
    (3, 128, 32, 8, 8, 1, 1, True, False),
])
def test_gating_top_k(dtype, rows, E, k, kg, G, mode, norm, bias, out_flag):
    rng = np.random.default_rng(5)
    x = grid(rng, (rows, E), dtype, 16, 0.25)
    b = grid(rng, (E,), dtype, 4, 0.0625) if bias else None
    y, idx, out = qmoe.npu_moe_gating_top_k(x, k, bias=b, k_group=kg, group_count=G,
                                            group_select_mode=mode, norm_type=norm,
                                            out_flag=out_flag, routed_scaling_factor=2.5, eps=1e-20)
    yref, ids, nref = gating_ref(x, b, k, kg, G, mode, norm, 2.5, 1e-20)
    np.testing.assert_array_equal(idx, ids.astype(np.int32))
    np.testing.assert_allclose(f64(y), yref, rtol=EPS[dtype] * 4, atol=1e-9)
    if out_flag:
        assert out.dtype == np.float32 and out.shape == (rows, E)
        np.testing.assert_allclose(out, nref, rtol=2e-5, atol=1e-9)
    else:
        assert out.size == 0


def test_gating_errors():
    x = np.zeros((2, 64), np.float32)
    for kwargs in [dict(k=33), dict(k=8, group_count=5), dict(k=8, k_group=3, group_count=2),
                   dict(k=4, renorm=1), dict(k=4, norm_type=3), dict(k=4, group_select_mode=2)]:
        with pytest.raises(qmoe.QmoeError) as e:
            qmoe.npu_moe_gating_top_k(x, **kwargs)
        assert e.value.code == qmoe.ERR_PARAM_INVALID
    with pytest.raises(qmoe.QmoeError):
        qmoe.npu_moe_gating_top_k_softmax(x, k=65)


# ------------------------------------------------------------------------------ init routing ---

def routing_ref(x, idx, E, start, end, active, quant, smooth):
    N, K = idx.shape
    flat = idx.reshape(-1).astype(np.int64)
    kept = np.nonzero((flat >= start) & (flat < end))[0]
    order = kept[np.argsort(flat[kept], kind="stable")]
    A = min(N * K, active) if active > 0 else N * K
    rows = order[:A]
    row_idx = np.full(N * K, -1, np.int64)
    row_idx[order] = np.arange(order.size)
    counts = np.bincount(flat[kept] - start, minlength=end - start)
    v = f64(x)[rows // K]
    if quant and smooth is not None:
        srow = flat[rows] - start if smooth.shape[0] > 1 else np.zeros(rows.size, np.int64)
        v = v * smooth[srow].astype(np.float64)
    return rows, row_idx, counts, v, A


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("N,K", [(0, 2), (1, 1), (33, 8), (17, 2)])
@pytest.mark.parametrize("quant,smooth", [(-1, None), (1, None), (1, "expert"), (1, "shared")])
@pytest.mark.parametrize("erange,active", [((), -1), ((2, 5), -1), ((), 5)])
@pytest.mark.parametrize("count", [False, True])
def test_init_routing(dtype, N, K, quant, smooth, erange, active, count):
    rng = np.random.default_rng(6)
    E, H = 8, 24
    x = rand(rng, (N, H), dtype)
    idx = rng.integers(0, E, size=(N, K)).astype(np.int32)
    start, end = erange if erange else (0, E)
    sm = None
    if smooth == "expert":
        sm = rand(rng, (end - start, H), np.float32, 0.5, 2.0)
    elif smooth == "shared":
        sm = rand(rng, (1, H), np.float32, 0.5, 2.0)
    ex, ri, tok, es = qmoe.npu_moe_init_routing_v2(
        x, idx, scale=sm, active_num=active, expert_num=E, expert_tokens_num_type=int(count),
        expert_tokens_num_flag=True, quant_mode=quant, active_expert_range=list(erange))
    rows, row_idx, counts, v, A = routing_ref(x, idx, E, start, end, active, quant == 1, sm)
    np.testing.assert_array_equal(ri, row_idx.astype(np.int32))
    np.testing.assert_array_equal(tok, counts if count else np.cumsum(counts))
    assert ex.shape == (A, H)
    if quant == 1:
        check_quant(ex[:rows.size], es[:rows.size], v)
    else:
        assert ex.dtype == dtype
        np.testing.assert_array_equal(f64(ex[:rows.size]), v)


def test_init_routing_scatter_empty_experts_and_int8_tokens():
    rng = np.random.default_rng(7)
    x = rng.integers(-127, 128, size=(12, 16)).astype(np.int8)
    per_token = rand(rng, (12,), np.float32, 0.01, 0.1)
    idx = np.full((12, 2), 3, np.int32)  # every other expert is empty
    idx[:, 1] = 6
    ex, ri, tok, es = qmoe.npu_moe_init_routing_v2(
        x, idx, scale=per_token, expert_num=8, expert_tokens_num_type=1,
        expert_tokens_num_flag=True, quant_mode=-1, row_idx_type=1)
    order = np.argsort(idx.reshape(-1), kind="stable")
    np.testing.assert_array_equal(ri, order)
    np.testing.assert_array_equal(tok, [0, 0, 0, 12, 0, 0, 12, 0])
    np.testing.assert_array_equal(ex, x[order // 2])
    np.testing.assert_array_equal(es, per_token[order // 2])


def test_init_routing_strided_input():
    rng = np.random.default_rng(8)
    big = rand(rng, (10, 64), BF16)
    x = big[:, 1::2]
    idx = rng.integers(0, 4, size=(10, 3)).astype(np.int32)
    ex, ri, tok, es = qmoe.npu_moe_init_routing_v2(x, idx, expert_num=4, quant_mode=-1)
    rows, row_idx, counts, v, A = routing_ref(x, idx, 4, 0, 4, -1, False, None)
    assert ex.dtype == BF16
    np.testing.assert_array_equal(f64(ex), v)


def test_init_routing_errors():
    x = np.zeros((4, 8), np.float32)
    idx = np.zeros((4, 2), np.int32)
    with pytest.raises(qmoe.QmoeError):  # static quant
        qmoe.npu_moe_init_routing_v2(x, idx, expert_num=4)
    with pytest.raises(qmoe.QmoeError):
        qmoe.npu_moe_init_routing_v2(x, idx, expert_num=4, quant_mode=-1, drop_pad_mode=1)
    bad = idx.copy()
    bad[2, 1] = 4
    with pytest.raises(qmoe.QmoeError) as e:
        qmoe.npu_moe_init_routing_v2(x, bad, expert_num=4, quant_mode=1)
    assert e.value.code == qmoe.ERR_PARAM_INVALID and "expertIdx" in e.value.message


# ------------------------------------------------------------------------------ finalize -------

def finalize_ref(rows, ri, skip1, skip2, bias, scales, eidx, mode, N, K):
    out = np.zeros((N, rows.shape[1]))
    if skip1 is not None:
        out += f64(skip1)
    if skip2 is not None:
        out += f64(skip2)
    for j in range(K):
        f = j * N + np.arange(N) if mode == 0 else np.arange(N) * K + j
        r = ri[f]
        v = f64(rows)[np.maximum(r, 0)]
        if bias is not None:
            v = v + f64(bias)[eidx[:, j]]
        w = f64(scales)[:, j:j + 1] if scales is not None else 1.0
        out += np.where((r >= 0)[:, None], w * v, 0)
    return out


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("N,K", [(0, 2), (1, 1), (29, 8)])
@pytest.mark.parametrize("mode", [0, 2])
@pytest.mark.parametrize("skips", [0, 1, 3])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("dropped", [False, True])
def test_finalize_routing(dtype, N, K, mode, skips, bias, dropped):
    rng = np.random.default_rng(9)
    H, E = 40, 6
    rows = rand(rng, (N * K, H), dtype, -2, 2)
    ri = rng.permutation(N * K).astype(np.int32)
    if dropped:
        ri[::3] = -1
    s1 = rand(rng, (N, H), dtype, -1, 1) if skips & 1 else None
    s2 = rand(rng, (N, H), dtype, -1, 1) if skips & 2 else None
    b = rand(rng, (E, H), dtype, -0.5, 0.5) if bias else None
    sc = rand(rng, (N, K), dtype, 0, 1)
    eidx = rng.integers(0, E, size=(N, K)).astype(np.int32)
    out = qmoe.npu_moe_finalize_routing(rows, s1, s2, b, sc, ri, eidx, drop_pad_mode=mode)
    ref = finalize_ref(rows, ri, s1, s2, b, sc, eidx, mode, N, K)
    assert out.dtype == dtype and out.shape == (N, H)
    mag = np.abs(ref) + 4 * K + 2
    np.testing.assert_array_less(np.abs(f64(out) - ref), 1e-6 * mag + EPS[dtype] * np.abs(ref) + 1e-7)


def test_token_unpermute():
    rng = np.random.default_rng(10)
    N, K, H = 11, 4, 32
    tokens = rand(rng, (N * K, H), BF16)
    sorted_indices = rng.permutation(N * K).astype(np.int64)  # int64 is accepted
    probs = rand(rng, (N, K), np.float32, 0, 1)
    out = qmoe.npu_moe_token_unpermute(tokens, sorted_indices, probs)
    ref = (f64(tokens)[sorted_indices].reshape(N, K, H) * probs[..., None]).sum(axis=1)
    assert out.dtype == BF16
    np.testing.assert_allclose(f64(out), ref, rtol=2 ** -7, atol=1e-5)
    out1 = qmoe.npu_moe_token_unpermute(tokens, sorted_indices)  # K = 1, weight 1
    np.testing.assert_array_equal(f64(out1), f64(tokens)[sorted_indices])
    with pytest.raises(qmoe.QmoeError):
        qmoe.npu_moe_token_unpermute(tokens, sorted_indices, probs, padded_mode=True)


def test_finalize_errors():
    rows = np.zeros((6, 4), np.float32)
    ri = np.arange(6, dtype=np.int32)
    ri[2] = 6  # past the rows
    with pytest.raises(qmoe.QmoeError) as e:
        qmoe.npu_moe_finalize_routing(rows, None, None, None, np.ones((3, 2), np.float32), ri,
                                      None, drop_pad_mode=2)
    assert e.value.code == qmoe.ERR_PARAM_INVALID
    with pytest.raises(qmoe.QmoeError):
        qmoe.npu_moe_finalize_routing(rows, None, None, None, None, np.arange(6, dtype=np.int32),
                                      None, drop_pad_mode=1)


# ------------------------------------------------------------------------------ SwiGLU ---------

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape,dim", [((0, 8), -1), ((1, 4096), -1), ((6, 4, 10), 1),
                                       ((6, 4, 10), 0), ((64,), 0)])
def test_swiglu(dtype, shape, dim):
    rng = np.random.default_rng(11)
    x = rand(rng, shape, dtype, -6, 6)
    out = qmoe.npu_swiglu(x, dim=dim)
    a, b = np.split(f64(x), 2, axis=dim)
    ref = a / (1 + np.exp(-a)) * b
    assert out.dtype == dtype
    np.testing.assert_allclose(f64(out), ref, rtol=max(EPS[dtype], 4e-6), atol=1e-6)


def test_swiglu_strided_and_errors():
    rng = np.random.default_rng(12)
    x = rand(rng, (5, 40), np.float32)[:, ::2]
    a, b = np.split(f64(x), 2, axis=-1)
    np.testing.assert_allclose(qmoe.npu_swiglu(x), a / (1 + np.exp(-a)) * b, rtol=4e-6, atol=1e-6)
    with pytest.raises(qmoe.QmoeError):
        qmoe.npu_swiglu(np.zeros((4, 7), np.float32))
    with pytest.raises(qmoe.QmoeError):
        qmoe.npu_swiglu(np.zeros((4, 8), np.float32), dim=2)


# ------------------------------------------------------------------------------ round trip -----

def test_routing_round_trip():
    """gating -> init routing -> a per-expert float transform -> finalize (mode 2) matches a
    direct float64 MoE of the same routing."""
    rng = np.random.default_rng(13)
    N, H, E, k = 40, 32, 8, 2
    x = rand(rng, (N, H), np.float32)
    logits = rand(rng, (N, E), np.float32)
    w = rand(rng, (E, H, H), np.float32, -0.2, 0.2)
    y, idx, _ = qmoe.npu_moe_gating_top_k_softmax(logits, k=k)
    ex, ri, cum, _ = qmoe.npu_moe_init_routing_v2(x, idx, expert_num=E, expert_tokens_num_flag=True,
                                                  quant_mode=-1)
    expert_out = np.zeros_like(ex)
    start = 0
    for e, end in enumerate(cum):
        expert_out[start:end] = ex[start:end] @ w[e]
        start = end
    out = qmoe.npu_moe_finalize_routing(expert_out, None, None, None, y, ri, idx, drop_pad_mode=2)
    ref = np.zeros((N, H))
    for i in range(N):
        for j in range(k):
            ref[i] += f64(y)[i, j] * (f64(x)[i] @ f64(w)[idx[i, j]])
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------------------ PyTorch --------

def test_torch_tensors_in_and_out():
    torch = need_torch()
    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, 32, generator=g).to(torch.bfloat16)
    y, scale = qmoe.npu_dynamic_quant(x)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.int8 and scale.dtype == torch.float32
    check_quant(y.numpy(), scale.numpy(), x.float().double().numpy())
    logits = torch.randn(6, 16, generator=g)
    w, idx, ridx = qmoe.npu_moe_gating_top_k_softmax(logits, None, k=2)
    assert isinstance(idx, torch.Tensor) and idx.dtype == torch.int32
    ex, ri, tok, es = qmoe.npu_moe_init_routing_v2(x, idx, expert_num=16, quant_mode=1,
                                                   expert_tokens_num_flag=True)
    assert ex.dtype == torch.int8 and tok.dtype == torch.int64
    rows = torch.randn(12, 32, generator=g).to(torch.bfloat16)
    out = qmoe.npu_moe_finalize_routing(rows, None, None, None, w.to(torch.bfloat16), ri, idx,
                                        drop_pad_mode=2)
    assert out.dtype == torch.bfloat16 and tuple(out.shape) == (6, 32)
    s = qmoe.npu_swiglu(x)
    assert s.dtype == torch.bfloat16 and tuple(s.shape) == (6, 16)
    yk, ik, ok = qmoe.npu_moe_gating_top_k(logits.to(torch.float16), 2, k_group=2, group_count=4,
                                           norm_type=1, out_flag=True)
    assert yk.dtype == torch.float16 and ok.dtype == torch.float32
    fin = torch.tensor([False, True, False, False, True, False])
    _, idx2, _ = qmoe.npu_moe_gating_top_k_softmax(logits, fin, k=3)
    assert (idx2[1] == 16).all() and (idx2[0] < 16).all()


def test_quantized_moe_pipeline():
    """gating -> init routing with fused int8 quant -> GroupedMatmulSwigluQuant -> the down
    projection (npu_grouped_matmul, per-token dequant) -> finalize routing, against
    a float64 NumPy MoE with the same quantization (per-token int8 activations, per-channel
    weights)."""
    rng = np.random.default_rng(14)
    N, H, E, k, inter = 48, 64, 8, 2, 32
    x = rand(rng, (N, H), BF16, -1, 1)
    logits = rand(rng, (N, E), np.float32)
    w1 = rng.integers(-127, 128, size=(E, H, 2 * inter)).astype(np.int8)
    w1s = rand(rng, (E, 2 * inter), np.float32, 0.001, 0.01)
    w2 = rng.integers(-127, 128, size=(E, inter, H)).astype(np.int8)
    w2s = rand(rng, (E, H), np.float32, 0.001, 0.01)

    y, ids, _ = qmoe.npu_moe_gating_top_k_softmax(logits, k=k)
    xq, ri, cum, xs = qmoe.npu_moe_init_routing_v2(x, ids, expert_num=E, quant_mode=1,
                                                   expert_tokens_num_flag=True)
    hq, hs, _ = qmoe.npu_grouped_matmul_swiglu_quant(xq, w1, cum, w1s, xs, weight_format="nd")
    down = qmoe.npu_grouped_matmul([hq], [w2], scale=[w2s], per_token_scale=[hs], group_list=cum,
                                   split_item=3, group_type=0, group_list_type=0,
                                   output_dtype=np.float32)[0]
    out = qmoe.npu_moe_finalize_routing(down, None, None, None, y, ri, ids, drop_pad_mode=2)

    ref = np.zeros((N, H))
    for i in range(N):
        q, s = quant_ref(f64(x)[i:i + 1])
        for j in range(k):
            e = ids[i, j]
            c = (q @ w1[e].astype(np.float64)) * s[:, None] * w1s[e]
            act = c[:, :inter] / (1 + np.exp(-c[:, :inter])) * c[:, inter:]
            hq_ref, hs_ref = quant_ref(act)
            d = (hq_ref @ w2[e].astype(np.float64)) * hs_ref[:, None] * w2s[e]
            ref[i] += f64(y)[i, j] * d[0]
    err = np.abs(f64(out) - ref)
    assert err.max() <= 0.03 * np.abs(ref).max(), (err.max(), np.abs(ref).max())
    assert np.median(err) <= 0.005 * np.abs(ref).max()
