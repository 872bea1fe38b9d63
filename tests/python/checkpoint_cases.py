"""Hostile checkpoints for the rules of docs/moe-layer.md "Checkpoint rules", written byte by byte
(the `safetensors` package cannot write most of them), and given to both readers: the Python
one (tests/python/test_checkpoint_rules.py, qmoe.load_experts) and the C one of `qmoe moe run`
(tests/cli/test_checkpoint_rules.py). Both must accept the same files and refuse the same ones,
each refusal naming what is wrong.

CASES maps a name to (build, words): build(rng) returns the file's bytes; words are what both
readers' messages contain (a tuple (C's, Python's) where their wording differs), None for a file
both accept.
"""
import json
import struct

import numpy as np

P = "model.layers.0.mlp"
E, I, H = 4, 64, 128
TOP_K = 2


def layer_tensors(rng, names=("gate_proj", "up_proj", "down_proj")):
    """A valid layer: E experts, a router, as (name, dtype, array) in file order."""
    t = []
    for e in range(E):
        t.append((f"{P}.experts.{e}.{names[0]}.weight", "F32", rng.standard_normal((I, H)) * 0.05))
        t.append((f"{P}.experts.{e}.{names[1]}.weight", "F32", rng.standard_normal((I, H)) * 0.05))
        t.append((f"{P}.experts.{e}.{names[2]}.weight", "F32", rng.standard_normal((H, I)) * 0.05))
    t.append((f"{P}.gate.weight", "F32", rng.standard_normal((E, H))))
    return [(n, d, np.asarray(a, np.float32)) for n, d, a in t]


def _bytes(dtype, arr):
    return np.ascontiguousarray(arr, {"F32": "<f4", "F16": "<f2", "I8": "i1"}[dtype]).tobytes()


def image(tensors, *, meta=None, header=None, extra_entries=(), data_tail=b"", hlen=None,
          keep=None):
    """A file image: tensors (name, dtype, array) laid out in order; extra_entries are header
    entries (name, dtype, shape, begin, end) added as given (duplicates, overlaps); header, when
    given, replaces the JSON text; keep cuts the image to that many bytes."""
    parts, entries, at = [], [], 0
    for name, dtype, arr in tensors:
        b = _bytes(dtype, arr)
        entries.append((name, dtype, list(arr.shape), at, at + len(b)))
        parts.append(b)
        at += len(b)
    entries += list(extra_entries)
    if header is None:
        items = []
        if meta is not None:
            items.append(json.dumps("__metadata__") + ":" + meta)
        for name, dtype, shape, b, e in entries:
            items.append(json.dumps(name) + ":" + json.dumps(
                {"dtype": dtype, "shape": shape, "data_offsets": [b, e]}, separators=(",", ":")))
        header = "{" + ",".join(items) + "}"
    text = header.encode("latin-1") if isinstance(header, str) else header
    text += b" " * (-len(text) % 8)
    blob = struct.pack("<Q", len(text) if hlen is None else hlen) + text + b"".join(parts) + data_tail
    return blob if keep is None else blob[:keep]


def _with(rng, extra):
    return image(layer_tensors(rng) + extra)


def _dup_name(rng):
    t = layer_tensors(rng)
    end = sum(a.nbytes for _, _, a in t)
    r = t[-1][2]
    return image(t, extra_entries=[(f"{P}.gate.weight", "F32", list(r.shape), end, end + r.nbytes)],
                 data_tail=r.tobytes())


def _overlap(rng):
    return image(layer_tensors(rng), extra_entries=[("model.layers.1.other", "F32", [2], 0, 8)])


def _hole(rng):
    t = layer_tensors(rng)
    end = sum(a.nbytes for _, _, a in t)
    return image(t, extra_entries=[("model.layers.1.other", "F32", [2], end + 8, end + 16)],
                 data_tail=bytes(16))


def _mixtral_beside(rng):
    t = layer_tensors(rng)
    m = layer_tensors(rng, ("w1", "w3", "w2"))[:-1]
    return image(t + m)


def _mixed_experts(rng):
    t = layer_tensors(rng)
    m = {n: (n, d, a) for n, d, a in layer_tensors(rng, ("w1", "w3", "w2"))}
    out = []
    for n, d, a in t:  # expert 3 in Mixtral's names, the others in gate/up/down
        if ".experts.3." in n:
            k = n.replace("gate_proj", "w1").replace("up_proj", "w3").replace("down_proj", "w2")
            out.append(m[k])
        else:
            out.append((n, d, a))
    return image(out)


