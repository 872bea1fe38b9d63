#!/usr/bin/env python3
"""The speed targets of prepacked weights (docs/performance.md), measured in one run.

Runs `qmoe bench` for each target row ROUNDS times (rows interleaved, so a noisy minute hits
every row alike; rows that run the same command share one run per round), keeps every JSON line
(--jsonl FILE) and prints a Markdown table: the median over the rounds, the spread (min-max),
and the ratio the target is stated in (speedup against the peer's bare GEMM timed in the same
process, % of the peak or bandwidth measured in the same process, 2-thread over 1-thread
speedup, or a per-group row's speed over the per-channel row's of the same round).

The default rows are issue 23's targets for an AVX-512 VNNI CPU without AMX (--rows vnni);
--rows amx gives the earlier targets, which stand on a CPU with AMX.

    python3 scripts/bench_targets.py [--qmoe build/tools/qmoe] [--rounds 3] [--peer onednn]
        [--rows vnni|amx] [--jsonl out.jsonl] [--only NAME,...]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

PREFILL = ["prefill", "--repeat", "3"]
A8W8, A8W4 = ["--mode", "a8w8"], ["--mode", "a8w4"]
# groups of 32 (ggml's q8_0 / q4_0 / mxfp4 block): G = K / 32
G32_PREFILL, G32_QWEN3 = ["--groups", "224"], ["--groups", "64"]

# name, qmoe bench arguments, environment, measure, target[, per-channel arguments for "ratio"]
# measure: "peer" speedup_vs_peer, "peak" pct_peak, "mem" pct_mem, "scale" 2T/1T of the same row,
# "ratio" per-channel median ms / this row's median ms
ROWS_VNNI = [
    ("prefill A8W8 % peak", PREFILL + A8W8, {}, "peak", ">= 92%"),
    ("prefill A8W8 vs peer", PREFILL + A8W8, {}, "peer", ">= 1.03x"),
    ("prefill A8W4 % peak", PREFILL + A8W4, {}, "peak", ">= 92%"),
    ("mid64 A8W8 % peak", ["mid64"] + A8W8, {}, "peak", ">= 90%"),
    ("mid64 A8W8 vs peer", ["mid64"] + A8W8, {}, "peer", ">= 1.07x"),
    ("qwen3 A8W8 % peak", ["qwen3"] + A8W8, {}, "peak", ">= 85%"),
    ("qwen3 A8W8 vs peer", ["qwen3"] + A8W8, {}, "peer", ">= 1.35x"),
    ("mid uneven A8W8 % peak", ["mid"] + A8W8, {}, "peak", ">= 80%"),
    ("mid uneven A8W8 vs peer", ["mid"] + A8W8, {}, "peer", ">= 1.0x"),
    ("decode A8W8 % DRAM", ["decode"] + A8W8, {}, "mem", ">= 95%"),
    ("decode A8W4 % DRAM", ["decode"] + A8W4, {}, "mem", ">= 90%"),
    ("G=32 prefill A8W8 / per-channel", PREFILL + A8W8 + G32_PREFILL, {}, "ratio", ">= 0.85x",
     PREFILL + A8W8),
    ("G=32 qwen3 A8W8 / per-channel", ["qwen3"] + A8W8 + G32_QWEN3, {}, "ratio", ">= 0.85x",
     ["qwen3"] + A8W8),
    ("G=32 decode A8W4 / per-channel", ["decode"] + A8W4 + G32_PREFILL, {}, "ratio", ">= 0.85x",
     ["decode"] + A8W4),
    ("prefill A8W8 1 -> 2 threads", PREFILL + A8W8, {}, "scale", ">= 1.9x"),
]

ROWS_AMX = [
    ("mid64 A8W8 vs peer", ["mid64", "--mode", "a8w8"], {}, "peer", ">= 1.3x"),
    ("qwen3 A8W8 vs peer", ["qwen3", "--mode", "a8w8"], {}, "peer", ">= 1.3x"),
    ("decode A8W8 vs peer", ["decode", "--mode", "a8w8"], {}, "peer", ">= 1.1x"),
    ("decode A8W4 vs peer (A8W8)", ["decode", "--mode", "a8w4"], {}, "peer", ">= 1.8x"),
    ("prefill A8W8 vs peer", ["prefill", "--mode", "a8w8", "--repeat", "3"], {}, "peer", ">= 1.5x"),
    ("prefill A8W8 % peak", ["prefill", "--mode", "a8w8", "--repeat", "3"], {}, "peak", ">= 50%"),
    ("prefill A8W4 % peak", ["prefill", "--mode", "a8w4", "--repeat", "3"], {}, "peak", ">= 50%"),
    ("prefill A8W8 raw % peak", ["prefill", "--mode", "a8w8", "--raw", "--repeat", "3"], {}, "peak",
     ">= 40%"),
    ("prefill A8W4 G=K/256 % peak", ["prefill", "--mode", "a8w4", "--groups", "28", "--repeat", "3"],
     {}, "peak", ">= 40%"),
    ("mid (M=512) A8W8 % peak", ["mid", "--mode", "a8w8"], {}, "peak", ">= 30%"),
    ("decode A8W8 % DRAM", ["decode", "--mode", "a8w8"], {}, "mem", ">= 90%"),
    ("decode A8W4 % DRAM", ["decode", "--mode", "a8w4"], {}, "mem", ">= 90%"),
    ("prefill A8W8 1 -> 2 threads", ["prefill", "--mode", "a8w8", "--repeat", "3"], {}, "scale",
     ">= 1.9x"),
    ("avx512_vnni prefill A8W8 % peak", ["prefill", "--mode", "a8w8", "--repeat", "3"],
     {"QMOE_ISA": "avx512_vnni"}, "peak", ">= 80%"),
    ("avx512_vnni prefill A8W4 % peak", ["prefill", "--mode", "a8w4", "--repeat", "3"],
     {"QMOE_ISA": "avx512_vnni"}, "peak", ">= 80%"),
    ("avx512_vnni prefill A8W4 G=K/256 % peak",
     ["prefill", "--mode", "a8w4", "--groups", "28", "--repeat", "3"], {"QMOE_ISA": "avx512_vnni"},
     "peak", ">= 65%"),
]


def bench(qmoe, args, env, threads, peer):
    cmd = [qmoe, "bench", *args, "--threads", str(threads), "--dram-mb", "512"]
    if peer:
        cmd += ["--peer", peer]
    e = dict(os.environ, **env)
    out = subprocess.run(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    if out.returncode != 0:
        raise SystemExit(f"bench_targets: {' '.join(cmd)} failed with {out.returncode}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def value(measure, line, other=None):
    if measure == "peer":
        return line.get("speedup_vs_peer")
    if measure == "peak":
        return line.get("pct_peak")
    if measure == "mem":
        return line.get("pct_mem")
    # "scale": the 1-thread line over this one; "ratio": the per-channel line over this one
    return other["median_ms"] / line["median_ms"] if other else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--qmoe", default="build/tools/qmoe")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--peer", default="onednn", help="onednn or mkl ('' for none)")
    ap.add_argument("--rows", default="vnni", choices=["vnni", "amx"])
    ap.add_argument("--jsonl", help="also write every JSON line here")
    ap.add_argument("--only", help="comma-separated substrings of row names")
    a = ap.parse_args()
    table = ROWS_VNNI if a.rows == "vnni" else ROWS_AMX
    rows = [r for r in table if not a.only or any(s in r[0] for s in a.only.split(","))]
    # rows of one command share its run: with the peer when any of them needs it
    needs_peer = {}
    for r in rows:
        key = (tuple(r[1]), tuple(sorted(r[2].items())))
        needs_peer[key] = needs_peer.get(key, False) or r[3] == "peer"
    got = {r[0]: [] for r in rows}
    times = {r[0]: [] for r in rows}
    sink = open(a.jsonl, "w") if a.jsonl else None
    for rnd in range(a.rounds):
        cache = {}

        def run(args, env, threads, row_name):
            key = (tuple(args), tuple(sorted(env.items())), threads)
            if key not in cache:
                peer = a.peer if threads == a.threads and needs_peer.get(key[:2]) else ""
                cache[key] = bench(a.qmoe, args, env, threads, peer)
                if sink:
                    sink.write(json.dumps(dict(cache[key], target_row=row_name, round=rnd)) + "\n")
            return cache[key]

        for r in rows:
            name, args, env, measure = r[:4]
            line = run(args, env, a.threads, name)
            other = None
            if measure == "scale":
                other = run(args, env, 1, name)
            elif measure == "ratio":
                other = run(r[5], env, a.threads, name)
            got[name].append(value(measure, line, other))
            times[name].append(line["median_ms"])
            print(f"round {rnd + 1}/{a.rounds}: {name}: {got[name][-1]}", file=sys.stderr)
    print(f"| target ({a.threads} threads) | median ms | value: median (min-max) | target |")
    print("|---|---|---|---|")
    for r in rows:
        name, measure, target = r[0], r[3], r[4]
        v = [x for x in got[name] if x is not None]
        unit = "%" if measure in ("peak", "mem") else "x"
        cell = "no peer" if not v else (f"{statistics.median(v):.2f}{unit} "
                                        f"({min(v):.2f}-{max(v):.2f})")
        print(f"| {name} | {statistics.median(times[name]):.2f} | {cell} | {target} |")


if __name__ == "__main__":
    main()
