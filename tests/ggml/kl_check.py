#!/usr/bin/env python3
"""End-to-end check of the QMOE backend inside llama.cpp (issue 22, item 5): next-token
distributions with the backend must differ from llama.cpp's CPU backend on the same file by no
more than llama.cpp's CPU differs from itself across one quantization step.

A model of Qwen3-MoE's structure with random weights (make_moe_gguf.py, F16) is quantized by
llama-quantize to Q8_0, Q4_0 and Q4_K_M. llama-perplexity --kl-divergence-base writes a run's
next-token log-probabilities over a fixed token text, --kl-divergence compares a second run with
them. The bound is (a) KL(CPU F16 -> CPU Q8_0); the check is, for each type, (b) KL(CPU type ->
QMOE type) <= (a), mean over all the distributions.

The same for gpt-oss's structure (make_moe_gguf.py --arch gpt-oss: expert and attention biases,
attention sinks, the clamped SwiGLU of llama.cpp's SWIGLU_OAI), its experts MXFP4 through
llama-quantize's MXFP4_MOE (the rest Q8_0): its own bound (a') KL(CPU F16 -> CPU Q8_0) of that
model, and (b') KL(CPU MXFP4_MOE -> QMOE MXFP4_MOE) <= (a').

It checks its own teeth: the distributions must be peaked (printed: top-1 probability and
entropy against the uniform one), the runs with the backend must have put the expert tensors in
QMOE buffers (llama.cpp's "QMOE model buffer size" line), and a negative control, the QMOE run on a
Q8_0 file whose expert block scales are perturbed by +-2 % (an error ggml's NMSE threshold lets
pass), must exceed the bound.

usage: kl_check.py LLAMA_BIN_DIR LIBGGML_QMOE OUT_DIR   (PYTHONPATH=<tree>/gguf-py, numpy)
Prints one line per result and exits 0 when the check passed, 1 when it failed. For exploring
only, QMOE_KL_CHUNKS, QMOE_KL_SEED, QMOE_KL_LOGIT_SCALE (any key of MODEL, upper case) change
the setup; make test uses none of them.
"""
import os
import re
import shutil
import subprocess
import sys
import time

import numpy as np
import gguf

HERE = os.path.dirname(os.path.abspath(__file__))
# Sizes where quantization matters (every row a multiple of 256, for the K-quants) and the
# whole check stays within a minute or two on 2 cores.
MODEL = dict(hidden=512, experts=32, used=4, expert_ffn=256, layers=4, heads=8, kv_heads=4,
             head_dim=64, vocab=1024, logit_scale=4.0, seed=1)
CTX, CHUNKS, THREADS = 256, int(os.environ.get("QMOE_KL_CHUNKS", 32)), 2
TYPES = ["Q8_0", "Q4_0", "Q4_K_M"]
# gpt-oss: the sizes above, its expert types (MXFP4 experts, Q8_0 elsewhere)
OSS_TYPES = ["MXFP4_MOE"]
# The types whose expert tensors the backend must take (the run fails without them); for the
# others the line says where the expert tensors went.
REQUIRED_ON_QMOE = {"Q8_0", "Q4_0", "Q4_K_M", "MXFP4_MOE"}
PERTURB = 0.02
EXPERTS = re.compile(r"ffn_(gate|up|down|gate_up)_exps\.weight$")


def log(msg):
    print("qmoe: ggml: KL: " + msg, flush=True)


def run(cmd, logpath, env=None):
    with open(logpath, "w") as f:
        rc = subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT, env=env)
    if rc != 0:
        with open(logpath) as f:
            tail = f.readlines()[-20:]
        sys.stderr.write("".join(tail))
        raise RuntimeError(f"{' '.join(cmd)} exited {rc} (log: {logpath})")
    with open(logpath) as f:
        return f.read()


