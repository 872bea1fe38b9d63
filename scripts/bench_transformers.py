#!/usr/bin/env python3
"""transformers' MoE block against the one qmoe.transformers.patch puts in its place, in one run.

1. The Qwen3-30B-A3B layer (Qwen3MoeSparseMoeBlock: H 2048, I 768, E 128, top-8; random weights
   N(0, 0.02)) for T tokens: transformers with its "eager" experts and with its default experts
   implementation ("grouped_mm"), each at 1 and 2 torch threads (torch.set_num_threads), against
   the patched block (qmoe layer at 1 and 2 threads; A8W8 per channel and A8W4 per group of 128,
   no clip search: it changes accuracy, not speed). Rounds alternate the settings (the order
   rotated each round); each sample is the mean of as many calls as fill --seconds; the table
   gives the median ms per call over the rounds with [min-max], and the patched block's speedup
   over transformers' fastest setting at that T (target >= 5x).
2. A small Qwen3-MoE model (--gen-layers layers of that shape with --gen-experts experts and a
   --vocab of 8192, so that, as in the real model, the MoE blocks are about 60% of each token's
   weights):
   generate() of --new-tokens greedy tokens, tokens/s unpatched (default experts) and patched
   (the first of --modes), each at 1 and 2 threads, alternating, medians over the rounds.

    PYTHONPATH=python QMOE_LIBRARY=build/libqmoe.so python3 scripts/bench_transformers.py
        [--tokens 1,64,512] [--rounds 5] [--seconds 0.5] [--modes a8w8,a8w4]
        [--group-size 128] [--dtype bfloat16]
        [--gen-layers 4] [--gen-experts 64] [--vocab 8192] [--new-tokens 32] [--skip-generate]
        [--skip-block]

Needs torch and transformers (tests/python/requirements-torch.txt). Random weights, no download.
"""
import argparse
import os
import statistics
import sys
import time

import torch
import transformers

import qmoe
import qmoe.transformers as qt


def spread(values, fmt="%.2f"):
    return (fmt + " [" + fmt + "-" + fmt + "]") % (statistics.median(values), min(values),
                                                     max(values))


def qwen3_config(args, layers, experts):
    return transformers.Qwen3MoeConfig(
        hidden_size=2048, moe_intermediate_size=768, intermediate_size=6144,
        num_experts=experts, num_experts_per_tok=8, norm_topk_prob=True,
        num_hidden_layers=layers, num_attention_heads=32, num_key_value_heads=4, head_dim=128,
        vocab_size=args.vocab, max_position_embeddings=4096)


