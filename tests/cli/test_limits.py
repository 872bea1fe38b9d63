"""Sizes, limits and metadata the `qmoe` commands refuse, as a user meets them: an impossible or
too large size is refused with one line before anything is allocated or written (peak memory
from wait4), the limit a message states is the one enforced, and a checkpoint's bad metadata is
called invalid. Run by ctest (cli_limits) with QMOE_CLI set to the program."""
import json
import os
import subprocess
import tempfile

import numpy as np
from safetensors.numpy import save_file  # in tests/python/requirements.txt (the project venv)

QMOE = os.environ.get("QMOE_CLI", "qmoe")
MiB = 1 << 20


def qmoe(*args):
    return subprocess.run([QMOE, *map(str, args)], capture_output=True, text=True, timeout=300)


def run_peak(*args):
    """(exit code, stdout, stderr, peak RSS in bytes) of one run: wait4 on the child alone."""
    with tempfile.TemporaryFile() as o, tempfile.TemporaryFile() as e:
        p = subprocess.Popen([QMOE, *map(str, args)], stdout=o, stderr=e)
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        o.seek(0), e.seek(0)
        return p.returncode, o.read().decode(), e.read().decode(), usage.ru_maxrss * 1024


def test_moe_gen_max_gib_bounds_every_file(tmp_path):
    # 1e6 tokens of H = 512 make a 2 GB hidden.npy beside a 12 MB layer
    d = tmp_path / "l"
    rc, _, err, rss = run_peak("moe", "gen", "--out", d, "--tokens", 1000000, "--max-gib", 1)
    assert rc == 1 and "more than --max-gib 1" in err and "hidden.npy" in err, err
    assert err.count("\n") == 1
    assert not d.exists()
    assert rss < 256 * MiB, rss
    # within the bound, all three files
    rc, _, err, _ = run_peak("moe", "gen", "--out", d, "--tokens", 4096, "--max-gib", 1)
    assert rc == 0, err
    assert sorted(os.listdir(d)) == ["hidden.npy", "layer.safetensors", "router_logits.npy"]


def test_bench_down_proj_sizes(tmp_path):
    # E * K * N is 2^90: refused by the checked sum, not formed
    rc, out, err, rss = run_peak("bench", "down-proj", "--n", 1 << 30, "--k", 1 << 30,
                                 "--experts", 1 << 30)
    assert rc == 2 and "more than 2^64 bytes" in err and out == "", err
    assert rss < 64 * MiB
    # 32 GiB of weights: over the default cap, refused before the probes run
    rc, out, err, rss = run_peak("bench", "down-proj", "--k", 65536, "--n", 65536, "--experts", 8,
                                 "--prefill", 0, "--decode", 1, "--copies", 1)
    assert rc == 2 and "more than --max-gib 16" in err and out == "", err
    assert "measuring" not in err and rss < 64 * MiB


def test_bench_moe_ops_size_cap():
    rc, out, err, rss = run_peak("bench", "moe-ops", "--tokens", 1 << 24, "--hidden", 1 << 24)
    assert rc == 2 and "more than --max-gib 16" in err and out == "", err
    assert "measuring" not in err and rss < 64 * MiB
    # the default shape takes about 1.4 GiB with the probe's 512 MB
    rc, out, err, rss = run_peak("bench", "moe-ops", "--max-gib", 1)
    assert rc == 2 and "more than --max-gib 1" in err and rss < 64 * MiB, err


def test_bench_moe_more_threads_than_probes():
    # the bandwidth probe has 256 readers; --threads takes up to 4096 (a crash before)
    rc, out, err, _ = run_peak("bench", "moe", "--model", "qwen3-30b-a3b", "--experts", 8,
                               "--tokens", 1, "--threads", 300, "--dram-mb", 16, "--seconds", 0.01)
    assert rc == 0, err
    line = json.loads(out)
    assert line["threads"] == 300 and line["tokens"] == 1


def test_bench_moe_token_buffers_capped():
    # 2^20 tokens: 104 GiB of hidden, out, logits and workspace beside 70 MB of weights, refused
    # before the first token count runs
    rc, out, err, rss = run_peak("bench", "moe", "--model", "qwen3-30b-a3b", "--experts", 8,
                                 "--tokens", "1,1048576", "--dram-mb", 16)
    assert rc == 2 and "T=1048576" in err and "more than --max-gib 16" in err and out == "", err
    assert "measuring" not in err and rss < 256 * MiB


