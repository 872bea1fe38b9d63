"""qmoe.transformers.patch against transformers itself: for each MoE architecture, a tiny random
model built from its config (no downloads). The patched block routes as transformers does (same
experts, weights within 1e-6, every token); its output equals a float64 statement of the
quantized computation (the block's weights quantized by qmoe.quantize_experts, per-token int8
activations and intermediate, exact integer products) within 1e-3 relative L2; it differs from
the unpatched block by the documented band of its mode; the patched model's generate() runs.

Skipped without torch or transformers (failures under QMOE_REQUIRE_TORCH=1, as `make test-torch`
sets); an architecture the installed transformers lacks skips its case by name."""

import copy
import os

import numpy as np
import pytest

import qmoe
from conftest import need_torch

torch = need_torch()


def _need_transformers():
    if os.environ.get("QMOE_REQUIRE_TORCH") == "1":
        import transformers
        return transformers
    return pytest.importorskip("transformers", reason="transformers is not installed in this "
                               "virtual environment; `make test-torch` installs it")


transformers = _need_transformers()
import qmoe.transformers as qt  # noqa: E402  (needs torch, imported above)

H, I, E, K = 128, 128, 8, 2
COMMON = dict(hidden_size=H, num_hidden_layers=2, num_attention_heads=4, vocab_size=128,
              max_position_embeddings=256, tie_word_embeddings=False)
ARCHS = {
    "qwen3_moe": ("Qwen3MoeConfig", dict(moe_intermediate_size=I, intermediate_size=2 * I,
                                         num_experts=E, num_experts_per_tok=K,
                                         norm_topk_prob=True, head_dim=32)),
    "qwen3_moe_no_renorm": ("Qwen3MoeConfig", dict(moe_intermediate_size=I,
                                                   intermediate_size=2 * I, num_experts=E,
                                                   num_experts_per_tok=K, norm_topk_prob=False,
                                                   head_dim=32)),
    "deepseek_v3_no_renorm": ("DeepseekV3Config", dict(
        moe_intermediate_size=I, intermediate_size=2 * I, num_key_value_heads=4,
        n_routed_experts=E, num_experts_per_tok=K, n_group=4, topk_group=2, n_shared_experts=2,
        norm_topk_prob=False, routed_scaling_factor=2.5, first_k_dense_replace=0,
        kv_lora_rank=16, q_lora_rank=32, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=32)),
    "gpt_oss": ("GptOssConfig", dict(intermediate_size=I, num_local_experts=E,
                                     num_experts_per_tok=K, head_dim=32)),
    "mixtral": ("MixtralConfig", dict(intermediate_size=I, num_local_experts=E,
                                      num_experts_per_tok=K)),
    "olmoe": ("OlmoeConfig", dict(intermediate_size=I, num_experts=E, num_experts_per_tok=K)),
    "qwen2_moe": ("Qwen2MoeConfig", dict(moe_intermediate_size=I, intermediate_size=2 * I,
                                         shared_expert_intermediate_size=2 * I, num_experts=E,
                                         num_experts_per_tok=K, norm_topk_prob=True)),
    "deepseek_v3": ("DeepseekV3Config", dict(moe_intermediate_size=I, intermediate_size=2 * I,
                                             num_key_value_heads=4, n_routed_experts=E,
                                             num_experts_per_tok=K,
                                             n_group=4, topk_group=2, n_shared_experts=1,
                                             routed_scaling_factor=2.5, first_k_dense_replace=0,
                                             kv_lora_rank=16, q_lora_rank=32,
                                             qk_rope_head_dim=8, qk_nope_head_dim=8,
                                             v_head_dim=32)),
}
# (mode, group_size, clip_search) and the documented band of the relative L2 difference from
# the unpatched block (docs/transformers.md).
MODES = {"a8w8": (("a8w8", None, False), (0.01, 0.03)),
         "a8w4": (("a8w4", 128, True), (0.14, 0.24))}


