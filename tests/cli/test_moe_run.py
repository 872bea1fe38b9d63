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