def _shared(rng, kinds):
    t = layer_tensors(rng)
    for kind in kinds:
        t += [(f"{P}.{kind}.gate_proj.weight", "F32", rng.standard_normal((I, H)).astype(np.float32)),
              (f"{P}.{kind}.up_proj.weight", "F32", rng.standard_normal((I, H)).astype(np.float32)),
              (f"{P}.{kind}.down_proj.weight", "F32", rng.standard_normal((H, I)).astype(np.float32))]
    return image(t)


def _router(rng, shape, dtype="F32"):
    t = [x for x in layer_tensors(rng) if not x[0].endswith(".gate.weight")]
    return image(t + [(f"{P}.gate.weight", dtype, np.zeros(shape, np.float32))])


def _renamed(rng, old, new):
    return image([(n.replace(old, new), d, a) for n, d, a in layer_tensors(rng)])


def _header(rng, edit):
    """The valid layer's header text edited by `edit` (a str -> str function)."""
    t = layer_tensors(rng)
    base = image(t)
    (n,) = struct.unpack("<Q", base[:8])
    return image(t, header=edit(base[8:8 + n].decode().rstrip(" ")))


def _meta_twice(rng):
    return image(layer_tensors(rng), meta='{"qmoe.top_k":"2","qmoe.top_k":"3"}')


def _missing(rng):
    return image([x for x in layer_tensors(rng) if x[0] != f"{P}.experts.1.up_proj.weight"])


def _fused(rng, gpt_oss=False, drop=(), add=()):
    """The experts fused as transformers 5 writes them (save_original_format=False), or as
    gpt-oss does (interleaved gate/up, expert biases, router.weight and router.bias)."""
    r = lambda *shape: (rng.standard_normal(shape) * 0.05).astype(np.float32)  # noqa: E731
    if gpt_oss:
        t = [(f"{P}.experts.down_proj", "F32", r(E, I, H)), (f"{P}.experts.down_proj_bias", "F32", r(E, H)),
             (f"{P}.experts.gate_up_proj", "F32", r(E, H, 2 * I)),
             (f"{P}.experts.gate_up_proj_bias", "F32", r(E, 2 * I)),
             (f"{P}.router.bias", "F32", r(E)), (f"{P}.router.weight", "F32", r(E, H) * 20)]
    else:
        t = [(f"{P}.experts.down_proj", "F32", r(E, H, I)), (f"{P}.experts.gate_up_proj", "F32", r(E, 2 * I, H)),
             (f"{P}.gate.weight", "F32", r(E, H) * 20)]
    return image([x for x in t if not any(x[0].endswith(d) for d in drop)] + list(add))


def _qwen2(rng):
    t = layer_tensors(rng)
    for k, shape in (("gate_proj", (I, H)), ("up_proj", (I, H)), ("down_proj", (H, I))):
        t.append((f"{P}.shared_expert.{k}.weight", "F32", rng.standard_normal(shape).astype(np.float32) * 0.05))
    t.append((f"{P}.shared_expert_gate.weight", "F32", rng.standard_normal((1, H)).astype(np.float32) * 0.1))
    return image(t)