def _config(arch):
    cls_name, kw = ARCHS[arch]
    cls = getattr(transformers, cls_name, None)
    if cls is None:
        pytest.skip(f"transformers {transformers.__version__} has no {cls_name} ({arch})")
    return cls(**{"num_key_value_heads": 2, **COMMON, **kw})


def _model(arch, seed=0, dtype=torch.float32):
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(_config(arch)).to(dtype).eval()
    with torch.no_grad():  # routers spread like a trained one's, so no top-k ties
        for mod in model.modules():
            bias = getattr(mod, "e_score_correction_bias", None)
            if isinstance(bias, torch.Tensor):
                bias.copy_(torch.randn(bias.shape) * 0.05)
    return model


def _blocks(model):
    return {n: m for n, m in model.named_modules() if hasattr(m, "experts")}


def _rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


# --- the float64 statement of the quantized computation (independent of qmoe's kernels) -------

def _silu(a):
    return a / (1.0 + np.exp(-a))


def _int_weights(q_weight, mode):
    """int64 [E, K, N] of quantize_experts' ND weight (A8W4: int32 words of 8 nibbles)."""
    w = qmoe.unpack_int4_int32(q_weight) if mode == "a8w4" else np.asarray(q_weight)
    return np.asarray(w).astype(np.int64)


def _dequant_matmul(xq, w, scale):
    """Exact integer products xq [R, K] @ w [K, N] per group, each group's sum times its
    float32 scale (scale [N] per channel or [G, N] per group), in float64."""
    scale = np.asarray(scale, np.float64)
    if scale.ndim == 1:
        return (xq @ w).astype(np.float64) * scale
    G = scale.shape[0]
    gs = w.shape[0] // G
    out = np.zeros((xq.shape[0], w.shape[1]))
    for g in range(G):
        out += (xq[:, g * gs:(g + 1) * gs] @ w[g * gs:(g + 1) * gs]).astype(np.float64) * scale[g]
    return out


def _quant_rows(a):
    """Per-row symmetric int8: (int64 values, float64 scales), round half to even."""
    s = np.abs(a).max(axis=1) / 127.0
    safe = np.where(s > 0, s, 1.0)
    return np.clip(np.rint(a / safe[:, None]), -127, 127).astype(np.int64), s


class QuantExperts:
    """E SwiGLU experts quantized by qmoe.quantize_experts (ND), run in float64."""

    def __init__(self, gate, up, down, mode, group_size, clip_search, gpt_oss=None):
        q = qmoe.quantize_experts(gate, up, down, mode=mode, group_size=group_size,
                                  clip_search=clip_search, weight_format="nd")
        self.I = gate.shape[1]
        self.w13, self.s13 = _int_weights(q.gate_up_weight, mode), np.asarray(q.gate_up_scale)
        self.w2, self.s2 = _int_weights(q.down_weight, mode), np.asarray(q.down_scale)
        self.gpt_oss = gpt_oss  # (gate bias, up bias [E, I], down bias [E, H], alpha, limit)

    def run(self, e, x):
        """Expert e on rows x [R, H] (float64): [R, H]."""
        xq, xs = _quant_rows(x)
        gu = _dequant_matmul(xq, self.w13[e], self.s13[e]) * xs[:, None]
        a, lin = gu[:, :self.I], gu[:, self.I:]
        if self.gpt_oss is None:
            h = _silu(a) * lin
        else:  # gpt-oss: biases, gate clamped above, up clamped both ways, (up + 1) * glu
            gb, ub, _, alpha, limit = self.gpt_oss
            a = np.minimum(a + gb[e], limit)
            lin = np.clip(lin + ub[e], -limit, limit)
            h = a / (1.0 + np.exp(-alpha * a)) * (lin + 1.0)
        hq, hs = _quant_rows(h)
        y = _dequant_matmul(hq, self.w2[e], self.s2[e]) * hs[:, None]
        return y if self.gpt_oss is None else y + self.gpt_oss[2][e]


