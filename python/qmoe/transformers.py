"""Hugging Face transformers on qmoe: :func:`patch` replaces a loaded model's MoE blocks, in
place, with modules that run :class:`qmoe.MoELayer` on the blocks' own in-memory weights
(quantized A8W8 or A8W4 once, no file round trip). docs/transformers.md says what is supported.

    import qmoe.transformers
    report = qmoe.transformers.patch(model, mode="a8w8")
    print(report)                      # the blocks replaced, and why the others were left
    model.generate(...)                # unchanged

Needs torch and transformers (imported by this module only, never by ``import qmoe``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F

from . import _lib
from ._arrays import invalid
from ._errors import QmoeError
from ._moe_layer import MoELayer
from ._omp import OmpDevice, omp_available, openmp_runtimes

__all__ = ["patch", "PatchReport", "PatchedBlock", "ReplacedBlock", "SkippedBlock",
           "QmoeMoEBlock", "QmoeExperts"]


@dataclasses.dataclass(frozen=True)
class ReplacedBlock:
    """A block :func:`patch` replaced: where, what it was, and how the new module routes."""

    name: str
    block: str          # the transformers class replaced
    kind: str           # "block" (the whole block) or "experts" (block.experts only)
    routing: str        # "qmoe" (the layer's gating, in C) or "torch" (the model's own router)
    shared: str         # "none", "qmoe" (in the layer) or "torch" (the model's own modules)
    num_experts: int
    top_k: int
    hidden_size: int
    intermediate_size: int
    weight_bytes: int


@dataclasses.dataclass(frozen=True)
class SkippedBlock:
    """A block left as it is, and why."""

    name: str
    block: str
    reason: str


@dataclasses.dataclass
class PatchReport:
    """What :func:`patch` did: ``replaced`` and ``skipped`` blocks, in module order."""

    mode: str
    replaced: List[ReplacedBlock] = dataclasses.field(default_factory=list)
    skipped: List[SkippedBlock] = dataclasses.field(default_factory=list)
    # which device runs the layers: "openmp (N threads, <runtime>)" or "qmoe (...: why)"
    device: str = "qmoe"

    def __str__(self) -> str:
        lines = [f"qmoe.transformers.patch ({self.mode}): {len(self.replaced)} block(s) replaced, "
                 f"{len(self.skipped)} left as they are; device {self.device}"]
        for r in self.replaced:
            lines.append(f"  replaced {r.name} ({r.block}, {r.kind}): E {r.num_experts} top-"
                         f"{r.top_k} H {r.hidden_size} I {r.intermediate_size}, routing "
                         f"{r.routing}, shared expert {r.shared}, {r.weight_bytes / 2**20:.1f} MiB")
        for s in self.skipped:
            lines.append(f"  left {s.name} ({s.block}): {s.reason}")
        return "\n".join(lines)


class _Unsupported(Exception):
    """A block patch() leaves as it is; the message is the report's reason."""


# --- how each known router routes -------------------------------------------------------------
# A router's semantics cannot be read off its structure, so the ones qmoe's gating reproduces
# are named here; any other router is called as it is (routing in torch) and only the experts
# run in qmoe.

_SOFTMAX_ROUTERS = {  # softmax over E in float32, top-k, renormalised when norm_topk_prob
    "Qwen3MoeTopKRouter", "Qwen2MoeTopKRouter", "OlmoeTopKRouter", "MixtralTopKRouter",
}
_ALWAYS_RENORMALIZED = {"MixtralTopKRouter"}
_DEEPSEEK_ROUTERS = {"DeepseekV3TopkRouter"}  # sigmoid + bias, group top-k (sum of top 2)
_GPT_OSS_BLOCKS = {"GptOssMLP"}  # router logits with a bias, softmax over the top-k logits

# Block classes whose forward is known: (router attribute, shared expert attributes, whether the
# block also returns the routing weights).
_BLOCKS: Dict[str, Tuple[str, Optional[str], Optional[str], bool]] = {
    "Qwen3MoeSparseMoeBlock": ("gate", None, None, False),
    "MixtralSparseMoeBlock": ("gate", None, None, False),
    "OlmoeSparseMoeBlock": ("gate", None, None, False),
    "Qwen2MoeSparseMoeBlock": ("gate", "shared_expert", "shared_expert_gate", False),
    "DeepseekV3MoE": ("gate", "shared_experts", None, False),
    "GptOssMLP": ("router", None, None, True),
}


