"""close() while another thread calls: MoELayer and PrepackedWeights wait for the calls in
flight, and a call that starts after close() raises QmoeError (161001) — never a crash.

Each scenario runs in a child interpreter, so a crash (the old behaviour: the layer or the
weights freed under a running call) is a failed test, not a dead test run. The call is held
inside deterministically: the library function the call ends in is wrapped with one that
signals an Event and waits for another before calling the real one, so close() is issued while
the call is known to be past its start.
"""
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))

SETUP = r"""
import sys, threading
import numpy as np
import qmoe
from qmoe import _lib

rng = np.random.default_rng(20261201)
which = sys.argv[1]
if which == "layer":
    # Weights of a few MiB: freeing them unmaps them, so a use after free faults.
    E, I, H, T = 8, 256, 512, 16
    gate = rng.standard_normal((E, I, H)).astype(np.float32) * 0.05
    up = rng.standard_normal((E, I, H)).astype(np.float32) * 0.05
    down = rng.standard_normal((E, H, I)).astype(np.float32) * 0.05
    obj = qmoe.MoELayer.from_float(gate, up, down, top_k=2)
    hidden = rng.standard_normal((T, H)).astype(np.float32)
    logits = rng.standard_normal((T, E)).astype(np.float32)
    call = lambda: obj(hidden, logits)
    name = "qmoe_moe_layer_forward"
else:
    E, K, N, M = 8, 1024, 512, 64
    w = rng.integers(-128, 128, size=(E, K, N), dtype=np.int8)
    ws = rng.uniform(0.5, 1.5, size=(E, N)).astype(np.float32) / 4000
    obj = qmoe.prepack(w, ws)
    x = rng.integers(-128, 128, size=(M, K), dtype=np.int8)
    xs = rng.uniform(0.5, 1.5, size=M).astype(np.float32)
    gl = np.array([8, 16, 24, 32, 40, 48, 56, 64], np.int64)
    if which == "prepacked":
        call = lambda: qmoe.grouped_matmul_swiglu_quant(x, obj, gl, None, xs)[:2]
        name = "qmoe_grouped_matmul_swiglu_quant"
    else:  # the grouped matmul with the same prepacked weights
        call = lambda: qmoe.npu_grouped_matmul([x], [obj], per_token_scale=[xs], group_list=gl,
                                               split_item=3, group_type=0)[0]
        name = "qmoe_grouped_matmul"
want = call()

def same(got):
    if isinstance(want, tuple):
        return all(np.array_equal(a, b) for a, b in zip(got, want))
    return np.array_equal(got, want)

def late():
    try:
        call()
    except qmoe.QmoeError as err:
        return f"QmoeError {err.code}"
    return "no error"
"""

HELD = SETUP + r"""
inside, release = threading.Event(), threading.Event()
real = getattr(_lib.lib, name)

def held(*args):
    inside.set()
    release.wait()
    return real(*args)

setattr(_lib.lib, name, held)
result = {}

def caller():
    try:
        result["ok"] = same(call())
    except Exception as exc:  # reported, not raised: the parent checks the line
        result["ok"] = repr(exc)

t = threading.Thread(target=caller)
t.start()
inside.wait()
closer = threading.Thread(target=obj.close)
closer.start()
# close() must not finish while the call is inside; on a close() that does not wait it ends at
# once. (The bound only limits how long a wrong close() is given to show itself.)
closer.join(0.5)
waited = closer.is_alive()
release.set()
t.join()
closer.join()
setattr(_lib.lib, name, real)
print(f"waited={waited} ok={result['ok']} late={late()}")
"""

HAMMER = SETUP + r"""
threads, started = 4, [threading.Event() for _ in range(4)]
outcomes = [[] for _ in range(threads)]

def worker(i):
    while True:
        try:
            got = call()
        except qmoe.QmoeError as err:
            outcomes[i].append(f"QmoeError {err.code}")
            return
        outcomes[i].append(same(got))
        started[i].set()

ts = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
for t in ts:
    t.start()
for e in started:
    e.wait()
obj.close()
for t in ts:
    t.join()
bad = [o for out in outcomes for o in out[:-1] if o is not True]
ends = {out[-1] for out in outcomes}
print(f"calls={sum(map(len, outcomes))} bad={bad} ends={sorted(ends)} late={late()}")
"""


def child(script, which):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), HERE) if p)
    r = subprocess.run([sys.executable, "-c", script, which], capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 0, f"child exited {r.returncode}: {r.stderr[-2000:]}"
    return r.stdout.strip()


@pytest.mark.parametrize("which", ["layer", "prepacked", "grouped"])
def test_close_waits_for_the_call_inside(which):
    assert child(HELD, which) == "waited=True ok=True late=QmoeError 161001"


@pytest.mark.parametrize("which", ["layer", "prepacked", "grouped"])
def test_close_while_threads_hammer(which):
    out = child(HAMMER, which)
    assert "bad=[] ends=['QmoeError 161001'] late=QmoeError 161001" in out, out
