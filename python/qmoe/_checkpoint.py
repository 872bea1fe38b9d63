"""Reading a MoE layer's float weights from a safetensors checkpoint (python/qmoe/_safetensors.py:
the file and naming rules of docs/moe-layer.md "Checkpoint rules", which `qmoe moe run` applies too).

Tensor names, under the layer's ``prefix`` (e.g. ``"model.layers.3.mlp"``), as common MoE
checkpoints (Qwen3-MoE, DeepSeek-V3, Mixtral) write them:

- experts: ``experts.{e}.gate_proj.weight`` ``[I, H]``, ``experts.{e}.up_proj.weight`` ``[I, H]``,
  ``experts.{e}.down_proj.weight`` ``[H, I]`` for e = 0 .. E-1 (Mixtral's ``w1`` / ``w3`` / ``w2``
  are read as gate / up / down);
- router (optional): ``gate.weight`` ``[E, H]``, ``gate.e_score_correction_bias`` ``[E]``;
- shared expert (optional): ``shared_experts.{gate,up,down}_proj.weight`` (``shared_expert.`` as
  in Qwen2-MoE, with its optional ``shared_expert_gate.weight`` ``[1, H]``);
- or the experts fused, as transformers 5 writes them with ``save_original_format=False``:
  ``experts.gate_up_proj`` ``[E, 2I, H]`` (gate rows first) and ``experts.down_proj``
  ``[E, H, I]``; gpt-oss (told by its ``router.`` or ``_bias`` tensors): ``experts.gate_up_proj``
  ``[E, H, 2I]`` (gate and up interleaved, gate the even columns), ``experts.gate_up_proj_bias``
  ``[E, 2I]`` (interleaved), ``experts.down_proj`` ``[E, I, H]``, ``experts.down_proj_bias``
  ``[E, H]``, router ``router.weight`` ``[E, H]`` and ``router.bias`` ``[E]`` (added to the
  logits, not a selection bias).

Every tensor under the prefix must be one of these; a missing, extra or mis-shaped tensor is a
QmoeError naming it. Tensors outside the prefix (other layers) are ignored.
"""

from __future__ import annotations

import re
from collections import namedtuple
from typing import Dict, List, Optional, Tuple

import numpy as np

from . import _lib
from ._arrays import invalid
from ._errors import QmoeError

MoECheckpoint = namedtuple("MoECheckpoint", [
    "gate", "up", "down", "router", "router_bias",
    "shared_gate", "shared_up", "shared_down", "shared_expert_gate",
    "gate_up_bias", "down_bias", "router_logit_bias", "layout",
], defaults=(None, None, None, "experts"))
MoECheckpoint.__doc__ = """One MoE layer's float weights: gate, up [E, I, H], down [E, H, I]
(NumPy, the file's dtype; bfloat16 as ml_dtypes.bfloat16; views of the fused tensor for a fused
file); router [E, H] and router_bias [E] (e_score_correction_bias, a selection bias) or None;
shared_gate, shared_up [Is, H], shared_down [H, Is] or None; shared_expert_gate [1, H] or None;
gpt-oss: gate_up_bias [E, 2I] (gate's I, then up's I), down_bias [E, H], router_logit_bias [E]
(router.bias, added to the logits) or None. layout: "experts" (one tensor per expert),
"transformers" or "gpt_oss" (fused)."""

_FUSED = ("experts.gate_up_proj", "experts.down_proj", "experts.gate_up_proj_bias",
          "experts.down_proj_bias", "router.weight", "router.bias")

_PROJ = {"gate_proj": "gate", "up_proj": "up", "down_proj": "down",
         "w1": "gate", "w3": "up", "w2": "down"}
# e in decimal without a leading zero, at most 1000000 (as tools/cmd_moe_run.c reads it)
_EXPERT = re.compile(r"experts\.(0|[1-9]\d{0,6})\.(gate_proj|up_proj|down_proj|w1|w2|w3)\.weight")
_SHARED = re.compile(r"(shared_experts|shared_expert)\.(gate_proj|up_proj|down_proj)\.weight")
_FLOATS = ("F32", "F16", "BF16")
MAX_EXPERT = 1000000


def _naming(rest: str, expert: bool) -> int:
    """Which naming a layer tensor uses: experts 1 gate_proj/up_proj/down_proj, 2 w1/w3/w2;
    shared 1 shared_experts., 2 shared_expert.; 0 for the others."""
    if expert:
        return 2 if re.search(r"\.w[123]\.", rest) else 1
    return 1 if rest.startswith("shared_experts.") else 2 if rest.startswith("shared_expert.") else 0


