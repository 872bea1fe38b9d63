"""`qmoe moe run` (the C reader, tools/safetensors_read.c and cmd_moe_run.c's layer rules) on the
hostile checkpoints of tests/python/checkpoint_cases.py: the verdicts qmoe.load_experts gives the
same files in tests/python/test_checkpoint_rules.py (docs/moe-layer.md "Checkpoint rules"). A
refused file is exit 1 with the reason and no output; an accepted one runs and, where the
package is importable, equals qmoe.MoELayer on the same file. Run by ctest (cli_checkpoint_rules)
with QMOE_CLI set."""
import os
import subprocess
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import checkpoint_cases as cc  # noqa: E402

QMOE = os.environ.get("QMOE_CLI", "qmoe")


@pytest.mark.parametrize("case", sorted(cc.CASES))
def test_c_reader_verdict(tmp_path, case):
    build, _ = cc.CASES[case]
    layer = tmp_path / "layer.safetensors"
    layer.write_bytes(build(np.random.default_rng(11)))
    rng = np.random.default_rng(5)
    hidden = rng.standard_normal((6, cc.H)).astype(np.float32)
    logits = rng.standard_normal((6, cc.E)).astype(np.float32)
    np.save(tmp_path / "hidden.npy", hidden)
    np.save(tmp_path / "logits.npy", logits)
    out = tmp_path / "out.npy"
    r = subprocess.run([QMOE, "moe", "run", "--layer", str(layer), "--hidden",
                        str(tmp_path / "hidden.npy"), "--router-logits", str(tmp_path / "logits.npy"),
                        "--out", str(out), "--prefix", cc.P, "--top-k", str(cc.TOP_K)],
                       capture_output=True, text=True, timeout=300)
    words = cc.words_for(case, "c")
    if words is not None:
        assert r.returncode == 1 and words in r.stderr, r.stderr
        assert not out.exists()
        return
    assert r.returncode == 0, r.stderr
    got = np.load(out)
    assert got.shape == hidden.shape and np.isfinite(got).all()
    try:
        import qmoe
    except ImportError:
        return
    want = qmoe.MoELayer.from_safetensors(str(layer), cc.P, top_k=cc.TOP_K)(hidden, logits)
    assert np.array_equal(got, want)
