"""qmoe.MoELayer against a float64 NumPy MoE with the same float weights: quantization must be the
only source of error (relative L2 at most 1.05x that of the float64 simulation of the scheme in
test_quantize.py: quantized weights, per-token int8 activations and intermediate, exact integer
products); routing variants, safetensors, torch, errors."""

import threading

import numpy as np
import pytest

import qmoe
from conftest import need_torch
from test_quantize import experts, float_moe, quant_moe, rel_l2, sim_experts

F32 = np.float32


def silu(a):
    return a / (1.0 + np.exp(-a))


def moe_with(hidden, ids, wts, gate, up, down):
    out = np.zeros((hidden.shape[0], down.shape[1]))
    for t in range(hidden.shape[0]):
        x = hidden[t].astype(np.float64)
        for j in range(ids.shape[1]):
            e = ids[t, j]
            h = silu(gate[e].astype(np.float64) @ x) * (up[e].astype(np.float64) @ x)
            out[t] += wts[t, j] * (down[e].astype(np.float64) @ h)
    return out


@pytest.mark.parametrize("label,mode,group,clip", [
    ("a8w8 per-channel", "a8w8", None, False),
    ("a8w4 group-128", "a8w4", 128, False),
    ("a8w4 group-128 clip search", "a8w4", 128, True),
])
def test_error_is_the_quantization_error(label, mode, group, clip, capsys):
    T, H, I, E, K = 64, 512, 256, 8, 2
    rng = np.random.default_rng(13)
    gate, up, down = experts(E, I, H, seed=14)
    hidden = rng.standard_normal((T, H))
    logits = rng.standard_normal((T, E))
    ref, ids, wts = float_moe(hidden, logits, gate, up, down, K)
    sim = quant_moe(hidden.astype(F32).astype(np.float64), ids, wts,
                    sim_experts(gate, up, down, mode, group, clip), I)
    layer = qmoe.MoELayer.from_float(gate, up, down, top_k=K, mode=mode, group_size=group,
                                     clip_search=clip)
    out = layer(hidden.astype(F32), logits.astype(F32))
    assert out.dtype == F32 and out.shape == (T, H)
    e_layer, e_sim = rel_l2(out.astype(np.float64), ref), rel_l2(sim, ref)
    with capsys.disabled():
        print(f"\nMoELayer {label}: relative L2 vs float64 {100 * e_layer:.3f}% "
              f"(simulation {100 * e_sim:.3f}%, ratio {e_layer / e_sim:.4f})")
    assert e_layer <= 1.05 * e_sim


def test_sigmoid_group_gating_and_no_renorm():
    T, H, I, E, K = 24, 128, 64, 16, 4
    rng = np.random.default_rng(3)
    gate, up, down = experts(E, I, H, seed=4)
    hidden = rng.standard_normal((T, H)).astype(F32)
    logits = rng.standard_normal((T, E)).astype(F32)
    bias = (rng.standard_normal(E) * 0.3).astype(F32)
    # float64 DeepSeek-style routing: sigmoid, + bias for choice, best 2 of 4 groups (sum of top 2)
    sig = 1 / (1 + np.exp(-logits.astype(np.float64)))
    choice = sig + bias
    grp = np.sort(choice.reshape(T, 4, 4), axis=2)[:, :, -2:].sum(2)
    keep = np.argsort(-grp, axis=1, kind="stable")[:, :2]
    masked = np.full_like(choice, -np.inf)
    for t in range(T):
        for g in keep[t]:
            masked[t, 4 * g:4 * g + 4] = choice[t, 4 * g:4 * g + 4]
    ids = np.argsort(-masked, axis=1, kind="stable")[:, :K]
    w = np.take_along_axis(sig, ids, 1)
    wts = w / w.sum(1, keepdims=True) * 2.5
    ref = moe_with(hidden, ids, wts, gate, up, down)
    layer = qmoe.MoELayer.from_float(gate, up, down, top_k=K, gating="sigmoid", group_count=4,
                                     k_group=2, routed_scaling_factor=2.5, correction_bias=bias)
    assert rel_l2(layer(hidden, logits).astype(np.float64), ref) < 0.04
    # softmax without renormalisation: the top-k softmax probabilities as weights
    p = np.exp(logits - logits.max(1, keepdims=True)).astype(np.float64)
    p /= p.sum(1, keepdims=True)
    ids = np.argsort(-p, axis=1, kind="stable")[:, :K]
    ref = moe_with(hidden, ids, np.take_along_axis(p, ids, 1), gate, up, down)
    layer = qmoe.MoELayer.from_float(gate, up, down, top_k=K, renormalize=False)
    assert rel_l2(layer(hidden, logits).astype(np.float64), ref) < 0.04