_NAMINGS = {(True, 1): "a gate_proj/up_proj/down_proj", (True, 2): "Mixtral's w1/w3/w2",
            (False, 1): "a shared_experts.", (False, 2): "a shared_expert."}


class _File:
    """The checkpoint's checked header (the file rules), data read tensor by tensor."""

    def __init__(self, path: str):
        from ._safetensors import SafetensorsFile

        self.st = SafetensorsFile(path)
        self.path = self.st.path

    def close(self) -> None:
        self.st.close()

    def keys(self) -> List[str]:
        return self.st.keys()

    def shape(self, name: str) -> Tuple[int, ...]:
        return self.st.shape(name)

    def dtype(self, name: str) -> str:
        return self.st.dtype(name)

    def read(self, name: str, out: Optional[np.ndarray] = None) -> np.ndarray:
        return self.st.read(name, out)


def _expect(file: _File, name: str, shape: Tuple[int, ...]) -> None:
    got = file.shape(name)
    if got != tuple(shape):
        raise invalid(f"{file.path}: tensor {name}: shape {list(got)}, expected {list(shape)}")


def _float(file: _File, name: str, want: Optional[str] = None) -> None:
    dt = file.dtype(name)
    if dt not in _FLOATS:
        raise invalid(f"{file.path}: tensor {name}: dtype {dt}; expected F32, F16 or BF16")
    if want is not None and dt != want:
        raise invalid(f"{file.path}: tensor {name}: dtype {dt} differs from the experts' {want}")


def _stack(file: _File, names: List[str], shape: Tuple[int, ...]) -> np.ndarray:
    dtype = file.dtype(names[0])
    for name in names:
        _expect(file, name, shape)
        _float(file, name)
        if file.dtype(name) != dtype:
            raise invalid(f"{file.path}: tensor {name}: dtype {file.dtype(name)} differs from "
                          f"{names[0]}'s {dtype}")
    try:
        out = np.empty((len(names),) + tuple(shape), dtype=file.st.numpy_dtype(names[0]))
    except MemoryError as exc:
        raise QmoeError(_lib.ERR_INNER, f"{file.path}: out of memory for {len(names)} x "
                        f"{list(shape)} {dtype}", _lib.status_name(_lib.ERR_INNER)) from exc
    for e, name in enumerate(names):
        file.read(name, out[e])  # straight into the stack: one copy of the weights in memory
    return out


def load_experts(path: str, prefix: str, *, num_experts: Optional[int] = None) -> MoECheckpoint:
    """Read one MoE layer's float weights from a safetensors file.

    The file and its names must follow docs/moe-layer.md "Checkpoint rules" (the rules
    ``qmoe moe run`` applies to the same file).

    Args:
        path: the ``.safetensors`` file.
        prefix: the layer's name prefix, e.g. ``"model.layers.0.mlp"`` (a trailing ``.`` is
            optional; ``""`` for names without one).
        num_experts: E, when the file's experts should be checked against it; otherwise E is the
            router's first dimension, or the number of experts found.

    Returns:
        MoECheckpoint (see its doc). Raises QmoeError naming the tensor that is missing, extra
        or mis-shaped, or the file rule that is broken.
    """
    p = prefix.rstrip(".") + "." if prefix else ""
    file = _File(path)
    try:
        return _load(file, p, num_experts)
    finally:
        file.close()


