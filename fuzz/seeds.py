#!/usr/bin/env python3
"""Writes the committed seed corpora of the fuzz harnesses (fuzz/corpus/<harness>/).

Seeds are small inputs that decode to representative cases: every weight layout for fuzz_plan
and fuzz_op, and well-formed plus typical malformed .npy images for fuzz_npy. Run it from the
repository root after changing a harness's input format; the fuzzers grow the corpus from here.
"""
import base64
import os
import struct

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def put(harness, name, data):
    d = os.path.join(ROOT, harness)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def plan_seeds():
    # template: layout, M, E, E', K/16-1, N-units, G flag, scale dtype, groupList type; then the
    # mutation count and mutations (see fuzz_plan.c)
    for layout in range(6):
        put("fuzz_plan", f"layout{layout}", bytes([layout, 7, 3, 2, 1, 1, 0, 0, 0, 0]))
        put("fuzz_plan", f"layout{layout}-group", bytes([layout, 9, 2, 2, 3, 2, 1, 2, 0, 1, 0]))
    # a few mutations: huge dim of x, negative stride of the output, threads = INT32_MAX
    put("fuzz_plan", "huge-dim", bytes([0, 4, 1, 1, 0, 3, 0, 0, 0, 1, 0, 1, 2, 200, 20]))
    put("fuzz_plan", "stride", bytes([1, 4, 1, 1, 0, 1, 0, 0, 0, 1, 7, 1, 4, 200, 2]))
    put("fuzz_plan", "threads", bytes([0, 4, 1, 1, 0, 1, 0, 0, 0, 2, 0, 0, 8, 3, 200, 15,
                                       0, 0, 8, 4, 200, 15]))


def op_seeds():
    # layout, M, K, N, E, E', G flag, scale dtype, groupList type, x/out strides, flavour, seed
    for layout in range(6):
        body = bytes([layout, 6, 5, 3, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0, 7]) + bytes(range(1, 9))
        put("fuzz_op", f"layout{layout}", body + bytes([2, 3, 1]))
        put("fuzz_op", f"layout{layout}-strided-group",
            bytes([layout, 9, 7, 5, 3, 3, 0, 1, 1, 1, 1, 2, 1, 1, 9]) + bytes(range(9, 17))
            + bytes([1, 2, 3, 2]))
    put("fuzz_op", "nan-scales", bytes([0, 4, 3, 2, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 16]) + bytes(8) + bytes([4, 2]))
    put("fuzz_op", "extreme", bytes([3, 4, 1, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 17]) + bytes(8) + bytes([4, 2]))


def prepack_seeds():
    # layout, E, M, K, N, per-group flag [, G], scale dtype, data seed (8), E', mutation count,
    # null-options byte, threads (see fuzz_prepack.c): every layout, per-channel and per-group
    for layout in range(6):
        for pg in (0, 1):
            head = [layout, 2, 30, 3, 2, pg] + ([5] if pg else []) + [layout % 3]
            put("fuzz_prepack", f"layout{layout}{'-group' if pg else ''}",
                bytes(head) + bytes(range(1, 9)) + bytes([1, 0, 0, 2]))
    # a mutation: force_weight_nz on an ND weight (refused), and the kernel option
    put("fuzz_prepack", "force-nz", bytes([0, 1, 8, 3, 2, 0, 0]) + bytes(8) + bytes([0, 1, 0, 6, 1, 0, 1]))
    # a mutation: value_bits 6 with the weights brought into [-32, 31] (accepted), and 5 (refused)
    for name, b in (("six-bits", 7), ("value-bits-5", 6)):
        put("fuzz_prepack", name, bytes([0, 2, 30, 3, 2, 1, 5, 0]) + bytes(range(1, 9))
            + bytes([1, 1, 0, 11, b, 1, 0, 2]))
    # found by the fuzzer: a weight cut to fewer experts than groupList names (the raw operator
    # refuses it; the object refuses it too, unless appends made it long enough)
    put("fuzz_prepack", "fewer-experts", base64.b64decode("AAAtrq6urq6urq6urq6uhLfr6+vr6+vrIevr6+vrIgH/"))
    put("fuzz_prepack", "fewer-experts-appended", base64.b64decode(
        "PXZa7RUBBZP7BFMEAiYWAQX//181AJPr6+vr6+vr6+vr6+vr6+vr65Ozk5OTk5OTk5OTkwOT+wZT/wAAACjBwcHBwcHBwcHBwQI="))


