"""Fused expert layouts: MoELayer.from_fused (transformers 5's gate_up_proj [E, 2I, H] and
gpt-oss's interleaved [E, H, 2I] with expert biases and the clamped SwiGLU) against from_float
on the split weights (identical bits) and against a float64 gpt-oss block; the same layouts from
safetensors files named as transformers 5.24 writes them (save_original_format=False), refusals
naming what was seen; and, where torch and transformers are installed, transformers' own
GptOssMLP and Qwen3-MoE block."""

import numpy as np
import pytest

import qmoe
from conftest import need_torch
from test_quantize import experts, rel_l2

F32 = np.float32


def gpt_oss_reference(hidden, logits, gu, gub, dn, dnb, k, limit=7.0, alpha=1.702):
    """float64 GptOssExperts: top-k of the logits, softmax over them; gate/up interleaved."""
    x = hidden.astype(np.float64)
    ids = np.argsort(-logits, axis=1, kind="stable")[:, :k]
    top = np.take_along_axis(logits.astype(np.float64), ids, 1)
    w = np.exp(top - top.max(1, keepdims=True))
    w /= w.sum(1, keepdims=True)
    out = np.zeros((x.shape[0], dn.shape[2]))
    for t in range(x.shape[0]):
        for j in range(k):
            e = ids[t, j]
            h = x[t] @ gu[e] + gub[e]
            g, u = np.minimum(h[0::2], limit), np.clip(h[1::2], -limit, limit)
            out[t] += w[t, j] * ((u + 1) * g / (1 + np.exp(-alpha * g)) @ dn[e] + dnb[e])
    return out, ids, w


def gpt_oss_weights(E, I, H, seed):
    rng = np.random.default_rng(seed)
    gu = (rng.standard_normal((E, H, 2 * I)) * H ** -0.5 * 3).astype(F32)
    gub = (rng.standard_normal((E, 2 * I)) * 0.5).astype(F32)
    dn = (rng.standard_normal((E, I, H)) * I ** -0.5).astype(F32)
    dnb = (rng.standard_normal((E, H)) * 0.2).astype(F32)
    return gu, gub, dn, dnb


def test_from_fused_transformers_layout_is_from_float():
    E, I, H, T = 4, 32, 64, 10
    gate, up, down = experts(E, I, H, seed=3)
    rng = np.random.default_rng(4)
    hidden = rng.standard_normal((T, H)).astype(F32)
    logits = rng.standard_normal((T, E)).astype(F32)
    gate_up = np.concatenate([gate, up], axis=1)  # [E, 2I, H], gate rows first
    a = qmoe.MoELayer.from_fused(gate_up, down, top_k=2)(hidden, logits)
    b = qmoe.MoELayer.from_float(gate, up, down, top_k=2)(hidden, logits)
    assert np.array_equal(a, b)
    with pytest.raises(qmoe.QmoeError, match="layout"):
        qmoe.MoELayer.from_fused(gate_up, down, layout="mixtral", top_k=2)
    with pytest.raises(qmoe.QmoeError, match=r"\[E, 2I, H\]"):
        qmoe.MoELayer.from_fused(gate_up[:, :-1], down, top_k=2)


def test_gpt_oss_layer_against_float64():
    E, I, H, T, K = 8, 64, 128, 32, 2
    gu, gub, dn, dnb = gpt_oss_weights(E, I, H, 11)
    rng = np.random.default_rng(12)
    hidden = rng.standard_normal((T, H)).astype(F32)
    logits = rng.standard_normal((T, E)).astype(F32)
    ref, ids, w = gpt_oss_reference(hidden, logits, gu, gub, dn, dnb, K, limit=1.5)
    layer = qmoe.MoELayer.from_fused(gu, dn, layout="gpt_oss", gate_up_bias=gub, down_bias=dnb,
                                     top_k=K, swiglu_limit=1.5, swiglu_alpha=1.702)
    rids, rw = layer.route(logits)
    assert np.array_equal(rids, ids) and np.max(np.abs(rw - w)) < 1e-6
    out = layer(hidden, logits)
    err = rel_l2(out.astype(np.float64), ref)
    assert err < 0.04, err
    # the same experts split by hand, through from_float: the same bits
    gate, up = gu[:, :, 0::2].transpose(0, 2, 1), gu[:, :, 1::2].transpose(0, 2, 1)
    b = np.concatenate([gub[:, 0::2], gub[:, 1::2]], axis=1)
    same = qmoe.MoELayer.from_float(gate, up, dn.transpose(0, 2, 1), top_k=K, gate_up_bias=b,
                                    down_bias=dnb, swiglu_limit=1.5, swiglu_alpha=1.702)
    assert np.array_equal(same(hidden, logits), out)
    # without the variant and biases the block is another function
    plain = qmoe.MoELayer.from_fused(gu, dn, layout="gpt_oss", top_k=K)
    assert rel_l2(plain(hidden, logits).astype(np.float64), ref) > 0.2
    with pytest.raises(qmoe.QmoeError, match="swiglu_alpha"):
        qmoe.MoELayer.from_fused(gu, dn, layout="gpt_oss", top_k=K, swiglu_alpha=-1.0)
    with pytest.raises(qmoe.QmoeError, match="down_bias"):
        qmoe.MoELayer.from_fused(gu, dn, layout="gpt_oss", top_k=K, down_bias=dnb[:, :5])
    with pytest.raises(qmoe.QmoeError, match="gate_up_bias"):
        qmoe.MoELayer.from_fused(gu, dn, layout="gpt_oss", top_k=K, gate_up_bias=gub[:, :5])