def write_text(path, n_chars, seed):
    # lowercase letters tokenize to the model's one- and two-letter pieces (make_moe_gguf.py)
    rng = np.random.default_rng(seed)
    letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz", dtype=np.uint8)
    with open(path, "wb") as f:
        f.write(letters[rng.integers(0, 26, n_chars)].tobytes())


def read_log_probs(path):
    """The base file of llama-perplexity (tools/perplexity: "_logits_", n_ctx, n_vocab, n_chunk,
    the tokens, then per scored position 2 floats (scale, min) and n_vocab uint16 levels,
    padded to an even count): log-probabilities, one row per scored position."""
    raw = open(path, "rb").read()
    if raw[:8] != b"_logits_":
        raise RuntimeError(f"{path} is not a llama-perplexity log-probability file")
    n_ctx, n_vocab, n_chunk = (int(v) for v in np.frombuffer(raw, np.int32, 3, 8))
    nv = 2 * ((n_vocab + 1) // 2) + 4
    rows = n_chunk * (n_ctx - 1 - n_ctx // 2)
    a = np.frombuffer(raw, np.uint16, rows * nv, 20 + 4 * n_ctx * n_chunk).reshape(rows, nv)
    head = a[:, :4].copy().view(np.float32)
    return a[:, 4:4 + n_vocab] * head[:, :1] + head[:, 1:2]


def peakedness(path):
    lp = read_log_probs(path)
    # llama-perplexity keeps 16 nats below the top (its KL ignores the rest too)
    p = np.where(lp > -16, np.exp(lp), 0.0)
    entropy = -(p * np.where(p > 0, lp, 0.0)).sum(axis=1)
    return lp.shape[0], float(p.max(axis=1).mean()), float(entropy.mean()), float(np.log(lp.shape[1]))


# llama-perplexity's per-chunk line: chunk, PPL ± u, ln ratio ± u, KL ± u, Δp RMS ± u %, same top ± u %
# (running means over the chunks so far)
P = r"(-?[0-9.]+)\s+±\s+([0-9.]+)"
CHUNK_LINE = re.compile(rf"^\s*(\d+)\s+{P}\s+{P}\s+{P}\s+{P}\s+%\s+{P}\s+%\s*$", re.M)


def kl_of(text, chunks):
    """(mean KL, its uncertainty, same top %) of a --kl-divergence run, or None. The final
    statistics first; the last chunk's running means where they are missing: llama.cpp's
    logger is asynchronous and leaked at exit (common/log.cpp), so the end of the output is
    sometimes lost."""
    m = re.search(r"Mean\s+KLD:\s+(-?[0-9.]+)\s+±\s+([0-9.]+)", text)
    top = re.search(r"Same top p:\s+([0-9.]+)", text)
    if m and top:
        return float(m.group(1)), float(m.group(2)), float(top.group(1))
    last = [c for c in CHUNK_LINE.findall(text) if int(c[0]) == chunks]
    if last:
        return float(last[-1][5]), float(last[-1][6]), float(last[-1][9])
    return None


def qmoe_buffer_mib(text):
    # the last one is the real load (common's parameter fitting loads once without data first)
    sizes = re.findall(r"QMOE model buffer size =\s+([0-9.]+) MiB", text)
    return float(sizes[-1]) if sizes else 0.0


def expert_tensors(path):
    """{type name: bytes} of the file's expert tensors, and their total."""
    by_type = {}
    for t in gguf.GGUFReader(path).tensors:
        if EXPERTS.search(t.name):
            name = t.tensor_type.name.lower()
            by_type[name] = by_type.get(name, 0) + int(t.n_bytes)
    return by_type


def perturb_expert_scales(src, dst, rel, seed):
    """A copy of a Q8_0 file whose expert blocks' fp16 scales are multiplied by 1 +- rel."""
    shutil.copyfile(src, dst)
    reader = gguf.GGUFReader(dst, "r+")
    rng = np.random.default_rng(seed)
    block = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType.Q8_0][1]  # 2-byte d + 32 int8
    for t in reader.tensors:
        if EXPERTS.search(t.name) and t.tensor_type == gguf.GGMLQuantizationType.Q8_0:
            raw = t.data.reshape(-1)
            d = raw.reshape(-1, block)[:, :2].copy().view(np.float16)
            sign = rng.choice([-1.0, 1.0], size=d.shape)
            d = (d.astype(np.float32) * (1 + rel * sign)).astype(np.float16)
            raw.reshape(-1, block)[:, :2] = d.view(np.uint8)
    reader.data.flush()
    del reader


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    bin_dir, lib, out = sys.argv[1], os.path.realpath(sys.argv[2]), sys.argv[3]
    for k in list(MODEL):  # exploration only: QMOE_KL_SEED=2 etc.
        if os.environ.get("QMOE_KL_" + k.upper()):
            MODEL[k] = type(MODEL[k])(os.environ["QMOE_KL_" + k.upper()])
    os.makedirs(out, exist_ok=True)
    start = time.time()
    quantize = os.path.join(bin_dir, "llama-quantize")
    ppl = os.path.join(bin_dir, "llama-perplexity")
    for f in (quantize, ppl, lib):
        if not os.path.exists(f):
            log(f"{f} is missing")
            return 1
    text = os.path.join(out, "tokens.txt")
    write_text(text, 4 * CTX * CHUNKS, MODEL["seed"])

    def make(arch, types):
        """{type: path} of the model with arch's structure: F16, Q8_0 (the bound's) and types."""
        pre = "moe" if arch == "qwen3moe" else arch
        f16 = os.path.join(out, f"{pre}-F16.gguf")
        args = [sys.executable, os.path.join(HERE, "make_moe_gguf.py"), f16, "--type", "f16",
                "--arch", arch]
        for k, v in MODEL.items():
            args += ["--" + k.replace("_", "-"), str(v)]
        run(args, os.path.join(out, f"make-{pre}.log"))
        files = {"F16": f16}
        for t in ["Q8_0"] + [t for t in types if t != "Q8_0"]:
            files[t] = os.path.join(out, f"{pre}-{t}.gguf")
            run([quantize, f16, files[t], t, str(THREADS)], os.path.join(out, f"quantize-{pre}-{t}.log"))
        return files

    common = ["-c", str(CTX), "-t", str(THREADS), "-v"]  # -v: the load log (buffer sizes)
    cpu_env = dict(os.environ)
    cpu_env.pop("GGML_BACKEND_PATH", None)
    # The tools built on common/ load a backend named by GGML_BACKEND_PATH only when the command
    # line asks for backends (--device, -ot, --list-devices); an -ot that changes nothing does.
    # --device QMOE would make QMOE a model device and llama.cpp aborts (the KV cache lands in
    # QMOE's buffer). OMP_WAIT_POLICY=passive: docs/ggml.md (ggml's OpenMP threads spin).
    qmoe_env = dict(cpu_env, GGML_BACKEND_PATH=lib, OMP_WAIT_POLICY="passive")
    load_qmoe = ["-ot", r"token_embd\.weight=CPU"]

    def base(name, model):
        kld = os.path.join(out, f"base-{name}.kld")
        run([ppl, "-m", model, "-f", text, "--chunks", str(CHUNKS), "--kl-divergence-base", kld]
            + common, os.path.join(out, f"base-{name}.log"), cpu_env)
        return kld

    def kl(name, model, kld, qmoe):
        logpath = os.path.join(out, f"kl-{name}.log")
        for _ in range(3):  # deterministic runs: a retry only recovers lost output
            txt = run([ppl, "-m", model, "--kl-divergence-base", kld, "--kl-divergence"] + common
                      + (load_qmoe if qmoe else []), logpath, qmoe_env if qmoe else cpu_env)
            res = kl_of(txt, CHUNKS)
            if res:
                return res + (qmoe_buffer_mib(txt), logpath)
        raise RuntimeError(f"no mean KL divergence in {logpath}")

    def check(arch, label, types):
        """The bound and every type's KL for one structure; (ok, bound, {type: path}, bases)."""
        files = make(arch, types)
        pre = "" if arch == "qwen3moe" else arch + "-"
        bases = {"F16": base(pre + "F16", files["F16"])}
        n, top1, entropy, uniform = peakedness(bases["F16"])
        m = MODEL
        log(f"model: {label} structure, hidden {m['hidden']}, {m['experts']} experts top-{m['used']}, "
            f"expert width {m['expert_ffn']}, {m['layers']} layers, vocab {m['vocab']}, random weights, "
            f"logits x{m['logit_scale']:g}; {n} next-token distributions ({CHUNKS} chunks of {CTX} "
            f"tokens, scored halves), {THREADS} threads")
        ok = top1 > 0.2 and entropy < uniform - 2
        log(f"F16 on the CPU: mean top-1 probability {top1:.3f}, mean entropy {entropy:.2f} nats "
            f"(uniform: {uniform:.2f}): " + ("peaked, not uniform" if ok else
            "FAILED: close to uniform, the check would have no teeth"))
        bound, bound_err, bound_top, _, _ = kl(pre + "F16-Q8_0", files["Q8_0"], bases["F16"], False)
        if bound <= 0:
            raise RuntimeError(f"{label}: KL(CPU F16 -> CPU Q8_0) is 0: no bound to compare with")
        log(f"(a) {label} bound KL(CPU F16 -> CPU Q8_0) = {bound:.6f} ± {bound_err:.6f}, same top "
            f"token {bound_top:.1f} %")
        for t in types:
            bases[t] = base(pre + t, files[t])
            val, err, top, mib, logpath = kl(pre + t, files[t], bases[t], True)
            experts = expert_tensors(files[t])
            total = sum(experts.values()) / 2**20
            kinds = ", ".join(f"{k} {v / 2**20:.2f}" for k, v in sorted(experts.items()))
            # llama.cpp prints the buffer's MiB with two decimals: within half of the last digit
            placed = mib + 0.005 >= total
            verdict = "<= bound" if val <= bound else "> bound: FAILED"
            log(f"(b) {label} {t}: KL(CPU -> QMOE) = {val:.6f} ± {err:.6f} {verdict} ({val / bound:.2f} "
                f"of it), same top token {top:.1f} %; QMOE model buffer {mib:.2f} MiB, the file's "
                f"expert tensors {total:.2f} MiB ({kinds} MiB): experts on QMOE: "
                f"{'yes' if placed else 'no'} (log: {logpath})")
            if val > bound:
                ok = False
            if t in REQUIRED_ON_QMOE and not placed:
                log(f"FAILED: the {label} {t} run did not put the expert tensors in QMOE buffers")
                ok = False
        return ok, bound, files, bases

    ok, bound, files, bases = check("qwen3moe", "Qwen3-MoE", TYPES)
    oss_ok, _, _, _ = check("gpt-oss", "gpt-oss", OSS_TYPES)
    ok = ok and oss_ok

    bad = os.path.join(out, "moe-Q8_0-perturbed.gguf")
    perturb_expert_scales(files["Q8_0"], bad, PERTURB, MODEL["seed"])
    val, err, top, mib, logpath = kl("Q8_0-perturbed", bad, bases["Q8_0"], True)
    caught = val > bound
    log(f"negative control: QMOE on Q8_0 with expert scales x(1 ± {PERTURB:g}) against CPU Q8_0: "
        f"KL = {val:.6f} ± {err:.6f} ({val / bound:.2f} of the bound): "
        f"{'caught' if caught else 'NOT caught: FAILED'}")
    ok = ok and caught
    log(f"{'PASSED' if ok else 'FAILED'} ({time.time() - start:.0f} s, logs in {out})")
    return 0 if ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except RuntimeError as e:
        log(f"FAILED: {e}")
        sys.exit(1)
