#!/usr/bin/env python3
"""KTransformers' CPU MoE (PyPI kt-kernel: AMXInt8_MOE / AMXInt4_MOE) timed at the shapes of
`qmoe bench moe`, for the side-by-side in docs/performance.md (`make bench-kt`).

One JSON line per token count, the fields of `qmoe bench moe` where they mean the same thing:
median seconds per forward (min and max too: the machine is shared), tokens per second and int8
GOPS (2 * T * k * 3 * H * I / time). The weights are random bf16 expert weights in the checkpoint
convention, quantized by kt-kernel itself when loaded (its online quantization); hidden states
and output are bf16, routing weights float32, as kt-kernel's own wrapper passes them. Like
`qmoe bench moe`, each run routes the tokens to other experts (the top-k of random logits,
rotated by E/8 experts per run), so decode reads the experts from memory, not from a cache that
holds the few a repeated routing would touch.

A sanity check before timing: kt-kernel's output for a few tokens against a float32 PyTorch
MoE with the same bf16 weights (relative L2 error, on stderr): a wrong call would show here.
"""
import argparse
import json
import os
import sys
import time

MODELS = {  # name: (H, I, E, top_k), as tools/bench_moe_layer.c
    "qwen3-30b-a3b": (2048, 768, 128, 8),
    "deepseek-v3": (7168, 2048, 256, 8),
    "mixtral-8x7b": (4096, 14336, 8, 2),
}
VARIANTS = 8


def log(msg):
    print(f"bench_kt_kernel: {msg}", file=sys.stderr, flush=True)