def _load(file: _File, p: str, num_experts: Optional[int]) -> MoECheckpoint:
    experts: Dict[int, Dict[str, str]] = {}
    shared: Dict[str, str] = {}
    router = router_bias = shared_gate_w = None
    fused: Dict[str, str] = {}
    named = {True: 0, False: 0}  # the naming of the first expert / shared tensor in name order
    for name in sorted(file.keys()):
        if not name.startswith(p):
            continue
        rest = name[len(p):]
        m, s = _EXPERT.fullmatch(rest), _SHARED.fullmatch(rest)
        if m and int(m.group(1)) > MAX_EXPERT:
            m = None
        others = ("gate.weight", "gate.e_score_correction_bias", "shared_expert_gate.weight")
        if rest in _FUSED:
            fused[rest] = name
            continue
        if not (m or s or rest in others):
            raise invalid(f"{file.path}: tensor {name}: not a MoE layer tensor under prefix "
                          f"{p!r} (extra)")
        is_expert = m is not None
        kind = _naming(rest, is_expert)
        if kind and named[is_expert] and kind != named[is_expert]:
            raise invalid(f"{file.path}: tensor {name}: {_NAMINGS[is_expert, kind]} naming beside "
                          "the layer's other one (one naming per layer) (extra)")
        if kind:
            named[is_expert] = kind
        if m:
            slot = experts.setdefault(int(m.group(1)), {})
            role = _PROJ[m.group(2)]
            if role in slot:
                raise invalid(f"{file.path}: tensor {name}: expert {m.group(1)}'s {role} "
                              f"projection is also given as {slot[role]}")
            slot[role] = name
        elif s:
            shared[_PROJ[s.group(2)]] = name
        elif rest == "gate.weight":
            router = name
        elif rest == "gate.e_score_correction_bias":
            router_bias = name
        else:
            shared_gate_w = name
    if fused:
        if experts:
            e0 = experts[min(experts)]
            raise invalid(f"{file.path}: tensor {next(iter(e0.values()))}: one tensor per expert "
                          f"beside the fused {next(iter(fused.values()))} (one layout per layer) "
                          "(extra)")
        if router is not None and "router.weight" in fused:
            raise invalid(f"{file.path}: tensor {router}: a router beside {fused['router.weight']} "
                          "(extra)")
        gate, up, down, gub, dnb, layout, E, I, H = _fused(file, p, fused, num_experts)
        if router is None and "router.weight" in fused:
            router = fused["router.weight"]
        r = rb = rlb = None
        if router is not None:
            _expect(file, router, (E, H))
            _float(file, router)
            r = file.read(router)
        if "router.bias" in fused:
            _expect(file, fused["router.bias"], (E,))
            _float(file, fused["router.bias"])
            rlb = file.read(fused["router.bias"])
        if router_bias is not None:
            rb = _router_bias(file, router_bias, E)
        sg, su, sd, sgw = _shared(file, p, shared, shared_gate_w, H, file.dtype(fused["experts.gate_up_proj"]))
        return MoECheckpoint(gate, up, down, r, rb, sg, su, sd, sgw, gub, dnb, rlb, layout)
    own = {"gate": "w1", "up": "w3", "down": "w2"} if named[True] == 2 else \
        {"gate": "gate_proj", "up": "up_proj", "down": "down_proj"}
    if not experts:
        raise invalid(f"{file.path}: no tensor {p}experts.0.gate_proj.weight (missing): no experts "
                      f"under prefix {p!r}")
    g0 = f"{p}experts.0.{own['gate']}.weight"
    if g0 not in experts.get(0, {}).values():
        raise invalid(f"{file.path}: tensor {g0} is missing")
    gshape = file.shape(g0)
    if len(gshape) != 2 or not all(gshape):
        raise invalid(f"{file.path}: tensor {g0}: shape {list(gshape)}, expected a non-empty "
                      "[I, H] matrix")
    I, H = gshape
    if router is not None:  # checked before E is used: a router [2^40, 0] is a shape error
        rshape = file.shape(router)
        if len(rshape) != 2 or rshape[1] != H or rshape[0] < 1:
            raise invalid(f"{file.path}: tensor {router}: shape {list(rshape)}, expected "
                          f"[E, H = {H}]")
        _float(file, router)
    E = num_experts
    if E is None:
        E = file.shape(router)[0] if router is not None else max(experts) + 1
    for e in sorted(experts):
        if e >= E:
            raise invalid(f"{file.path}: tensor {next(iter(experts[e].values()))}: expert {e} "
                          f"beyond E = {E} (extra)")
    names: Dict[str, List[str]] = {"gate": [], "up": [], "down": []}
    for e in range(E):  # stops at the first missing one: E is at most max(experts) + 1 here
        for role in ("gate", "up", "down"):
            name = experts.get(e, {}).get(role)
            if name is None:
                raise invalid(f"{file.path}: tensor {p}experts.{e}.{own[role]}.weight is missing")
            names[role].append(name)
    gate = _stack(file, names["gate"], (I, H))
    up = _stack(file, names["up"], (I, H))
    down = _stack(file, names["down"], (H, I))
    r = rb = None
    if router is not None:
        _expect(file, router, (E, H))
        r = file.read(router)
    if router_bias is not None:
        rb = _router_bias(file, router_bias, E)
    sg, su, sd, sgw = _shared(file, p, shared, shared_gate_w, H, file.dtype(names["gate"][0]))
    return MoECheckpoint(gate, up, down, r, rb, sg, su, sd, sgw)