def _np(t):
    return t.detach().float().numpy().astype(np.float64)


def _reference(block, x, ids, wts, mode, group_size, clip_search):
    """The patched block's output in float64, from transformers' routing (ids, wts [T, k])."""
    ex = block.experts
    if hasattr(ex, "gate_up_proj_bias"):  # gpt-oss: [E, H, 2I] interleaved, down [E, I, H]
        gu, b = ex.gate_up_proj.detach().float(), _np(ex.gate_up_proj_bias)
        Ii = gu.shape[2] // 2
        experts = QuantExperts(gu[:, :, 0::2].transpose(1, 2).contiguous(),
                               gu[:, :, 1::2].transpose(1, 2).contiguous(),
                               ex.down_proj.detach().float().transpose(1, 2).contiguous(), mode,
                               group_size, clip_search,
                               gpt_oss=(b[:, 0::2], b[:, 1::2], _np(ex.down_proj_bias),
                                        float(ex.alpha), float(ex.limit)))
    else:
        Ii = ex.down_proj.shape[2]
        gu = ex.gate_up_proj.detach().float()
        experts = QuantExperts(gu[:, :Ii], gu[:, Ii:], ex.down_proj.detach().float(), mode,
                               group_size, clip_search)
    out = np.zeros(x.shape)
    for t in range(x.shape[0]):
        for j in range(ids.shape[1]):
            out[t] += wts[t, j] * experts.run(int(ids[t, j]), x[t:t + 1])[0]
    # the shared expert runs in the layer as Is/I more experts of weight 1 (DeepSeek) or of
    # weight sigmoid(x . shared_expert_gate) (Qwen2-MoE)
    sh = getattr(block, "shared_experts", None) or getattr(block, "shared_expert", None)
    if sh is not None:
        m = sh.gate_proj.weight.shape[0] // Ii
        g = _np(sh.gate_proj.weight).reshape(m, Ii, -1)
        u = _np(sh.up_proj.weight).reshape(m, Ii, -1)
        d = _np(sh.down_proj.weight).reshape(-1, m, Ii).transpose(1, 0, 2)
        shared = QuantExperts(g.astype(np.float32), u.astype(np.float32),
                              np.ascontiguousarray(d).astype(np.float32), mode, group_size,
                              clip_search)
        scale = 1.0
        if hasattr(block, "shared_expert_gate"):
            scale = 1.0 / (1.0 + np.exp(-(x @ _np(block.shared_expert_gate.weight).T)))
        for j in range(m):
            out += scale * shared.run(j, x)
    return out


def _router(block):
    return getattr(block, "gate", None) or getattr(block, "router")


