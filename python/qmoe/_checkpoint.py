"""Reading a MoE layer's float weights from a safetensors checkpoint (the `safetensors` package).

Tensor names, under the layer's ``prefix`` (e.g. ``"model.layers.3.mlp"``), as common MoE
checkpoints (Qwen3-MoE, DeepSeek-V3, Mixtral) write them:

- experts: ``experts.{e}.gate_proj.weight`` ``[I, H]``, ``experts.{e}.up_proj.weight`` ``[I, H]``,
  ``experts.{e}.down_proj.weight`` ``[H, I]`` for e = 0 .. E-1 (Mixtral's ``w1`` / ``w3`` / ``w2``
  are read as gate / up / down);
- router (optional): ``gate.weight`` ``[E, H]``, ``gate.e_score_correction_bias`` ``[E]``;
- shared expert (optional): ``shared_experts.{gate,up,down}_proj.weight`` (``shared_expert.`` as
  in Qwen2-MoE, with its optional ``shared_expert_gate.weight`` ``[1, H]``).

Every tensor under the prefix must be one of these; a missing, extra or mis-shaped tensor is a
QmoeError naming it. Tensors outside the prefix (other layers) are ignored.
"""

from __future__ import annotations

import re
from collections import namedtuple
from typing import Dict, List, Optional, Tuple

import numpy as np

from ._arrays import invalid

MoECheckpoint = namedtuple("MoECheckpoint", [
    "gate", "up", "down", "router", "router_bias",
    "shared_gate", "shared_up", "shared_down", "shared_expert_gate",
])
MoECheckpoint.__doc__ = """One MoE layer's float weights: gate, up [E, I, H], down [E, H, I]
(NumPy, the file's dtype; bfloat16 as ml_dtypes.bfloat16); router [E, H] and router_bias [E] or
None; shared_gate, shared_up [Is, H], shared_down [H, Is] or None; shared_expert_gate [1, H] or
None."""

_PROJ = {"gate_proj": "gate", "up_proj": "up", "down_proj": "down",
         "w1": "gate", "w3": "up", "w2": "down"}
_EXPERT = re.compile(r"experts\.(\d+)\.(gate_proj|up_proj|down_proj|w1|w2|w3)\.weight")
_SHARED = re.compile(r"(shared_experts|shared_expert)\.(gate_proj|up_proj|down_proj)\.weight")


def _open(path: str):
    try:
        from safetensors import safe_open
    except ImportError as exc:  # pragma: no cover - a dependency of the checkpoint loader
        raise ImportError("qmoe.load_experts needs the `safetensors` package "
                          "(pip install safetensors)") from exc
    try:
        return safe_open(str(path), framework="numpy")
    except Exception as exc:  # the package raises several types for unreadable files
        raise invalid(f"{path}: cannot be read as safetensors ({exc})") from exc


def _bfloat16():
    try:
        import ml_dtypes
    except ImportError as exc:
        raise invalid("bfloat16 tensors need the `ml_dtypes` package (NumPy has no "
                      "bfloat16)") from exc
    return ml_dtypes.bfloat16


class _File:
    """Names, shapes and dtypes from the header; data read tensor by tensor."""

    def __init__(self, path: str):
        self.path = str(path)
        self.handle = _open(path)
        self.f = self.handle.__enter__()

    def close(self) -> None:
        self.handle.__exit__(None, None, None)

    def keys(self) -> List[str]:
        return list(self.f.keys())

    def shape(self, name: str) -> Tuple[int, ...]:
        return tuple(self.f.get_slice(name).get_shape())

    def dtype(self, name: str) -> str:
        return self.f.get_slice(name).get_dtype()

    def read(self, name: str) -> np.ndarray:
        bf16 = self.dtype(name) == "BF16"
        if bf16:
            _bfloat16()  # importing ml_dtypes lets NumPy (and safetensors) name bfloat16
        t = np.asarray(self.f.get_tensor(name))
        if bf16 and t.dtype.name != "bfloat16":
            t = t.view(_bfloat16())  # older safetensors hand NumPy bfloat16 as its bits
        return t


def _expect(file: _File, name: str, shape: Tuple[int, ...]) -> None:
    got = file.shape(name)
    if got != tuple(shape):
        raise invalid(f"{file.path}: tensor {name}: shape {list(got)}, expected {list(shape)}")


