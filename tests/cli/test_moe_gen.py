"""`qmoe moe gen` as a user meets it: the layer file loads with the `safetensors` package and has
the documented names, shapes, dtypes and metadata; hidden.npy / router_logits.npy match it;
refused options write nothing. Run by ctest (cli_moe_gen) with QMOE_CLI set to the program."""
import hashlib
import os
import subprocess

import numpy as np
import pytest

safetensors = pytest.importorskip("safetensors", reason="in tests/python/requirements.txt")
from safetensors import safe_open  # noqa: E402

QMOE = os.environ.get("QMOE_CLI", "qmoe")


def gen(out, *args):
    return subprocess.run([QMOE, "moe", "gen", "--out", str(out), *args], capture_output=True,
                          text=True)


def load(path):
    try:
        import ml_dtypes  # noqa: F401  (NumPy's bfloat16, for bf16 files)
    except ImportError:
        pass
    with safe_open(str(path), framework="numpy") as f:
        return {k: f.get_tensor(k) for k in f.keys()}, f.metadata()


def sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_custom_shape(tmp_path):
    r = gen(tmp_path / "l", "--H", "128", "--I", "64", "--E", "4", "--top-k", "2", "--tokens",
            "16", "--mode", "a8w4", "--group-size", "64", "--seed", "3")
    assert r.returncode == 0, r.stderr
    assert "qmoe moe run --layer" in r.stdout
    t, meta = load(tmp_path / "l" / "layer.safetensors")
    p = "model.layers.0.mlp."
    want = {f"{p}gate.weight": (4, 128)}
    for e in range(4):
        want[f"{p}experts.{e}.gate_proj.weight"] = (64, 128)
        want[f"{p}experts.{e}.up_proj.weight"] = (64, 128)
        want[f"{p}experts.{e}.down_proj.weight"] = (128, 64)
    assert {k: v.shape for k, v in t.items()} == want
    assert all(v.dtype == np.float32 for v in t.values())
    assert meta["qmoe.mode"] == "a8w4" and meta["qmoe.top_k"] == "2"
    assert meta["qmoe.hidden_size"] == "128" and meta["qmoe.intermediate_size"] == "64"
    assert meta["qmoe.num_experts"] == "4" and meta["qmoe.group_size"] == "64"
    assert meta["qmoe.prefix"] == "model.layers.0.mlp"
    # Gaussian weights with std 1/sqrt(fan_in), distinct per tensor
    g = np.stack([t[f"{p}experts.{e}.gate_proj.weight"] for e in range(4)])
    d = np.stack([t[f"{p}experts.{e}.down_proj.weight"] for e in range(4)])
    assert abs(g.std() * np.sqrt(128) - 1) < 0.05 and abs(d.std() * np.sqrt(64) - 1) < 0.05
    assert abs(g.mean()) < 0.01
    assert not np.array_equal(t[f"{p}experts.0.gate_proj.weight"], t[f"{p}experts.0.up_proj.weight"])
    h = np.load(tmp_path / "l" / "hidden.npy")
    lg = np.load(tmp_path / "l" / "router_logits.npy")
    assert h.shape == (16, 128) and h.dtype == np.float32
    assert lg.shape == (16, 4) and lg.dtype == np.float32
    assert abs(h.std() - 1) < 0.1


def test_seed_decides_the_bytes(tmp_path):
    args = ["--H", "64", "--I", "32", "--E", "2", "--tokens", "4"]
    for d, seed in (("a", "1"), ("b", "1"), ("c", "2")):
        assert gen(tmp_path / d, *args, "--seed", seed).returncode == 0
    for f in ("layer.safetensors", "hidden.npy", "router_logits.npy"):
        assert sha(tmp_path / "a" / f) == sha(tmp_path / "b" / f)
        assert sha(tmp_path / "a" / f) != sha(tmp_path / "c" / f)


def test_models_bf16_and_layers(tmp_path):
    pytest.importorskip("ml_dtypes", reason="NumPy's bfloat16, in tests/python/requirements.txt")
    r = gen(tmp_path / "ds", "--model", "deepseek-v3", "--experts", "2", "--H", "256", "--I", "128",
            "--shared-I", "64", "--layers", "2", "--dtype", "bf16", "--tokens", "3")
    assert r.returncode == 0, r.stderr
    t, meta = load(tmp_path / "ds" / "layer.safetensors")
    assert meta["qmoe.model"] == "deepseek-v3" and meta["qmoe.gating"] == "sigmoid-group-topk"
    assert meta["qmoe.top_k"] == "2"  # top-8 cut to the 2 experts kept
    for l in range(2):
        p = f"model.layers.{l}.mlp."
        assert t[f"{p}experts.1.up_proj.weight"].shape == (128, 256)
        assert t[f"{p}experts.1.up_proj.weight"].dtype.name == "bfloat16"
        assert t[f"{p}gate.e_score_correction_bias"].shape == (2,)
        assert t[f"{p}gate.e_score_correction_bias"].dtype == np.float32
        assert t[f"{p}shared_experts.gate_proj.weight"].shape == (64, 256)
        assert t[f"{p}shared_experts.down_proj.weight"].shape == (256, 64)
    assert len(t) == 2 * (2 * 3 + 2 + 3)
    r = gen(tmp_path / "mx", "--model", "mixtral-8x7b", "--experts", "2", "--H", "64", "--I", "32")
    assert r.returncode == 0, r.stderr
    t, meta = load(tmp_path / "mx" / "layer.safetensors")
    p = "model.layers.0.block_sparse_moe."
    assert t[f"{p}experts.1.w1.weight"].shape == (32, 64)
    assert t[f"{p}experts.1.w2.weight"].shape == (64, 32)
    assert t[f"{p}experts.1.w3.weight"].shape == (32, 64)
    assert meta["qmoe.prefix"] == "model.layers.0.block_sparse_moe"
    # the published shapes, refused by size before anything is written
    r = gen(tmp_path / "full", "--model", "deepseek-v3")
    assert r.returncode != 0 and "--max-gib" in r.stderr
    assert not (tmp_path / "full").exists()


@pytest.mark.parametrize("args,words", [
    (["--H", "100", "--mode", "a8w4"], "K % 16 == 0 and N % 64 == 0"),
    (["--I", "208", "--group-size", "128"], "group_size 128 does not divide K = 208"),
    (["--E", "2", "--top-k", "3"], "--top-k"),
    (["--model", "llama"], "--model"),
    (["--dtype", "fp8"], "--dtype"),
    (["--bogus"], "unknown option"),
])
def test_refusals_write_nothing(tmp_path, args, words):
    d = tmp_path / "d"
    d.mkdir()
    (d / "hidden.npy").write_bytes(b"old bytes")
    r = gen(d, *args)
    assert r.returncode != 0 and words in r.stderr
    assert sorted(os.listdir(d)) == ["hidden.npy"]
    assert (d / "hidden.npy").read_bytes() == b"old bytes"


def test_replaces_old_files_whole(tmp_path):
    d = tmp_path / "d"
    assert gen(d, "--H", "64", "--I", "32", "--E", "2", "--seed", "1").returncode == 0
    first = sha(d / "layer.safetensors")
    assert gen(d, "--H", "64", "--I", "32", "--E", "2", "--seed", "2").returncode == 0
    assert sha(d / "layer.safetensors") != first
    assert sorted(os.listdir(d)) == ["hidden.npy", "layer.safetensors", "router_logits.npy"]
    r = subprocess.run([QMOE, "moe", "frobnicate"], capture_output=True, text=True)
    assert r.returncode == 2 and "unknown subcommand" in r.stderr