Z = np.zeros
CASES = {
    "valid-fused-transformers": (lambda rng: _fused(rng), None),
    "valid-fused-gpt-oss": (lambda rng: _fused(rng, True), None),
    "valid-qwen2-gated-shared-expert": (_qwen2, None),
    "valid-bias-with-softmax": (lambda rng: _with(rng, [(f"{P}.gate.e_score_correction_bias", "F32",
                                                          np.linspace(-0.5, 0.5, E).astype(np.float32))]), None),
    "fused-down-missing": (lambda rng: _fused(rng, drop=("experts.down_proj",)),
                           "experts.down_proj is missing (fused experts: saw"),
    "fused-beside-per-expert": (lambda rng: _fused(rng, add=[(f"{P}.experts.0.gate_proj.weight", "F32",
                                                              Z((I, H), np.float32))]),
                                "one tensor per expert beside the fused"),
    "fused-down-transposed": (lambda rng: _fused(rng, drop=("experts.down_proj",),
                                                 add=[(f"{P}.experts.down_proj", "F32", Z((E, I, H), np.float32))]),
                              f"{P}.experts.down_proj: shape [4, 64, 128]"),
    "gated-shared-without-shared": (lambda rng: _with(rng, [(f"{P}.shared_expert_gate.weight", "F32",
                                                              Z((1, H), np.float32))]),
                                    "shared_expert_gate.weight without a shared expert"),
    # accepted by both
    "valid": (lambda rng: image(layer_tensors(rng)), None),
    "valid-mixtral": (lambda rng: image(layer_tensors(rng, ("w1", "w3", "w2"))), None),
    "valid-empty-tensor-and-metadata": (
        lambda rng: image(layer_tensors(rng) + [("model.norm-0.bias", "F32", Z((0,), np.float32))],
                          meta='{"format":"pt"}'), None),
    "valid-shared-expert": (lambda rng: _shared(rng, ["shared_experts"]), None),
    # the file rules
    "duplicate-name": (_dup_name, f"{P}.gate.weight given twice"),
    "overlapping-offsets": (_overlap, "overlap"),
    "hole-between-tensors": (_hole, "hole"),
    "bytes-after-last-tensor": (lambda rng: image(layer_tensors(rng), data_tail=b"\0" * 4),
                                "bytes after the last tensor"),
    "duplicate-metadata-key": (_meta_twice, "qmoe.top_k given twice"),
    "unicode-escape": (lambda rng: _header(rng, lambda h: h.replace('"dtype"', '"dt\\u0079pe"', 1)),
                       "unsupported escape"),
    "non-ascii-name": (lambda rng: _header(rng, lambda h: h.replace("model.layers", "mod\xe9l.layers", 1)),
                       "printable ASCII"),
    "negative-dim": (lambda rng: _header(rng, lambda h: h.replace('"shape":[64,', '"shape":[-64,', 1)),
                     "non-negative integer"),
    "negative-zero-dim": (lambda rng: _header(rng, lambda h: h.replace('"shape":[64,', '"shape":[-0,', 1)),
                          "non-negative integer"),
    "float-dim": (lambda rng: _header(rng, lambda h: h.replace('"shape":[64,', '"shape":[64.0,', 1)),
                  ("expected ']'", "expected a non-negative integer")),
    "integer-over-2^62": (lambda rng: _header(rng, lambda h: h.replace('"shape":[64,', '"shape":[4611686018427387905,', 1)),
                          "integer over 2^62"),
    "repeated-key-in-entry": (lambda rng: _header(rng, lambda h: h.replace('{"dtype":"F32",', '{"dtype":"F32","dtype":"F32",', 1)),
                              ("repeated key", "dtype given twice")),
    "header-longer-than-file": (lambda rng: image(layer_tensors(rng), hlen=1 << 26), "does not fit"),
    "data-cut-short": (lambda rng: image(layer_tensors(rng), keep=-8), "do not hold"),
    # the layer rules
    "extra-experts-00": (lambda rng: _with(rng, [(f"{P}.experts.00.gate_proj.weight", "F32", Z((I, H), np.float32))]),
                         f"{P}.experts.00.gate_proj.weight: not a MoE layer tensor"),
    "mixtral-set-beside": (_mixtral_beside, f"{P}.experts.0.w1.weight: Mixtral's w1/w3/w2 naming"),
    "mixed-expert-naming": (_mixed_experts, f"{P}.experts.3.w1.weight: Mixtral's w1/w3/w2 naming"),
    "two-shared-namings": (lambda rng: _shared(rng, ["shared_experts", "shared_expert"]),
                           f"{P}.shared_experts.down_proj.weight: a shared_experts. naming"),
    "router-2^40-by-0": (lambda rng: _router(rng, (1 << 40, 0)),
                         f"{P}.gate.weight: shape [1099511627776, 0], expected [E, H = {H}]"),
    "router-int8": (lambda rng: _router(rng, (E, H), "I8"), "dtype I8; expected F32, F16 or BF16"),
    "router-more-rows": (lambda rng: _router(rng, (E + 2, H)),
                         f"{P}.experts.{E}.gate_proj.weight is missing"),
    "missing-projection": (_missing, f"{P}.experts.1.up_proj.weight is missing"),
    "expert-index-beyond-router": (lambda rng: _with(rng, [(f"{P}.experts.{E}.gate_proj.weight", "F32", Z((I, H), np.float32))]),
                                   "beyond E = 4"),
    "bias-float16": (lambda rng: _with(rng, [(f"{P}.gate.e_score_correction_bias", "F16", Z((E,), np.float32))]),
                     "expected F32"),
    "empty-expert-matrix": (lambda rng: image([(n, d, a[:0] if ".experts.0.gate_proj" in n else a)
                                              for n, d, a in layer_tensors(rng)]),
                            "non-empty [I, H] matrix"),
    "no-experts-under-prefix": (lambda rng: _renamed(rng, P + ".", "model.layers.5.mlp."),
                                f"{P}.experts.0.gate_proj.weight"),
}


def words_for(case, reader):
    """What `reader` ("c" or "python") must say for `case` (None: it must accept the file)."""
    words = CASES[case][1]
    if isinstance(words, tuple):
        return words[0 if reader == "c" else 1]
    return words
