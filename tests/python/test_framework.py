"""Drop-in for the accelerator framework's callers (issue 10, section 2), with NumPy arrays and
with PyTorch tensors: what the framework returns (output_offset a 0-dim float32, tensors for
tensors), what it accepts (NZ weights by their logical shape, int32 group_list, fp16/bf16 and
[M, 1] x_scale), and messages in the Python argument names. Results against vendor_ref."""

import numpy as np
import pytest

import qmoe
import vendor_ref as vr
from conftest import Problem, as_np, assert_accepted, need_torch, need_ml_dtypes


def is_backend(value, name):
    if name == "numpy":
        return isinstance(value, np.ndarray)
    return type(value).__module__.startswith("torch")


@pytest.mark.parametrize("fn", [qmoe.grouped_matmul_swiglu_quant, qmoe.npu_grouped_matmul_swiglu_quant,
                                qmoe.reference])
def test_output_offset_is_a_0dim_float32_and_types_follow_inputs(rng, backend, fn):
    name, wrap = backend
    p = Problem(rng, M=16, K=32, N=64, E=3, group_list=[4, 9, 16])
    out, scale, offset = fn(wrap(p.x), wrap(vr.nz_from_logical(p.w, 32)), wrap(p.group_list),
                            wrap(p.ws), wrap(p.xs))
    for value in (out, scale, offset):
        assert is_backend(value, name)
    assert tuple(offset.shape) == () and str(offset.dtype).endswith("float32")
    assert float(offset) == 0.0
    assert_accepted(as_np(out), as_np(scale), *p.expected())


def test_torch_results_share_memory_with_the_result_arrays(rng):
    torch = need_torch()
    p = Problem(rng, M=8, K=32, N=64, E=2, group_list=[3, 8])
    out, scale, _ = qmoe.grouped_matmul_swiglu_quant(torch.from_numpy(p.x), torch.from_numpy(p.w),
                                                     torch.from_numpy(p.group_list),
                                                     torch.from_numpy(p.ws), torch.from_numpy(p.xs))
    assert out.is_contiguous() and scale.is_contiguous()
    # zero-copy in: a torch input is read in place (no copy), its memory is the array's
    x = torch.from_numpy(p.x)
    from qmoe import _arrays
    assert np.shares_memory(_arrays.to_numpy(x, "x"), p.x)
    assert_accepted(out.numpy(), scale.numpy(), *p.expected())


def test_out_arguments_are_returned_as_given(rng, backend):
    name, wrap = backend
    p = Problem(rng, M=8, K=32, N=64, E=2, group_list=[3, 7])
    out = wrap(np.full((8, 32), 5, np.int8))
    scale = wrap(np.full(8, -1, np.float32))
    got = qmoe.grouped_matmul_swiglu_quant(wrap(p.x), wrap(p.w), wrap(p.group_list), wrap(p.ws),
                                           wrap(p.xs), out=(out, scale))
    assert got[0] is out and got[1] is scale and is_backend(got[2], name)
    ref_out, ref_scale = p.expected()
    assert_accepted(as_np(out)[:7], as_np(scale)[:7], ref_out[:7], ref_scale[:7])
    assert (as_np(out)[7] == 5).all() and as_np(scale)[7] == -1  # past the last group: untouched