def test_gen_and_demo_size_cap(tmp_path):
    d = tmp_path / "case"
    d.mkdir()
    (d / "x.npy").write_bytes(b"old bytes")
    # 384 GiB of case (E = 64, K = N = 65536), and the vendor sample under --max-gib 0
    for args in (["--E", 64, "--K", 65536, "--N", 65536], ["--max-gib", 0]):
        rc, out, err, rss = run_peak("gen", "--out", d, *args)
        assert rc == 1 and "more than --max-gib" in err and out == "", err
        assert rss < 64 * MiB
        assert os.listdir(d) == ["x.npy"] and (d / "x.npy").read_bytes() == b"old bytes"
    rc, out, err, rss = run_peak("demo", "--E", 64, "--K", 65536, "--N", 65536)
    assert rc == 1 and "more than --max-gib 16" in err, err
    assert rss < 64 * MiB


def small_layer(tmp_path, *extra):
    d = tmp_path / "layer"
    rc, _, err, _ = run_peak("moe", "gen", "--out", d, "--H", 64, "--I", 32, "--E", 4, "--top-k", 2,
                             "--tokens", 4, *extra)
    assert rc == 0, err
    return d


def moe_run(d, out, *extra, layer=None):
    return run_peak("moe", "run", "--layer", layer or d / "layer.safetensors",
                    "--hidden", d / "hidden.npy", "--router-logits", d / "router_logits.npy",
                    "--out", out, *extra)


def test_moe_run_threads_one_limit(tmp_path):
    d = small_layer(tmp_path)
    out = tmp_path / "out.npy"
    rc, _, err, _ = moe_run(d, out, "--threads", 4097)
    assert rc == 2 and "[0, 4096]" in err and not out.exists(), err
    rc, _, err, _ = moe_run(d, out, "--threads", 4096)  # the limit stated is the one that runs
    assert rc == 0 and out.exists(), err
    assert "--threads N       0..4096" in qmoe("moe", "run", "--help").stdout


def test_moe_run_invalid_metadata(tmp_path):
    d = small_layer(tmp_path)
    from safetensors import safe_open
    with safe_open(str(d / "layer.safetensors"), framework="numpy") as f:
        tensors, meta = {k: f.get_tensor(k) for k in f.keys()}, f.metadata()
    out = tmp_path / "out.npy"
    for key, value, words in [("qmoe.top_k", "-3", 'qmoe.top_k = "-3" is invalid'),
                              ("qmoe.top_k", "two", 'qmoe.top_k = "two" is invalid'),
                              ("qmoe.group_size", "-64", 'qmoe.group_size = "-64" is invalid'),
                              ("qmoe.mode", "a8w16", 'qmoe.mode = "a8w16" is invalid'),
                              ("qmoe.gating", "tanh", 'qmoe.gating = "tanh" is invalid')]:
        save_file(tensors, str(d / "bad.safetensors"), metadata={**meta, key: value})
        rc, _, err, _ = moe_run(d, out, layer=d / "bad.safetensors")
        assert rc == 1 and words in err and "missing" not in err, (key, value, err)
        assert not out.exists()
    # qmoe.gating = softmax-norenorm is that gating (it ran renormalised before)
    save_file(tensors, str(d / "norenorm.safetensors"), metadata={**meta, "qmoe.gating": "softmax-norenorm"})
    rc, _, err, _ = moe_run(d, out, layer=d / "norenorm.safetensors")
    assert rc == 0, err
    by_meta = np.load(out)
    rc, _, err, _ = moe_run(d, out, "--gating", "softmax-norenorm")
    assert rc == 0, err
    assert np.array_equal(by_meta, np.load(out))
    rc, _, err, _ = moe_run(d, out)
    assert rc == 0 and not np.array_equal(by_meta, np.load(out)), err
    # --top-k given: the file's qmoe.top_k is not read
    save_file(tensors, str(d / "bad.safetensors"), metadata={**meta, "qmoe.top_k": "-3"})
    rc, _, err, _ = moe_run(d, out, "--top-k", 2, layer=d / "bad.safetensors")
    assert rc == 0, err


def test_moe_run_sigmoid_options_need_sigmoid(tmp_path):
    d = small_layer(tmp_path)  # softmax gating in its metadata
    out = tmp_path / "out.npy"
    for opt in (["--scaling", "2.5"], ["--groups", "2"], ["--k-group", "1"],
                ["--gating", "softmax-norenorm", "--scaling", "2"]):
        rc, _, err, _ = moe_run(d, out, *opt)
        assert rc == 1 and "are for sigmoid gating" in err and not out.exists(), (opt, err)
    rc, _, err, _ = moe_run(d, out, "--gating", "sigmoid", "--scaling", "2", "--groups", "1",
                            "--k-group", "1")
    assert rc == 0, err
