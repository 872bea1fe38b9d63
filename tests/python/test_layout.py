"""Layout helpers: agreement with the NumPy definitions of the layouts, and round trips."""

import numpy as np
import pytest

import qmoe
import vendor_ref as vr


def test_int8_nd_nz_round_trip(rng):
    w = rng.integers(-128, 128, size=(3, 48, 96), dtype=np.int8)
    nz = qmoe.nd_to_nz(w)
    assert nz.dtype == np.int8 and nz.shape == (3, 3, 3, 16, 32)
    np.testing.assert_array_equal(nz, vr.nz_from_logical(w, 32))
    np.testing.assert_array_equal(qmoe.nz_to_nd(nz), w)


def test_int4_nd_nz_round_trip_bytes_and_words(rng):
    w = rng.integers(-8, 8, size=(2, 32, 128), dtype=np.int8)
    nz = qmoe.nd_to_nz(w, int4=True)
    assert nz.dtype == np.uint8 and nz.shape == (2, 2, 2, 16, 32)
    want = vr.pack_nibbles(vr.nz_from_logical(w, 64).reshape(2, -1)).reshape(nz.shape)
    np.testing.assert_array_equal(nz, want)
    words = qmoe.nd_to_nz(w, int4=True, as_int32=True)
    assert words.dtype == np.int32 and words.shape == (2, 2, 2, 16, 8)
    np.testing.assert_array_equal(
        words, vr.words_from_nibbles(vr.nz_from_logical(w, 64).reshape(2, -1)).reshape(words.shape))
    for packed in (nz, words, nz.view(np.int8)):
        kw = {"int4_packed": True} if packed.dtype == np.int8 else {}
        np.testing.assert_array_equal(qmoe.nz_to_nd(packed, **kw), w)


def test_pack_unpack_int4(rng):
    v = rng.integers(-8, 8, size=(5, 24), dtype=np.int8)
    packed = qmoe.pack_int4(v)
    assert packed.dtype == np.uint8 and packed.shape == (5, 12)
    np.testing.assert_array_equal(packed, vr.pack_nibbles(v))
    np.testing.assert_array_equal(qmoe.unpack_int4(packed), v)
    np.testing.assert_array_equal(vr.unpack_nibbles(packed), v)
    words = qmoe.pack_int4(v, as_int32=True)
    np.testing.assert_array_equal(words, qmoe.pack_int4_int32(v))
    assert words.dtype == np.int32 and words.shape == (5, 3)
    np.testing.assert_array_equal(words, vr.words_from_nibbles(v))
    np.testing.assert_array_equal(qmoe.unpack_int4(words), v)
    np.testing.assert_array_equal(qmoe.unpack_int4_int32(words), v)
    # non-contiguous input and a list
    np.testing.assert_array_equal(qmoe.pack_int4(v[:, ::-1]), vr.pack_nibbles(v[:, ::-1]))
    np.testing.assert_array_equal(qmoe.pack_int4([[-8, 7, 0, -1]]), [[0x78, 0xF0]])


@pytest.mark.parametrize("G", [0, 4])
def test_weight_assist_matrix(rng, G):
    w = rng.integers(-8, 8, size=(3, 64, 16), dtype=np.int8)
    shape = (3, G, 16) if G else (3, 16)
    scale = rng.uniform(0.001, 0.01, size=shape).astype(np.float32)
    want = vr.vendor_bias(w, scale)
    got = qmoe.weight_assist_matrix(w, scale)
    assert got.dtype == np.float32 and got.shape == (3, 16)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_array_equal(qmoe.weight_assist_matrix(w, scale, G), got)
    np.testing.assert_array_equal(qmoe.weight_assist_matrix(w, vr.u64_with_f32(scale, rng)), got)