def test_routed_forward_and_threads():
    T, H, I, E, K = 40, 128, 64, 8, 2
    rng = np.random.default_rng(5)
    gate, up, down = experts(E, I, H, seed=6)
    hidden = rng.standard_normal((T, H)).astype(np.float16)
    logits = rng.standard_normal((T, E)).astype(F32)
    layer = qmoe.MoELayer.from_float(gate, up, down, top_k=K)
    out = layer(hidden, logits)
    assert out.dtype == np.float16
    y, idx, _ = qmoe.npu_moe_gating_top_k(logits, K, norm_type=0)
    assert np.array_equal(layer.forward_routed(hidden, idx, y), out)
    one = qmoe.MoELayer.from_float(gate, up, down, top_k=K, threads=1)
    assert np.array_equal(one(hidden, logits), out)
    # several Python threads at once (the GIL is released inside): the same bits
    results = [None] * 4

    def work(i):
        results[i] = layer(hidden, logits)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(np.array_equal(r, out) for r in results)
    empty = layer(np.zeros((0, H), F32), np.zeros((0, E), F32))
    assert empty.shape == (0, H)


def test_from_safetensors(tmp_path):
    st = pytest.importorskip("safetensors.numpy")
    E, I, H = 4, 64, 128
    gate, up, down = experts(E, I, H, seed=21)
    t = {}
    for e in range(E):
        t[f"model.layers.0.mlp.experts.{e}.gate_proj.weight"] = gate[e]
        t[f"model.layers.0.mlp.experts.{e}.up_proj.weight"] = up[e]
        t[f"model.layers.0.mlp.experts.{e}.down_proj.weight"] = down[e]
    path = tmp_path / "layer.safetensors"
    st.save_file(t, str(path))
    rng = np.random.default_rng(1)
    hidden = rng.standard_normal((9, H)).astype(F32)
    logits = rng.standard_normal((9, E)).astype(F32)
    a = qmoe.MoELayer.from_safetensors(str(path), "model.layers.0.mlp", top_k=2, mode="a8w4",
                                       group_size=64)(hidden, logits)
    b = qmoe.MoELayer.from_float(gate, up, down, top_k=2, mode="a8w4", group_size=64)(hidden, logits)
    assert np.array_equal(a, b)
    del t["model.layers.0.mlp.experts.2.up_proj.weight"]
    st.save_file(t, str(path))
    with pytest.raises(qmoe.QmoeError, match=r"experts\.2\.up_proj\.weight is missing"):
        qmoe.MoELayer.from_safetensors(str(path), "model.layers.0.mlp", top_k=2)


def test_torch_in_torch_out():
    torch = need_torch()
    E, I, H = 4, 64, 128
    gate, up, down = experts(E, I, H, seed=2)
    layer = qmoe.MoELayer.from_float(torch.from_numpy(gate), torch.from_numpy(up),
                                     torch.from_numpy(down), top_k=2)
    hidden = torch.randn(5, H, dtype=torch.bfloat16)
    logits = torch.randn(5, E)
    out = layer(hidden, logits)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16 and out.shape == (5, H)
    want = layer(hidden.float().numpy(), logits.numpy())  # bf16 values are exact in float32
    assert np.abs(out.float().numpy() - want).max() <= np.abs(want).max() * 2 ** -7


def test_errors():
    E, I, H = 4, 64, 128
    gate, up, down = experts(E, I, H, seed=2)
    with pytest.raises(qmoe.QmoeError, match="top_k"):
        qmoe.MoELayer.from_float(gate, up, down, top_k=5)
    with pytest.raises(qmoe.QmoeError, match="down"):
        qmoe.MoELayer.from_float(gate, up, down[:, :-1], top_k=2)
    with pytest.raises(qmoe.QmoeError, match="group_size"):
        qmoe.MoELayer.from_float(gate, up, down, top_k=2, group_size=48)
    with pytest.raises(qmoe.QmoeError, match="mode"):
        qmoe.MoELayer.from_float(gate, up, down, top_k=2, mode="a4w4")
    layer = qmoe.MoELayer.from_float(gate, up, down, top_k=2)
    with pytest.raises(qmoe.QmoeError, match="hidden"):
        layer(np.zeros((3, H + 1), F32), np.zeros((3, E), F32))
    with pytest.raises(qmoe.QmoeError, match="router_logits"):
        layer(np.zeros((3, H), F32), np.zeros((2, E), F32))
    with pytest.raises(qmoe.QmoeError):
        layer.forward_routed(np.zeros((3, H), F32), np.full((3, 2), E), np.ones((3, 2), F32))
    layer.close()
    with pytest.raises(qmoe.QmoeError, match="closed"):
        layer(np.zeros((3, H), F32), np.zeros((3, E), F32))


