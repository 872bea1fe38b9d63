"""`qmoe moe run` as a user meets it: `qmoe moe gen` then `qmoe moe run`, and the output equals
qmoe.MoELayer built from the same safetensors file (same bits: both quantize with the library);
files with missing, extra or mis-shaped tensors are refused by name and write nothing. Run by
ctest (cli_moe_run) with QMOE_CLI set to the program and the in-tree package and library."""
import os
import subprocess

import numpy as np
import pytest

st = pytest.importorskip("safetensors.numpy", reason="in tests/python/requirements.txt")
import qmoe  # noqa: E402

QMOE = os.environ.get("QMOE_CLI", "qmoe")


def cli(*args):
    return subprocess.run([QMOE, "moe", *args], capture_output=True, text=True)


def run(d, out, *extra):
    return cli("run", "--layer", str(d / "layer.safetensors"), "--hidden", str(d / "hidden.npy"),
               "--router-logits", str(d / "router_logits.npy"), "--out", str(out), *extra)


@pytest.mark.parametrize("gen_args,layer_kw", [
    (["--H", "256", "--I", "128", "--E", "8", "--top-k", "2", "--tokens", "24"],
     dict(top_k=2)),
    (["--H", "256", "--I", "128", "--E", "8", "--top-k", "2", "--tokens", "24", "--mode", "a8w4",
      "--group-size", "128"], dict(top_k=2, mode="a8w4", group_size=128)),
    (["--model", "deepseek-v3", "--experts", "16", "--H", "256", "--I", "128", "--tokens", "8"],
     dict(top_k=8, gating="sigmoid", group_count=8, k_group=4, routed_scaling_factor=2.5)),
])
def test_gen_then_run_equals_python(tmp_path, gen_args, layer_kw):
    d = tmp_path / "layer"
    r = cli("gen", "--out", str(d), *gen_args)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "out.npy"
    r = run(d, out)
    assert r.returncode == 0, r.stderr
    got = np.load(out)
    hidden, logits = np.load(d / "hidden.npy"), np.load(d / "router_logits.npy")
    layer = qmoe.MoELayer.from_safetensors(str(d / "layer.safetensors"), "model.layers.0.mlp",
                                           **layer_kw)
    want = layer(hidden, logits)
    assert got.dtype == np.float32 and got.shape == hidden.shape
    assert np.array_equal(got, want)
    assert np.abs(got).max() > 0


def test_bad_files_refused_by_name(tmp_path):
    d = tmp_path / "layer"
    assert cli("gen", "--out", str(d), "--H", "128", "--I", "64", "--E", "4", "--top-k", "2",
               "--tokens", "4").returncode == 0
    from safetensors import safe_open
    with safe_open(str(d / "layer.safetensors"), framework="numpy") as f:
        tensors, meta = {k: f.get_tensor(k) for k in f.keys()}, f.metadata()
    p = "model.layers.0.mlp."
    cases = {
        "missing": (lambda t: t.pop(p + "experts.1.up_proj.weight"),
                    "experts.1.up_proj.weight is missing"),
        "extra": (lambda t: t.__setitem__(p + "experts.0.bogus", np.zeros(2, np.float32)),
                  "experts.0.bogus: not a MoE layer tensor"),
        "shape": (lambda t: t.__setitem__(p + "experts.2.down_proj.weight",
                                          np.zeros((128, 32), np.float32)),
                  "experts.2.down_proj.weight: shape mismatch"),
    }
    for label, (edit, words) in cases.items():
        t = dict(tensors)
        edit(t)
        st.save_file(t, str(d / "layer.safetensors"), metadata=meta)
        out = tmp_path / f"{label}.npy"
        r = run(d, out)
        assert r.returncode == 1 and words in r.stderr, (label, r.stderr)
        assert not out.exists()
    (d / "layer.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{\"a\":1} ")
    r = run(d, tmp_path / "x.npy")
    assert r.returncode == 1 and "layer.safetensors" in r.stderr


