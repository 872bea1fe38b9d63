#!/usr/bin/env python3
"""End-to-end tests of the `qmoe` program against an independent NumPy model of the operator.

Parts (one ctest test each):
  gen       `qmoe gen` cases run with `qmoe run`; also checks gen's bias is the assist matrix
            and that its cases are realistic (no saturated or zero rows)
  numpy     cases built here in NumPy (layouts, scale dtypes, opaque bias, empty groups, E' < E,
            tail rows, count group lists, .npy versions 2.0/3.0), run with `qmoe run`
  failures  bad files and arguments: non-zero exit, one line on stderr, no output file
  demo      `qmoe demo` on a small shape exits 0 and reports all sampled rows verified

The model follows the vendor formulas of the spec in float64, written from the spec alone:
x = 16*floor(x/16) + ((x & 0xF) - 8) + 8 for A8W4 with the caller's bias as the +8 term.
Acceptance (the spec's): output within +-1 and >= 99.9% identical; outputScale within 1e-6
relative; rows past the last group are 0 in the files.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

import numpy as np

# ---------------------------------------------------------------- the model ------------------


def unpack_nibbles(b):
    """uint8 bytes -> signed int4 values, low nibble first (last axis doubles)."""
    b = np.asarray(b).view(np.uint8)
    lo = (b & 0xF).astype(np.int64)
    hi = (b >> 4).astype(np.int64)
    v = np.stack([lo, hi], axis=-1).reshape(b.shape[:-1] + (b.shape[-1] * 2,))
    return np.where(v >= 8, v - 16, v)


def logical_weight(w, int4_nd=False):
    """Stored weight -> W[e, k, n] as int64, by dtype and rank as `qmoe run` documents."""
    if int4_nd:
        return unpack_nibbles(w)
    if w.ndim == 5:
        E, n1, k1, k0, inner = w.shape
        tile = unpack_nibbles(w.view(np.uint8)) if w.dtype == np.int32 else w.astype(np.int64)
        cols = tile.shape[-1]  # 32 int8 or 64 int4 columns per NZ tile
        return tile.transpose(0, 2, 3, 1, 4).reshape(E, k1 * k0, n1 * cols)
    if w.dtype == np.int32:
        return unpack_nibbles(w.view(np.uint8))
    return w.astype(np.int64)


def scale_values(ws, bf16=False):
    """Stored weight scale -> float64 values the operator reads."""
    if ws.dtype in (np.uint64, np.int64):
        return (ws.astype(np.uint64) & np.uint64(0xFFFFFFFF)).astype(np.uint32).view(np.float32).astype(np.float64)
    if bf16:
        return (ws.astype(np.uint32) << np.uint32(16)).view(np.float32).astype(np.float64)
    return ws.astype(np.float64)


def group_ends(gl, count):
    return np.cumsum(gl) if count else np.asarray(gl)


def model(x, W, ws, xs, ends, bias):
    """Output int8 [M, N/2] and outputScale [M] as the CLI writes them (float64 scale)."""
    M, K = x.shape
    E, _, N = W.shape
    if ws.ndim == 2:
        ws = ws[:, None, :]
    G = ws.shape[1]
    gk = K // G
    n2 = N // 2
    q = np.zeros((M, n2), np.int64)
    qs = np.zeros(M, np.float64)
    start = 0
    for e, end in enumerate(ends):
        rows = slice(start, end)
        start = end
        xe = x[rows].astype(np.int64)
        if xe.shape[0] == 0:
            continue
        if bias is None:
            parts = [(xe,)]
        else:
            hi = np.floor_divide(xe, 16)
            lo = (xe & 0xF) - 8
            parts = [(hi, 16.0), (lo, 1.0)]
        C = np.zeros((xe.shape[0], N))
        for part in parts:
            xp, mult = part[0], (part[1] if len(part) > 1 else 1.0)
            for g in range(G):
                ks = slice(g * gk, (g + 1) * gk)
                acc = xp[:, ks].astype(np.float64) @ W[e, ks].astype(np.float64)  # exact
                C += mult * acc * ws[e, g]
        if bias is not None:
            C += bias[e].astype(np.float64)
        C *= xs[rows, None].astype(np.float64)
        a, b = C[:, :n2], C[:, n2:]
        S = a / (1.0 + np.exp(-a)) * b
        amax = np.abs(S).max(axis=1)
        scale = amax / 127.0
        safe = np.where(amax > 0, scale, 1.0)
        q[rows] = np.where(amax[:, None] > 0, np.rint(S / safe[:, None]), 0)
        qs[rows] = np.where(amax > 0, scale, 0.0)
    return q, qs


def compare(name, q, qs, q_ref, qs_ref, routed):
    """The spec's acceptance; rows past `routed` must be exactly 0."""
    assert q.dtype == np.int8 and qs.dtype == np.float32, f"{name}: output dtypes {q.dtype} {qs.dtype}"
    assert q.shape == q_ref.shape and qs.shape == qs_ref.shape, f"{name}: output shapes {q.shape} {qs.shape}"
    diff = np.abs(q.astype(np.int64) - q_ref)
    assert diff.max(initial=0) <= 1, f"{name}: output differs by {diff.max()} at {np.unravel_index(diff.argmax(), diff.shape)}"
    same = 1.0 if diff.size == 0 else float((diff == 0).mean())
    assert same >= 0.999, f"{name}: only {same:.5f} of the output is identical"
    rel = np.abs(qs.astype(np.float64) - qs_ref) / np.maximum(np.abs(qs_ref), 1e-300)
    bad = (rel > 1e-6) & ~((qs == 0) & (qs_ref == 0))
    assert not bad.any(), f"{name}: outputScale row {bad.argmax()}: {qs[bad.argmax()]!r} vs {qs_ref[bad.argmax()]!r}"
    assert not q[routed:].any() and not qs[routed:].any(), f"{name}: rows past the last group are not 0"
    return same