def init_(module, dtype):
    """N(0, 0.02) weights (the experts' parameters are created empty), norms at 1."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            if p.ndim == 1:
                p.fill_(1.0)
            else:  # slice by slice: no float32 copy of a whole [E, 2I, H] tensor
                for sl in (p if p.ndim == 3 else [p]):
                    sl.copy_(torch.randn(sl.shape, dtype=torch.float32).mul_(0.02))
    return module.eval()


def timed(fn, seconds):
    """ms per call: the mean over as many calls as fill `seconds` (at least one)."""
    n, t0 = 0, time.perf_counter()
    while True:
        fn()
        n += 1
        el = time.perf_counter() - t0
        if el >= seconds:
            return 1e3 * el / n


class Holder(torch.nn.Module):
    def __init__(self, block):
        super().__init__()
        self.mlp = block


def bench_block(args, dtype):
    cfg = qwen3_config(args, 1, 128)
    block = init_(transformers.models.qwen3_moe.modeling_qwen3_moe.Qwen3MoeSparseMoeBlock(cfg)
                  .to(dtype), dtype)
    patched = {}
    for mode in args.modes:
        for threads in (1, 2):
            h = Holder(block)
            t0 = time.perf_counter()
            report = qt.patch(h, mode=mode, group_size=args.group_size if mode == "a8w4" else None,
                              clip_search=False, threads=threads)
            assert report.replaced, str(report)
            patched[(mode, threads)] = h.mlp
            print(f"patched {mode} at {threads} thread(s) in {time.perf_counter() - t0:.1f} s "
                  f"({report.replaced[0].weight_bytes / 2**20:.0f} MiB)", flush=True)

    def tf(impl):
        def run(x):
            cfg._experts_implementation = impl
            return block(x)
        return run

    settings = [(f"transformers {impl}, {th}t", th, tf(impl))
                for impl in ("eager", "grouped_mm") for th in (1, 2)]
    settings += [(f"qmoe {mode}, {th}t", th, patched[(mode, th)]) for mode in args.modes
                 for th in (1, 2)]
    tokens = [int(t) for t in args.tokens.split(",")]
    xs = {T: (torch.randn(1, T, 2048) * 1.0).to(dtype) for T in tokens}
    samples = {(s[0], T): [] for s in settings for T in tokens}
    with torch.no_grad():
        for name, th, fn in settings:  # warm-up: first calls plan, allocate, fault pages in
            torch.set_num_threads(th)
            for T in tokens:
                fn(xs[T])
        for r in range(args.rounds):
            order = settings[r % len(settings):] + settings[:r % len(settings)]
            for T in tokens:
                for name, th, fn in order:
                    torch.set_num_threads(th)
                    samples[(name, T)].append(timed(lambda: fn(xs[T]), args.seconds))
            print(f"round {r + 1}/{args.rounds} done", flush=True)
    print(f"\n### Qwen3-30B-A3B MoE block (H 2048, I 768, E 128, top-8), {str(dtype)[6:]} "
          f"hidden states, ms per call: median [min-max] of {args.rounds} rounds\n")
    print("| setting | " + " | ".join(f"T = {T}" for T in tokens) + " |")
    print("|---|" + "---|" * len(tokens))
    for name, _, _ in settings:
        print(f"| {name} | " + " | ".join(spread(samples[(name, T)]) for T in tokens) + " |")
    line = []
    for T in tokens:
        best_tf = min(statistics.median(samples[(n, T)]) for n, _, _ in settings
                      if n.startswith("transformers"))
        best_q = min(statistics.median(samples[(n, T)]) for n, _, _ in settings
                     if n.startswith("qmoe"))
        line.append(f"{best_tf / best_q:.1f}x")
    print("| **speedup** (fastest qmoe over fastest transformers) | " + " | ".join(line) + " |")


def bench_generate(args, dtype):
    cfg = qwen3_config(args, args.gen_layers, args.gen_experts)
    torch.manual_seed(0)
    model = init_(transformers.AutoModelForCausalLM.from_config(cfg, dtype=dtype), dtype)
    plain = {n: m for n, m in model.named_modules() if hasattr(m, "experts")}

    def use(blocks):
        for name, m in blocks.items():
            parent, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent), child, m)

    setups = []
    for th in (1, 2):
        use(plain)
        report = qt.patch(model, mode=args.mode,
                          group_size=args.group_size if args.mode == "a8w4" else None, threads=th)
        setups.append((f"patched ({args.mode}), {th}t", th,
                       {r.name: model.get_submodule(r.name) for r in report.replaced}))
    setups = [(f"transformers (grouped_mm), {th}t", th, plain) for th in (1, 2)] + setups
    prompt = torch.randint(0, args.vocab, (1, 16), generator=torch.Generator().manual_seed(1))

    def gen():
        t0 = time.perf_counter()
        out = model.generate(prompt, max_new_tokens=args.new_tokens,
                             min_new_tokens=args.new_tokens, do_sample=False)
        assert out.shape[1] == 16 + args.new_tokens
        return args.new_tokens / (time.perf_counter() - t0)

    rates = {name: [] for name, _, _ in setups}
    with torch.no_grad():
        for name, th, blocks in setups:  # warm-up
            use(blocks)
            torch.set_num_threads(th)
            gen()
        for r in range(args.rounds):
            for name, th, blocks in setups[r % 4:] + setups[:r % 4]:
                use(blocks)
                torch.set_num_threads(th)
                rates[name].append(gen())
    print(f"\n### generate(): Qwen3-MoE of {args.gen_layers} layers (H 2048, I 768, "
          f"E {args.gen_experts}, top-8), {str(dtype)[6:]}, 16-token prompt + "
          f"{args.new_tokens} new tokens (greedy); tokens/s (prefill included), median [min-max] "
          f"of {args.rounds} rounds\n")
    print("| model | tokens/s |\n|---|---|")
    for name, v in rates.items():
        print(f"| {name} | {spread(v)} |")
    best = {k: max(statistics.median(v) for n, v in rates.items() if n.startswith(k))
            for k in ("transformers", "patched")}
    print(f"| **ratio** (fastest patched over fastest unpatched) | "
          f"{best['patched'] / best['transformers']:.1f}x |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", default="1,64,512")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=0.5)
    ap.add_argument("--modes", default="a8w8,a8w4",
                    help="the patched block's modes (the first one also runs generate())")
    ap.add_argument("--group-size", type=int, default=128, help="A8W4's group size")
    ap.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    ap.add_argument("--gen-layers", type=int, default=4)
    ap.add_argument("--gen-experts", type=int, default=64)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--skip-generate", action="store_true")
    ap.add_argument("--skip-block", action="store_true")
    args = ap.parse_args()
    args.modes = args.modes.split(",")
    args.mode = args.modes[0]
    if any(m not in ("a8w8", "a8w4") for m in args.modes):
        ap.error("--modes: a8w8 and/or a8w4")
    dtype = getattr(torch, args.dtype)
    torch.manual_seed(0)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"qmoe {qmoe.__version__}, torch {torch.__version__}, transformers "
          f"{transformers.__version__}, {os.cpu_count()} CPUs, load average {load:.2f} at start",
          flush=True)
    if not args.skip_block:
        bench_block(args, dtype)
    if not args.skip_generate:
        bench_generate(args, dtype)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"\nload average {load:.2f} at the end (above 2 on 2 cores: a noisy machine)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