def _sorted_routing(ids, wts):
    ids, wts = np.asarray(ids), np.asarray(wts, np.float64)
    order = np.argsort(ids, axis=1, kind="stable")
    return np.take_along_axis(ids, order, 1), np.take_along_axis(wts, order, 1)


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_patched_block_against_transformers(arch, mode, capsys):
    (qmode, group, clip), (lo, hi) = MODES[mode]
    model = _model(arch)
    name, orig = next(iter(_blocks(model).items()))
    report = qt.patch(model, mode=qmode, group_size=group, clip_search=clip)
    assert [r.name for r in report.replaced] == list(_blocks(_model(arch)))
    assert report.skipped == []
    assert all(r.routing == "qmoe" and r.shared in ("qmoe", "none") for r in report.replaced)
    new = model.get_submodule(name)
    assert isinstance(new, qt.QmoeMoEBlock) and new is not orig
    torch.manual_seed(1)
    hidden = torch.randn(2, 16, H)
    x2 = hidden.reshape(-1, H)

    # routing: same experts, weights within 1e-6, every token
    with torch.no_grad():
        t_logits, t_w, t_ids = _router(orig)(x2)
    logits, w, ids = new.route(hidden)
    assert torch.equal(logits, t_logits)
    q_ids, q_w = _sorted_routing(ids, w)
    r_ids, r_w = _sorted_routing(t_ids, t_w.float())
    assert np.array_equal(q_ids, r_ids), f"{arch}: experts differ on " \
        f"{int((q_ids != r_ids).any(1).sum())} of {len(q_ids)} tokens"
    assert np.abs(q_w - r_w).max() <= 1e-6

    # output: the float64 statement of the quantized computation, and the band
    with torch.no_grad():
        out = new(hidden)
        ref_float = orig(hidden)
    if isinstance(ref_float, tuple):  # gpt-oss returns its routing weights too
        (out, scores), (ref_float, t_scores) = out, ref_float
        assert scores.dtype == t_scores.dtype and scores.shape == t_scores.shape
        assert np.abs(_sorted_routing(ids, scores)[1] - r_w).max() <= 1e-6
    assert out.shape == hidden.shape and out.dtype == hidden.dtype
    ref = _reference(orig, x2.numpy().astype(np.float64), r_ids, r_w, qmode, group, clip)
    err_sim = _rel(out.reshape(-1, H).numpy(), ref)
    err_float = _rel(out.numpy(), ref_float.numpy())
    with capsys.disabled():
        print(f"\n{arch} {mode}: vs float64 quantized statement {err_sim:.2e}, vs transformers "
              f"{100 * err_float:.2f}%")
    assert err_sim < 1e-3
    assert lo < err_float < hi


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_patched_model_generates(arch):
    model = _model(arch)
    report = qt.patch(model, mode="a8w8")
    assert report.replaced and not report.skipped
    prompt = torch.randint(0, 128, (1, 6), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        ids = model.generate(prompt, max_new_tokens=32, min_new_tokens=32, do_sample=False)
    assert ids.shape == (1, 6 + 32)
    assert torch.equal(ids[:, :6], prompt)


def test_bf16_model():
    """bf16 hidden states in, bf16 out; the band holds against the unpatched bf16 block."""
    model = _model("qwen3_moe", dtype=torch.bfloat16)
    name, orig = next(iter(_blocks(model).items()))
    qt.patch(model, mode="a8w8")
    hidden = torch.randn(3, 8, H).to(torch.bfloat16)
    with torch.no_grad():
        out, ref = model.get_submodule(name)(hidden), orig(hidden)
    assert out.dtype == torch.bfloat16 and out.shape == hidden.shape
    assert 0.005 < _rel(out.float().numpy(), ref.float().numpy()) < 0.04
    with torch.no_grad():
        ids = model.generate(torch.tensor([[1, 2, 3]]), max_new_tokens=32, min_new_tokens=32,
                             do_sample=False)
    assert ids.shape == (1, 35)


def test_router_logits_are_still_recorded():
    """output_router_logits: the router module is kept, so transformers' hooks still see it."""
    model = _model("qwen3_moe")
    plain = copy.deepcopy(model)
    qt.patch(model)
    prompt = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        got = model(prompt, output_router_logits=True).router_logits
        want = plain(prompt, output_router_logits=True).router_logits
    assert len(got) == len(want) == 2
    assert torch.equal(got[0], want[0])  # the first block's input is the same in both models


def test_report_names_what_it_left():
    """Llama 4's experts (not transformers' standard fused SwiGLU module) are left as they are,
    with the reason, and nothing in the model changes."""
    cfg = getattr(transformers, "Llama4TextConfig", None)
    if cfg is None:
        pytest.skip(f"transformers {transformers.__version__} has no Llama4TextConfig")
    model = transformers.AutoModelForCausalLM.from_config(
        cfg(**COMMON, num_key_value_heads=2, intermediate_size=I, intermediate_size_mlp=I,
            num_local_experts=E, num_experts_per_tok=1, head_dim=32)).eval()
    before = {n: type(m) for n, m in model.named_modules()}
    report = qt.patch(model)
    assert report.replaced == []
    assert [s.name for s in report.skipped] == ["model.layers.0.feed_forward",
                                                "model.layers.1.feed_forward"]
    assert all("Llama4TextExperts is not transformers' standard experts module" in s.reason
               for s in report.skipped)
    assert {n: type(m) for n, m in model.named_modules()} == before
    assert "left model.layers.0.feed_forward (Llama4TextMoe)" in str(report)


def test_refused_shape_is_reported():
    """A group size that does not divide the blocks' H: the layer refuses each block, which
    is reported and left as it is."""
    model = _model("qwen3_moe")
    report = qt.patch(model, mode="a8w4", group_size=96)
    assert report.replaced == [] and len(report.skipped) == 2
    assert all(s.reason.startswith("qmoe refused it:") and "group_size" in s.reason
               for s in report.skipped), report
    assert type(model.model.layers[0].mlp).__name__ == "Qwen3MoeSparseMoeBlock"


@pytest.mark.parametrize("kwargs", [dict(mode="a8w3"), dict(group_size=-1),
                                    dict(threads=1.5), dict(clip_search=True),
                                    dict(mode="a8w4", clip_search=1)])
def test_bad_options_refuse_before_anything_changes(kwargs):
    model = _model("olmoe")
    with pytest.raises(qmoe.QmoeError) as err:
        qt.patch(model, **kwargs)
    assert err.value.code == qmoe.ERR_PARAM_INVALID
    assert all(type(m).__name__ == "OlmoeSparseMoeBlock" for m in _blocks(model).values())


def test_patching_twice_changes_nothing():
    model = _model("mixtral")
    first = qt.patch(model)
    blocks = dict(_blocks(model))
    second = qt.patch(model)
    assert len(first.replaced) == 2 and second.replaced == [] and second.skipped == []
    assert dict(_blocks(model)) == blocks


# Blocks of other classes whose experts are transformers' standard fused SwiGLU module: only the
# experts are replaced, the block's own router and shared expert stay torch.
OTHER = {"minimax": "MiniMaxConfig", "glm4_moe": "Glm4MoeConfig",
         "deepseek_v2": "DeepseekV2Config", "ernie4_5_moe": "Ernie4_5_MoeConfig"}
GENERIC = dict(moe_intermediate_size=I, intermediate_size=I, num_experts=E, num_local_experts=E,
               n_routed_experts=E, num_experts_per_tok=K, first_k_dense_replace=0, n_group=1,
               topk_group=1, n_shared_experts=1, shared_expert_intermediate_size=I,
               kv_lora_rank=16, q_lora_rank=32, qk_rope_head_dim=8, qk_nope_head_dim=8,
               v_head_dim=32, moe_num_experts=E, moe_k=K, head_dim=32, num_key_value_heads=4)


@pytest.mark.parametrize("arch", sorted(OTHER))
def test_other_architectures_experts_only(arch):
    cls = getattr(transformers, OTHER[arch], None)
    if cls is None:
        pytest.skip(f"transformers {transformers.__version__} has no {OTHER[arch]} ({arch})")
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cls(**COMMON, **GENERIC)).eval()
    plain = copy.deepcopy(model)
    report = qt.patch(model, mode="a8w8")
    assert report.replaced and not report.skipped
    assert all(r.kind == "experts" and r.routing == "torch" for r in report.replaced)
    name = report.replaced[0].name
    block, orig = model.get_submodule(name), plain.get_submodule(name)
    assert isinstance(block.experts, qt.QmoeExperts)
    # the experts against the float64 statement, for a routing of our own
    rng = np.random.default_rng(3)
    x = torch.randn(24, H)
    ids = torch.from_numpy(np.stack([rng.choice(E, K, replace=False) for _ in range(24)]))
    wts = torch.rand(24, K)
    with torch.no_grad():
        got = block.experts(x, ids, wts).numpy()
    ex = orig.experts
    gu = ex.gate_up_proj.detach()
    ref_experts = QuantExperts(gu[:, :I], gu[:, I:], ex.down_proj.detach(), "a8w8", None, False)
    xd = x.numpy().astype(np.float64)
    ref = np.stack([sum(float(wts[t, j]) * ref_experts.run(int(ids[t, j]), xd[t:t + 1])[0]
                        for j in range(K)) for t in range(24)])
    assert _rel(got, ref) < 1e-3
    # the whole block against the unpatched one: the A8W8 band
    hidden = torch.randn(2, 12, H)
    with torch.no_grad():
        out, want = block(hidden), orig(hidden)
    if isinstance(out, tuple):
        out, want = out[0], want[0]
    assert 0.003 < _rel(out.numpy(), want.numpy()) < 0.03
    with torch.no_grad():
        gen = model.generate(torch.tensor([[1, 2, 3]]), max_new_tokens=32, min_new_tokens=32,
                             do_sample=False)
    assert gen.shape == (1, 35)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_hidden_states_are_read_in_place(dtype, monkeypatch):
    """A contiguous CPU hidden-state tensor reaches the layer as a view of its own memory."""
    model = _model("qwen3_moe", dtype=dtype)
    qt.patch(model)
    seen = []
    run = qmoe.MoELayer._run

    def spy(self, x, *rest):
        seen.append(x.ctypes.data)
        return run(self, x, *rest)

    monkeypatch.setattr(qmoe.MoELayer, "_run", spy)
    hidden = torch.randn(2, 5, H).to(dtype)
    with torch.no_grad():
        out = model.model.layers[0].mlp(hidden)
    assert seen == [hidden.data_ptr()]
    assert out.dtype == dtype and out.shape == hidden.shape


