"""qmoe.quantize_experts against a NumPy simulation of the documented scheme (docs/moe-layer.md).

The simulation is written here from the scheme's words (float32 scale and division, round half to
even, clamping, the clip-search candidates and their float64 squared error summed in index order),
and the layouts from the spec's formulas, so the library's bits are checked independently. The
accuracy test runs a float64 MoE with the quantized weights and reports its error."""

import numpy as np
import pytest

import qmoe
from conftest import need_ml_dtypes, need_torch

F32 = np.float32


# ------------------------------------------------------------------ the scheme, in NumPy


def sim_quantize(w_nk, qmax, group, clip):
    """w [E, N, K] float32 (checkpoint rows = output channels) -> (values [E, K, N] int8,
    scale [E, G, N] float32)."""
    E, N, K = w_nk.shape
    gk = group or K
    wg = w_nk.reshape(E, N, K // gk, gk)
    amax = np.abs(wg).max(axis=-1) if K else np.zeros((E, N, 1), F32)
    with np.errstate(divide="ignore", invalid="ignore"):
        s = (amax / F32(qmax)).astype(F32)
        if clip:
            best_err = np.full(s.shape, np.inf)
            best = s.copy()
            for step in range(51):
                r = F32(100 - step) / F32(100)
                sc = (amax * r) / F32(7)
                q = np.clip(np.rint(wg / sc[..., None]), -7, 7)
                d = wg.astype(np.float64) - q.astype(np.float64) * sc[..., None].astype(np.float64)
                err = np.cumsum(d * d, axis=-1)[..., -1]  # in index order, as documented
                take = (sc > 0) & (s > 0) & (err < best_err)
                best_err = np.where(take, err, best_err)
                best = np.where(take, sc, best)
            s = best
        q = np.where(s[..., None] == 0, 0, np.clip(np.rint(wg / s[..., None]), -qmax, qmax))
    values = q.reshape(E, N, K).astype(np.int8).transpose(0, 2, 1)
    return np.ascontiguousarray(values), np.ascontiguousarray(s.transpose(0, 2, 1))


def sim_assist(values, scale):
    """bias[e, n] = 8 * sum_k W[e,k,n] * scale[e, g(k), n], in float64, rounded to float32."""
    E, K, N = values.shape
    G = scale.shape[1]
    s = np.repeat(scale.astype(np.float64), K // G, axis=1)
    return (8.0 * (values.astype(np.float64) * s).sum(axis=1)).astype(F32)


def nz_int8(values):
    """The spec's FRACTAL_NZ: NZ[e][n1][k1][k0][n0] = W[e][16 k1 + k0][32 n1 + n0]."""
    E, K, N = values.shape
    return values.reshape(E, K // 16, 16, N // 32, 32).transpose(0, 3, 1, 2, 4).copy()


def nz_int4_words(values):
    """int4 NZ [E, N/64, K/16, 16, 64] packed two per byte (low nibble first), as int32 words."""
    E, K, N = values.shape
    nz = values.reshape(E, K // 16, 16, N // 64, 64).transpose(0, 3, 1, 2, 4).reshape(-1)
    nib = (nz & 0xF).astype(np.uint8)
    return (nib[0::2] | (nib[1::2] << 4)).view("<i4").reshape(E, N // 64, K // 16, 16, 8)


def nd_int4_words(values):
    nib = (values.reshape(-1) & 0xF).astype(np.uint8)
    E, K, N = values.shape
    return (nib[0::2] | (nib[1::2] << 4)).view("<i4").reshape(E, K, N // 8)


def sim_experts(gate, up, down, mode, group, clip):
    qmax = 7 if mode == "a8w4" else 127
    v13, s13 = sim_quantize(np.concatenate([gate, up], axis=1).astype(F32), qmax, group, clip)
    v2, s2 = sim_quantize(down.astype(F32), qmax, group, clip)
    return v13, s13, v2, s2


def squeeze(scale, group):
    return scale[:, 0, :] if not group else scale


def experts(E, I, H, seed, std=None):
    rng = np.random.default_rng(seed)
    g = (rng.standard_normal((E, I, H)) * (std or H ** -0.5)).astype(F32)
    u = (rng.standard_normal((E, I, H)) * (std or H ** -0.5)).astype(F32)
    d = (rng.standard_normal((E, H, I)) * (std or I ** -0.5)).astype(F32)
    return g, u, d


# ------------------------------------------------------------------ bits against the simulation

CASES = [("a8w8", None, False), ("a8w8", 64, False), ("a8w4", None, False), ("a8w4", 64, False),
         ("a8w4", 64, True), ("a8w4", None, True)]


@pytest.mark.parametrize("mode,group,clip", CASES)
@pytest.mark.parametrize("fmt", ["nz", "nd"])
def test_bits_match_simulation(mode, group, clip, fmt):
    gate, up, down = experts(3, 64, 128, seed=1)
    gate[1, 5, :] = 0.0          # an all-zero gate channel: scale 0, values 0
    up[2, 7, 3] = 2.8e-45        # a denormal channel: amax / 7 underflows to scale 0
    up[2, 7, :3] = 0.0
    up[2, 7, 4:] = 0.0
    r = qmoe.quantize_experts(gate, up, down, mode=mode, group_size=group, clip_search=clip,
                              weight_format=fmt, threads=3)
    v13, s13, v2, s2 = sim_experts(gate, up, down, mode, group, clip)
    assert np.array_equal(r.gate_up_scale.view(np.uint32), squeeze(s13, group).view(np.uint32))
    assert np.array_equal(r.down_scale.view(np.uint32), squeeze(s2, group).view(np.uint32))
    assert np.all(r.gate_up_scale[1, ..., 5] == 0) and np.all(v13[1, :, 5] == 0)
    assert np.all(r.gate_up_scale[2, ..., 64 + 7] == 0) and np.all(v13[2, :, 64 + 7] == 0)
    if mode == "a8w8":
        want13 = nz_int8(v13) if fmt == "nz" else v13
        want2 = nz_int8(v2) if fmt == "nz" else v2
        assert r.gate_up_bias is None and r.down_bias is None
    else:
        conv = nz_int4_words if fmt == "nz" else nd_int4_words
        want13, want2 = conv(v13), conv(v2)
        assert np.array_equal(r.gate_up_bias, sim_assist(v13, s13))
        assert np.array_equal(r.down_bias, sim_assist(v2, s2))
    assert np.array_equal(r.gate_up_weight, want13)
    assert np.array_equal(r.down_weight, want2)


def test_gate_is_the_first_half():
    """Columns [0, I) of the fused weight come from gate_proj, [I, 2I) from up_proj."""
    gate, up, down = experts(1, 32, 64, seed=2)
    r = qmoe.quantize_experts(gate, up, down, weight_format="nd")
    v, _ = sim_quantize(gate, 127, None, False)
    assert np.array_equal(r.gate_up_weight[:, :, :32], v)
    assert not np.array_equal(r.gate_up_weight[:, :, 32:], v)


def test_half_even_rounding():
    """w / scale exactly at .5 rounds to even: amax 127 gives scale 1, 2.5 -> 2, -3.5 -> -4."""
    gate = np.zeros((1, 32, 16), F32)
    gate[0, 0, :4] = [127.0, 2.5, -3.5, 0.5]
    up = np.zeros_like(gate)
    down = np.zeros((1, 16, 32), F32)
    r = qmoe.quantize_experts(gate, up, down, weight_format="nd")
    assert r.gate_up_scale[0, 0] == 1.0
    assert list(r.gate_up_weight[0, :4, 0]) == [127, 2, -4, 0]
    assert np.all(r.down_scale == 0) and np.all(r.down_weight == 0)


def test_thread_count_does_not_change_bits():
    gate, up, down = experts(4, 128, 256, seed=3)
    runs = [qmoe.quantize_experts(gate, up, down, mode="a8w4", group_size=128, clip_search=True,
                                  threads=t) for t in (1, 2, 7)]
    for r in runs[1:]:
        for a, b in zip(runs[0], r):
            assert np.array_equal(a, b)


def test_half_precision_inputs_are_widened_exactly():
    gate, up, down = experts(2, 32, 64, seed=4)
    h = [a.astype(np.float16) for a in (gate, up, down)]
    r16 = qmoe.quantize_experts(*h, mode="a8w4")
    r32 = qmoe.quantize_experts(*[a.astype(F32) for a in h], mode="a8w4")
    for a, b in zip(r16, r32):
        assert np.array_equal(a, b)
    ml = need_ml_dtypes()
    b = [a.astype(ml.bfloat16) for a in (gate, up, down)]
    rb = qmoe.quantize_experts(*b)
    rf = qmoe.quantize_experts(*[a.astype(F32) for a in b])
    for x, y in zip(rb, rf):
        assert (x is None and y is None) or np.array_equal(x, y)


def test_torch_in_torch_out():
    torch = need_torch()
    gate, up, down = experts(2, 32, 64, seed=5)
    rt = qmoe.quantize_experts(torch.from_numpy(gate).bfloat16(), torch.from_numpy(up).bfloat16(),
                               torch.from_numpy(down).bfloat16(), mode="a8w4")
    assert isinstance(rt.gate_up_weight, torch.Tensor)
    rn = qmoe.quantize_experts(*[torch.from_numpy(a).bfloat16().float().numpy()
                                 for a in (gate, up, down)], mode="a8w4")
    for x, y in zip(rt, rn):
        assert np.array_equal(x.numpy(), y)


# ------------------------------------------------------------------ refusals


@pytest.mark.parametrize("kwargs,words", [
    (dict(mode="a8w16"), "mode"),
    (dict(weight_format="zz"), "weight_format"),
    (dict(mode="a8w8", clip_search=True), "clip_search"),
    (dict(group_size=48), "group_size 48"),
    (dict(group_size=-1), "group_size"),
])
def test_bad_options(kwargs, words):
    gate, up, down = experts(2, 32, 64, seed=6)
    with pytest.raises(qmoe.QmoeError, match=words) as info:
        qmoe.quantize_experts(gate, up, down, **kwargs)
    assert info.value.code == qmoe.ERR_PARAM_INVALID


def test_bad_shapes_and_values():
    gate, up, down = experts(2, 32, 64, seed=7)
    with pytest.raises(qmoe.QmoeError, match="down: shape"):
        qmoe.quantize_experts(gate, up, down[:, :, :16])
    with pytest.raises(qmoe.QmoeError, match="up: shape"):
        qmoe.quantize_experts(gate, up[:1], down)
    with pytest.raises(qmoe.QmoeError, match="N % 64"):   # int4 NZ needs 2I % 64 == 0
        qmoe.quantize_experts(gate[:, :16], up[:, :16], down[:, :, :16], mode="a8w4")
    bad = up.copy()
    bad[1, 3, 9] = np.nan
    with pytest.raises(qmoe.QmoeError, match="up: expert 1, row 3, column 9 is not finite"):
        qmoe.quantize_experts(gate, bad, down)
    with pytest.raises(qmoe.QmoeError, match="dtype int32"):
        qmoe.quantize_experts(gate.astype(np.int32), up, down)


# ------------------------------------------------------------------ accuracy of the layer


def float_moe(hidden, logits, gate, up, down, top_k):
    """float64 MoE: softmax, top-k, renormalised weights, SwiGLU experts."""
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    ids = np.argsort(-p, axis=1, kind="stable")[:, :top_k]
    wts = np.take_along_axis(p, ids, 1)
    wts /= wts.sum(1, keepdims=True)
    out = np.zeros_like(hidden)
    for t in range(hidden.shape[0]):
        for j in range(top_k):
            e = ids[t, j]
            out[t] += wts[t, j] * expert_float(hidden[t], gate[e], up[e], down[e])
    return out, ids, wts


def silu(a):
    return a / (1.0 + np.exp(-a))


def expert_float(x, g, u, d):
    return d.astype(np.float64) @ (silu(g.astype(np.float64) @ x) * (u.astype(np.float64) @ x))


def quant_token(x):
    amax = np.abs(x).max()
    s = amax / 127.0
    return (np.rint(x / s), s) if s > 0 else (np.zeros_like(x), 0.0)


def dequant_matmul(xq, xs, values, scale):
    """Exact integer products per group, dequantized by group scale and token scale."""
    K, N = values.shape
    G = scale.shape[0]
    acc = (xq.reshape(G, K // G, 1) * values.reshape(G, K // G, N).astype(np.float64)).sum(1)
    return (acc * scale.astype(np.float64)).sum(0) * xs


def quant_moe(hidden, ids, wts, r, I):
    """The same MoE with the quantized weights (ND values), int8 activations per token and an
    int8 intermediate per token, exact integer products (float64 simulation)."""
    v13, s13, v2, s2 = r
    out = np.zeros_like(hidden)
    for t in range(hidden.shape[0]):
        xq, xs = quant_token(hidden[t])
        for j in range(ids.shape[1]):
            e = ids[t, j]
            c = dequant_matmul(xq, xs, v13[e], s13[e])
            hq, hs = quant_token(silu(c[:I]) * c[I:])
            out[t] += wts[t, j] * dequant_matmul(hq, hs, v2[e], s2[e])
    return out


def rel_l2(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def test_moe_accuracy(capsys):
    """T=64, H=512, I=256, E=8, top-2, Gaussian inputs: the relative L2 error of the float64 MoE
    run with the library's quantized weights (equal to the simulation's bits, checked here)."""
    T, H, I, E, K = 64, 512, 256, 8, 2
    rng = np.random.default_rng(13)
    gate, up, down = experts(E, I, H, seed=14)
    hidden = rng.standard_normal((T, H))
    logits = rng.standard_normal((T, E))
    ref, ids, wts = float_moe(hidden, logits, gate, up, down, K)
    errors = {}
    for label, mode, group, clip in [("a8w8 per-channel", "a8w8", None, False),
                                     ("a8w4 group-128 amax/7", "a8w4", 128, False),
                                     ("a8w4 group-128 clip search", "a8w4", 128, True)]:
        r = qmoe.quantize_experts(gate, up, down, mode=mode, group_size=group, clip_search=clip,
                                  weight_format="nd")
        sim = sim_experts(gate, up, down, mode, group, clip)
        assert np.array_equal(squeeze(sim[1], group), r.gate_up_scale)
        assert np.array_equal(squeeze(sim[3], group), r.down_scale)
        errors[label] = rel_l2(quant_moe(hidden, ids, wts, sim, I), ref)
    with capsys.disabled():
        print("\nMoE relative L2 error vs float64:",
              ", ".join(f"{k} {100 * v:.2f}%" for k, v in errors.items()))
    assert 0.01 < errors["a8w8 per-channel"] < 0.04
    assert 0.10 < errors["a8w4 group-128 amax/7"] < 0.30
    assert errors["a8w4 group-128 clip search"] < 0.95 * errors["a8w4 group-128 amax/7"]


# ------------------------------------------------------------------ the operator takes them


def test_fused_operator_reads_the_weights():
    """GroupedMatmulSwigluQuant on the quantized NZ weights (A8W4, per group, with the assist
    matrix) gives the float64 SwiGLU of the dequantized weights: gate is the activated half."""
    E, I, H, M = 2, 128, 256, 24
    gate, up, down = experts(E, I, H, seed=8)
    r = qmoe.quantize_experts(gate, up, down, mode="a8w4", group_size=128)
    v13, s13, _, _ = sim_experts(gate, up, down, "a8w4", 128, False)
    rng = np.random.default_rng(9)
    x = rng.integers(-128, 128, (M, H)).astype(np.int8)
    xs = (rng.random(M) * 0.01 + 0.001).astype(F32)
    groups = np.array([10, M])
    out, oscale, _ = qmoe.grouped_matmul_swiglu_quant(x, r.gate_up_weight, groups, r.gate_up_scale,
                                                      xs, bias=r.gate_up_bias)
    for m in range(M):
        e = 0 if m < 10 else 1
        c = dequant_matmul(x[m].astype(np.float64), float(xs[m]), v13[e], s13[e])
        s = silu(c[:I]) * c[I:]
        want_scale = np.abs(s).max() / 127
        assert abs(oscale[m] - want_scale) <= 1e-5 * want_scale
        assert np.abs(out[m].astype(int) - np.rint(s / want_scale)).max() <= 1


def test_ctypes_options_match_the_header():
    """qmoe/_quantize.py's struct and mode numbers agree with include/qmoe/quantize.h."""
    import re
    from pathlib import Path
    from qmoe import _quantize

    text = (Path(__file__).resolve().parents[2] / "include" / "qmoe" / "quantize.h").read_text()
    body = re.search(r"typedef struct qmoe_quant_options \{(.*?)\} qmoe_quant_options;", text, re.S)
    fields = re.findall(r"^\s*[\w ]+?\s(\w+);", body.group(1), re.M)
    assert fields == [f[0] for f in _quantize._QuantOptions._fields_]
    modes = dict(re.findall(r"QMOE_QUANT_(A8W\d) = (\d+)", text))
    assert {k.lower(): int(v) for k, v in modes.items()} == _quantize._MODES
