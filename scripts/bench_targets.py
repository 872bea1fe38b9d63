#!/usr/bin/env python3
"""The speed targets of prepacked weights (docs/performance.md), measured in one run.

Runs `qmoe bench` for each target row ROUNDS times (rows interleaved, so a noisy minute hits
every row alike), keeps every JSON line (--jsonl FILE) and prints a Markdown table: the median
over the rounds, the spread (min-max), and the ratio the target is stated in (speedup against
the peer's bare GEMM timed in the same process, % of the peak or bandwidth measured in the same
process, or 2-thread over 1-thread speedup).

    python3 scripts/bench_targets.py [--qmoe build/tools/qmoe] [--rounds 3] [--peer onednn]
        [--jsonl out.jsonl] [--only NAME,...]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

# name, qmoe bench arguments, environment, measure, target
# measure: "peer" speedup_vs_peer, "peak" pct_peak, "mem" pct_mem, "scale" 2T/1T of the same row
ROWS = [
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


def value(measure, line, one_thread=None):
    if measure == "peer":
        return line.get("speedup_vs_peer")
    if measure == "peak":
        return line.get("pct_peak")
    if measure == "mem":
        return line.get("pct_mem")
    return one_thread["median_ms"] / line["median_ms"] if one_thread else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--qmoe", default="build/tools/qmoe")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--peer", default="onednn", help="onednn or mkl ('' for none)")
    ap.add_argument("--jsonl", help="also write every JSON line here")
    ap.add_argument("--only", help="comma-separated substrings of row names")
    a = ap.parse_args()
    rows = [r for r in ROWS if not a.only or any(s in r[0] for s in a.only.split(","))]
    got = {r[0]: [] for r in rows}
    times = {r[0]: [] for r in rows}
    sink = open(a.jsonl, "w") if a.jsonl else None
    for rnd in range(a.rounds):
        for name, args, env, measure, _ in rows:
            peer = a.peer if measure == "peer" else ""
            line = bench(a.qmoe, args, env, a.threads, peer)
            one = bench(a.qmoe, args, env, 1, "") if measure == "scale" else None
            for l in (line, one):
                if l and sink:
                    sink.write(json.dumps(dict(l, target_row=name, round=rnd)) + "\n")
            got[name].append(value(measure, line, one))
            times[name].append(line["median_ms"])
            print(f"round {rnd + 1}/{a.rounds}: {name}: {got[name][-1]}", file=sys.stderr)
    print(f"| target ({a.threads} threads) | median ms | value: median (min-max) | target |")
    print("|---|---|---|---|")
    for name, args, env, measure, target in rows:
        v = [x for x in got[name] if x is not None]
        unit = "%" if measure in ("peak", "mem") else "x"
        cell = "no peer" if not v else (f"{statistics.median(v):.2f}{unit} "
                                        f"({min(v):.2f}-{max(v):.2f})")
        print(f"| {name} | {statistics.median(times[name]):.2f} | {cell} | {target} |")


if __name__ == "__main__":
    main()
