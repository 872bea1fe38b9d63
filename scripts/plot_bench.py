#!/usr/bin/env python3
"""Plots `qmoe bench` JSON lines: int8 throughput against tokens per expert, one line per
kernel / weight path / mode and per peer, with the roofs measured in the same runs: the int8
peak of the kernel's instruction and the DRAM bandwidth (weights streamed once per call:
GOPS <= bandwidth x 2 x tokens per expert / bytes per weight).

    qmoe bench --shape 8,8,2048,1536 --even ... > bench.jsonl
    python scripts/plot_bench.py bench.jsonl -o docs/performance-bench.png

Needs matplotlib (make bench-venv installs it).
"""

import argparse
import collections
import json
import sys


def load(paths):
    rows = []
    for path in paths:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    rows.append(json.loads(line))
    return rows


def tokens_per_expert(r):
    return r["M"] / r["E"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("jsonl", nargs="+", help="files of qmoe bench JSON lines")
    ap.add_argument("-o", "--output", default="bench.png", help="the PNG to write")
    ap.add_argument("--title", default=None)
    args = ap.parse_args(argv)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = load(args.jsonl)
    if not rows:
        print("plot_bench: no JSON lines found", file=sys.stderr)
        return 1

    series = collections.defaultdict(dict)  # label -> {tokens: best gops}
    peers = collections.defaultdict(dict)
    peak, dram = {}, 0.0
    bytes_per_weight = {}
    for r in rows:
        t = tokens_per_expert(r)
        label = f"qmoe {r['kernel']} {r['mode']} {r.get('weights', 'raw')}"
        if r.get("groups"):
            label += f" G={r['groups']}"
        series[label][t] = max(series[label].get(t, 0.0), r["int8_gops"])
        if "peer" in r:
            plabel = f"{r['peer']} int8 GEMM (bare)"
            peers[plabel][t] = max(peers[plabel].get(t, 0.0), r["peer_int8_gops"])
        peak[r["kernel"]] = max(peak.get(r["kernel"], 0.0), r["peak_int8_gops"])
        dram = max(dram, r["dram_read_gbps"])
        bytes_per_weight[r["mode"]] = 0.5 if r["mode"] == "a8w4" else 1.0

    fig, ax = plt.subplots(figsize=(9, 5.5))
    for label, pts in sorted(series.items()):
        xs = sorted(pts)
        ax.plot(xs, [pts[x] for x in xs], marker="o", label=label)
    for label, pts in sorted(peers.items()):
        xs = sorted(pts)
        ax.plot(xs, [pts[x] for x in xs], marker="s", linestyle="--", color="black", label=label)
    allx = sorted({x for pts in list(series.values()) + list(peers.values()) for x in pts})
    lo, hi = min(allx), max(allx)
    for kernel, p in sorted(peak.items()):
        ax.axhline(p, color="gray", linestyle=":", linewidth=1)
        ax.annotate(f"{kernel} peak {p / 1000:.1f} TOPS", (lo, p), textcoords="offset points",
                    xytext=(2, 3), fontsize=8, color="gray")
    xs = [lo * (hi / lo) ** (i / 100) for i in range(101)] if hi > lo else [lo]
    for mode, b in sorted(bytes_per_weight.items()):
        ax.plot(xs, [dram * 2 * x / b for x in xs], color="gray", linestyle="-.", linewidth=1)
        ax.annotate(f"DRAM {dram:.0f} GB/s roof ({mode})", (xs[0], dram * 2 * xs[0] / b),
                    textcoords="offset points", xytext=(2, -10), fontsize=8, color="gray")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("tokens per expert")
    ax.set_ylabel("int8 GOPS (2·M·K·N / time)")
    top = max(list(peak.values()) + [1.0])
    ax.set_ylim(bottom=max(1.0, min(min(p.values()) for p in series.values()) / 2), top=top * 2)
    first = rows[0]
    ax.set_title(args.title or f"qmoe bench: K={first['K']} N={first['N']}, "
                 f"{first['threads']} threads")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(args.output, dpi=110)
    print(f"plot_bench: wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
