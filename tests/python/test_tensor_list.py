"""grouped_matmul_swiglu_quant_weight_nz_tensor_list: per-expert weight and scale lists (NumPy
and PyTorch), with and without the swiglu_limit clamp, against vendor_ref (which stacks the
experts and clamps independently)."""

import numpy as np
import pytest

import qmoe
import vendor_ref as vr
from conftest import Problem, as_np, assert_accepted, need_ml_dtypes

op = qmoe.grouped_matmul_swiglu_quant_weight_nz_tensor_list


def expert_lists(p, layout):
    if layout == "nz":
        nz = vr.nz_from_logical(p.w, 32)
        return [np.ascontiguousarray(nz[e]) for e in range(p.E)], {}
    if layout == "nz-logical":  # framework NZ tensors: NZ memory, logical [K, N] shape
        nz = vr.nz_from_logical(p.w, 32)
        return [np.ascontiguousarray(nz[e]).reshape(p.K, p.N) for e in range(p.E)], {
            "weight_format": "nz"}
    return [np.ascontiguousarray(p.w[e]) for e in range(p.E)], {}


@pytest.mark.parametrize("layout", ["nz", "nz-logical", "nd"])
def test_matches_the_stacked_formulas(rng, backend, kernel, layout):
    name, wrap = backend
    p = Problem(rng, M=40, K=64, N=128, E=5, group_list=[7, 7, 20, 33])  # E' < E, tail rows
    weights, kw = expert_lists(p, layout)
    out, scale, offset = op(wrap(p.x), [wrap(w) for w in weights], [wrap(s) for s in p.ws],
                            wrap(p.xs), wrap(p.group_list), kernel=kernel, **kw)
    assert tuple(offset.shape) == (40,) and (as_np(offset) == 0).all()
    if name == "torch":
        assert type(out).__module__.startswith("torch")
    assert_accepted(as_np(out), as_np(scale), *p.expected())


@pytest.mark.parametrize("limit", [0.3, 1.0, 2.5])
def test_swiglu_limit_clamps_as_the_vendor_kernel(rng, backend, limit):
    name, wrap = backend
    p = Problem(rng, M=32, K=64, N=64, E=3, group_list=[10, 20, 32])
    C = vr.dequant(p.x, p.w, p.ws, p.xs, vr.group_ends(p.group_list))
    assert (np.abs(C) > limit).mean() > 0.05  # the clamp changes something here
    weights, _ = expert_lists(p, "nz")
    out, scale, _ = op(wrap(p.x), [wrap(w) for w in weights], [wrap(s) for s in p.ws], wrap(p.xs),
                       wrap(p.group_list), swiglu_limit=limit)
    ref_out, ref_scale = vr.operator(p.x, p.w, p.ws, p.xs, p.group_list, swiglu_limit=limit)
    assert_accepted(as_np(out), as_np(scale), ref_out, ref_scale)
    unclamped = vr.operator(p.x, p.w, p.ws, p.xs, p.group_list)[1]
    assert not np.allclose(ref_scale, unclamped)


@pytest.mark.parametrize("kernel", ["reference", "portable", "auto"])
def test_swiglu_limit_in_every_kernel(rng, kernel):
    # every kernel's SwiGLU step takes the clamp (no refusal, no fallback to the reference)
    p = Problem(rng, M=24, K=64, N=64, E=2, group_list=[9, 24])
    weights, _ = expert_lists(p, "nz")
    out, scale, _ = op(p.x, weights, list(p.ws), p.xs, p.group_list, swiglu_limit=0.5,
                       kernel=kernel)
    assert_accepted(out, scale, *vr.operator(p.x, p.w, p.ws, p.xs, p.group_list, swiglu_limit=0.5))


def test_no_clamp_at_or_below_1e_8(rng):
    p = Problem(rng, M=16, K=32, N=64, E=2, group_list=[6, 16])
    weights, _ = expert_lists(p, "nz")
    out, scale, _ = op(p.x, weights, list(p.ws), p.xs, p.group_list, swiglu_limit=1e-9)
    assert_accepted(out, scale, *p.expected())


def test_fp16_and_bf16_scales_and_int32_group_list(rng):
    ml_dtypes = need_ml_dtypes()
    p = Problem(rng, M=16, K=32, N=64, E=2, group_list=[6, 16])
    weights, _ = expert_lists(p, "nz")
    for scales, exact in (
            ([s.astype(np.float16) for s in p.ws], p.ws.astype(np.float16).astype(np.float32)),
            ([s.astype(ml_dtypes.bfloat16) for s in p.ws], vr.bf16_to_f32(vr.bf16_bits(p.ws)))):
        out, scale, _ = op(p.x, weights, scales, p.xs, p.group_list.astype(np.int32))
        assert_accepted(out, scale, *p.expected(ws=exact))


def test_refusals_name_the_entry(rng):
    p = Problem(rng, M=8, K=32, N=64, E=3, group_list=[3, 8])
    weights, _ = expert_lists(p, "nz")
    scales = list(p.ws)

    def refused(match, **change):
        args = dict(x=p.x, weight=weights, weight_scale=scales, x_scale=p.xs,
                    group_list=p.group_list)
        args.update(change)
        with pytest.raises(qmoe.QmoeError, match=match):
            op(**args)

    refused(r"weight\[1\]", weight=[weights[0], None, weights[2]])
    refused(r"weight\[2\].*layout", weight=[weights[0], weights[1], weights[2][:, :, :, :16]])
    refused(r"weight_scale\[0\]", weight_scale=[s.astype(np.float64) for s in scales])
    refused("weight_scale: 2 entries", weight_scale=scales[:2])
    refused("swiglu_limit", swiglu_limit=float("nan"))
    refused("swiglu_limit", swiglu_limit=-1.0)
    refused("swiglu_limit", swiglu_limit="1")
    refused("bias", bias=np.zeros((3, 64), np.float32))
    refused("lists", weight=np.stack(weights))
    refused("num_experts|weight", weight=[], weight_scale=[])
    refused("group_list", group_list=[3, 8, 8, 8])  # more entries than experts
    refused("x_scale", x_scale=p.xs[:3])
