#!/usr/bin/env python3
"""The targets of expert parallelism (docs/performance.md, "Expert parallelism (MPI)"), in one run.

Each round runs, one after the other, `qmoe bench moe --ep` at 2 ranks x 1 thread with the
shared-memory transport and with MPI messages only, and the whole layer in one process with 2
threads (`--bind-to none`: mpirun would put both threads on one core), for float32 and bf16
rows. Keeps every JSON line (--jsonl FILE) and prints two Markdown tables: dispatch + combine
against the bare MPI_Alltoallv of the same bytes (target >= 0.8) and the layer at 2 ranks over
one process (target <= 1.15x), medians over the rounds with [min-max].

    python3 scripts/bench_ep.py [--qmoe build/tools/qmoe] [--rounds 3] [--tokens 64,512,2048]
        [--experts 32] [--seconds 2] [--jsonl out.jsonl]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = ["--allow-run-as-root"] if os.geteuid() == 0 else []


def run(qmoe, ranks, extra, args):
    """One mpirun of the benchmark; its JSON lines."""
    cmd = ["mpirun", *ROOT, "--oversubscribe", "--mca", "mpi_yield_when_idle", "1"]
    if ranks == 1:
        cmd += ["--bind-to", "none"]
    cmd += ["-np", str(ranks), qmoe, "bench", "moe", "--ep", str(ranks), "--model", "qwen3-30b-a3b",
            "--experts", str(args.experts), "--tokens", args.tokens, "--seconds", str(args.seconds),
            *extra]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=False)
    if p.returncode != 0:
        sys.exit("bench_ep: %s failed (%d):\n%s" % (" ".join(cmd), p.returncode, p.stderr[-2000:]))
    return [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]


def spread(values, fmt):
    return (fmt + " [" + fmt + "-" + fmt + "]") % (statistics.median(values), min(values), max(values))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--qmoe", default="build/tools/qmoe")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", default="64,512,2048")
    ap.add_argument("--experts", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=2)
    ap.add_argument("--jsonl")
    args = ap.parse_args()
    configs = [("shared memory", 2, []), ("messages", 2, ["--transport", "messages"]),
               ("one process", 1, ["--threads", "2"])]
    lines = []
    for r in range(args.rounds):
        for dtype in ("fp32", "bf16"):
            for name, ranks, extra in configs:
                for d in run(args.qmoe, ranks, extra + ["--dtype", dtype], args):
                    d["round"], d["config"] = r, name
                    lines.append(d)
    if args.jsonl:
        with open(args.jsonl, "w") as f:
            f.writelines(json.dumps(d) + "\n" for d in lines)

    def pick(dtype, tokens, config):
        return [d for d in lines if d["dtype"] == dtype and d["tokens"] == tokens and d["config"] == config]

    cases = sorted({(d["dtype"], d["tokens"]) for d in lines}, key=lambda c: (c[0] != "fp32", c[1]))
    print("| tokens | rows | transport | dispatch ms | combine ms | bare both ways ms | vs_alltoallv (>= 0.8) |")
    print("|---|---|---|---|---|---|---|")
    for transport in ("shared memory", "messages"):
        for dtype, tokens in cases:
            ds = pick(dtype, tokens, transport)
            print("| %d | %s | %s | %s | %s | %s | %s |" % (
                tokens, dtype, transport, spread([d["dispatch_ms"] for d in ds], "%.2f"),
                spread([d["combine_ms"] for d in ds], "%.2f"), spread([d["alltoallv_ms"] for d in ds], "%.2f"),
                spread([d["vs_alltoallv"] for d in ds], "%.2f")))
    print()
    print("| tokens | dtype | 2 ranks, shared memory ms | 2 ranks, messages ms | one process, 2 threads ms "
          "| ratio shared / messages (<= 1.15) |")
    print("|---|---|---|---|---|---|")
    for dtype, tokens in cases:
        shm = [d["layer_ms"] for d in pick(dtype, tokens, "shared memory")]
        msg = [d["layer_ms"] for d in pick(dtype, tokens, "messages")]
        one = [d["one_process_layer_ms"] for d in pick(dtype, tokens, "one process")]
        m1 = statistics.median(one)
        print("| %d | %s | %s | %s | %s | %.2f / %.2f |" % (
            tokens, dtype, spread(shm, "%.1f"), spread(msg, "%.1f"), spread(one, "%.1f"),
            statistics.median(shm) / m1, statistics.median(msg) / m1))


if __name__ == "__main__":
    main()
