"""qmoe.load_experts: a MoE layer's float weights from safetensors files written here with the
`safetensors` package; missing, extra and mis-shaped tensors are refused by name."""

import numpy as np
import pytest

import qmoe

st = pytest.importorskip("safetensors.numpy", reason="safetensors is in tests/python/requirements.txt")

P = "model.layers.1.mlp"
E, I, H = 3, 32, 64


def layer(rng, prefix=P, names=("gate_proj", "up_proj", "down_proj"), shared=True, dtype=np.float32):
    t = {}
    for e in range(E):
        t[f"{prefix}.experts.{e}.{names[0]}.weight"] = rng.standard_normal((I, H)).astype(dtype)
        t[f"{prefix}.experts.{e}.{names[1]}.weight"] = rng.standard_normal((I, H)).astype(dtype)
        t[f"{prefix}.experts.{e}.{names[2]}.weight"] = rng.standard_normal((H, I)).astype(dtype)
    t[f"{prefix}.gate.weight"] = rng.standard_normal((E, H)).astype(np.float32)
    if shared:
        t[f"{prefix}.gate.e_score_correction_bias"] = rng.standard_normal(E).astype(np.float32)
        t[f"{prefix}.shared_experts.gate_proj.weight"] = rng.standard_normal((2 * I, H)).astype(dtype)
        t[f"{prefix}.shared_experts.up_proj.weight"] = rng.standard_normal((2 * I, H)).astype(dtype)
        t[f"{prefix}.shared_experts.down_proj.weight"] = rng.standard_normal((H, 2 * I)).astype(dtype)
    return t


def save(tmp_path, tensors, name="layer.safetensors"):
    path = tmp_path / name
    st.save_file(tensors, str(path))
    return path


def test_loads_experts_router_and_shared(tmp_path):
    t = layer(np.random.default_rng(1))
    t["model.layers.0.self_attn.q_proj.weight"] = np.zeros((4, 4), np.float32)  # other layers: ignored
    ck = qmoe.load_experts(save(tmp_path, t), P + ".")
    for e in range(E):
        assert np.array_equal(ck.gate[e], t[f"{P}.experts.{e}.gate_proj.weight"])
        assert np.array_equal(ck.up[e], t[f"{P}.experts.{e}.up_proj.weight"])
        assert np.array_equal(ck.down[e], t[f"{P}.experts.{e}.down_proj.weight"])
    assert ck.gate.shape == (E, I, H) and ck.down.shape == (E, H, I)
    assert np.array_equal(ck.router, t[f"{P}.gate.weight"])
    assert np.array_equal(ck.router_bias, t[f"{P}.gate.e_score_correction_bias"])
    assert np.array_equal(ck.shared_down, t[f"{P}.shared_experts.down_proj.weight"])
    r = qmoe.quantize_experts(ck.gate, ck.up, ck.down, mode="a8w4")
    assert r.gate_up_weight.shape == (E, 2 * I // 64, H // 16, 16, 8)


def test_mixtral_names(tmp_path):
    t = layer(np.random.default_rng(2), prefix="model.layers.0.block_sparse_moe",
              names=("w1", "w3", "w2"), shared=False)
    ck = qmoe.load_experts(save(tmp_path, t), "model.layers.0.block_sparse_moe")
    assert np.array_equal(ck.up[2], t["model.layers.0.block_sparse_moe.experts.2.w3.weight"])
    assert np.array_equal(ck.down[1], t["model.layers.0.block_sparse_moe.experts.1.w2.weight"])
    assert ck.shared_gate is None and ck.router_bias is None


def test_bfloat16_file(tmp_path):
    ml = pytest.importorskip("ml_dtypes")
    t = layer(np.random.default_rng(3), shared=False, dtype=ml.bfloat16)
    ck = qmoe.load_experts(save(tmp_path, t), P)
    assert ck.gate.dtype == ml.bfloat16
    assert np.array_equal(ck.gate[1].astype(np.float32),
                          t[f"{P}.experts.1.gate_proj.weight"].astype(np.float32))
    a = qmoe.quantize_experts(ck.gate, ck.up, ck.down)
    b = qmoe.quantize_experts(*(x.astype(np.float32) for x in (ck.gate, ck.up, ck.down)))
    assert all(np.array_equal(x, y) for x, y in zip(a, b) if x is not None)


@pytest.mark.parametrize("edit,name,what", [
    (lambda t: t.pop(f"{P}.experts.1.up_proj.weight"), f"{P}.experts.1.up_proj.weight", "missing"),
    (lambda t: t.update({f"{P}.experts.0.bias": np.zeros(3, np.float32)}), f"{P}.experts.0.bias",
     "extra"),
    (lambda t: t.update({f"{P}.experts.3.gate_proj.weight": np.zeros((I, H), np.float32)}),
     f"{P}.experts.3.gate_proj.weight", "beyond E = 3"),
    (lambda t: t.update({f"{P}.experts.2.down_proj.weight": np.zeros((H, I + 1), np.float32)}),
     f"{P}.experts.2.down_proj.weight", "shape"),
    (lambda t: t.update({f"{P}.gate.weight": np.zeros((E, H + 1), np.float32)}),
     f"{P}.gate.weight", "shape"),
    (lambda t: t.pop(f"{P}.shared_experts.down_proj.weight"),
     f"{P}.shared_experts.down_proj.weight", "missing"),
    (lambda t: t.update({f"{P}.shared_experts.up_proj.weight": np.zeros((I, H), np.float32)}),
     f"{P}.shared_experts.up_proj.weight", "shape"),
    (lambda t: t.update({f"{P}.experts.1.gate_proj.weight": np.zeros((I, H), np.float16)}),
     f"{P}.experts.1.gate_proj.weight", "dtype"),
])
def test_refused_by_name(tmp_path, edit, name, what):
    t = layer(np.random.default_rng(4))
    edit(t)
    with pytest.raises(qmoe.QmoeError) as info:
        qmoe.load_experts(save(tmp_path, t), P)
    assert name in str(info.value) and what in str(info.value)
    assert info.value.code == qmoe.ERR_PARAM_INVALID


def test_router_fixes_expert_count(tmp_path):
    """With a router of E rows, an expert missing at the end is named (not silently dropped)."""
    t = layer(np.random.default_rng(5), shared=False)
    for k in ("gate_proj", "up_proj", "down_proj"):
        t.pop(f"{P}.experts.2.{k}.weight")
    with pytest.raises(qmoe.QmoeError, match=rf"{P}\.experts\.2\.gate_proj\.weight is missing"):
        qmoe.load_experts(save(tmp_path, t), P)
    with pytest.raises(qmoe.QmoeError, match=r"experts\.3\.gate_proj\.weight is missing"):
        qmoe.load_experts(save(tmp_path, layer(np.random.default_rng(6), shared=False)), P,
                          num_experts=4)


def test_no_experts_and_unreadable_file(tmp_path):
    t = layer(np.random.default_rng(7))
    with pytest.raises(qmoe.QmoeError, match="no experts"):
        qmoe.load_experts(save(tmp_path, t), "model.layers.9.mlp")
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"not a safetensors file")
    with pytest.raises(qmoe.QmoeError, match="cannot be read as safetensors"):
        qmoe.load_experts(bad, P)
