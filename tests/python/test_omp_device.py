"""qmoe.omp_device(): a MoELayer whose parts run on the process's OpenMP team (libqmoe_omp).

Its bits must equal the default device's (the library promises it for an external device at
any thread count), and its parts must run on OpenMP's threads, not on workers of qmoe's own."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import qmoe

OK, WHY = qmoe.omp_available()
pytestmark = pytest.mark.skipif(not OK, reason=f"libqmoe_omp is not available: {WHY}")

E, H, I, K = 16, 256, 128, 4


def _experts(seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape, dtype=np.float32) * 0.05
            for shape in ((E, I, H), (E, I, H), (E, H, I))]


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("mode", ["a8w8", "a8w4"])
def test_bits_equal_default_device(threads, mode):
    g, u, d = _experts()
    rng = np.random.default_rng(threads)
    x = rng.standard_normal((37, H), dtype=np.float32)
    logits = rng.standard_normal((37, E), dtype=np.float32)
    layer = qmoe.MoELayer.from_float(g, u, d, top_k=K, mode=mode,
                                     group_size=64 if mode == "a8w4" else None, threads=threads)
    want = layer(x, logits)
    ids, wts = layer.route(logits)
    want_routed = layer.forward_routed(x, ids, wts * 0.5)
    with qmoe.omp_device(threads) as dev:
        layer.device = dev
        got = layer(x, logits)
        got_routed = layer.forward_routed(x, ids, wts * 0.5)
        got_one = layer(x[:1], logits[:1])  # T = 1, the decode shape
        layer.device = None
    assert got.dtype == want.dtype and np.array_equal(got, want)
    assert np.array_equal(got_routed, want_routed)
    assert np.array_equal(got_one, layer(x[:1], logits[:1]))
    assert np.abs(want).max() > 0  # a real output, not two zero buffers


def test_bfloat16_torch_bits_equal():
    from conftest import need_torch
    torch = need_torch()
    g, u, d = _experts(1)
    layer = qmoe.MoELayer.from_float(g, u, d, top_k=K, threads=2)
    x = torch.randn(9, H).to(torch.bfloat16)
    logits = torch.randn(9, E)
    want = layer(x, logits)
    layer.device = qmoe.omp_device(2)
    got = layer(x, logits)
    assert got.dtype == torch.bfloat16 and torch.equal(got, want)


def test_data_error_reported_and_output_untouched():
    g, u, d = _experts()
    layer = qmoe.MoELayer.from_float(g, u, d, top_k=K, threads=2)
    layer.device = qmoe.omp_device(2)
    x = np.ones((3, H), np.float32)
    ids = np.full((3, K), E + 5, np.int32)  # out of range: found when the chain runs
    with pytest.raises(qmoe.QmoeError):
        layer.forward_routed(x, ids, np.ones((3, K), np.float32))
    # the device's stream is usable again after the error was reported
    ok = layer.forward_routed(x, np.zeros((3, K), np.int32), np.ones((3, K), np.float32))
    layer.device = None
    assert np.array_equal(ok, layer.forward_routed(x, np.zeros((3, K), np.int32),
                                                   np.ones((3, K), np.float32)))


def test_bad_device_and_threads_refused():
    g, u, d = _experts()
    layer = qmoe.MoELayer.from_float(g, u, d, top_k=K, threads=1)
    layer.device = "omp"
    with pytest.raises(qmoe.QmoeError, match="device"):
        layer(np.ones((1, H), np.float32), np.ones((1, E), np.float32))
    for bad in (0, -1, 5000, 2.0, True):
        with pytest.raises(qmoe.QmoeError, match="threads"):
            qmoe.omp_device(bad)


def test_closed_device_refused():
    g, u, d = _experts()
    layer = qmoe.MoELayer.from_float(g, u, d, top_k=K, threads=1)
    dev = qmoe.omp_device(1)
    layer.device = dev
    dev.close()
    with pytest.raises(qmoe.QmoeError, match="closed"):
        layer(np.ones((1, H), np.float32), np.ones((1, E), np.float32))


_THREADS_SCRIPT = textwrap.dedent("""
    import os, sys, numpy as np, qmoe
    def threads():
        return len(os.listdir("/proc/self/task"))
    E, H, I, K = 16, 256, 128, 4
    rng = np.random.default_rng(0)
    g, u = (rng.standard_normal((E, I, H), dtype=np.float32) for _ in range(2))
    d = rng.standard_normal((E, H, I), dtype=np.float32)
    x = rng.standard_normal((64, H), dtype=np.float32)
    lg = rng.standard_normal((64, E), dtype=np.float32)
    n = int(sys.argv[1])
    layer = qmoe.MoELayer.from_float(g, u, d, top_k=K, threads=n)
    layer.device = qmoe.omp_device(n)
    before = threads()
    layer(x, lg)  # OpenMP starts its team: n - 1 threads
    team = threads()
    for _ in range(5):
        layer(x, lg)
    after_omp = threads()
    layer.device = None
    layer(x, lg)  # the default device starts workers of qmoe's own
    print(before, team, after_omp, threads())
""")


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux's /proc")
def test_parts_run_on_openmp_threads():
    # a fresh process, so no device or OpenMP team of another test exists yet
    n = 3
    out = subprocess.run([sys.executable, "-c", _THREADS_SCRIPT, str(n)], check=True,
                         capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    before, team, after_omp, after_default = map(int, out.stdout.split())
    assert team == before + n - 1, out.stdout  # OpenMP's team, not a pool of qmoe's
    assert after_omp == team, out.stdout  # later calls reuse that team
    # the default device starts its own n - 1 workers: none of them ran the calls above
    assert after_default >= after_omp + n - 1, out.stdout


_SHORT_TEAM_SCRIPT = textwrap.dedent("""
    import numpy as np, qmoe
    E, H, I, K = 16, 256, 128, 4
    rng = np.random.default_rng(0)
    g, u = (rng.standard_normal((E, I, H), dtype=np.float32) for _ in range(2))
    d = rng.standard_normal((E, H, I), dtype=np.float32)
    layer = qmoe.MoELayer.from_float(g, u, d, top_k=K, threads=2)
    layer.device = qmoe.omp_device(2)
    x = np.ones((8, H), np.float32)
    try:
        layer(x, np.ones((8, E), np.float32))
        print("ran")
    except qmoe.QmoeError as err:
        print(err.code, qmoe._omp.omp_short_teams())
""")


def test_short_team_fails_clearly():
    """OMP_THREAD_LIMIT=1: OpenMP gives a team of 1 where 2 were asked; no part runs twice or
    alone (they would wait for each other): the call fails with 361001."""
    out = subprocess.run([sys.executable, "-c", _SHORT_TEAM_SCRIPT], check=True, timeout=120,
                         capture_output=True, text=True, env=dict(os.environ, OMP_THREAD_LIMIT="1"))
    code, short = map(int, out.stdout.split())
    assert code == qmoe.ERR_RUNTIME and short >= 1, out.stdout
