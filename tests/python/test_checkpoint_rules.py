"""qmoe.load_experts on the hostile checkpoints of checkpoint_cases.py: the same files
`qmoe moe run` is given in tests/cli/test_checkpoint_rules.py, with the same verdicts (the rules
of docs/moe-layer.md "Checkpoint rules"). Also: a file that changes while it is read."""
import os

import numpy as np
import pytest

import checkpoint_cases as cc
import qmoe
from qmoe._safetensors import SafetensorsFile


@pytest.mark.parametrize("case", sorted(cc.CASES))
def test_python_reader_verdict(tmp_path, case):
    build, _ = cc.CASES[case]
    path = tmp_path / "layer.safetensors"
    path.write_bytes(build(np.random.default_rng(11)))
    words = cc.words_for(case, "python")
    if words is None:
        ck = qmoe.load_experts(str(path), cc.P)
        assert ck.gate.shape == (cc.E, cc.I, cc.H) and ck.down.shape == (cc.E, cc.H, cc.I)
        return
    with pytest.raises(qmoe.QmoeError) as info:
        qmoe.load_experts(str(path), cc.P)
    assert info.value.code == qmoe.ERR_PARAM_INVALID
    assert words in info.value.message, info.value.message


def test_values_read_as_written(tmp_path):
    rng = np.random.default_rng(12)
    t = cc.layer_tensors(rng)
    path = tmp_path / "layer.safetensors"
    path.write_bytes(cc.image(t))
    ck = qmoe.load_experts(str(path), cc.P)
    want = {n: a for n, _, a in t}
    for e in range(cc.E):
        assert np.array_equal(ck.gate[e], want[f"{cc.P}.experts.{e}.gate_proj.weight"])
        assert np.array_equal(ck.down[e], want[f"{cc.P}.experts.{e}.down_proj.weight"])
    assert np.array_equal(ck.router, want[f"{cc.P}.gate.weight"])


def test_truncated_while_read_is_an_error(tmp_path):
    """The header was read and checked; the file is then cut short under the reader: reading a
    tensor past the new end is a QmoeError naming the byte, not a crash (no mapping)."""
    path = tmp_path / "layer.safetensors"
    path.write_bytes(cc.image(cc.layer_tensors(np.random.default_rng(13))))
    with SafetensorsFile(str(path)) as f:
        last = max(f.keys(), key=lambda n: f.tensors[n].begin)
        os.truncate(path, os.path.getsize(path) - 4)
        f.read(f.keys()[0])  # still inside the file
        with pytest.raises(qmoe.QmoeError, match="ended at byte .* while it was read"):
            f.read(last)
