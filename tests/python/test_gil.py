"""The GIL is released while the operator runs: another Python thread makes progress *during* the
call. The witness is the operator's own output: the other thread counts the moments it sees the
output partly written, which exist only while the C call is in progress — a thread that could run
only before or after the call (GIL held throughout) would see nothing or everything."""

import threading

import numpy as np

import qmoe
from conftest import Problem, assert_accepted

SENTINEL = np.float32(-1.0)  # a scale the operator never writes (scales are >= 0 or NaN)


def test_other_threads_run_during_the_operator(rng):
    # The reference kernel, one thread, row by row: rows finish one after another.
    p = Problem(rng, M=1024, K=512, N=256, E=1, group_list=[1024])
    out = np.zeros((p.M, p.N // 2), np.int8)
    scale = np.full(p.M, SENTINEL, np.float32)
    started, done = threading.Event(), threading.Event()
    seen = {"partial": 0, "polls": 0}

    def watch():
        started.set()
        while not done.is_set():
            written = int(np.count_nonzero(scale != SENTINEL))
            seen["polls"] += 1
            if 0 < written < p.M:
                seen["partial"] += 1

    watcher = threading.Thread(target=watch)
    watcher.start()
    started.wait()
    try:
        qmoe.grouped_matmul_swiglu_quant(p.x, p.w, p.group_list, p.ws, p.xs, out=(out, scale),
                                         kernel="reference", threads=1, devices=1)
    finally:
        done.set()
        watcher.join()
    assert np.all(scale != SENTINEL)  # the call wrote every row
    assert seen["partial"] > 0, f"no progress during the call ({seen['polls']} polls in all)"


def test_concurrent_calls_keep_their_results_and_errors(rng):
    # Threads run operators at the same time (the GIL is released); each gets its own results,
    # and a failing call's message is its own (the library's last error is per thread).
    from concurrent.futures import ThreadPoolExecutor

    problems = [Problem(rng, M=64, K=128, N=128, E=2, group_list=[20 + i, 64]) for i in range(4)]
    expected = [p.expected() for p in problems]

    def good(i):
        p = problems[i]
        return qmoe.grouped_matmul_swiglu_quant(p.x, p.w, p.group_list, p.ws, p.xs)

    def bad(i):
        p = problems[i]
        try:
            qmoe.grouped_matmul_swiglu_quant(p.x, p.w, [i + 1, 0], p.ws, p.xs)
        except qmoe.QmoeError as err:
            return err.message
        return None

    messages = [bad(i) for i in range(4)]  # each alone first
    assert len(set(messages)) == 4 and all(messages)
    with ThreadPoolExecutor(max_workers=8) as pool:
        goods = [pool.submit(good, i) for i in range(4) for _ in range(3)]
        bads = [pool.submit(bad, i) for i in range(4) for _ in range(3)]
        for n, f in enumerate(goods):
            out, scale, _ = f.result()
            assert_accepted(out, scale, *expected[n // 3])
        for n, f in enumerate(bads):
            assert f.result() == messages[n // 3]