def _stack(file: _File, names: List[str], shape: Tuple[int, ...]) -> np.ndarray:
    dtype = file.dtype(names[0])
    out = None
    for e, name in enumerate(names):
        _expect(file, name, shape)
        if file.dtype(name) != dtype:
            raise invalid(f"{file.path}: tensor {name}: dtype {file.dtype(name)} differs from "
                          f"{names[0]}'s {dtype}")
    for e, name in enumerate(names):
        t = file.read(name)
        if out is None:
            out = np.empty((len(names),) + tuple(shape), dtype=t.dtype)
        out[e] = t
    return out if out is not None else np.empty((0,) + tuple(shape), np.float32)


def load_experts(path: str, prefix: str, *, num_experts: Optional[int] = None) -> MoECheckpoint:
    """Read one MoE layer's float weights from a safetensors file.

    Args:
        path: the ``.safetensors`` file.
        prefix: the layer's name prefix, e.g. ``"model.layers.0.mlp"`` (a trailing ``.`` is
            optional; ``""`` for names without one).
        num_experts: E, when the file's experts should be checked against it; otherwise E is the
            router's first dimension, or the number of experts found.

    Returns:
        MoECheckpoint (see its doc). Raises QmoeError naming the tensor that is missing, extra
        or mis-shaped.
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
    for name in sorted(file.keys()):
        if not name.startswith(p):
            continue
        rest = name[len(p):]
        m, s = _EXPERT.fullmatch(rest), _SHARED.fullmatch(rest)
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
        elif rest == "shared_expert_gate.weight":
            shared_gate_w = name
        else:
            raise invalid(f"{file.path}: tensor {name}: not a MoE layer tensor under prefix "
                          f"{p!r} (extra)")
    if not experts:
        raise invalid(f"{file.path}: no tensor {p}experts.0.gate_proj.weight (missing): no experts "
                      f"under prefix {p!r}")
    E = num_experts
    if E is None:
        E = file.shape(router)[0] if router is not None and file.shape(router) else \
            max(experts) + 1
    for e in sorted(experts):
        if e >= E:
            raise invalid(f"{file.path}: tensor {next(iter(experts[e].values()))}: expert {e} "
                          f"beyond E = {E} (extra)")
    names = {"gate": [], "up": [], "down": []}
    style = next(iter(experts[min(experts)].values()))
    mixtral = re.search(r"\.w[123]\.weight$", style) is not None
    own = {"gate": "w1", "up": "w3", "down": "w2"} if mixtral else \
        {"gate": "gate_proj", "up": "up_proj", "down": "down_proj"}
    for e in range(E):
        for role in ("gate", "up", "down"):
            name = experts.get(e, {}).get(role)
            if name is None:
                raise invalid(f"{file.path}: tensor {p}experts.{e}.{own[role]}.weight is missing")
            names[role].append(name)
    gshape = file.shape(names["gate"][0])
    if len(gshape) != 2:
        raise invalid(f"{file.path}: tensor {names['gate'][0]}: shape {list(gshape)}, expected "
                      "[I, H]")
    I, H = gshape
    gate = _stack(file, names["gate"], (I, H))
    up = _stack(file, names["up"], (I, H))
    down = _stack(file, names["down"], (H, I))
    r = rb = None
    if router is not None:
        _expect(file, router, (E, H))
        r = file.read(router)
    if router_bias is not None:
        _expect(file, router_bias, (E,))
        rb = file.read(router_bias)
    sg = su = sd = sgw = None
    if shared:
        for role in ("gate", "up", "down"):
            if role not in shared:
                kind = next(iter(shared.values())).split(".")[len(p.split(".")) - 1]
                raise invalid(f"{file.path}: tensor {p}{kind}.{role}_proj.weight is missing")
        sshape = file.shape(shared["gate"])
        if len(sshape) != 2 or sshape[1] != H:
            raise invalid(f"{file.path}: tensor {shared['gate']}: shape {list(sshape)}, expected "
                          f"[Is, H = {H}]")
        Is = sshape[0]
        _expect(file, shared["up"], (Is, H))
        _expect(file, shared["down"], (H, Is))
        sg, su, sd = (file.read(shared[k]) for k in ("gate", "up", "down"))
    if shared_gate_w is not None:
        _expect(file, shared_gate_w, (1, H))
        sgw = file.read(shared_gate_w)
    return MoECheckpoint(gate, up, down, r, rb, sg, su, sd, sgw)