def parse():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=sorted(MODELS), default="qwen3-30b-a3b")
    ap.add_argument("--tokens", default="1,8,64,512,4096", help="comma-separated token counts")
    ap.add_argument("--experts", type=int, default=0, help="fewer experts than the model (>= top-k)")
    ap.add_argument("--mode", choices=["int8", "int4"], default="int8",
                    help="AMXInt8_MOE or AMXInt4_MOE (per-channel int4)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=1.0, help="time per token count")
    a = ap.parse_args()
    try:
        a.tokens = [int(t) for t in a.tokens.split(",")]
    except ValueError:
        ap.error(f"--tokens: {a.tokens!r} is not a list of integers")
    if any(t < 1 for t in a.tokens) or a.threads < 1 or a.seconds <= 0:
        ap.error("--tokens, --threads and --seconds must be positive")
    return a


def load_kt():
    try:
        import torch  # noqa: F401  (kt-kernel needs it)
        import kt_kernel
        from kt_kernel import kt_kernel_ext
    except Exception as e:  # what pip installed does not import on this machine: say why
        log(f"kt-kernel does not import: {type(e).__name__}: {e}")
        sys.exit(3)
    return kt_kernel, kt_kernel_ext


def routing(torch, T, E, k, seed):
    """VARIANTS routings of T tokens: the top-k of random logits (softmax weights, renormalised
    as Qwen3 does), each rotated by E/VARIANTS experts from the last."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.rand((T, E), generator=g) * 6 - 3
    shift = max(E // VARIANTS, 1)
    out = []
    for v in range(VARIANTS):
        lv = torch.roll(logits, shifts=v * shift, dims=1)
        w, ids = torch.topk(torch.softmax(lv, dim=-1), k, dim=-1)
        out.append((ids.to(torch.int64).contiguous(), (w / w.sum(-1, keepdim=True)).float().contiguous()))
    return out


def reference(torch, x, ids, w, gate, up, down):
    """float32 MoE with SwiGLU: sum_j w_j down_e(silu(gate_e x) * up_e x)."""
    out = torch.zeros(x.shape[0], x.shape[1])
    for t in range(x.shape[0]):
        xf = x[t].float()
        for j in range(ids.shape[1]):
            e = int(ids[t, j])
            h = torch.nn.functional.silu(gate[e].float() @ xf) * (up[e].float() @ xf)
            out[t] += float(w[t, j]) * (down[e].float() @ h)
    return out


def main():
    a = parse()
    # kt-kernel's C++ greets on stdout: the JSON lines keep stdout, everything else goes to stderr
    json_out = os.fdopen(os.dup(1), "w")
    sys.stdout.flush()
    os.dup2(2, 1)
    kt_kernel, kx = load_kt()
    import torch

    H, I, E, k = MODELS[a.model]
    if a.experts:
        if a.experts < k:
            log(f"--experts {a.experts} is below top-{k}")
            return 2
        E = a.experts
    cls = {"int8": "AMXInt8_MOE", "int4": "AMXInt4_MOE"}[a.mode]
    moe_cls = getattr(kx.moe, cls, None)
    if moe_cls is None:
        log(f"this kt-kernel build ({kt_kernel.__version__}, variant {kt_kernel.__cpu_variant__}) has no {cls}")
        return 3
    log(f"kt-kernel {kt_kernel.__version__} ({kt_kernel.__cpu_variant__}), {cls}, {a.model} E={E} H={H} "
        f"I={I} top-{k}, {a.threads} threads: making the weights")
    torch.manual_seed(7)
    gate = (torch.randn(E, I, H) / H**0.5).to(torch.bfloat16).contiguous()
    up = (torch.randn(E, I, H) / H**0.5).to(torch.bfloat16).contiguous()
    down = (torch.randn(E, H, I) / I**0.5).to(torch.bfloat16).contiguous()

    wc = kx.WorkerPoolConfig()
    wc.subpool_count = 1
    wc.subpool_numa_map = [0]
    wc.subpool_thread_count = [a.threads]
    cpu = kx.CPUInfer(wc)
    mask = torch.zeros(E, dtype=torch.bool)  # no expert on a GPU
    cfg = kx.moe.MOEConfig(E, k, H, I, mask.data_ptr())
    cfg.max_len = (max(a.tokens) + 63) // 64 * 64  # its buffers: whole blocks of rows
    cfg.pool = cpu.backend_
    cfg.gate_proj, cfg.up_proj, cfg.down_proj = gate.data_ptr(), up.data_ptr(), down.data_ptr()
    moe = moe_cls(cfg)
    p2l = torch.arange(E, dtype=torch.int64)
    t0 = time.perf_counter()
    cpu.submit(moe.load_weights_task(p2l.data_ptr()))
    cpu.sync()
    log(f"weights quantized by kt-kernel in {time.perf_counter() - t0:.1f} s")

    def forward(x, ids, w, out, bsz):
        cpu.submit(moe.forward_task(bsz.data_ptr(), k, ids.data_ptr(), w.data_ptr(), x.data_ptr(),
                                    out.data_ptr(), False))
        cpu.sync()

    # sanity: a few tokens against float32 PyTorch
    n = 4
    x = (torch.rand(n, H) * 2 - 1).to(torch.bfloat16).contiguous()
    ids, w = routing(torch, n, E, k, 1)[0]
    out = torch.zeros(n, H, dtype=torch.bfloat16)
    forward(x, ids, w, out, torch.tensor([n], dtype=torch.int32))
    ref = reference(torch, x, ids, w, gate, up, down)
    err = float((out.float() - ref).norm() / ref.norm())
    log(f"sanity: relative L2 error against float32 PyTorch on {n} tokens: {100 * err:.2f}%")
    if not err < 0.5:
        log("kt-kernel's output is not the MoE of these weights: not timing it")
        return 1

    for T in a.tokens:
        x = (torch.rand(T, H) * 2 - 1).to(torch.bfloat16).contiguous()
        out = torch.empty(T, H, dtype=torch.bfloat16)
        bsz = torch.tensor([T], dtype=torch.int32)
        routes = routing(torch, T, E, k, 99 + T)
        log(f"T={T}: timing for about {a.seconds:.1f} s")
        forward(x, *routes[0], out, bsz)  # warm-up
        times, start = [], time.perf_counter()
        while len(times) < 1000 and (len(times) < 3 or time.perf_counter() - start < a.seconds):
            ids, w = routes[len(times) % VARIANTS]
            t0 = time.perf_counter()
            forward(x, ids, w, out, bsz)
            times.append(time.perf_counter() - t0)
        times.sort()
        t = times[len(times) // 2]
        print(json.dumps({
            "bench": "kt_kernel_moe", "backend": cls, "kt_kernel": kt_kernel.__version__,
            "model": a.model, "dtype": "bf16", "mode": a.mode, "E": E, "H": H, "I": I, "top_k": k,
            "tokens": T, "threads": a.threads, "runs": len(times), "seconds": round(t, 6),
            "min_seconds": round(times[0], 6), "max_seconds": round(times[-1], 6),
            "tokens_per_s": round(T / t, 2), "int8_gops": round(2.0 * T * k * 3 * H * I / t / 1e9, 2),
        }), file=json_out, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
