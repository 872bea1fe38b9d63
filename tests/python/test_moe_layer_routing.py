"""MoELayer.route (the layer's own gating from Python) against a float64 statement of each gating
rule; the gated shared expert (Qwen2-MoE) against a float64 layer; from_safetensors keeping a
correction bias and a shared expert gate instead of dropping or refusing them."""

import numpy as np
import pytest

import qmoe
from conftest import need_torch
from test_quantize import experts, rel_l2

F32 = np.float32


def silu(a):
    return a / (1.0 + np.exp(-a))


def reference_route(logits, k, *, gating="softmax", bias=None, groups=1, k_group=1,
                    renormalize=True, scale=1.0):
    """float64: scores, + bias for choice, group-limited top-k (group score: sum of its best 2),
    weights the scores without the bias, renormalised or not, times the factor."""
    x = logits.astype(np.float64)
    if gating == "sigmoid":
        s = 1 / (1 + np.exp(-x))
    else:
        s = np.exp(x - x.max(1, keepdims=True))
        s /= s.sum(1, keepdims=True)
    choice = s + (0 if bias is None else bias.astype(np.float64))
    T, E = choice.shape
    if groups > 1:
        per = E // groups
        score = np.sort(choice.reshape(T, groups, per), axis=2)[:, :, -2:].sum(2)
        keep = np.argsort(-score, axis=1, kind="stable")[:, :k_group]
        mask = np.zeros((T, groups), bool)
        np.put_along_axis(mask, keep, True, 1)
        choice = np.where(np.repeat(mask, per, 1), choice, -np.inf)
    ids = np.argsort(-choice, axis=1, kind="stable")[:, :k]
    w = np.take_along_axis(s, ids, 1)
    if renormalize:
        w = w / w.sum(1, keepdims=True)
    return ids, w * scale


CASES = [
    ("sigmoid, not renormalised", dict(gating="sigmoid", renormalize=False)),
    ("sigmoid groups + bias, scaled, not renormalised",
     dict(gating="sigmoid", groups=4, k_group=2, renormalize=False, scale=2.5, bias=True)),
    ("sigmoid groups + bias, renormalised",
     dict(gating="sigmoid", groups=4, k_group=2, scale=2.5, bias=True)),
    ("softmax + bias, renormalised", dict(bias=True)),
    ("softmax + bias, not renormalised", dict(bias=True, renormalize=False)),
    ("softmax, not renormalised, scaled", dict(renormalize=False, scale=2.0)),
]


@pytest.mark.parametrize("label,case", CASES)
def test_route_is_the_gating_rule(label, case):
    T, H, I, E, K = 48, 64, 32, 16, 4
    rng = np.random.default_rng(8)
    gate, up, down = experts(E, I, H, seed=9)
    logits = rng.standard_normal((T, E)).astype(F32)
    hidden = rng.standard_normal((T, H)).astype(F32)
    bias = (rng.standard_normal(E) * 0.3).astype(F32) if case.get("bias") else None
    ref_ids, ref_w = reference_route(logits, K, gating=case.get("gating", "softmax"), bias=bias,
                                     groups=case.get("groups", 1), k_group=case.get("k_group", 1),
                                     renormalize=case.get("renormalize", True),
                                     scale=case.get("scale", 1.0))
    layer = qmoe.MoELayer.from_float(gate, up, down, top_k=K, gating=case.get("gating", "softmax"),
                                     group_count=case.get("groups", 1),
                                     k_group=case.get("k_group", 1),
                                     renormalize=case.get("renormalize", True),
                                     routed_scaling_factor=case.get("scale", 1.0),
                                     correction_bias=bias)
    ids, w = layer.route(logits)
    assert ids.dtype == np.int32 and w.dtype == F32 and ids.shape == w.shape == (T, K)
    assert np.array_equal(ids, ref_ids), label
    assert np.max(np.abs(w - ref_w) / np.abs(ref_w)) < 1e-6, label
    # the forward routes by these bits
    assert np.array_equal(layer(hidden, logits), layer.forward_routed(hidden, ids, w))
    # bfloat16-rounded logits as a float16 array: read as float32, as calling the layer does
    ids16, w16 = layer.route(logits.astype(np.float16))
    assert np.array_equal(ids16, layer.route(logits.astype(np.float16).astype(F32))[0])
    assert w16.dtype == F32


def test_route_errors_and_empty():
    gate, up, down = experts(8, 32, 64, seed=2)
    layer = qmoe.MoELayer.from_float(gate, up, down, top_k=2)
    with pytest.raises(qmoe.QmoeError, match="router_logits"):
        layer.route(np.zeros((3, 7), F32))
    with pytest.raises(qmoe.QmoeError, match="rank"):
        layer.route(np.zeros(8, F32))
    ids, w = layer.route(np.zeros((0, 8), F32))
    assert ids.shape == (0, 2) and w.shape == (0, 2)
    layer.close()
    with pytest.raises(qmoe.QmoeError):
        layer.route(np.zeros((1, 8), F32))


def test_route_torch_in_torch_out():
    torch = need_torch()
    gate, up, down = experts(8, 32, 64, seed=3)
    layer = qmoe.MoELayer.from_float(gate, up, down, top_k=2)
    logits = torch.randn(5, 8, dtype=torch.bfloat16)
    ids, w = layer.route(logits)
    assert isinstance(ids, torch.Tensor) and ids.dtype == torch.int32 and w.dtype == torch.float32
    want_ids, want_w = layer.route(logits.float().numpy())
    assert np.array_equal(ids.numpy(), want_ids) and np.array_equal(w.numpy(), want_w)


