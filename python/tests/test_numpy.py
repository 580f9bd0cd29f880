"""The NumPy API against NumPy references and against the C++ command-line tool's results."""
import json
import math

import numpy as np
import pytest

import sparse24


def magnitude_mask_ref(w, n=2, m=4):
    """N largest |w| per group of M along the last axis, ties to the lower index (rows x K, K % M == 0)."""
    rows, k = w.shape
    g = np.abs(w.reshape(rows, k // m, m))
    order = np.argsort(-g, axis=2, kind="stable")  # stable: equal magnitudes keep index order
    keep = np.zeros_like(g, dtype=np.uint8)
    np.put_along_axis(keep, order[:, :, :n], 1, axis=2)
    return keep.reshape(rows, k)


@pytest.mark.parametrize("shape", [(1, 4), (3, 8), (17, 64), (64, 128)])
def test_mask_matches_numpy_reference(rng, shape):
    w = rng.standard_normal(shape).astype(np.float32)
    w[0, :4] = [1, -1, 1, -1]  # ties
    assert np.array_equal(sparse24.mask(w), magnitude_mask_ref(w))
    p = sparse24.prune(w)
    assert np.array_equal(p, w * magnitude_mask_ref(w))


@pytest.mark.parametrize("pattern", ["1:2", "4:8"])
def test_other_patterns(rng, pattern):
    n, m = map(int, pattern.split(":"))
    w = rng.standard_normal((8, 32)).astype(np.float32)
    assert np.array_equal(sparse24.mask(w, pattern), magnitude_mask_ref(w, n, m))


def test_transposable(rng):
    w = rng.standard_normal((16, 32)).astype(np.float32)
    for search in ("exact", "greedy"):
        p = sparse24.prune(w, method="transposable", search=search)
        assert sparse24.inspect(p)["valid"] and sparse24.inspect(np.ascontiguousarray(p.T))["valid"]


def test_conv_weight_groups_along_input_channels(rng):
    w = rng.standard_normal((4, 8, 3, 3)).astype(np.float32)
    m = sparse24.mask(w)
    # groups of 4 along `in` for every (out, kh, kw)
    assert (m.reshape(4, 2, 4, 3, 3).sum(axis=2) == 2).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int8])
def test_compress_roundtrip(rng, dtype):
    w = (rng.standard_normal((12, 40)) * 50).astype(dtype)
    c = sparse24.compress(w, prune=True)
    assert c.shape == (12, 40) and c.dtype == np.dtype(dtype).name
    assert c.values.shape == (12, 20) and c.metadata.shape == (12, 5) and c.metadata.dtype == np.uint8
    assert not c.values.flags.writeable
    d = sparse24.decompress(c)
    assert d.dtype == dtype and np.array_equal(d, sparse24.prune(w))
    # values are the kept elements of each group, in order
    assert np.array_equal(c.values[c.values != 0], d[d != 0])


def test_compress_odd_k_and_ranks(rng):
    for shape in [(7,), (3, 5), (2, 3, 6), (8, 4, 3, 3)]:
        w = rng.standard_normal(shape).astype(np.float32)
        assert np.array_equal(sparse24.decompress(sparse24.compress(w, prune=True)), sparse24.prune(w))


def gelu(y):
    return y * 0.5 * (1 + np.vectorize(math.erf)(y / math.sqrt(2)))