def npy(descr, shape, data, version=1, fortran=False, pad=True):
    shape_txt = "(" + "".join(f"{d}, " if len(shape) == 1 else f"{d}, " for d in shape).rstrip(", ")
    shape_txt += ",)" if len(shape) == 1 else ")"
    header = "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (
        descr, "True" if fortran else "False", shape_txt)
    prefix = 10 if version == 1 else 12
    total = prefix + len(header) + 1
    if pad:
        header += " " * ((64 - total % 64) % 64)
    header += "\n"
    magic = b"\x93NUMPY" + bytes([version, 0])
    size = struct.pack("<H", len(header)) if version == 1 else struct.pack("<I", len(header))
    return magic + size + header.encode("latin1") + data


def npy_seeds():
    put("fuzz_npy", "i1-2x3", npy("|i1", (2, 3), bytes([1, 2, 3, 0xFF, 0x80, 0x7F])))
    put("fuzz_npy", "f4-4", npy("<f4", (4,), struct.pack("<4f", 1.0, -2.5, 0.0, 1e-3)))
    put("fuzz_npy", "i8-3-v2", npy("<i8", (3,), struct.pack("<3q", 0, 5, 9), version=2))
    put("fuzz_npy", "u8-scalar", npy("<u8", (), struct.pack("<Q", 42)))
    put("fuzz_npy", "f2-2x2-v3", npy("<f2", (2, 2), bytes(8), version=3))
    put("fuzz_npy", "u1-empty", npy("|u1", (0, 5), b""))
    put("fuzz_npy", "i8-empty-huge-dims", npy("<i8", (0, 4294967296, 4294967296), b""))
    put("fuzz_npy", "i4-1x1x1x1", npy("<i4", (1, 1, 1, 1), struct.pack("<i", -7)))
    put("fuzz_npy", "u2-unpadded", npy("<u2", (2,), struct.pack("<2H", 1, 0xFFFF), pad=False))
    # malformed: truncated data, big-endian, Fortran order, overflowing shape, bad magic
    put("fuzz_npy", "bad-truncated", npy("<f4", (4,), bytes(7)))
    put("fuzz_npy", "bad-bigendian", npy(">f4", (1,), bytes(4)))
    put("fuzz_npy", "bad-fortran", npy("|i1", (2, 2), bytes(4), fortran=True))
    put("fuzz_npy", "bad-overflow", npy("<i8", (4294967296, 4294967296, 16), b""))
    put("fuzz_npy", "bad-magic", b"\x93NUMPZ\x01\x00" + npy("|i1", (1,), b"\x01")[8:])
    # a 4 GiB promise in a header-only file: refused without the peak memory moving
    put("fuzz_npy", "bad-huge-short", npy("|i1", (4294967296,), b""))


def grouped_matmul_seeds():
    # form, M, E, K/16-1, N/64-1, G flag, float dtype, out dtype, bias; then group list type,
    # threads, mutation count (see fuzz_grouped_matmul.c)
    for form in range(8):
        put("fuzz_grouped_matmul", f"form{form}", bytes([form, 9, 3, 1, 1, form & 1, 1, 0, 1, 0, 2, 0]))
    put("fuzz_grouped_matmul", "m0", bytes([0, 0, 2, 0, 0, 0, 0, 2, 0, 1, 1, 0]))
    # then a run: the pointers kept, then the group list's draws (each: parity picks an extreme
    # or a small value); counts {2, INT64_MAX} and cumulative ends {2, INT64_MIN}, whose running
    # total or order must be refused before it is formed
    run = [0, 9, 1, 1, 0, 0, 0, 0, 0]
    put("fuzz_grouped_matmul", "run-counts-overflow", bytes(run + [1, 2, 0, 0, 0, 0, 4, 1, 0]))
    put("fuzz_grouped_matmul", "run-ends-min", bytes(run + [0, 2, 0, 0, 0, 0, 4, 1, 1]))


if __name__ == "__main__":
    grouped_matmul_seeds()
    plan_seeds()
    op_seeds()
    prepack_seeds()
    npy_seeds()