def save(st, path, tensors):
    st.save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, str(path))


def test_fused_files(tmp_path):
    st = pytest.importorskip("safetensors.numpy")
    E, I, H, T = 4, 32, 64, 12
    rng = np.random.default_rng(21)
    hidden = rng.standard_normal((T, H)).astype(F32)
    logits = rng.standard_normal((T, E)).astype(F32)
    p = "model.layers.0.mlp"
    # transformers 5 (Qwen3-MoE, save_original_format=False); 2I == H: only the names and down's
    # shape tell the layouts apart
    gate, up, down = experts(E, I, H, seed=22)
    router = rng.standard_normal((E, H)).astype(F32)
    t5 = {f"{p}.experts.gate_up_proj": np.concatenate([gate, up], 1),
          f"{p}.experts.down_proj": down, f"{p}.gate.weight": router}
    save(st, tmp_path / "qwen3.safetensors", t5)
    ck = qmoe.load_experts(str(tmp_path / "qwen3.safetensors"), p)
    assert ck.layout == "transformers" and np.array_equal(ck.gate, gate)
    assert np.array_equal(ck.up, up) and np.array_equal(ck.router, router)
    a = qmoe.MoELayer.from_safetensors(str(tmp_path / "qwen3.safetensors"), p, top_k=2)
    b = qmoe.MoELayer.from_float(gate, up, down, top_k=2)
    assert np.array_equal(a(hidden, logits), b(hidden, logits))
    # gpt-oss
    gu, gub, dn, dnb = gpt_oss_weights(E, I, H, 23)
    rb = rng.standard_normal(E).astype(F32)
    go = {f"{p}.experts.gate_up_proj": gu, f"{p}.experts.gate_up_proj_bias": gub,
          f"{p}.experts.down_proj": dn, f"{p}.experts.down_proj_bias": dnb,
          f"{p}.router.weight": router, f"{p}.router.bias": rb}
    save(st, tmp_path / "gptoss.safetensors", go)
    ck = qmoe.load_experts(str(tmp_path / "gptoss.safetensors"), p)
    assert ck.layout == "gpt_oss" and np.array_equal(ck.router_logit_bias, rb)
    assert ck.router_bias is None and np.array_equal(ck.down, dn.transpose(0, 2, 1))
    a = qmoe.MoELayer.from_safetensors(str(tmp_path / "gptoss.safetensors"), p, top_k=2)
    b = qmoe.MoELayer.from_fused(gu, dn, layout="gpt_oss", gate_up_bias=gub, down_bias=dnb,
                                 top_k=2, swiglu_limit=7.0, swiglu_alpha=1.702)
    assert np.array_equal(a(hidden, logits), b(hidden, logits))
    # refusals name what they saw
    bad = dict(t5)
    del bad[f"{p}.experts.down_proj"]
    save(st, tmp_path / "bad.safetensors", bad)
    with pytest.raises(qmoe.QmoeError, match=r"experts\.down_proj is missing.*saw .*gate_up_proj"):
        qmoe.load_experts(str(tmp_path / "bad.safetensors"), p)
    bad = dict(t5)
    bad[f"{p}.experts.0.gate_proj.weight"] = gate[0]
    save(st, tmp_path / "bad.safetensors", bad)
    with pytest.raises(qmoe.QmoeError, match=r"experts\.0\.gate_proj\.weight.*fused"):
        qmoe.load_experts(str(tmp_path / "bad.safetensors"), p)
    bad = dict(t5)
    bad[f"{p}.experts.down_proj"] = down.transpose(0, 2, 1).copy()
    save(st, tmp_path / "bad.safetensors", bad)
    with pytest.raises(qmoe.QmoeError, match=r"experts\.down_proj: shape \[4, 32, 64\], expected "
                                             r"\[4, 64, 32\]"):
        qmoe.load_experts(str(tmp_path / "bad.safetensors"), p)


def test_against_transformers_gpt_oss_and_qwen3():
    torch = need_torch()
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    T = 16
    hidden = torch.randn(T, 64)
    try:
        from transformers import GptOssConfig
        from transformers.models.gpt_oss.modeling_gpt_oss import GptOssMLP
    except ImportError:
        pytest.skip(f"transformers {transformers.__version__} has no gpt-oss")
    cfg = GptOssConfig(hidden_size=64, intermediate_size=32, num_local_experts=4,
                       num_experts_per_tok=2)
    block = GptOssMLP(cfg).eval()
    with torch.no_grad():
        for prm in block.parameters():
            prm.normal_(0, 0.3)
        want = block(hidden[None])[0][0].double().numpy()
        logits = torch.nn.functional.linear(hidden, block.router.weight, block.router.bias)
    ex = block.experts
    layer = qmoe.MoELayer.from_fused(ex.gate_up_proj.detach(), ex.down_proj.detach(),
                                     layout="gpt_oss", gate_up_bias=ex.gate_up_proj_bias.detach(),
                                     down_bias=ex.down_proj_bias.detach(), top_k=2,
                                     swiglu_limit=ex.limit, swiglu_alpha=ex.alpha)
    got = layer(hidden, logits).double().numpy()
    assert rel_l2(got, want) < 0.04