@pytest.mark.parametrize("kind", ["int8", "int32", "packed"])
def test_nz_weight_given_with_its_logical_shape(rng, backend, kind):
    """Framework NZ tensors report [E, K, N] ([E, K, N/8] int32): with weight_format="nz" the
    memory is read as the NZ tiles."""
    name, wrap = backend
    int4 = kind != "int8"
    p = Problem(rng, M=12, K=64, N=128, E=2, group_list=[5, 12], int4=int4)
    if kind == "int8":
        nz = vr.nz_from_logical(p.w, 32)
        logical, kw = nz.reshape(p.E, p.K, p.N), {}
    else:
        nz_values = vr.nz_from_logical(p.w, 64).reshape(p.E, -1)
        if kind == "int32":
            logical, kw = vr.words_from_nibbles(nz_values).reshape(p.E, p.K, p.N // 8), {}
        else:
            logical, kw = vr.pack_nibbles(nz_values).reshape(p.E, p.K, p.N // 2), {"int4_packed": True}
    out, scale, _ = qmoe.grouped_matmul_swiglu_quant(
        wrap(p.x), wrap(logical), wrap(p.group_list), wrap(p.ws), wrap(p.xs),
        bias=None if p.bias is None else wrap(p.bias), weight_format="nz", **kw)
    assert_accepted(as_np(out), as_np(scale), *p.expected())
    # The same bytes as ND are a different weight: the format is what decides.
    with pytest.raises(qmoe.QmoeError, match="K % 16"):
        qmoe.grouped_matmul_swiglu_quant(p.x, np.zeros((2, 8, 64), np.int8), p.group_list,
                                         p.ws[:, :64], p.xs, weight_format="nz")


def test_nz_logical_shape_must_be_contiguous(rng):
    p = Problem(rng, M=4, K=32, N=64, E=2, group_list=[2, 4])
    logical = np.asfortranarray(vr.nz_from_logical(p.w, 32).reshape(p.E, p.K, p.N))
    with pytest.raises(qmoe.QmoeError, match="contiguous"):
        qmoe.grouped_matmul_swiglu_quant(p.x, logical, p.group_list, p.ws, p.xs, weight_format="nz")


def test_int32_group_list(rng, backend):
    name, wrap = backend
    p = Problem(rng, M=10, K=32, N=64, E=3, group_list=[2, 2, 9])
    out, scale, _ = qmoe.grouped_matmul_swiglu_quant(wrap(p.x), wrap(p.w),
                                                     wrap(p.group_list.astype(np.int32)),
                                                     wrap(p.ws), wrap(p.xs))
    assert_accepted(as_np(out), as_np(scale), *p.expected())


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("column", [False, True], ids=["[M]", "[M,1]"])
def test_x_scale_in_half_precision_and_as_a_column(rng, backend, dtype, column):
    name, wrap = backend
    p = Problem(rng, M=10, K=32, N=64, E=2, group_list=[4, 10])
    if dtype == "float16":
        xs_exact = p.xs.astype(np.float16).astype(np.float32)
        given = wrap(p.xs.astype(np.float16))
    else:
        xs_exact = vr.bf16_to_f32(vr.bf16_bits(p.xs))
        if name == "torch":
            torch = need_torch()
            given = torch.from_numpy(xs_exact).to(torch.bfloat16)
        else:
            ml_dtypes = need_ml_dtypes()
            given = xs_exact.astype(ml_dtypes.bfloat16)
    if column:
        given = given.reshape(-1, 1)
    out, scale, _ = qmoe.grouped_matmul_swiglu_quant(wrap(p.x), wrap(p.w), wrap(p.group_list),
                                                     wrap(p.ws), given)
    ref = vr.operator(p.x, p.w, p.ws, xs_exact, p.group_list)
    assert_accepted(as_np(out), as_np(scale), *ref)


def test_messages_use_the_python_argument_names(rng):
    p = Problem(rng, M=8, K=32, N=64, E=2, group_list=[3, 8])
    cases = {
        "x_scale": dict(x_scale=p.xs[:5]),
        "weight_scale": dict(weight_scale=p.ws[:, :32]),
        "group_list": dict(group_list=np.array([3, 8, 8], np.int64)),
    }
    for name, change in cases.items():
        args = dict(x=p.x, weight=p.w, group_list=p.group_list, weight_scale=p.ws, x_scale=p.xs)
        args.update(change)
        with pytest.raises(qmoe.QmoeError) as info:
            qmoe.grouped_matmul_swiglu_quant(**args)
        assert info.value.message.startswith(name + ":"), info.value.message
        for c_name in ("xScale", "weightScale", "groupList", "outputScale"):
            assert c_name not in info.value.message


def test_structured_error_names_the_rule_and_the_python_argument(rng):
    p = Problem(rng, M=8, K=32, N=64, E=2, group_list=[3, 8])
    with pytest.raises(qmoe.QmoeError) as info:
        qmoe.grouped_matmul_swiglu_quant(p.x, p.w, p.group_list, p.ws, p.xs[:5])
    assert (info.value.rule, info.value.arg) == ("QMOE_RULE_SHAPE", "x_scale")
    with pytest.raises(qmoe.QmoeError) as info:
        qmoe.grouped_matmul_swiglu_quant(p.x, p.w, p.group_list, p.ws.astype(np.int32), p.xs)
    assert (info.value.rule, info.value.arg) == ("QMOE_RULE_DTYPE", "weight_scale")
    nz = vr.nz_from_logical(p.w, 32)
    with pytest.raises(qmoe.QmoeError) as info:
        qmoe.grouped_matmul_swiglu_quant_weight_nz_tensor_list(
            p.x, [nz[0], nz[1]], list(p.ws), p.xs, p.group_list, swiglu_limit=-1.0)
    assert (info.value.rule, info.value.arg) == ("QMOE_RULE_LIMIT", "swiglu_limit")


def test_bf16_torch_tensor_is_called_bf16(rng):
    torch = need_torch()
    p = Problem(rng, M=8, K=32, N=64, E=2, group_list=[3, 8])
    with pytest.raises(qmoe.QmoeError, match="x: dtype bfloat16") as info:
        qmoe.grouped_matmul_swiglu_quant(torch.from_numpy(p.x).to(torch.bfloat16), p.w,
                                         p.group_list, p.ws, p.xs)
    assert "uint16" not in info.value.message
    with pytest.raises(qmoe.QmoeError, match="group_list: dtype bfloat16"):
        qmoe.grouped_matmul_swiglu_quant(p.x, p.w, torch.tensor([3.0, 8.0], dtype=torch.bfloat16),
                                         p.ws, p.xs)


def test_layout_helpers_return_torch_for_torch(rng):
    torch = need_torch()
    w = rng.integers(-8, 8, size=(2, 32, 64), dtype=np.int8)
    tw = torch.from_numpy(w)
    nz = qmoe.nd_to_nz(tw)
    assert isinstance(nz, torch.Tensor)
    np.testing.assert_array_equal(nz.numpy(), vr.nz_from_logical(w, 32))
    back = qmoe.nz_to_nd(nz)
    assert isinstance(back, torch.Tensor) and torch.equal(back, tw)
    words = qmoe.pack_int4(tw, as_int32=True)
    assert isinstance(words, torch.Tensor)
    np.testing.assert_array_equal(words.numpy(), vr.words_from_nibbles(w))
    assert torch.equal(qmoe.unpack_int4(words), tw)
    ws = rng.uniform(0.5, 1.5, size=(2, 64)).astype(np.float32)
    bias = qmoe.weight_assist_matrix(tw, torch.from_numpy(ws))
    assert isinstance(bias, torch.Tensor)
    np.testing.assert_allclose(bias.numpy(), vr.vendor_bias(w, ws), rtol=1e-6)
    # NumPy in, NumPy out
    assert isinstance(qmoe.nd_to_nz(w), np.ndarray)