# ---------------------------------------------------------------- running qmoe ---------------

QMOE = None
INPUTS = [("x", "--x"), ("weight", "--weight"), ("bias", "--bias"), ("weight_scale", "--weight-scale"),
          ("x_scale", "--x-scale"), ("group_list", "--group-list")]


def run_qmoe(args, check=True):
    p = subprocess.run([QMOE] + args, capture_output=True, text=True, timeout=600)
    if check and p.returncode != 0:
        raise AssertionError(f"qmoe {' '.join(args)} failed ({p.returncode}): {p.stderr.strip()}")
    return p


def run_case(d, flags=()):
    args = ["run"]
    for name, opt in INPUTS:
        if os.path.exists(os.path.join(d, name + ".npy")):
            args += [opt, os.path.join(d, name + ".npy")]
    args += ["--out", os.path.join(d, "out.npy"), "--out-scale", os.path.join(d, "out_scale.npy")]
    run_qmoe(args + list(flags))
    return np.load(os.path.join(d, "out.npy")), np.load(os.path.join(d, "out_scale.npy"))


def check_case_dir(name, d, flags=(), count=False, int4_nd=False, bf16=False):
    a = {n: np.load(os.path.join(d, n + ".npy")) for n, _ in INPUTS if os.path.exists(os.path.join(d, n + ".npy"))}
    W = logical_weight(a["weight"], int4_nd)
    ends = group_ends(a["group_list"], count)
    routed = int(ends[-1]) if len(ends) else 0
    q_ref, qs_ref = model(a["x"], W, scale_values(a["weight_scale"], bf16), a["x_scale"], ends, a.get("bias"))
    q, qs = run_case(d, flags)
    same = compare(name, q, qs, q_ref, qs_ref, routed)
    print(f"ok   {name}: {same * 100:.2f}% identical, {routed}/{len(qs)} rows routed")
    return a, q, qs, ends


# ---------------------------------------------------------------- part: gen ------------------

GEN_CASES = [
    ("gen a8w4 nz per-channel", ["--mode", "a8w4", "--E", "4", "--M", "96", "--K", "128", "--N", "128"], {}),
    ("gen a8w4 nd per-group u64 count tail", ["--mode", "a8w4", "--E", "5", "--M", "80", "--K", "96", "--N", "48",
                                              "--groups", "3", "--weight-format", "nd", "--scale-dtype", "u64",
                                              "--group-list-type", "count", "--tail-rows", "7", "--empty-experts"],
     {"count": True}),
    ("gen a8w4 nd4 f16", ["--mode", "a8w4", "--E", "3", "--M", "40", "--K", "64", "--N", "36", "--weight-format", "nd4",
                          "--scale-dtype", "f16", "--seed", "7"], {"int4_nd": True}),
    ("gen a8w8 nz per-channel empty tail", ["--mode", "a8w8", "--E", "6", "--M", "64", "--K", "64", "--N", "96",
                                            "--empty-experts", "--tail-rows", "5"], {}),
    ("gen a8w8 nd per-group f16", ["--mode", "a8w8", "--E", "2", "--M", "33", "--K", "80", "--N", "22",
                                   "--groups", "5", "--weight-format", "nd", "--scale-dtype", "f16"], {}),
    ("gen a8w4 nz bf16 per-group", ["--mode", "a8w4", "--E", "3", "--M", "50", "--K", "128", "--N", "64",
                                    "--groups", "2", "--scale-dtype", "bf16"], {"bf16": True}),
]