def test_shared_expert():
    """DeepSeek-style layer with a shared expert (Is = 2I): float64 reference adds the shared
    SwiGLU MLP with weight 1 to the routed experts' sum."""
    T, H, I, E, K = 16, 128, 64, 8, 2
    rng = np.random.default_rng(11)
    gate, up, down = experts(E, I, H, seed=12)
    sg = (rng.standard_normal((2 * I, H)) * H ** -0.5).astype(F32)
    su = (rng.standard_normal((2 * I, H)) * H ** -0.5).astype(F32)
    sd = (rng.standard_normal((H, 2 * I)) * (2 * I) ** -0.5).astype(F32)
    hidden = rng.standard_normal((T, H)).astype(F32)
    logits = rng.standard_normal((T, E)).astype(F32)
    ref, _, _ = float_moe(hidden.astype(np.float64), logits.astype(np.float64), gate, up, down, K)
    for t in range(T):
        x = hidden[t].astype(np.float64)
        ref[t] += sd.astype(np.float64) @ (silu(sg.astype(np.float64) @ x) * (su.astype(np.float64) @ x))
    layer = qmoe.MoELayer.from_float(gate, up, down, top_k=K, shared_gate=sg, shared_up=su,
                                     shared_down=sd)
    assert rel_l2(layer(hidden, logits).astype(np.float64), ref) < 0.04
    with pytest.raises(qmoe.QmoeError, match="shared"):
        qmoe.MoELayer.from_float(gate, up, down, top_k=K, shared_gate=sg, shared_up=su)
    with pytest.raises(qmoe.QmoeError, match="shared_intermediate_size"):
        qmoe.MoELayer.from_float(gate, up, down, top_k=K, shared_gate=sg[:40], shared_up=su[:40],
                                 shared_down=sd[:, :40])


def test_ctypes_config_matches_the_header():
    """qmoe/_moe_layer.py's struct agrees with include/qmoe/moe_layer.h, field by field."""
    import re
    from pathlib import Path
    from qmoe import _moe_layer

    text = (Path(__file__).resolve().parents[2] / "include" / "qmoe" / "moe_layer.h").read_text()
    body = re.search(r"typedef struct qmoe_moe_layer_config \{(.*?)\} qmoe_moe_layer_config;", text,
                     re.S).group(1)
    body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
    fields = []
    for decl in body.split(";"):
        decl = decl.strip()
        if decl:
            fields += [re.findall(r"\w+", part)[-1] for part in decl.split(",")]
    assert fields == [f[0] for f in _moe_layer._LayerConfig._fields_]
    gatings = dict(re.findall(r"QMOE_MOE_GATING_(\w+) = (\d+)", text))
    assert {k.lower(): int(v) for k, v in gatings.items()} == _moe_layer._GATINGS


def test_repeated_calls_reuse_the_workspace():
    """A second forward of the same shape on the same thread allocates no new workspace (a fresh
    one per call faults its pages in at every forward), gives the same bits, and another thread
    gets a workspace of its own."""
    import tracemalloc

    T, H, I, E, K = 256, 512, 256, 8, 2
    rng = np.random.default_rng(21)
    gate, up, down = experts(E, I, H, seed=22)
    layer = qmoe.MoELayer.from_float(gate, up, down, top_k=K)
    hidden = rng.standard_normal((T, H)).astype(F32)
    logits = rng.standard_normal((T, E)).astype(F32)
    first = layer(hidden, logits)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        again = layer(hidden, logits)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    np.testing.assert_array_equal(first, again)
    # the output (T x H float32) and small objects only: well under the workspace
    assert peak < 2 * hidden.nbytes, f"a repeated forward allocated {peak} bytes"
    other = {}
    th = threading.Thread(target=lambda: other.setdefault("out", layer(hidden, logits)))
    th.start()
    th.join()
    np.testing.assert_array_equal(first, other["out"])
    layer.close()