def _is_silu(act: Any) -> bool:
    return act is not None and "silu" in type(act).__name__.lower()


def _fused_experts(experts: torch.nn.Module) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(gate [E, I, H], up [E, I, H], down [E, H, I]) as views of a transformers-5 experts
    module (gate_up_proj [E, 2I, H], gate rows first; down_proj [E, H, I]); refuses the
    variants qmoe's SwiGLU does not compute."""
    gu, down = getattr(experts, "gate_up_proj", None), getattr(experts, "down_proj", None)
    if not isinstance(gu, torch.Tensor) or not isinstance(down, torch.Tensor):
        raise _Unsupported("its experts have no fused gate_up_proj / down_proj tensors")
    if any(getattr(experts, a, None) is not None for a in ("gate_up_proj_bias", "down_proj_bias")):
        raise _Unsupported("its experts have biases (only gpt-oss's are known)")
    if getattr(experts, "is_transposed", False) or not getattr(experts, "is_concatenated", True):
        raise _Unsupported("its experts store gate_up_proj transposed or interleaved")
    if getattr(experts, "has_bias", False) or getattr(experts, "has_post_expert_norm", False):
        raise _Unsupported("its experts have biases or a post-expert norm")
    gate_fn = getattr(type(experts), "_apply_gate", None)
    if not hasattr(experts, "is_concatenated") or getattr(gate_fn, "__name__", "") != \
            "_default_apply_gate":
        raise _Unsupported(f"{type(experts).__name__} is not transformers' standard experts "
                           "module (@use_experts_implementation with act(gate) * up)")
    act = getattr(experts, "act_fn", None)
    if not _is_silu(act):
        raise _Unsupported(f"its experts' activation is {type(act).__name__}, not SiLU (SwiGLU)")
    if gu.ndim != 3 or down.ndim != 3 or gu.shape[1] % 2:
        raise _Unsupported(f"gate_up_proj {list(gu.shape)} / down_proj {list(down.shape)} are "
                           "not [E, 2I, H] / [E, H, I]")
    E, I2, H = gu.shape
    I = I2 // 2
    if tuple(down.shape) != (E, H, I):
        raise _Unsupported(f"down_proj {list(down.shape)} is not [E, H, I] = {[E, H, I]}")
    gu, down = gu.detach(), down.detach()
    return gu[:, :I], gu[:, I:], down


def _gpt_oss_layer(experts: torch.nn.Module, top_k: int, opts: Dict[str, Any]) -> MoELayer:
    """gpt-oss's experts (gate_up_proj [E, H, 2I] gate/up interleaved, down_proj [E, I, H],
    biases on both, SwiGLU clamped at `limit` with (up + 1) * gate * sigmoid(alpha * gate)) as a
    layer with softmax-renormalised top-k gating: the router's softmax over its top-k logits is
    the renormalised top-k of the softmax over all E."""
    if type(experts).__name__ != "GptOssExperts":
        raise _Unsupported(f"{type(experts).__name__} is not gpt-oss's GptOssExperts")
    if not hasattr(MoELayer, "from_fused"):
        raise _Unsupported("expert biases and gpt-oss's clamped SwiGLU need "
                           "qmoe.MoELayer.from_fused, which this qmoe does not have")
    gu, down = experts.gate_up_proj.detach(), experts.down_proj.detach()
    _check_tensor(gu, "the experts' weight")
    alpha, limit = float(experts.alpha), float(experts.limit)
    if not (alpha > 0 and limit > 0):
        raise _Unsupported(f"swiglu_alpha {alpha} / swiglu_limit {limit}: qmoe's gpt-oss SwiGLU "
                           "needs both positive")
    return MoELayer.from_fused(gu, down, layout="gpt_oss",
                               gate_up_bias=experts.gate_up_proj_bias.detach(),
                               down_bias=experts.down_proj_bias.detach(), swiglu_alpha=alpha,
                               swiglu_limit=limit, top_k=top_k, gating="softmax",
                               renormalize=True, **opts)


