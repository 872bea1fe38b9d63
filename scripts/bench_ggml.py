#!/usr/bin/env python3
"""The QMOE ggml backend against llama.cpp's CPU backend, side by side, in one run (make bench-ggml;
issue 22, item 6).

1. test-backend-ops perf -o MUL_MAT_ID at its Qwen3-30B-A3B cases (128 experts, top-8, 2048 -> 768;
   q8_0, q4_0, q4_K) and gpt-oss-20b cases (32 experts, top-4, 2880 -> 2880, mxfp4), -b CPU and
   -b QMOE alternating, GFLOPS. test-backend-ops gives every backend hardware_concurrency() / 2
   threads; to give both --threads, a two-line shim (get_nprocs, which libstdc++'s
   hardware_concurrency reads) is preloaded.
2. llama-bench -p 512 -n 32 -t THREADS -r 1 on a Qwen3-30B-A3B-shaped model (hidden 2048, 32/4 heads
   of 128, 128 experts, top-8, expert width 768, 4 layers, random weights; Q8_0, Q4_0, Q4_K_M from
   one F16 file by llama-quantize, cached under --models), with llama.cpp's CPU at --repack 1 and
   --repack 0 and with the backend (GGML_BACKEND_PATH), alternating; t/s, and peak RSS of the process
   (the kernel's ru_maxrss: mmap'd file pages plus any copy) against the GGUF file's size, and the
   load's wall time (a -p 0 -n 1 run of the same configuration: the backend converts every expert
   weight at load). The type
   MXFP4_MOE (in the default --model-types) is a gpt-oss-20b-shaped model instead (hidden 2880,
   64/8 heads of 64, 32 experts, top-4, expert width 2880, 4 layers; biases, sinks, SWIGLU_OAI),
   its experts MXFP4 and the rest Q8_0, as gpt-oss is published.

Every run, CPU and QMOE alike, gets the same OMP_WAIT_POLICY (--omp-wait-policy, default: left
unset, llama.cpp's own default, under which its OpenMP threads spin a while between regions). The
backend runs qmoe on that same OpenMP team, so the spinning threads are the ones it uses; with
passive, both backends were slower (docs/ggml.md, "Measured side by side").

Each configuration runs once per round, the order rotated every round, so a noisy minute hits every
configuration alike; the table shows the median and the spread (min-max) over the rounds and the
ratio QMOE / llama.cpp's best CPU setting against the issue's targets. Every measurement is also a
JSON line (--out DIR/bench-ggml.jsonl).

usage: bench_ggml.py --bin LLAMA_BIN_DIR --lib LIBGGML_QMOE --models DIR --out DIR [--rounds 3]
       [--threads 2] [--batches 1,8,64,512] [--skip-ops] [--skip-model] [--model-types Q8_0,...]
       (PYTHONPATH=<tree>/gguf-py and numpy, for writing the model)
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MAKE_MODEL = os.path.join(HERE, "..", "tests", "ggml", "make_moe_gguf.py")
QWEN3 = dict(hidden=2048, experts=128, used=8, expert_ffn=768, layers=4, heads=32, kv_heads=4,
             head_dim=128)
# gpt-oss-20b's layer (hidden 2880, 64 / 8 heads of 64, 32 experts, top-4, expert width 2880: its
# biases, sinks and SWIGLU_OAI), 4 layers, its experts MXFP4 (llama-quantize MXFP4_MOE)
GPT_OSS = dict(arch="gpt-oss", hidden=2880, experts=32, used=4, expert_ffn=2880, layers=4, heads=64,
               kv_heads=8, head_dim=64)
# the model each --model-types entry is made from: its shape and file name stem
SHAPES = {"MXFP4_MOE": (GPT_OSS, "gpt-oss-20b-shape")}
DEFAULT_SHAPE = (QWEN3, "qwen3-30b-a3b-shape")
OPS_TYPES = ["q8_0", "q4_0", "q4_K"]
# MUL_MAT_ID targets (issue 22): at batch >= 64 by type, at batch 1-8 for every type
OPS_TARGET_LARGE = {"q8_0": 8.0, "q4_0": 8.0, "q4_K": 2.5}
OPS_TARGET_SMALL = 1.2
TARGET_PP, TARGET_TG, TARGET_RSS = 2.0, 1.3, 1.15


def median_spread(xs):
    return statistics.median(xs), min(xs), max(xs)


def fmt(xs, digits=1):
    if not xs:
        return "n/a"
    m, lo, hi = median_spread(xs)
    return f"{m:.{digits}f} ({lo:.{digits}f}-{hi:.{digits}f})"


def verdict(ratio, target):
    return "met" if ratio >= target else "not met"


def threads_shim(out, threads):
    """A preload library whose get_nprocs() answers 2 * threads, or None without a C compiler."""
    src = os.path.join(out, "nprocs_shim.c")
    lib = os.path.join(out, f"nprocs_shim_{threads}.so")
    with open(src, "w") as f:
        f.write(f"int get_nprocs(void);\nint get_nprocs(void) {{ return {2 * threads}; }}\n")
    rc = subprocess.call(["cc", "-shared", "-fPIC", "-O2", "-o", lib, src],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return lib if rc == 0 else None


OPS_LINE = re.compile(r"^\s*MUL_MAT_ID\(type_a=(\w+),type_b=f32,n_mats=(\d+),n_used=(\d+),b=0,m=(\d+),"
                      r"n=(\d+),k=(\d+),[^)]*\):\s+(.*)$")


def run_ops(tbo, lib, backend, env, batches, logpath):
    """{(type, experts, used, m, n, k): GFLOPS or None (not supported)} of one test-backend-ops run."""
    ns = "|".join(str(b) for b in batches)
    qwen = f"type_a=({'|'.join(OPS_TYPES)}),type_b=f32,n_mats=128,n_used=8,b=0,m=768,n=({ns}),k=2048,"
    oss = f"type_a=mxfp4,type_b=f32,n_mats=32,n_used=4,b=0,m=2880,n=({ns}),k=2880,"
    cmd = [tbo, "perf", "-b", backend, "-o", "MUL_MAT_ID", "-p", f"({qwen})|({oss})"]
    e = dict(env)
    if backend == "QMOE":
        e["GGML_BACKEND_PATH"] = lib
    with open(logpath, "w") as f:
        rc = subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT, env=e)
    text = re.sub(r"\x1b\[[0-9;]*m", "", open(logpath).read())
    res = {}
    for line in text.splitlines():
        m = OPS_LINE.match(line)
        if not m:
            continue
        key = (m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4)), int(m.group(5)),
               int(m.group(6)))
        g = re.search(r"([0-9.]+) (G|T)FLOPS", m.group(7))
        res[key] = (float(g.group(1)) * (1000 if g.group(2) == "T" else 1)) if g else None
    if rc != 0 and not res:
        raise RuntimeError(f"{' '.join(cmd)} exited {rc} (log: {logpath})")
    return res


def bench_ops(a, emit):
    tbo = os.path.join(a.bin, "test-backend-ops")
    env = dict(os.environ)
    env.pop("GGML_BACKEND_PATH", None)
    shim = threads_shim(a.out, a.threads)
    if shim:
        env["LD_PRELOAD"] = shim
        note = f"{a.threads} threads each (get_nprocs shim)"
    else:
        note = "hardware_concurrency() / 2 threads each (no C compiler for the shim)"
    if a.omp_wait_policy != "default":  # the same for both backends, as in bench_model
        env["OMP_WAIT_POLICY"] = a.omp_wait_policy
    samples = {}
    for r in range(a.rounds):
        order = ["CPU", "QMOE"] if r % 2 == 0 else ["QMOE", "CPU"]
        for backend in order:
            log = os.path.join(a.out, f"ops-{backend}-{r}.log")
            for key, g in run_ops(tbo, os.path.realpath(a.lib), backend, env, a.batches, log).items():
                samples.setdefault(key, {}).setdefault(backend, []).append(g)
                emit({"bench": "ggml_mul_mat_id", "backend": backend, "round": r, "type": key[0],
                      "experts": key[1], "used": key[2], "m": key[3], "n": key[4], "k": key[5],
                      "gflops": g, "threads": a.threads if shim else None})
    print(f"\n### test-backend-ops perf -o MUL_MAT_ID, GFLOPS, median (min-max) of {a.rounds} rounds, "
          f"{note}\n")
    print("| case | type | batch | CPU | QMOE | QMOE / CPU | target |")
    print("|---|---|---|---|---|---|---|")
    for key in sorted(samples, key=lambda k: (k[1] != 128, k[0], k[4])):
        t, e, u, m, n, k = key
        cpu = [g for g in samples[key].get("CPU", []) if g is not None]
        qm = [g for g in samples[key].get("QMOE", []) if g is not None]
        case = "Qwen3-30B-A3B" if e == 128 else "gpt-oss-20b"
        if cpu and qm:
            ratio = statistics.median(qm) / statistics.median(cpu)
            target = (OPS_TARGET_LARGE.get(t) if n >= 64 else OPS_TARGET_SMALL if n <= 8 else None)
            tgt = f">= {target:g}x: {verdict(ratio, target)}" if target and e == 128 else "-"
            rs = f"{ratio:.2f}x"
        else:
            rs = "n/a"
            tgt = "QMOE does not take it" if cpu else "-"
        print(f"| {case} {e}/{u} {k}->{m} | {t} | {n} | {fmt(cpu)} | {fmt(qm) if qm else 'not supported'} "
              f"| {rs} | {tgt} |")


def ensure_models(a):
    os.makedirs(a.models, exist_ok=True)
    paths = {t: os.path.join(a.models, f"{SHAPES.get(t, DEFAULT_SHAPE)[1]}-{t}.gguf") for t in a.model_types}
    missing = [t for t, p in paths.items() if not os.path.exists(p)]
    for shape, stem in {SHAPES.get(t, DEFAULT_SHAPE)[1]: SHAPES.get(t, DEFAULT_SHAPE) for t in missing}.values():
        f16 = os.path.join(a.models, f"{stem}-F16.gguf")
        args = [sys.executable, MAKE_MODEL, f16 + ".tmp", "--type", "f16"]
        for k, v in shape.items():
            args += ["--" + k.replace("_", "-"), str(v)]
        print(f"bench-ggml: writing {f16} ({' '.join(args[4:])})", flush=True)
        subprocess.check_call(args)
        os.replace(f16 + ".tmp", f16)
        for t in missing:
            if SHAPES.get(t, DEFAULT_SHAPE)[1] != stem:
                continue
            print(f"bench-ggml: llama-quantize {t}", flush=True)
            with open(os.path.join(a.models, f"quantize-{t}.log"), "w") as f:
                subprocess.check_call([os.path.join(a.bin, "llama-quantize"), f16, paths[t] + ".tmp", t,
                                       str(a.threads)], stdout=f, stderr=subprocess.STDOUT)
            os.replace(paths[t] + ".tmp", paths[t])
        os.remove(f16)  # 4.9 GB (gpt-oss's: 6.6 GB), only the quantized files are kept
    return paths


def run_llama_bench(a, model, config, logpath, prompt=512, gen=32):
    """({"pp512": t/s, "tg32": t/s}, peak RSS in bytes, wall seconds) of one llama-bench process
    (-p prompt -n gen; -p 0 -n 1 is the load, almost all of its wall time)."""
    cmd = [os.path.join(a.bin, "llama-bench"), "-m", model, "-p", str(prompt), "-n", str(gen),
           "-t", str(a.threads), "-r", "1", "-o", "jsonl"]
    env = dict(os.environ)
    env.pop("GGML_BACKEND_PATH", None)
    # One policy for every configuration: QMOE needs passive (docs/ggml.md), and llama.cpp's own
    # spinning threads lose far more than that on a loaded machine (measured: tg32 1.4-47 t/s
    # active against QMOE's passive 105-114 on Q4_K_M, whose experts QMOE does not even take).
    if a.omp_wait_policy != "default":
        env["OMP_WAIT_POLICY"] = a.omp_wait_policy
    if config == "QMOE":
        env["GGML_BACKEND_PATH"] = os.path.realpath(a.lib)
    else:
        cmd += ["--repack", "1" if config == "CPU repack 1" else "0"]
    with open(logpath, "w") as f, tempfile.TemporaryFile() as out:
        t0 = time.monotonic()
        p = subprocess.Popen(cmd, stdout=out, stderr=f, env=env)
        _, status, usage = os.wait4(p.pid, 0)
        wall = time.monotonic() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read().decode()
        f.write(text)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode} (log: {logpath})")
    res = {}
    for line in text.splitlines():
        if line.startswith("{"):
            j = json.loads(line)
            name = f"pp{j['n_prompt']}" if j["n_prompt"] else f"tg{j['n_gen']}"
            res[name] = j["avg_ts"]
            if ("QMOE" in j["backends"]) != (config == "QMOE"):
                raise RuntimeError(f"llama-bench reports backends {j['backends']} for {config} "
                                   f"(log: {logpath})")
    want = ({f"pp{prompt}"} if prompt else set()) | ({f"tg{gen}"} if gen else set())
    if set(res) != want:
        raise RuntimeError(f"llama-bench gave {sorted(res)}, not {sorted(want)} (log: {logpath})")
    return res, usage.ru_maxrss * 1024, wall


def bench_model(a, emit):
    paths = ensure_models(a)
    configs = ["CPU repack 1", "CPU repack 0", "QMOE"]
    samples = {}
    for r in range(a.rounds):
        for t in a.model_types:
            for i in range(len(configs)):
                c = configs[(i + r) % len(configs)]
                log = os.path.join(a.out, f"llama-bench-{t}-{c.replace(' ', '')}-{r}.log")
                ts, rss, _ = run_llama_bench(a, paths[t], c, log)
                # the load alone: the wall time of -p 0 -n 1 (QMOE converts every expert weight)
                _, _, load = run_llama_bench(a, paths[t], c, log.replace(".log", "-load.log"), 0, 1)
                d = samples.setdefault((t, c), {"pp512": [], "tg32": [], "rss": [], "load": []})
                d["pp512"].append(ts.get("pp512"))
                d["tg32"].append(ts.get("tg32"))
                d["rss"].append(rss)
                d["load"].append(load)
                emit({"bench": "ggml_llama_bench", "model": os.path.basename(paths[t]), "type": t,
                      "config": c, "round": r, "threads": a.threads, "pp512_ts": ts.get("pp512"),
                      "tg32_ts": ts.get("tg32"), "peak_rss_bytes": rss, "load_s": load,
                      "gguf_bytes": os.path.getsize(paths[t])})
    print(f"\n### llama-bench -p 512 -n 32 -t {a.threads}, Qwen3-30B-A3B-shaped model (MXFP4_MOE: "
          f"gpt-oss-20b-shaped; 4 layers, random weights), t/s, median (min-max) of {a.rounds} rounds\n")
    print("| type | config | pp512 | tg32 | peak RSS / GGUF | load, s (-p 0 -n 1 wall) |")
    print("|---|---|---|---|---|---|")
    for t in a.model_types:
        size = os.path.getsize(paths[t])
        for c in configs:
            d = samples[(t, c)]
            print(f"| {t} ({size / 2**30:.2f} GiB) | {c} | {fmt(d['pp512'])} | {fmt(d['tg32'])} | "
                  f"{fmt([x / size for x in d['rss']], 2)} | {fmt(d['load'])} |")
    print("\n| type | pp512 QMOE / best CPU | tg32 QMOE / best CPU | peak RSS QMOE / GGUF |")
    print("|---|---|---|---|")
    for t in a.model_types:
        size = os.path.getsize(paths[t])
        q = samples[(t, "QMOE")]
        line = f"| {t} "
        for name, target in (("pp512", TARGET_PP), ("tg32", TARGET_TG)):
            best = max(statistics.median(samples[(t, c)][name]) for c in configs[:2])
            which = max(configs[:2], key=lambda c: statistics.median(samples[(t, c)][name]))
            ratio = statistics.median(q[name]) / best
            # the issue's targets are the Qwen3-shaped files'; gpt-oss's ratios are for reading
            line += (f"| {ratio:.2f}x of {which} " +
                     ("" if t in SHAPES else f"(>= {target:g}x: {verdict(ratio, target)}) "))
        rss = statistics.median(q["rss"]) / size
        line += f"| {rss:.2f}x " + ("" if t in SHAPES else
                                    f"(<= {TARGET_RSS:g}x: {'met' if rss <= TARGET_RSS else 'not met'}) ") + "|"
        print(line)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--models", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batches", default="1,8,64,512")
    ap.add_argument("--model-types", default="Q8_0,Q4_0,Q4_K_M,MXFP4_MOE")
    ap.add_argument("--omp-wait-policy", default="default", choices=["passive", "active", "default"],
                    help="OMP_WAIT_POLICY of every run, CPU and QMOE alike (default: unset)")
    ap.add_argument("--skip-ops", action="store_true")
    ap.add_argument("--skip-model", action="store_true")
    a = ap.parse_args()
    a.batches = [int(b) for b in a.batches.split(",")]
    a.model_types = a.model_types.split(",")
    if a.rounds < 1 or a.threads < 1:
        ap.error("--rounds and --threads must be at least 1")
    os.makedirs(a.out, exist_ok=True)
    jsonl = os.path.join(a.out, "bench-ggml.jsonl")
    start = time.time()
    with open(jsonl, "w") as f:
        def emit(d):
            f.write(json.dumps(d) + "\n")
            f.flush()
        with open("/proc/loadavg") as la:
            load = la.read().split()[:3]
        print(f"bench-ggml: {a.rounds} rounds, {a.threads} threads, OMP_WAIT_POLICY {a.omp_wait_policy} "
              f"for every run, load average at the start {' '.join(load)} (a shared machine is noisy: "
              f"read the spread)", flush=True)
        if not a.skip_ops:
            bench_ops(a, emit)
        if not a.skip_model:
            bench_model(a, emit)
    print(f"\nbench-ggml: {time.time() - start:.0f} s; JSON lines: {jsonl}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (RuntimeError, subprocess.CalledProcessError) as e:
        print(f"bench-ggml: FAILED: {e}", file=sys.stderr)
        sys.exit(1)