def gated_reference(hidden, ids, w, gate, up, down, sg, su, sd, g):
    out = np.zeros((hidden.shape[0], down.shape[1]))
    for t in range(hidden.shape[0]):
        x = hidden[t].astype(np.float64)
        for j in range(ids.shape[1]):
            e = ids[t, j]
            out[t] += w[t, j] * (down[e] @ (silu(gate[e] @ x) * (up[e] @ x)))
        sw = 1 / (1 + np.exp(-(x @ g.astype(np.float64).reshape(-1))))
        out[t] += sw * (sd @ (silu(sg @ x) * (su @ x)))
    return out


def shared(H, Is, seed):
    rng = np.random.default_rng(seed)
    sg = (rng.standard_normal((Is, H)) * H ** -0.5).astype(F32)
    su = (rng.standard_normal((Is, H)) * H ** -0.5).astype(F32)
    sd = (rng.standard_normal((H, Is)) * Is ** -0.5).astype(F32)
    g = (rng.standard_normal((1, H)) * H ** -0.5 * 2).astype(F32)
    return sg, su, sd, g


def test_gated_shared_expert():
    T, H, I, E, K = 24, 128, 64, 8, 2
    rng = np.random.default_rng(4)
    gate, up, down = experts(E, I, H, seed=5)
    sg, su, sd, g = shared(H, 2 * I, 6)
    hidden = rng.standard_normal((T, H)).astype(F32)
    logits = rng.standard_normal((T, E)).astype(F32)
    kw = dict(top_k=K, shared_gate=sg, shared_up=su, shared_down=sd)
    layer = qmoe.MoELayer.from_float(gate, up, down, shared_expert_gate=g, **kw)
    flat = qmoe.MoELayer.from_float(gate, up, down, shared_expert_gate=g[0], **kw)
    ungated = qmoe.MoELayer.from_float(gate, up, down, **kw)
    out = layer(hidden, logits)
    assert np.array_equal(out, flat(hidden, logits))
    assert not np.array_equal(out, ungated(hidden, logits))
    ids, w = layer.route(logits)
    ref = gated_reference(hidden, ids, w, gate, up, down, sg, su, sd, g)
    assert rel_l2(out.astype(np.float64), ref) < 0.04
    assert np.array_equal(layer.forward_routed(hidden, ids, w), out)
    with pytest.raises(qmoe.QmoeError, match="shared_expert_gate"):
        qmoe.MoELayer.from_float(gate, up, down, shared_expert_gate=g[:, :64], **kw)
    with pytest.raises(qmoe.QmoeError, match="shared_expert_gate"):
        qmoe.MoELayer.from_float(gate, up, down, top_k=K, shared_expert_gate=g)
    with pytest.raises(qmoe.QmoeError, match="shared_expert_gate"):
        qmoe.MoELayer.from_float(gate, up, down, shared_expert_gate=g.astype(np.float16), **kw)


def test_from_safetensors_keeps_bias_and_shared_gate(tmp_path):
    st = pytest.importorskip("safetensors.numpy")
    T, H, I, E = 16, 128, 64, 8
    gate, up, down = experts(E, I, H, seed=31)
    sg, su, sd, g = shared(H, I, 32)
    rng = np.random.default_rng(33)
    bias = (rng.standard_normal(E) * 0.5).astype(F32)
    p = "model.layers.0.mlp"
    t = {f"{p}.gate.weight": rng.standard_normal((E, H)).astype(F32)}
    for e in range(E):
        t[f"{p}.experts.{e}.gate_proj.weight"] = gate[e]
        t[f"{p}.experts.{e}.up_proj.weight"] = up[e]
        t[f"{p}.experts.{e}.down_proj.weight"] = down[e]
    hidden = rng.standard_normal((T, H)).astype(F32)
    logits = rng.standard_normal((T, E)).astype(F32)
    # Qwen2-MoE: shared_expert.* and shared_expert_gate.weight [1, H]
    q = dict(t)
    q.update({f"{p}.shared_expert.gate_proj.weight": sg, f"{p}.shared_expert.up_proj.weight": su,
              f"{p}.shared_expert.down_proj.weight": sd, f"{p}.shared_expert_gate.weight": g})
    st.save_file(q, str(tmp_path / "qwen2.safetensors"))
    a = qmoe.MoELayer.from_safetensors(str(tmp_path / "qwen2.safetensors"), p, top_k=2)
    b = qmoe.MoELayer.from_float(gate, up, down, top_k=2, shared_gate=sg, shared_up=su,
                                 shared_down=sd, shared_expert_gate=g)
    assert np.array_equal(a(hidden, logits), b(hidden, logits))
    # a correction bias with the default softmax gating: used, not dropped
    d = dict(t)
    d[f"{p}.gate.e_score_correction_bias"] = bias
    st.save_file(d, str(tmp_path / "bias.safetensors"))
    a = qmoe.MoELayer.from_safetensors(str(tmp_path / "bias.safetensors"), p, top_k=2)
    b = qmoe.MoELayer.from_float(gate, up, down, top_k=2, correction_bias=bias)
    plain = qmoe.MoELayer.from_float(gate, up, down, top_k=2)
    assert np.array_equal(a.route(logits)[0], b.route(logits)[0])
    assert not np.array_equal(a.route(logits)[0], plain.route(logits)[0])
    assert np.array_equal(a(hidden, logits), b(hidden, logits))