def flags_for(opts):
    flags = []
    if opts.get("count"):
        flags += ["--group-list-type", "count"]
    if opts.get("int4_nd"):
        flags += ["--weight-int4-nd"]
    if opts.get("bf16"):
        flags += ["--weight-scale-bf16"]
    return flags


def check_assist_matrix(name, a, opts):
    W = logical_weight(a["weight"], opts.get("int4_nd", False)).astype(np.float64)
    ws = scale_values(a["weight_scale"], opts.get("bf16", False))
    if ws.ndim == 2:
        ws = ws[:, None, :]
    E, K, N = W.shape
    G = ws.shape[1]
    want = 8.0 * (W.reshape(E, G, K // G, N).sum(axis=2) * ws).sum(axis=1)
    tol = 1e-6 * np.abs(want).max() + 1e-30
    assert np.all(np.abs(a["bias"] - want) <= tol), f"{name}: bias is not the assist matrix"


def check_realistic(name, q, qs, ends):
    routed = int(ends[-1])
    if routed == 0:
        return
    r = q[:routed].astype(np.int64)
    assert np.all(qs[:routed] > 0), f"{name}: a routed row has outputScale 0"
    assert np.all(np.abs(r).max(axis=1) == 127), f"{name}: a routed row does not reach 127"
    mean = np.abs(r).mean()
    assert 3 < mean < 80, f"{name}: mean |output| {mean:.1f} looks saturated or vanishing"


def part_gen(work):
    for name, args, opts in GEN_CASES:
        d = os.path.join(work, re.sub(r"\W+", "_", name))
        p = run_qmoe(["gen", "--out", d] + args)
        assert "qmoe run" in p.stdout, f"{name}: gen did not print the run command"
        a, q, qs, ends = check_case_dir(name, d, flags_for(opts), **opts)
        counts = np.diff(np.concatenate([[0], ends]))
        if "--empty-experts" in args:
            assert (counts == 0).any(), f"{name}: --empty-experts left no expert empty"
        if "--tail-rows" in args:
            tail = int(args[args.index("--tail-rows") + 1])
            assert int(ends[-1]) == len(qs) - tail, f"{name}: tail rows not honoured"
        if "bias" in a:
            check_assist_matrix(name, a, opts)
        check_realistic(name, q, qs, ends)
    # the same seed gives the same case
    d1, d2 = os.path.join(work, "seed1"), os.path.join(work, "seed2")
    for d in (d1, d2):
        run_qmoe(["gen", "--out", d, "--E", "2", "--M", "16", "--K", "32", "--N", "64", "--seed", "9"])
    for n, _ in INPUTS:
        f1, f2 = os.path.join(d1, n + ".npy"), os.path.join(d2, n + ".npy")
        assert open(f1, "rb").read() == open(f2, "rb").read(), f"gen --seed is not deterministic ({n})"


# ---------------------------------------------------------------- part: numpy ----------------


def pack_nibbles(v):
    """int4 values (last axis even) -> uint8 bytes, low nibble first."""
    u = (np.asarray(v, np.int64) & 0xF).astype(np.uint8)
    return u[..., 0::2] | (u[..., 1::2] << 4)


def store_weight(W, layout):
    E, K, N = W.shape
    if layout == "nz8":
        return W.reshape(E, K // 16, 16, N // 32, 32).transpose(0, 3, 1, 2, 4).astype(np.int8).copy()
    if layout == "nz4":
        tiles = W.reshape(E, K // 16, 16, N // 64, 64).transpose(0, 3, 1, 2, 4)
        return pack_nibbles(tiles).view("<i4").copy()
    if layout == "nd8":
        return W.astype(np.int8)
    if layout == "nd32":
        return pack_nibbles(W).view("<i4").copy()
    if layout == "nd4":
        return pack_nibbles(W)
    raise ValueError(layout)


def store_scale(ws32, kind):
    if kind == "f32":
        return ws32
    if kind == "f16":
        return ws32.astype(np.float16)
    if kind == "u64":
        # the high word is not part of the scale: fill it to check that it is ignored
        return ws32.view(np.uint32).astype(np.uint64) | np.uint64(0x5A5A0001 << 32)
    if kind == "bf16":
        return (ws32.view(np.uint32) >> np.uint32(16)).astype(np.uint16)  # truncated bf16 bits
    raise ValueError(kind)


def save(path, arr, version=None):
    with open(path, "wb") as f:
        np.lib.format.write_array(f, arr, version=version)  # Fortran-order arrays stay so


def make_numpy_case(d, rng, *, a8w4, E, M, K, N, G, layout, scale, counts, E_list=None, count=False,
                    zero_rows=(), versions=None):
    """A case written from NumPy only: random ints over the full int8 range (so -128 appears),
    a random opaque bias for A8W4, and a group list from `counts`."""
    os.makedirs(d, exist_ok=True)
    x = rng.integers(-128, 128, size=(M, K), dtype=np.int64).astype(np.int8)
    for r in zero_rows:
        x[r] = 0
    W = rng.integers(-8, 8, size=(E, K, N)) if a8w4 else rng.integers(-128, 128, size=(E, K, N))
    wstd = 4.6 if a8w4 else 74.0
    ws_shape = (E, N) if G == 0 else (E, G, N)
    ws32 = (rng.uniform(0.5, 1.5, ws_shape) / (np.sqrt(K) * wstd)).astype(np.float32)
    xs = rng.uniform(0.002, 0.03, M).astype(np.float32)
    ends = np.cumsum(counts)
    gl = np.asarray(counts if count else ends, np.int64)[: (E_list or E)]
    versions = versions or {}
    save(os.path.join(d, "x.npy"), x, versions.get("x"))
    save(os.path.join(d, "weight.npy"), store_weight(W, layout), versions.get("weight"))
    save(os.path.join(d, "weight_scale.npy"), store_scale(ws32, scale))
    save(os.path.join(d, "x_scale.npy"), xs)
    save(os.path.join(d, "group_list.npy"), gl)
    if a8w4:
        bias = rng.normal(0.0, 2.0, (E, N)).astype(np.float32)  # opaque: not the assist matrix
        save(os.path.join(d, "bias.npy"), bias)


NUMPY_CASES = [
    # name, generator arguments, run flags
    ("np a8w8 nz8 per-channel empty tail", dict(a8w4=False, E=4, M=40, K=64, N=64, G=0, layout="nz8", scale="f32",
                                                 counts=[10, 0, 17, 6], zero_rows=[3]), []),
    ("np a8w8 nd8 per-group f16 count E'<E", dict(a8w4=False, E=5, M=30, K=48, N=10, G=3, layout="nd8", scale="f16",
                                                   counts=[4, 9, 0], E_list=3, count=True), ["--group-list-type", "count"]),
    ("np a8w4 nz4 per-channel opaque bias", dict(a8w4=True, E=3, M=50, K=64, N=128, G=0, layout="nz4", scale="f32",
                                                  counts=[20, 0, 25], zero_rows=[0, 49],
                                                  versions={"x": (2, 0), "weight": (3, 0)}), []),
    ("np a8w4 nd32 per-group u64 E'<E tail", dict(a8w4=True, E=4, M=36, K=96, N=16, G=4, layout="nd32", scale="u64",
                                                   counts=[7, 11], E_list=2), []),
    ("np a8w4 nd4 per-group f16 count", dict(a8w4=True, E=3, M=29, K=40, N=6, G=2, layout="nd4", scale="f16",
                                              counts=[0, 14, 15], count=True),
     ["--weight-int4-nd", "--group-list-type", "count"]),
    ("np a8w4 nz4 per-group bf16", dict(a8w4=True, E=2, M=24, K=128, N=64, G=8, layout="nz4", scale="bf16",
                                         counts=[13, 11]), ["--weight-scale-bf16"]),
    ("np a8w4 nz4 u64 per-channel count", dict(a8w4=True, E=2, M=16, K=32, N=64, G=0, layout="nz4", scale="u64",
                                                counts=[9, 5], count=True), ["--group-list-type", "count"]),
    ("np a8w8 nothing routed", dict(a8w4=False, E=2, M=8, K=16, N=32, G=0, layout="nz8", scale="f32",
                                     counts=[0, 0]), []),
]


def part_numpy(work):
    rng = np.random.default_rng(20241130)
    for name, gen, flags in NUMPY_CASES:
        d = os.path.join(work, re.sub(r"\W+", "_", name))
        make_numpy_case(d, rng, **gen)
        check_case_dir(name, d, flags, count=gen.get("count", False), int4_nd="--weight-int4-nd" in flags,
                       bf16="--weight-scale-bf16" in flags)
    # the reference kernel agrees with the model too; thread counts do not change a bit
    name = NUMPY_CASES[2][0]
    d = os.path.join(work, re.sub(r"\W+", "_", name))
    check_case_dir(name + " --kernel reference", d, ["--kernel", "reference"])
    one = run_case(d, ["--threads", "1"])
    for extra in (["--threads", "3"], [], ["--devices", "2"], ["--devices", "3", "--threads", "2"]):
        other = run_case(d, extra)
        assert all(np.array_equal(a, b) for a, b in zip(one, other)), f"{extra} changed the result"
    print("ok   --threads 1 / 3 / all and --devices 2 / 3 give identical files")


# ---------------------------------------------------------------- part: failures -------------


def expect_failure(name, d, mutate, flags=(), in_stderr=None):
    """Copies the good case to a fresh folder, breaks it, runs, checks the failure contract."""
    case = os.path.join(d, re.sub(r"\W+", "_", name))
    shutil.copytree(os.path.join(d, "good"), case)
    args = mutate(case) or []
    run = ["run"]
    for n, opt in INPUTS:
        if os.path.exists(os.path.join(case, n + ".npy")) or opt in ("--x",):
            run += [opt, os.path.join(case, n + ".npy")]
    out, out_scale = os.path.join(case, "out.npy"), os.path.join(case, "out_scale.npy")
    run += ["--out", out, "--out-scale", out_scale] + list(flags) + args
    p = run_qmoe(run, check=False)
    lines = p.stderr.strip().splitlines()
    assert p.returncode != 0, f"{name}: exit code 0"
    assert len(lines) == 1 and lines[0].startswith("qmoe run: "), f"{name}: stderr is not one line: {p.stderr!r}"
    if in_stderr:
        assert in_stderr in lines[0], f"{name}: {in_stderr!r} not in {lines[0]!r}"
    left = [f for f in os.listdir(case) if f.startswith("out")]
    assert not left, f"{name}: output files left behind: {left}"
    print(f"ok   {name}: {lines[0]}")


def rewrite(path, fn):
    data = open(path, "rb").read()
    open(path, "wb").write(fn(data))


def part_failures(work):
    rng = np.random.default_rng(5)
    make_numpy_case(os.path.join(work, "good"), rng, a8w4=True, E=2, M=16, K=32, N=64, G=0, layout="nz4",
                    scale="f32", counts=[7, 9])
    j = os.path.join
    cases = [
        ("missing file", lambda c: os.remove(j(c, "x.npy")), "x.npy"),
        ("truncated data", lambda c: rewrite(j(c, "weight.npy"), lambda b: b[:-5]), "truncated"),
        ("truncated header", lambda c: rewrite(j(c, "x_scale.npy"), lambda b: b[:40]), "truncated"),
        ("trailing bytes", lambda c: rewrite(j(c, "x_scale.npy"), lambda b: b + b"\0\0\0\0"), "x_scale.npy"),
        ("not npy", lambda c: rewrite(j(c, "bias.npy"), lambda b: b"hello world, not an array"), "bias.npy"),
        ("fortran order", lambda c: save(j(c, "x.npy"), np.asfortranarray(np.load(j(c, "x.npy")))), "fortran"),
        ("big endian", lambda c: save(j(c, "x_scale.npy"), np.load(j(c, "x_scale.npy")).astype(">f4")), "big-endian"),
        ("float64 unsupported", lambda c: save(j(c, "x_scale.npy"), np.load(j(c, "x_scale.npy")).astype("<f8")), "<f8"),
        ("wrong dtype", lambda c: save(j(c, "x.npy"), np.load(j(c, "x.npy")).astype(np.float32)), "x.npy"),
        ("wrong group list dtype", lambda c: save(j(c, "group_list.npy"), np.array([7, 16], np.int32)),
         "group_list.npy"),
        ("mismatched shape", lambda c: save(j(c, "x_scale.npy"), np.ones(15, np.float32)), "x_scale.npy"),
        ("mismatched K", lambda c: save(j(c, "x.npy"), np.ones((16, 48), np.int8)), "weight.npy"),
        ("weight rank", lambda c: save(j(c, "weight.npy"), np.ones((2, 32, 8, 4), np.int32)), "weight.npy"),
        ("decreasing group list", lambda c: save(j(c, "group_list.npy"), np.array([9, 7], np.int64)), "groupList"),
        ("group list past M", lambda c: save(j(c, "group_list.npy"), np.array([9, 17], np.int64)), "groupList"),
        ("missing bias for A8W4", lambda c: os.remove(j(c, "bias.npy")), "bias"),
        ("out folder missing", lambda c: ["--out", j(c, "nowhere", "q.npy")], "nowhere"),
        # out.npy could be written, out_scale.npy not: neither may appear
        ("out-scale folder missing", lambda c: ["--out-scale", j(c, "nowhere", "qs.npy")], "nowhere"),
        ("unknown kernel", lambda c: ["--kernel", "fastest"], "--kernel"),
        ("bf16 flag on f32", lambda c: ["--weight-scale-bf16"], "weight_scale.npy"),
    ]
    for name, mutate, needle in cases:
        expect_failure(name, work, mutate, in_stderr=needle)
    # a failing run leaves existing outputs alone
    c = j(work, "keep")
    shutil.copytree(j(work, "good"), c)
    open(j(c, "out.npy"), "wb").write(b"previous")
    save(j(c, "group_list.npy"), np.array([9, 7], np.int64))
    p = run_qmoe(["run"] + sum(([o, j(c, n + ".npy")] for n, o in INPUTS), []) +
                 ["--out", j(c, "out.npy"), "--out-scale", j(c, "out_scale.npy")], check=False)
    assert p.returncode != 0 and open(j(c, "out.npy"), "rb").read() == b"previous", "a failed run touched the output"
    assert not os.path.exists(j(c, "out_scale.npy")), "a failed run wrote out_scale.npy"
    # gen refuses impossible cases without writing anything
    p = run_qmoe(["gen", "--out", j(work, "badgen"), "--mode", "a8w4", "--N", "96", "--K", "32"], check=False)
    assert p.returncode != 0 and len(p.stderr.strip().splitlines()) == 1, "gen accepted N=96 for NZ int4"
    assert not os.path.exists(j(work, "badgen")), "gen wrote a folder for a refused case"
    p = run_qmoe(["gen", "--out", ""], check=False)
    assert p.returncode == 1 and p.stderr.strip().splitlines() == ["qmoe gen: --out: the folder name is empty"], \
        f"gen --out '': {p.returncode} {p.stderr!r}"
    print("ok   failed runs keep old outputs; gen refuses NZ int4 with N % 64 != 0 and an empty --out")


# ---------------------------------------------------------------- part: demo -----------------


def part_demo(work):
    for args in (["--M", "256", "--K", "512", "--N", "512"],
                 ["--mode", "a8w8", "--E", "3", "--M", "96", "--K", "256", "--N", "128", "--groups", "4",
                  "--verify-rows", "7", "--tail-rows", "5", "--empty-experts"]):
        p = run_qmoe(["demo"] + args)
        m = re.search(r"verified rows: (\d+)/(\d+) match", p.stdout)
        assert m, f"demo {args}: no verified-rows line in {p.stdout!r}"
        want = int(args[args.index("--verify-rows") + 1]) if "--verify-rows" in args else 16
        assert int(m.group(1)) == int(m.group(2)) == want, f"demo {args}: {m.group(0)}"
        assert re.search(r"execute: [0-9.]+ ms, [0-9.]+ int8 GOPS", p.stdout), f"demo {args}: no timing line"
        print(f"ok   demo {' '.join(args)}: {m.group(0)}")


def main():
    global QMOE
    ap = argparse.ArgumentParser()
    ap.add_argument("--qmoe", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--part", choices=["gen", "numpy", "failures", "demo", "all"], default="all")
    args = ap.parse_args()
    QMOE = args.qmoe
    shutil.rmtree(args.workdir, ignore_errors=True)
    os.makedirs(args.workdir)
    parts = {"gen": part_gen, "numpy": part_numpy, "failures": part_failures, "demo": part_demo}
    for name, fn in parts.items():
        if args.part in (name, "all"):
            fn(os.path.join(args.workdir, name))
    print("all checks passed")


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        print(f"FAIL {e}", file=sys.stderr)
        sys.exit(1)