def _check_tensor(t: torch.Tensor, what: str) -> None:
    if t.device.type != "cpu":
        raise _Unsupported(f"{what} is on {t.device}; qmoe runs on the CPU")
    if t.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise _Unsupported(f"{what} is {t.dtype}; qmoe quantizes float32, bfloat16 or float16")


def _mlp_weights(mlp: torch.nn.Module) -> Optional[Tuple[torch.Tensor, ...]]:
    """(gate [Is, H], up, down [H, Is]) of a SwiGLU MLP module without biases, else None."""
    try:
        lins = [getattr(mlp, n) for n in ("gate_proj", "up_proj", "down_proj")]
    except AttributeError:
        return None
    if not all(isinstance(m, torch.nn.Linear) and m.bias is None for m in lins):
        return None
    if not _is_silu(getattr(mlp, "act_fn", None)):
        return None
    return tuple(m.weight.detach() for m in lins)


class QmoeMoEBlock(torch.nn.Module):
    """A transformers MoE block run by a :class:`qmoe.MoELayer`: same ``forward(hidden_states)``
    and return value as the block replaced. Inference only (no autograd through the experts).

    ``routing``: "qmoe" — the router's logits are computed in torch as the block computes
    them, gating and top-k run in the layer; "torch" — the block's own router module routes and
    the layer runs :meth:`qmoe.MoELayer.forward_routed`. The router module is kept under its
    original name, so hooks on it (transformers' ``output_router_logits``) still see it.
    """

    def __init__(self, layer: MoELayer, router: torch.nn.Module, router_name: str, *,
                 routing: str, logits_fp32: bool,
                 shared: Optional[torch.nn.Module], shared_name: Optional[str],
                 shared_gate: Optional[torch.nn.Module], shared_gate_name: Optional[str],
                 returns_scores: bool, replaced: str):
        super().__init__()
        self.qmoe_layer = layer
        self.router_name = router_name
        self.add_module(router_name, router)
        self.routing = routing
        self._logits_fp32 = logits_fp32
        self.shared_name = shared_name
        self.shared_gate_name = shared_gate_name
        if shared is not None:
            self.add_module(shared_name, shared)
        if shared_gate is not None:
            self.add_module(shared_gate_name, shared_gate)
        self.returns_scores = returns_scores
        self.replaced = replaced

    @property
    def _router(self) -> torch.nn.Module:
        return getattr(self, self.router_name)

    def extra_repr(self) -> str:
        L = self.qmoe_layer
        return (f"replaces={self.replaced}, routing={self.routing}, E={L.num_experts}, "
                f"top_k={L.top_k}, H={L.hidden_size}, I={L.intermediate_size}")

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        router = self._router
        if router._forward_hooks or router._forward_pre_hooks:
            return router(x)[0]  # someone records the router's output: let them see it
        if self._logits_fp32:
            return F.linear(x.float(), router.weight.float())
        return F.linear(x, router.weight, getattr(router, "bias", None))

    def route(self, hidden_states: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor,
                                                           torch.Tensor]:
        """(router_logits [T, E], topk_weights [T, k] float32, topk_ids [T, k]) of this block
        for hidden_states [..., H], computed as :meth:`forward` routes (for inspection)."""
        x = hidden_states.reshape(-1, hidden_states.shape[-1])
        with torch.no_grad():
            if self.routing == "torch":
                logits, w, ids = self._router(x)
                return logits, w.float(), ids
            logits = self._logits(x)
            ids, w = self.qmoe_layer.route(logits)
            return logits, w, ids

    def forward(self, hidden_states: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        shape = hidden_states.shape
        x = hidden_states.detach().reshape(-1, shape[-1])  # a view where the layout allows
        scores = None
        with torch.no_grad():
            if self.routing == "torch":
                _, scores, ids = self._router(x)
                out = self.qmoe_layer.forward_routed(x, ids, scores)
            elif self.returns_scores:  # the block returns its routing weights too
                logits = self._logits(x)
                ids, w = self.qmoe_layer.route(logits)
                out = self.qmoe_layer.forward_routed(x, ids, w)
                scores = w.to(logits.dtype)
            else:
                out = self.qmoe_layer(x, self._logits(x))
            if self.shared_name is not None:
                s = getattr(self, self.shared_name)(x)
                if self.shared_gate_name is not None:
                    s = torch.sigmoid(getattr(self, self.shared_gate_name)(x)) * s
                out = out + s.to(out.dtype)
        out = out.view(shape)
        return (out, scores) if self.returns_scores else out


class QmoeExperts(torch.nn.Module):
    """A transformers experts module (``forward(hidden_states, top_k_index, top_k_weights)``)
    run by a :class:`qmoe.MoELayer`; the block around it (router, shared expert) stays torch."""

    def __init__(self, layer: MoELayer, replaced: str):
        super().__init__()
        self.qmoe_layer = layer
        self.replaced = replaced

    def extra_repr(self) -> str:
        L = self.qmoe_layer
        return (f"replaces={self.replaced}, E={L.num_experts}, top_k={L.top_k}, "
                f"H={L.hidden_size}, I={L.intermediate_size}")

    def forward(self, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                top_k_weights: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return self.qmoe_layer.forward_routed(hidden_states.detach(), top_k_index,
                                                  top_k_weights)


PatchedBlock = (QmoeMoEBlock, QmoeExperts)


def _layer_options(mode: str, group_size: Optional[int], clip_search: bool,
                   threads: Optional[int]) -> Dict[str, Any]:
    """The layer's options, checked once here (a bad one refuses the call, not each block)."""
    if mode not in ("a8w8", "a8w4"):
        raise invalid(f"mode = {mode!r}: expected 'a8w8' or 'a8w4'")
    for label, value in (("group_size", group_size), ("threads", threads)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 0):
            raise invalid(f"{label} = {value!r}: expected a non-negative integer or None")
    if not isinstance(clip_search, bool):
        raise invalid(f"clip_search = {clip_search!r}: expected True or False")
    if clip_search and mode != "a8w4":
        raise invalid("clip_search is an A8W4 option (mode='a8w4')")
    return dict(mode=mode, group_size=group_size, clip_search=clip_search, threads=threads)


def _router_of(block: torch.nn.Module, name: str, E: int, H: int) -> torch.nn.Module:
    router = getattr(block, name, None)
    w = getattr(router, "weight", None)
    if not isinstance(router, torch.nn.Module) or not isinstance(w, torch.Tensor):
        raise _Unsupported(f"no router module '{name}' with a weight")
    if tuple(w.shape) != (E, H):
        raise _Unsupported(f"router weight {list(w.shape)} is not [E, H] = {[E, H]}")
    return router


def _top_k(router: torch.nn.Module, E: int) -> int:
    k = getattr(router, "top_k", None)
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= E:
        raise _Unsupported(f"its router's top_k ({k!r}) is not an integer in [1, E]")
    return k


def _patch_block(block: torch.nn.Module, cls: str, opts: Dict[str, Any]):
    """(new module, ReplacedBlock fields) for a known block class."""
    router_name, shared_name, shared_gate_name, returns_scores = _BLOCKS[cls]
    if cls in _GPT_OSS_BLOCKS:
        ex = block.experts
        E, H, I2 = ex.gate_up_proj.shape
        router = _router_of(block, router_name, E, H)
        top_k = _top_k(router, E)
        layer = _gpt_oss_layer(ex, top_k, opts)
        module = QmoeMoEBlock(layer, router, router_name, routing="qmoe", logits_fp32=False,
                              shared=None, shared_name=None, shared_gate=None,
                              shared_gate_name=None, returns_scores=True, replaced=cls)
        return module, dict(kind="block", routing="qmoe", shared="none", num_experts=E,
                            top_k=top_k, hidden_size=H, intermediate_size=I2 // 2,
                            weight_bytes=layer.nbytes)
    gate, up, down = _fused_experts(block.experts)
    E, I, H = gate.shape
    _check_tensor(gate, "the experts' weight")
    router = _router_of(block, router_name, E, H)
    rcls = type(router).__name__
    top_k = _top_k(router, E)
    kw: Dict[str, Any] = {}
    gating: Dict[str, Any] = {}
    logits_fp32 = False
    routing = "torch"
    if rcls in _SOFTMAX_ROUTERS:
        renorm = rcls in _ALWAYS_RENORMALIZED or bool(getattr(router, "norm_topk_prob", False))
        gating = dict(gating="softmax", renormalize=renorm)
        routing = "qmoe"
    elif rcls in _DEEPSEEK_ROUTERS:
        bias = getattr(router, "e_score_correction_bias", None)
        groups, kg = int(router.num_group), int(router.topk_group)
        if bias is not None and E % groups == 0:
            gating = dict(gating="sigmoid", renormalize=bool(router.norm_topk_prob),
                          group_count=groups, k_group=kg,
                          routed_scaling_factor=float(router.routed_scaling_factor),
                          correction_bias=bias.detach().float().contiguous())
            routing = "qmoe"
        logits_fp32 = True
    if routing == "qmoe":
        kw.update({k: v for k, v in gating.items()})
    shared = shared_gate = None
    shared_where = "none"
    if shared_name is not None:
        shared = getattr(block, shared_name)
        shared_gate = getattr(block, shared_gate_name) if shared_gate_name else None
        w = _mlp_weights(shared)
        shared_where = "torch"
        sg = None
        if shared_gate is not None:  # Qwen2-MoE: sigmoid(x . g) scales the shared expert
            sg = getattr(shared_gate, "weight", None)
            if not (isinstance(shared_gate, torch.nn.Linear) and shared_gate.bias is None
                    and tuple(sg.shape) == (1, H) and sg.dtype == gate.dtype):
                w = None
        if w is not None and w[0].shape[0] % I == 0 and w[0].dtype == gate.dtype \
                and tuple(w[0].shape[1:]) == (H,):
            kw.update(shared_gate=w[0], shared_up=w[1], shared_down=w[2])
            if sg is not None:
                kw.update(shared_expert_gate=sg.detach())
            shared, shared_gate, shared_where = None, None, "qmoe"
    layer = MoELayer.from_float(gate, up, down, top_k=top_k, **kw, **opts)
    module = QmoeMoEBlock(layer, router, router_name, routing=routing,
                          logits_fp32=logits_fp32, shared=shared,
                          shared_name=shared_name if shared is not None else None,
                          shared_gate=shared_gate,
                          shared_gate_name=shared_gate_name if shared_gate is not None else None,
                          returns_scores=returns_scores, replaced=cls)
    return module, dict(kind="block", routing=routing, shared=shared_where, num_experts=E,
                        top_k=top_k, hidden_size=H, intermediate_size=I,
                        weight_bytes=layer.nbytes)


def _patch_experts(block: torch.nn.Module, opts: Dict[str, Any]):
    """(new experts module, fields) for a block of unknown class whose experts fit."""
    experts = block.experts
    gate, up, down = _fused_experts(experts)
    E, I, H = gate.shape
    _check_tensor(gate, "the experts' weight")
    top_k = None
    for name in ("gate", "router"):
        r = getattr(block, name, None)
        if isinstance(getattr(r, "top_k", None), int):
            top_k = _top_k(r, E)
    if top_k is None:
        k = getattr(getattr(experts, "config", None), "num_experts_per_tok", None)
        if isinstance(k, int) and 1 <= k <= E:
            top_k = k
    if top_k is None:
        raise _Unsupported("its top_k (router.top_k or config.num_experts_per_tok) is not known")
    layer = MoELayer.from_float(gate, up, down, top_k=top_k, **opts)
    module = QmoeExperts(layer, type(experts).__name__)
    return module, dict(kind="experts", routing="torch", shared="torch" if any(
        "shared" in n for n, _ in block.named_children()) else "none", num_experts=E,
        top_k=top_k, hidden_size=H, intermediate_size=I, weight_bytes=layer.nbytes)


def _set_child(model: torch.nn.Module, name: str, module: torch.nn.Module) -> None:
    parent_name, _, child = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    setattr(parent, child, module)


def _torch_gomp() -> Optional[str]:
    """torch's OpenMP runtime when it is GNU libgomp and libqmoe_omp shares it (one runtime
    mapped after loading it), else None."""
    if "OpenMP" not in torch.__config__.parallel_info():
        return None
    ok, _ = omp_available()
    runtimes = openmp_runtimes()
    if not ok or len(runtimes) != 1 or "libgomp" not in runtimes[0]:
        return None
    return runtimes[0]


def _device(omp: Optional[bool], threads: Optional[int]) -> Tuple[Optional[OmpDevice], str]:
    """(the device the layers run on, its line in the report)."""
    if omp is False:
        return None, "qmoe (its own worker threads: omp=False)"
    runtime = _torch_gomp()
    if runtime is None:
        why = "torch's OpenMP is not a GNU libgomp libqmoe_omp can share"
        if omp:
            raise invalid(f"omp=True: {why} ({omp_available()[1]}; {openmp_runtimes()})")
        return None, f"qmoe (its own worker threads: {why})"
    n = threads or torch.get_num_threads()
    return OmpDevice(n), f"openmp ({n} threads of torch's team, {runtime})"


def patch(model: torch.nn.Module, mode: str = "a8w8", group_size: Optional[int] = None,
          clip_search: bool = False, threads: Optional[int] = None,
          omp: Optional[bool] = None) -> PatchReport:
    """Replace, in place, every MoE block of a loaded transformers model with a module that
    runs a :class:`qmoe.MoELayer` quantized (``mode`` "a8w8" or "a8w4", ``group_size``,
    ``clip_search``: :meth:`qmoe.MoELayer.from_float`) from the block's own weights; ``threads``
    the layer's worker threads (None: every online core, or torch.get_num_threads() on torch's
    OpenMP team). ``omp`` (None: where it can): the layers run on torch's own OpenMP team
    (:func:`qmoe.omp_device`) when torch's OpenMP is GNU libgomp and libqmoe_omp loads, so
    qmoe's parts and torch's ops take turns on the same threads instead of competing for the
    cores (on a machine whose cores other processes share, False can be faster: OpenMP's
    barriers spin); False: on qmoe's own worker threads; True: refuse when it cannot. The report's
    ``device`` says which. Returns a :class:`PatchReport`: the
    blocks replaced and, for those left as they are, the reason. Bad options raise
    :class:`qmoe.QmoeError` before anything is replaced.

    A block of a known class (Qwen3-MoE, Qwen2-MoE, Mixtral, OLMoE, DeepSeek-V3, ...) is
    replaced whole by :class:`QmoeMoEBlock`; a block of another class whose ``experts`` module
    is transformers' fused SwiGLU experts has only its experts replaced (:class:`QmoeExperts`).
    The float expert weights are released with the modules they belonged to."""
    opts = _layer_options(mode, group_size, clip_search, threads)
    if omp not in (None, True, False):
        raise invalid(f"omp = {omp!r}: expected None, True or False")
    device, where = _device(omp, threads)
    report = PatchReport(mode=mode, device=where)
    found = []
    for name, mod in model.named_modules():
        if isinstance(mod, PatchedBlock):
            continue
        experts = getattr(mod, "experts", None)
        routed = any(isinstance(getattr(mod, r, None), torch.nn.Module) for r in ("gate", "router"))
        if isinstance(experts, torch.nn.Module) and not isinstance(experts, PatchedBlock) \
                and routed:
            found.append((name, mod))
    with torch.no_grad():
        for name, mod in found:
            cls = type(mod).__name__
            try:
                if cls in _BLOCKS and not name:
                    raise _Unsupported("it is the module given: pass the model (or a module) "
                                       "that contains it, so it can be replaced there")
                if cls in _BLOCKS:
                    new, fields = _patch_block(mod, cls, opts)
                    _set_child(model, name, new)
                else:
                    new, fields = _patch_experts(mod, opts)
                    mod.experts = new
            except _Unsupported as why:
                report.skipped.append(SkippedBlock(name, cls, str(why)))
                continue
            except QmoeError as err:
                if err.code != _lib.ERR_PARAM_INVALID:  # out of memory: not the block's fault
                    raise
                # a shape or option the layer's rules refuse (a group_size not dividing H)
                report.skipped.append(SkippedBlock(name, cls, f"qmoe refused it: {err.message}"))
                continue
            layer = getattr(new, "qmoe_layer", None)
            if layer is not None:
                layer.device = device
            report.replaced.append(ReplacedBlock(name=name, block=cls, **fields))
    return report
