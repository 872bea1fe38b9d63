"""An independent NumPy implementation of the operator's published formulas (the spec, after the
vendor page), written from the formulas and not from qmoe's code: NumPy layouts by transposition,
nibbles by bit arithmetic, the matmul as exact int64 products, the epilogue in float32.
"""

import numpy as np

F32 = np.float32


# ---------------------------------------------------------------- layouts -------------------------

def nz_from_logical(w, cols):
    """[E, K, N] -> [E, N/cols, K/16, 16, cols]: NZ[e][n1][k1][k0][n0] = W[e][16k1+k0][cols*n1+n0]."""
    E, K, N = w.shape
    return np.ascontiguousarray(w.reshape(E, K // 16, 16, N // cols, cols).transpose(0, 3, 1, 2, 4))


def logical_from_nz(nz):
    E, n1, k1, k0, n0 = nz.shape
    return nz.transpose(0, 2, 3, 1, 4).reshape(E, k1 * k0, n1 * n0)


def pack_nibbles(values):
    """int4 values [..., n] -> uint8 [..., n/2]; element 2i in the low nibble of byte i."""
    v = np.asarray(values, dtype=np.int64) & 0xF
    return (v[..., 0::2] | (v[..., 1::2] << 4)).astype(np.uint8)


def unpack_nibbles(packed):
    b = np.asarray(packed, dtype=np.int64)
    lo, hi = b & 0xF, (b >> 4) & 0xF
    v = np.stack([lo, hi], axis=-1).reshape(*b.shape[:-1], 2 * b.shape[-1])
    return np.where(v >= 8, v - 16, v).astype(np.int8)


def words_from_nibbles(values):
    """int4 values [..., n] -> int32 [..., n/8]; element j of a word in bits [4j, 4j+4)."""
    v = np.asarray(values, dtype=np.int64) & 0xF
    v = v.reshape(*v.shape[:-1], v.shape[-1] // 8, 8)
    word = np.zeros(v.shape[:-1], dtype=np.int64)
    for j in range(8):
        word |= v[..., j] << (4 * j)
    return word.astype(np.uint32).view(np.int32)


# ---------------------------------------------------------------- scales --------------------------

def bf16_bits(f):
    """float32 -> bfloat16 bits (round to nearest even), as uint16."""
    u = np.asarray(f, dtype=F32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16)


def bf16_to_f32(bits):
    return (np.asarray(bits, dtype=np.uint32) << 16).view(F32)


def u64_with_f32(f, rng):
    """uint64 words whose low 32 bits are `f`'s float32 bits and whose high bits are noise."""
    low = np.asarray(f, dtype=F32).view(np.uint32).astype(np.uint64)
    high = rng.integers(0, 2 ** 32, size=low.shape, dtype=np.uint64) << np.uint64(32)
    return high | low


def vendor_bias(w, ws):
    """bias[e,n] = 8 * sum_k W[e,k,n] * ws[e, grp(k), n] (how real callers build it)."""
    E, K, N = w.shape
    ws = np.asarray(ws, dtype=np.float64)
    G = ws.shape[1] if ws.ndim == 3 else 1
    per = ws.reshape(E, G, N)
    sums = w.astype(np.int64).reshape(E, G, K // G, N).sum(axis=2)
    return (8.0 * (sums * per).sum(axis=1)).astype(F32)


# ---------------------------------------------------------------- the operator --------------------

def group_ends(group_list, kind="cumsum"):
    g = np.asarray(group_list, dtype=np.int64)
    return np.cumsum(g) if kind == "count" else g


def _grouped(rows, w_e, ws_e):
    """sum over K-groups of float32(exact int product of the group) * group scale, in float32."""
    G = ws_e.shape[0]
    gk = rows.shape[1] // G
    c = np.zeros((rows.shape[0], w_e.shape[1]), dtype=F32)
    for g in range(G):
        acc = rows[:, g * gk:(g + 1) * gk] @ w_e[g * gk:(g + 1) * gk]
        c = c + acc.astype(F32) * ws_e[g]
    return c


def dequant(x, w, ws, xs, ends, bias=None):
    """C[m, n] before SwiGLU for every routed row (unrouted rows are NaN)."""
    M, K = x.shape
    E, _, N = w.shape
    ws = np.asarray(ws, dtype=F32)
    per_group = ws.ndim == 3
    ws3 = ws if per_group else ws[:, None, :]
    C = np.full((M, N), np.nan, dtype=F32)
    start = 0
    for e, end in enumerate(ends):
        rows = x[start:end].astype(np.int64)
        w_e = w[e].astype(np.int64)
        xs_r = np.asarray(xs[start:end], dtype=F32)[:, None]
        if bias is None:
            if per_group:
                c = _grouped(rows, w_e, ws3[e]) * xs_r
            else:  # vendor order: times xScale, then the channel scale
                c = ((rows @ w_e).astype(F32) * xs_r) * ws3[e, 0]
        else:
            hi = np.floor_divide(rows, 16)
            lo = (rows & 0xF) - 8
            c_high = _grouped(hi, w_e, ws3[e])
            c_low = _grouped(lo, w_e, ws3[e])
            c = (c_high * F32(16) + c_low + np.asarray(bias, F32)[e]) * xs_r
        C[start:end] = c
        start = end
    return C


def swiglu_quant(C, rows):
    """SwiGLU (first half activated, second half the gate) and per-row symmetric int8."""
    M, N = C.shape
    n2 = N // 2
    out = np.zeros((M, n2), dtype=np.int8)
    scale = np.zeros(M, dtype=F32)
    a, gate = C[rows, :n2], C[rows, n2:]
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        s = a / (F32(1) + np.exp(-a)) * gate
        amax = np.abs(s).max(axis=1) if n2 else np.zeros(len(rows), F32)
        sc = amax / F32(127)
        q = np.rint(s / sc[:, None])
    ok = np.isfinite(sc) & (amax != 0)
    q = np.where(ok[:, None], np.clip(q, -127, 127), 0)
    out[rows] = q.astype(np.int8)
    scale[rows] = np.where(amax == 0, F32(0), sc)
    return out, scale


def swiglu_clamp(C, limit):
    """The weight-list operator's swiglu_limit (vendor kernel, when limit > 1e-8): the activated
    half min(C, limit), the linear half clipped to [-limit, limit]; NaN stays NaN."""
    if not limit > 1e-8:
        return C
    n2 = C.shape[1] // 2
    C = C.copy()
    a, lin = C[:, :n2], C[:, n2:]
    a[a > F32(limit)] = F32(limit)
    lin[lin > F32(limit)] = F32(limit)
    lin[lin < -F32(limit)] = -F32(limit)
    return C


def operator(x, w, ws, xs, group_list, bias=None, kind="cumsum", swiglu_limit=0.0):
    """(output, output_scale) for logical weights w [E, K, N] and float32 scales; rows past the
    last group are 0 (as in a zero-filled output)."""
    ends = group_ends(group_list, kind)
    C = swiglu_clamp(dequant(x, w, ws, xs, ends, bias), swiglu_limit)
    last = int(ends[-1]) if len(ends) else 0
    return swiglu_quant(C, np.arange(last))
