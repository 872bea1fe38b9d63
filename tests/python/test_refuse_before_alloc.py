"""Impossible sizes are refused with the library's error before anything is allocated or copied.

Each case runs in a child interpreter under an address-space limit (RLIMIT_AS) of its current
size plus 1 GiB, so a call that allocates an output or copies a (broadcast, memory-free) input
before validating it fails with MemoryError there; the right behaviour is a QmoeError with the
documented code. Also here: one rule for byte order (MoELayer reads big-endian hidden states as
the operator functions do).
"""
import os
import subprocess
import sys

import numpy as np
import pytest

import qmoe

CHILD = r"""
import resource, sys
import numpy as np
import qmoe

def vm_bytes():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024

rng = np.random.default_rng(7)
layer = qmoe.MoELayer.from_float(rng.standard_normal((4, 32, 64)).astype(np.float32),
                                 rng.standard_normal((4, 32, 64)).astype(np.float32),
                                 rng.standard_normal((4, 64, 32)).astype(np.float32), top_k=2)
layer(np.zeros((2, 64), np.float32), np.zeros((2, 4), np.float32))  # the pool started
limit = vm_bytes() + (1 << 30)
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
big = lambda dt, shape: np.broadcast_to(np.zeros((), dt), shape)  # no memory behind it
case = sys.argv[1]
try:
    if case == "layer-wrong-H":
        layer(big(np.float32, (2 ** 22, 8192)), np.zeros((2 ** 22, 4), np.float32))
    elif case == "layer-wrong-E":
        layer(np.zeros((4, 64), np.float32), big(np.float32, (4, 2 ** 31)))
    elif case == "routed-wrong-k":
        layer.forward_routed(np.zeros((4, 64), np.float32), big(np.int64, (4, 2 ** 31)),
                             np.zeros((4, 2), np.float32))
    elif case.startswith("init-routing-K"):
        dt = np.int64 if case.endswith("64") else np.int32
        qmoe.npu_moe_init_routing_v2(np.zeros((2 ** 15, 64), np.float32),
                                     big(dt, (2 ** 15, 100000)), quant_mode=-1)
    elif case == "softmax-k-gt-E":
        qmoe.npu_moe_gating_top_k_softmax(np.zeros((2 ** 20, 8), np.float32), k=2 ** 12)
    elif case == "finalize-2^33-rows":
        qmoe.npu_moe_finalize_routing(np.zeros((8, 64), np.float32),
                                      expanded_src_to_dst_row=big(np.int32, (2 ** 33,)))
    elif case == "init-routing-id-2^31-1":
        qmoe.npu_moe_init_routing_v2(np.zeros((8, 64), np.float32),
                                     np.full((8, 2), 2 ** 31 - 1, np.int32), quant_mode=-1,
                                     expert_tokens_num_flag=True)
    elif case == "softmax-k-2^63":
        qmoe.npu_moe_gating_top_k_softmax(np.zeros((4, 8), np.float32), k=2 ** 63)
    elif case == "top-k-k-2^63":
        qmoe.npu_moe_gating_top_k(np.zeros((4, 8), np.float32), k=2 ** 63)
    elif case == "reversed-range":
        qmoe.npu_moe_init_routing_v2(np.zeros((8, 64), np.float32), np.zeros((8, 2), np.int32),
                                     quant_mode=-1, active_expert_range=[4, 2],
                                     expert_tokens_num_flag=True)
    elif case == "grouped-matmul-wrong-K":
        qmoe.npu_grouped_matmul([big(np.int8, (2 ** 20, 128))], [np.zeros((1, 64, 4096), np.int8)],
                                scale=[np.ones((1, 4096), np.float32)],
                                per_token_scale=[big(np.float32, (2 ** 20,))],
                                group_list=np.array([2 ** 20], np.int64), split_item=3,
                                group_type=0)
    elif case.startswith("fused-"):
        x, w = np.zeros((16, 64), np.int8), np.zeros((2, 64, 64), np.int8)
        ws, xs, gl = np.ones((2, 64), np.float32), np.ones(16, np.float32), np.array([8, 16])
        if case == "fused-x_scale-f16":
            xs = big(np.float16, (2 ** 33,))
        else:
            gl = big(np.int32, (2 ** 33,))
        qmoe.grouped_matmul_swiglu_quant(x, w, gl, ws, xs)
    elif case in ("from-float-wrong-down", "quantize-wrong-down"):
        gate = big(np.float64, (64, 2048, 4096))  # 2 GiB as float32
        fn = qmoe.MoELayer.from_float if case.startswith("from") else qmoe.quantize_experts
        kw = {"top_k": 2} if case.startswith("from") else {}
        fn(gate, gate, big(np.float32, (64, 4096, 2047)), **kw)
    elif case == "swiglu-odd-broadcast":
        qmoe.npu_swiglu(big(np.float16, (2 ** 30, 4, 3)), dim=-1)
    print("no error")
except qmoe.QmoeError as err:
    print(f"QmoeError {err.code}: {err.message}")
except BaseException as exc:
    print(f"{type(exc).__name__}: {exc}")
"""