def _router_bias(file: _File, name: str, E: int) -> np.ndarray:
    _expect(file, name, (E,))
    if file.dtype(name) != "F32":
        raise invalid(f"{file.path}: tensor {name}: dtype {file.dtype(name)}; expected F32")
    return file.read(name)


def _fused(file: _File, p: str, fused: Dict[str, str], num_experts: Optional[int]):
    """The experts of a fused file, split into the checkpoint convention as views."""
    gpt = any(k in fused for k in ("router.weight", "router.bias", "experts.gate_up_proj_bias",
                                    "experts.down_proj_bias"))
    layout = "gpt_oss" if gpt else "transformers"
    for k in ("experts.gate_up_proj", "experts.down_proj"):
        if k not in fused:
            seen = ", ".join(sorted(fused.values()))
            raise invalid(f"{file.path}: tensor {p}{k} is missing (fused experts: saw {seen})")
    gu, dn = fused["experts.gate_up_proj"], fused["experts.down_proj"]
    gs, ds = file.shape(gu), file.shape(dn)
    if len(gs) != 3 or not all(gs) or len(ds) != 3:
        raise invalid(f"{file.path}: tensor {gu}: shape {list(gs)}, {dn}: {list(ds)}; expected "
                      + ("[E, H, 2I] and [E, I, H] (gpt-oss)" if gpt else
                         "[E, 2I, H] and [E, H, I] (transformers)"))
    E = gs[0]
    if gpt:
        H, I2 = gs[1], gs[2]
        want_d = (E, I2 // 2, H)
    else:
        I2, H = gs[1], gs[2]
        want_d = (E, H, I2 // 2)
    if I2 % 2:
        raise invalid(f"{file.path}: tensor {gu}: shape {list(gs)}: 2I = {I2} is odd")
    I = I2 // 2
    if num_experts is not None and E != num_experts:
        raise invalid(f"{file.path}: tensor {gu}: {E} experts, expected {num_experts}")
    _expect(file, dn, want_d)
    _float(file, gu)
    _float(file, dn, file.dtype(gu))
    a, d = file.read(gu), file.read(dn)
    if gpt:
        gate, up, down = a[:, :, 0::2].transpose(0, 2, 1), a[:, :, 1::2].transpose(0, 2, 1), \
            d.transpose(0, 2, 1)
    else:
        gate, up, down = a[:, :I], a[:, I:], d
    gub = dnb = None
    if "experts.gate_up_proj_bias" in fused:
        n = fused["experts.gate_up_proj_bias"]
        _expect(file, n, (E, I2))
        _float(file, n, file.dtype(gu))
        b = file.read(n)
        gub = np.concatenate([b[:, 0::2], b[:, 1::2]], axis=1)
    if "experts.down_proj_bias" in fused:
        n = fused["experts.down_proj_bias"]
        _expect(file, n, (E, H))
        _float(file, n, file.dtype(gu))
        dnb = file.read(n)
    return gate, up, down, gub, dnb, layout, E, I, H


def _shared(file: _File, p: str, shared: Dict[str, str], shared_gate_w: Optional[str], H: int,
            dtype: str):
    sg = su = sd = sgw = None
    if shared_gate_w is not None and not shared:
        raise invalid(f"{file.path}: tensor {shared_gate_w} without a shared expert")
    if shared:
        for role in ("gate", "up", "down"):
            if role not in shared:
                kind = next(iter(shared.values()))[len(p):].split(".")[0]
                raise invalid(f"{file.path}: tensor {p}{kind}.{role}_proj.weight is missing")
        sshape = file.shape(shared["gate"])
        if len(sshape) != 2 or sshape[1] != H or sshape[0] < 1:
            raise invalid(f"{file.path}: tensor {shared['gate']}: shape {list(sshape)}, expected "
                          f"[Is, H = {H}]")
        Is = sshape[0]
        _expect(file, shared["up"], (Is, H))
        _expect(file, shared["down"], (H, Is))
        for k in ("gate", "up", "down"):
            _float(file, shared[k], dtype)
        sg, su, sd = (file.read(shared[k]) for k in ("gate", "up", "down"))
    if shared_gate_w is not None:
        _expect(file, shared_gate_w, (1, H))
        _float(file, shared_gate_w)
        sgw = file.read(shared_gate_w)
    return sg, su, sd, sgw