@pytest.mark.parametrize("m,k,n", [(8, 16, 1), (33, 64, 5), (64, 100, 17), (128, 256, 64)])
def test_spmm_against_numpy(rng, m, k, n):
    w = sparse24.prune(rng.standard_normal((m, k)).astype(np.float32))
    p = sparse24.pack(w)
    assert p.shape == (m, k) and p.isa == sparse24.isa() and p.nbytes > 0
    x = rng.standard_normal((k, n)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    ref = w.astype(np.float64) @ x + b[:, None]
    tol = 1e-4 * max(1.0, float(np.abs(ref).max()))
    np.testing.assert_allclose(sparse24.spmm(p, x, bias=b), ref, atol=tol)
    np.testing.assert_allclose(sparse24.spmm(p, x, bias=b, epilogue="relu"), np.maximum(ref, 0), atol=tol)
    np.testing.assert_allclose(sparse24.spmm(p, x, bias=b, epilogue="gelu", threads=2), gelu(ref), atol=tol)
    np.testing.assert_allclose(sparse24.spmm(p, np.ascontiguousarray(x[:, 0])), w.astype(np.float64) @ x[:, 0], atol=tol)
    # a row-strided view (leading dimension > N) is multiplied without a copy
    wide = rng.standard_normal((k, n + 3)).astype(np.float32)
    np.testing.assert_allclose(sparse24.spmm(p, wide[:, :n]), w.astype(np.float64) @ wide[:, :n], atol=tol * 10)


def test_spmm_bf16_weights(rng):
    w = sparse24.prune(rng.standard_normal((64, 128)).astype(np.float32))
    x = rng.standard_normal(128).astype(np.float32)
    np.testing.assert_allclose(sparse24.spmm(sparse24.pack(w, bf16=True), x), w @ x, rtol=2e-2, atol=5e-2)


def _bf16_round(a):
    """float32 rounded to bfloat16 (to nearest even) and back."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16 << 16
    return u.astype(np.uint32).view(np.float32)


def test_spmm_bf16_activations(rng):
    # With bf16 weights (exactly bf16 values, so the only rounding is X's): the result is the product with X
    # rounded to bf16 where bf16_activations_supported(), else with X itself; the two differ, so this can fail.
    w = _bf16_round(sparse24.prune(rng.standard_normal((64, 256)).astype(np.float32)))
    x = rng.standard_normal((256, 8)).astype(np.float32)
    y = sparse24.spmm(sparse24.pack(w, bf16=True, bf16_activations=True), x)
    exact = w.astype(np.float64) @ x
    rounded = w.astype(np.float64) @ _bf16_round(x)
    want, other = (rounded, exact) if sparse24.bf16_activations_supported() else (exact, rounded)
    np.testing.assert_allclose(y, want, atol=1e-4)
    assert np.abs(other - want).max() > 1e-3
    assert isinstance(sparse24.bf16_activations_supported(), bool)


def _int8_act_round(x):
    """x [K, N] as int8 activations see it: per column and block of 64 rows, round(x * 127 / max|x|) (half to
    even) times max|x| / 127 (an independent statement of sparse24's rule)."""
    out = np.empty_like(x)
    for k0 in range(0, x.shape[0], 64):
        b = x[k0:k0 + 64].astype(np.float32)
        amax = np.abs(b).max(axis=0)
        inv = np.where(amax > 0, np.float32(127) / np.where(amax > 0, amax, 1), 0).astype(np.float32)
        out[k0:k0 + 64] = np.rint(b * inv) * (amax / np.float32(127))
    return out


def test_spmm_int8_activations(rng):
    # int8 weights (an int8 2:4 matrix): the product with X quantised per 64 rows where
    # int8_activations_supported(), else with X itself; the two differ, so this can fail.
    w = sparse24.prune(rng.integers(-127, 128, (64, 256)).astype(np.int8))
    x = rng.standard_normal((256, 8)).astype(np.float32)
    y = sparse24.spmm(sparse24.pack(w, int8_activations=True), x)
    exact = w.astype(np.float64) @ x
    rounded = w.astype(np.float64) @ _int8_act_round(x)
    want, other = (rounded, exact) if sparse24.int8_activations_supported() else (exact, rounded)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-3)
    assert np.abs(other - want).max() > 1e-1
    with pytest.raises(sparse24.Error, match="exclude"):
        sparse24.pack(w, bf16_activations=True, int8_activations=True)


def test_inspect(rng):
    w = rng.standard_normal((16, 32)).astype(np.float32)
    r = sparse24.inspect(w)
    assert not r["valid"] and r["bad_groups"] == 128 and r["first_bad"] == (0, 0) and r["sparsity"] == 0
    p = sparse24.prune(w)
    r = sparse24.inspect(p)
    assert r["valid"] and r["sparsity"] == 0.5 and r["first_bad"] is None
    assert sparse24.inspect(sparse24.compress(p))["format"] == "sparse24"


def test_files_roundtrip(tmp_path, rng):
    w = rng.standard_normal((8, 16)).astype(np.float16)
    sparse24.save(tmp_path / "w.npy", w)
    assert np.array_equal(sparse24.load(tmp_path / "w.npy"), w) and np.array_equal(np.load(tmp_path / "w.npy"), w)
    c = sparse24.compress(w, prune=True)
    sparse24.save(tmp_path / "c.safetensors", c)
    c2 = sparse24.load(tmp_path / "c.safetensors")
    assert isinstance(c2, sparse24.Compressed) and np.array_equal(c2.values, c.values)
    assert sparse24.inspect(tmp_path / "c.safetensors")["valid"]
    d = rng.standard_normal((8, 16)).astype(np.float32)
    for fmt in ("sparse24", "sparse-24-bitmask", "dense"):
        sparse24.save(tmp_path / "ck.safetensors", {"a.weight": c, "a.bias": d[0]}, format=fmt)
        ck = sparse24.load(tmp_path / "ck.safetensors")
        a = ck["a.weight"]
        assert np.array_equal(sparse24.decompress(a) if isinstance(a, sparse24.Compressed) else a,
                              sparse24.decompress(c))
        assert np.array_equal(ck["a.bias"], d[0])


def test_safetensors_from_the_reference_writer(tmp_path, rng):
    st = pytest.importorskip("safetensors.numpy")
    t = {"x": rng.standard_normal((3, 4)).astype(np.float32), "i": np.arange(5, dtype=np.int64)}
    st.save_file(t, str(tmp_path / "r.safetensors"))
    back = sparse24.load(tmp_path / "r.safetensors")
    assert np.array_equal(back["x"], t["x"]) and np.array_equal(back["i"], t["i"])


# ---- against the C++ tool ----------------------------------------------------------------------------------

@pytest.mark.parametrize("method", ["magnitude", "transposable"])
def test_prune_equals_cli(cli, tmp_path, rng, method):
    w = rng.standard_normal((32, 64)).astype(np.float32)
    np.save(tmp_path / "w.npy", w)
    cli("prune", tmp_path / "w.npy", "-o", tmp_path / "p.npy", "--method", method)
    assert np.array_equal(np.load(tmp_path / "p.npy"), sparse24.prune(w, method=method))


def test_compress_equals_cli(cli, tmp_path, rng):
    w = rng.standard_normal((16, 36)).astype(np.float32)
    np.save(tmp_path / "w.npy", w)
    cli("compress", tmp_path / "w.npy", "-o", tmp_path / "cli.safetensors", "--prune")
    sparse24.save(tmp_path / "py.safetensors", sparse24.compress(w, prune=True))
    assert (tmp_path / "cli.safetensors").read_bytes() == (tmp_path / "py.safetensors").read_bytes()
    report = json.loads(cli("inspect", "--json", tmp_path / "py.safetensors"))
    mine = sparse24.inspect(tmp_path / "py.safetensors")
    for key in ("valid", "groups", "bad_groups", "sparsity", "compression_ratio", "kept_magnitude"):
        assert report[key] == pytest.approx(mine[key])
    cli("decompress", tmp_path / "py.safetensors", "-o", tmp_path / "d.npy")
    assert np.array_equal(np.load(tmp_path / "d.npy"), sparse24.prune(w))