def test_bench_moe_prints_one_line_per_token_count():
    """The benchmark runs and reports what it measured (speed itself is not asserted)."""
    import json
    r = subprocess.run([QMOE, "bench", "moe", "--model", "qwen3-30b-a3b", "--experts", "8",
                        "--tokens", "1,5", "--seconds", "0.01", "--dram-mb", "16"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    assert [x["tokens"] for x in lines] == [1, 5]
    for x in lines:
        assert x["E"] == 8 and x["H"] == 2048 and x["I"] == 768 and x["top_k"] == 8
        assert x["seconds"] > 0 and x["dram_gb_per_s"] > 0 and x["active_experts"] == 8
    r = subprocess.run([QMOE, "bench", "moe", "--model", "mixtral-8x7b", "--experts", "1"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "top-2" in r.stderr


def model_file(path, layers, block="mlp", names=("gate_proj", "up_proj", "down_proj"), E=4, H=64,
               I=32, seed=0):
    """A checkpoint as a model's own tools write it (the safetensors package, no qmoe metadata):
    the layers' experts and router under model.layers.{l}.{block}, beside tensors of the rest of
    the model; its hidden states and router logits."""
    rng = np.random.default_rng(seed)
    t = {"model.embed_tokens.weight": rng.standard_normal((16, H)).astype(np.float32)}
    for l in layers:
        p = f"model.layers.{l}."
        t[p + "self_attn.q_proj.weight"] = rng.standard_normal((H, H)).astype(np.float32)
        t[p + "input_layernorm.weight"] = np.ones(H, np.float32)
        for e in range(E):
            for n, shape in zip(names, [(I, H), (I, H), (H, I)]):
                t[f"{p}{block}.experts.{e}.{n}.weight"] = (
                    rng.standard_normal(shape) / np.sqrt(shape[1])).astype(np.float32)
        t[f"{p}{block}.gate.weight"] = rng.standard_normal((E, H)).astype(np.float32)
    st.save_file(t, str(path / "model.safetensors"))
    np.save(path / "hidden.npy", rng.standard_normal((10, H)).astype(np.float32))
    np.save(path / "router_logits.npy", rng.standard_normal((10, E)).astype(np.float32))


def run_model(d, out, *extra):
    return cli("run", "--layer", str(d / "model.safetensors"), "--hidden", str(d / "hidden.npy"),
               "--router-logits", str(d / "router_logits.npy"), "--out", str(out), "--top-k", "2",
               *extra)


def python_layer(d, prefix):
    layer = qmoe.MoELayer.from_safetensors(str(d / "model.safetensors"), prefix, top_k=2)
    return layer(np.load(d / "hidden.npy"), np.load(d / "router_logits.npy"))


@pytest.mark.parametrize("block,names", [
    ("mlp", ("gate_proj", "up_proj", "down_proj")),  # Qwen3-MoE, DeepSeek
    ("block_sparse_moe", ("w1", "w3", "w2")),         # Mixtral
])
def test_prefix_inferred_from_a_model_file(tmp_path, block, names):
    # no qmoe.prefix: the prefix is the one P of the P.experts.0.* tensors
    model_file(tmp_path, [0], block, names)
    out = tmp_path / "out.npy"
    r = run_model(tmp_path, out)
    assert r.returncode == 0, r.stderr
    assert f"moe run: model.layers.0.{block}, E=4 H=64 I=32 top-2" in r.stdout
    assert np.array_equal(np.load(out), python_layer(tmp_path, f"model.layers.0.{block}"))


def test_several_layers_need_prefix(tmp_path):
    model_file(tmp_path, [0, 1])
    out = tmp_path / "out.npy"
    r = run_model(tmp_path, out)
    assert r.returncode == 1 and "model.layers.0.mlp and model.layers.1.mlp: give --prefix" in r.stderr
    assert not out.exists()
    r = run_model(tmp_path, out, "--prefix", "model.layers.1.mlp")
    assert r.returncode == 0, r.stderr
    assert np.array_equal(np.load(out), python_layer(tmp_path, "model.layers.1.mlp"))