def test_a_block_given_alone_is_left_with_the_reason():
    model = _model("qwen3_moe")
    block = model.model.layers[0].mlp
    report = qt.patch(block)
    assert report.replaced == [] and len(report.skipped) == 1
    assert report.skipped[0].name == "" and "contains it" in report.skipped[0].reason
    assert model.model.layers[0].mlp is block


@pytest.mark.parametrize("arch", ["qwen3_moe", "gpt_oss", "deepseek_v3"])
def test_openmp_device_bits_equal_own_threads(arch):
    """patch() runs the layers on torch's OpenMP team where it can (torch's PyPI wheel ships
    GNU libgomp); the bits equal the layers on qmoe's own threads, and the report says which."""
    ok, why = qmoe.omp_available()
    if not ok:
        pytest.skip(f"libqmoe_omp is not available: {why}")
    model = _model(arch)
    plain = copy.deepcopy(model)
    on_omp = qt.patch(model, mode="a8w4", group_size=64, threads=2)
    on_own = qt.patch(plain, mode="a8w4", group_size=64, threads=2, omp=False)
    assert on_omp.device.startswith("openmp (2 threads"), on_omp.device
    assert "libgomp" in on_omp.device and on_own.device.startswith("qmoe")
    assert str(on_omp).splitlines()[0].endswith(on_omp.device)
    prompt = torch.randint(0, 128, (2, 9), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        got, want = model(prompt).logits, plain(prompt).logits
    assert torch.equal(got, want)
    layers = [[m.qmoe_layer for m in mod.modules() if isinstance(m, qt.PatchedBlock)]
              for mod in (model, plain)]
    assert layers[0] and all(layer.device is not None for layer in layers[0])
    assert layers[1] and all(layer.device is None for layer in layers[1])


def test_omp_option_checked():
    model = _model("qwen3_moe")
    with pytest.raises(qmoe.QmoeError, match="omp"):
        qt.patch(model, omp="yes")
    assert not any(isinstance(m, qt.PatchedBlock) for m in model.modules())