CASES = {
    "layer-wrong-H": (161002, "hidden"),
    "layer-wrong-E": (161002, "router_logits"),
    "routed-wrong-k": (161002, "topk_ids"),
    "init-routing-K-32": (161002, "N*K"),
    "init-routing-K-64": (161002, "N*K"),
    "softmax-k-gt-E": (161002, "k = 4096"),
    # int32 row indices: more than INT32_MAX of them is refused, as init routing's N*K
    "finalize-2^33-rows": (161002, "expandedRowIdx"),
    "init-routing-id-2^31-1": (161002, "expertNum"),
    "softmax-k-2^63": (161002, "k = 9223372036854775808"),
    "top-k-k-2^63": (161002, "k = 9223372036854775808"),
    "reversed-range": (161002, "activeExpertRange = [4, 2)"),
    "swiglu-odd-broadcast": (161002, ""),
    "grouped-matmul-wrong-K": (161002, "x"),
    "fused-x_scale-f16": (161002, "x_scale"),
    "from-float-wrong-down": (161002, "down"),
    "quantize-wrong-down": (161002, "down"),
    "fused-group_list-i32": (161002, "group_list"),
}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
@pytest.mark.parametrize("case", sorted(CASES))
def test_refused_before_allocating(case):
    code, words = CASES[case]
    r = subprocess.run([sys.executable, "-c", CHILD, case], capture_output=True, text=True,
                       env=dict(os.environ), timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    out = r.stdout.strip()
    assert out.startswith(f"QmoeError {code}:") and words in out, out


def test_layer_reads_any_byte_order():
    """`>f4` and `>f2` hidden states (and router logits) give the native arrays' bits, as the
    operator functions accept them."""
    rng = np.random.default_rng(8)
    E, I, H, T = 4, 32, 64, 6
    layer = qmoe.MoELayer.from_float(rng.standard_normal((E, I, H)).astype(np.float32) * 0.1,
                                     rng.standard_normal((E, I, H)).astype(np.float32) * 0.1,
                                     rng.standard_normal((E, H, I)).astype(np.float32) * 0.1,
                                     top_k=2)
    hidden = rng.standard_normal((T, H)).astype(np.float32)
    logits = rng.standard_normal((T, E)).astype(np.float32)
    want = layer(hidden, logits)
    got = layer(hidden.astype(">f4"), logits.astype(">f4"))
    assert got.dtype == np.float32 and np.array_equal(got, want)
    half = hidden.astype(np.float16)
    assert np.array_equal(layer(half.astype(">f2"), logits), layer(half, logits))
    ids = np.tile(np.arange(2, dtype=np.int32), (T, 1))
    w = np.full((T, 2), 0.5, np.float32)
    assert np.array_equal(layer.forward_routed(hidden.astype(">f4"), ids.astype(">i4"),
                                               w.astype(">f4")),
                          layer.forward_routed(hidden, ids, w))
    # the operator functions read the same big-endian arrays
    y, _ = qmoe.npu_dynamic_quant(hidden.astype(">f4"))
    assert np.array_equal(y, qmoe.npu_dynamic_quant(hidden)[0])
