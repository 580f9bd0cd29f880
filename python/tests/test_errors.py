"""Hostile input gives exceptions with the library's message, never a crash."""
import numpy as np
import pytest

import sparse24


def test_error_classes():
    assert issubclass(sparse24.Error, ValueError)
    assert issubclass(sparse24.FileError, sparse24.Error) and issubclass(sparse24.FileError, OSError)


def test_wrong_dtype():
    with pytest.raises(sparse24.Error, match="float64"):
        sparse24.compress(np.zeros((4, 8)))
    with pytest.raises(sparse24.Error, match="dtype"):
        sparse24.prune(np.zeros((4, 8), dtype=np.int32))
    p = sparse24.pack(np.zeros((4, 8), np.float32))
    with pytest.raises(sparse24.Error, match="float32"):
        sparse24.spmm(p, np.zeros(8))
    with pytest.raises(sparse24.Error, match="float32"):
        sparse24.pack(sparse24.compress(np.zeros((4, 8), np.float16)))


def test_wrong_shape():
    p = sparse24.pack(np.zeros((4, 8), np.float32))
    with pytest.raises(sparse24.Error, match="does not match"):
        sparse24.spmm(p, np.zeros((9, 2), np.float32))
    with pytest.raises(sparse24.Error, match="dimensions"):
        sparse24.spmm(p, np.zeros((8, 2, 1), np.float32))
    with pytest.raises(sparse24.Error, match="bias"):
        sparse24.spmm(p, np.zeros(8, np.float32), bias=np.zeros(3, np.float32))
    with pytest.raises(sparse24.Error, match="dimensions"):
        sparse24.mask(np.zeros((1, 1, 1, 1, 4), np.float32))


def test_non_contiguous():
    p = sparse24.pack(np.zeros((4, 8), np.float32))
    x = np.zeros((2, 8), np.float32).T  # [8, 2] with column stride 8
    with pytest.raises(sparse24.Error, match="contiguous"):
        sparse24.spmm(p, x)
    with pytest.raises(sparse24.Error, match="contiguous"):
        sparse24.spmm(p, np.zeros(16, np.float32)[::2])
    # the copying functions accept any layout
    w = np.arange(64, dtype=np.float32).reshape(8, 8).T
    assert np.array_equal(sparse24.prune(w), sparse24.prune(np.ascontiguousarray(w)))


def test_nan():
    w = np.ones((4, 8), np.float32)
    w[2, 5] = np.nan
    for f in (sparse24.prune, sparse24.mask, lambda a: sparse24.compress(a, prune=True), sparse24.inspect):
        with pytest.raises(sparse24.Error, match="NaN"):
            f(w)


def test_bad_arguments():
    w = np.ones((4, 8), np.float32)
    with pytest.raises(sparse24.Error, match="pattern"):
        sparse24.prune(w, pattern="3:7")
    with pytest.raises(sparse24.Error, match="method"):
        sparse24.prune(w, method="random")
    with pytest.raises(sparse24.Error, match="2:4"):
        sparse24.prune(w, pattern="1:2", method="transposable")
    p = sparse24.pack(sparse24.prune(w))
    with pytest.raises(sparse24.Error, match="epilogue"):
        sparse24.spmm(p, np.zeros(8, np.float32), epilogue="tanh")
    with pytest.raises(sparse24.Error, match="threads"):
        sparse24.spmm(p, np.zeros(8, np.float32), threads=0)
    with pytest.raises(sparse24.Error, match="2:4"):
        sparse24.compress(w)
    with pytest.raises(sparse24.Error, match="Compressed"):
        sparse24.decompress(w)


def test_files(tmp_path):
    with pytest.raises(sparse24.FileError, match="No such file"):
        sparse24.load(tmp_path / "missing.npy")
    with pytest.raises(OSError):
        sparse24.load(tmp_path)
    for blob in (b"", b"\x93NUMPY\x01\x00\xff\xff", b"\x10\x00\x00\x00\x00\x00\x00\x00{\"a\":1}",
                 b"\xff" * 8 + b"{}", np.random.default_rng(0).bytes(300)):
        (tmp_path / "bad").write_bytes(blob)
        with pytest.raises(sparse24.Error):
            sparse24.load(tmp_path / "bad")
    with pytest.raises(sparse24.FileError):
        sparse24.save(tmp_path / "no" / "dir" / "x.npy", np.zeros(4, np.float32))


def test_engine_errors(tmp_path):
    with pytest.raises(sparse24.Error):
        sparse24.Engine.load(str(tmp_path))
    with pytest.raises(sparse24.Error, match="mode"):
        sparse24.Engine.load(str(tmp_path), mode="fast")
