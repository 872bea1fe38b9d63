"""Issue 16's Python items: values that do not fit, and non-integer group lists, raise QmoeError
naming the argument (never OverflowError or a silent truncation); every rule that needs no data
is checked before any output is allocated, so a refused input costs no memory."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import qmoe
from conftest import Problem

INVALID = 161002


def call(p, **change):
    args = dict(x=p.x, weight=p.w, group_list=p.group_list, weight_scale=p.ws, x_scale=p.xs)
    args.update(change)
    return qmoe.grouped_matmul_swiglu_quant(**args)


@pytest.fixture
def p(rng):
    return Problem(rng, M=4, K=32, N=64, E=2, group_list=[2, 4])


@pytest.mark.parametrize("name, value, words", [
    ("x", [[300] + [0] * 31] * 4, ["x:", "300", "int8"]),
    ("x", [[-129] + [0] * 31] * 4, ["x:", "-129", "int8"]),
    ("group_list", [2, 2 ** 70], ["group_list:", str(2 ** 70), "int64"]),
    ("group_list", [2, 2 ** 63], ["group_list:", str(2 ** 63), "int64"]),
    ("group_list", [2, 10.5], ["group_list:", "10.5", "integer"]),
    ("group_list", np.array([2.0, 4.0]), ["group_list:", "float64"]),
    ("group_list", [True, False], ["group_list"]),
    ("x_scale", ["a"] * 4, ["x_scale"]),
])
def test_values_that_do_not_fit_raise_qmoe_error_naming_the_argument(p, name, value, words):
    with pytest.raises(qmoe.QmoeError) as info:
        call(p, **{name: value})
    assert info.value.code == INVALID
    assert not isinstance(info.value, OverflowError)
    for word in words:
        assert word in info.value.message, info.value.message


def test_integral_floats_are_not_a_group_list_either(p):
    with pytest.raises(qmoe.QmoeError, match="group_list"):
        call(p, group_list=[2.0, 4.0])


def test_huge_refused_shapes_allocate_nothing():
    """x of shape (2**40, 0) (and other header-sized inputs with huge shapes): refused by a
    phase-one rule, with the process's peak memory well under 64 MiB above the interpreter's."""
    script = textwrap.dedent("""
        import resource, numpy as np, qmoe
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        cases = [
            # x_scale cannot have 2**40 entries: refused, never MemoryError
            dict(x=np.zeros((2 ** 40, 0), np.int8), weight=np.zeros((1, 0, 32), np.int8),
                 group_list=[1], weight_scale=np.ones((1, 32), np.float32),
                 x_scale=np.ones(4, np.float32)),
            # N = 32768 > 10240 with 2**18 rows: 4 GiB of outputs, refused first
            dict(x=np.zeros((2 ** 18, 0), np.int8), weight=np.zeros((1, 0, 32768), np.int8),
                 group_list=[1], weight_scale=np.ones((1, 32768), np.float32),
                 x_scale=np.broadcast_to(np.float32(1), (2 ** 18,))),
            # a weight scale of the wrong E with 2**30 rows
            dict(x=np.broadcast_to(np.int8(0), (2 ** 30, 16)), weight=np.zeros((2, 16, 64), np.int8),
                 group_list=[1], weight_scale=np.ones((3, 64), np.float32),
                 x_scale=np.broadcast_to(np.float32(1), (2 ** 30,))),
        ]
        for args in cases:
            try:
                qmoe.grouped_matmul_swiglu_quant(**args)
            except qmoe.QmoeError as err:
                print("refused:", err.message)
            else:
                raise SystemExit("accepted")
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print("grew_kib", peak - base)
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert [ln.split(":")[0] for ln in lines[:3]] == ["refused"] * 3, run.stdout
    assert "x_scale" in lines[0] and "10240" in lines[1] and "weight_scale" in lines[2]
    grew_kib = int(lines[3].split()[1])
    assert grew_kib < 64 * 1024, f"peak memory grew by {grew_kib} KiB"


def test_outputs_are_still_allocated_for_accepted_inputs(p):
    """The refusal probe does not change what an accepted call returns (zero-filled rows past
    the last group, fresh arrays)."""
    out, scale, offset = call(p, group_list=[1, 3])
    assert out.shape == (4, 32) and scale.shape == (4,) and offset.shape == ()
    assert (out[3] == 0).all() and scale[3] == 0 and (scale[:3] > 0).all()


def test_out_arrays_are_untouched_on_refusal(p):
    out, scale = np.full((4, 32), 9, np.int8), np.full(4, 7, np.float32)
    with pytest.raises(qmoe.QmoeError):
        call(p, group_list=[2, 10.5], out=(out, scale))
    with pytest.raises(qmoe.QmoeError):
        call(p, group_list=[3, 2], out=(out, scale))  # a data rule (phase two)
    assert (out == 9).all() and (scale == 7).all()


def test_accepted_inputs_whose_outputs_cannot_exist_are_qmoe_errors():
    """Valid inputs (broadcast views) whose outputs would need an exabyte: QmoeError 561000, not a
    MemoryError from deep inside NumPy."""
    M = 2 ** 55
    with pytest.raises(qmoe.QmoeError) as info:
        qmoe.grouped_matmul_swiglu_quant(np.broadcast_to(np.int8(0), (M, 16)),
                                         np.zeros((1, 16, 64), np.int8), [0],
                                         np.ones((1, 64), np.float32),
                                         np.broadcast_to(np.float32(1), (M,)))
    assert info.value.code == qmoe.ERR_INNER and "out of memory" in info.value.message
