"""sparse24: 2:4 structured sparsity for CPUs, from Python.

NumPy API over the C++ library (masks, the compressed format, files, the kernels) and its inference
engine; ``sparse24.torch`` holds the PyTorch parts (imported only when used). docs/python.md.

Every error the library reports is a ``sparse24.Error`` (a ``ValueError``) with its one-line message;
files that cannot be opened, read or written raise ``sparse24.FileError`` (also an ``OSError``).
"""

from __future__ import annotations

import os

import numpy as np

from . import _core
from ._core import (Compressed, Decoder, Engine, Error, FileError, Packed, bf16_activations_supported, convert,
                    int8_activations_supported, isa, prune_model, render_chat_template, spmm)

__all__ = [
    "Compressed", "Decoder", "Engine", "Error", "FileError", "Packed", "bf16_activations_supported", "compress",
    "convert", "decompress", "inspect", "int8_activations_supported", "isa",
    "load", "mask", "pack", "prune", "prune_model", "render_chat_template", "save", "spmm",
]

_SUPPORTED = (np.float32, np.float16, np.int8)


def _array(w, what: str) -> np.ndarray:
    """A C-ordered NumPy array of a supported dtype (a copy only when the layout needs one)."""
    if isinstance(w, Compressed):
        raise Error(f"{what}: expected a dense array, got Compressed (decompress it first)")
    a = np.asarray(w)
    if a.dtype not in _SUPPORTED:
        raise Error(f"{what}: dtype {a.dtype} is not supported (float32, float16 or int8)")
    return np.ascontiguousarray(a)


def mask(w, pattern: str = "2:4", method: str = "magnitude", search: str = "exact") -> np.ndarray:
    """The keep-mask (uint8, 1 = keep) of w, the library's mask code; same shape as w.

    Groups of M run along the last dimension (rank 1-3) or along the input channels of a rank-4 conv
    weight [out, in, kh, kw] (docs/formats.md). method: "magnitude" (the N largest |w| of each group) or
    "transposable" (2:4 in W and W^T; search "exact" or "greedy"). NaN is an Error.
    """
    return _core._mask(_array(w, "prune"), pattern, method, search)


def prune(w, pattern: str = "2:4", method: str = "magnitude", search: str = "exact") -> np.ndarray:
    """A copy of w with the pruned elements set to zero (kept values keep their exact bits)."""
    a = _array(w, "prune")
    m = _core._mask(a, pattern, method, search)
    out = a.copy()
    out[m == 0] = 0
    return out


def compress(w, prune: bool = False) -> Compressed:
    """The compressed 2:4 form of w (float32, float16 or int8; rank 1-4). Without prune a matrix that
    is not 2:4 is an Error naming the first bad row and group; with it, magnitude 2:4 pruning comes first."""
    return _core._compress(_array(w, "compress"), bool(prune))


def decompress(c: Compressed) -> np.ndarray:
    """The dense array again (bit for bit what compress was given, after pruning); bfloat16 as float32."""
    if not isinstance(c, Compressed):
        raise Error("decompress: expected a sparse24.Compressed")
    return _core._decompress(c)


def inspect(x, pattern: str = "2:4") -> dict:
    """What `sparse24 inspect` reports, as a dict: of an array, a Compressed, or a file (.npy or a
    compressed .safetensors)."""
    if isinstance(x, (str, os.PathLike)):
        x = load(x)
        if isinstance(x, dict):
            raise Error("inspect: a checkpoint holds several tensors; inspect them one by one")
    if isinstance(x, Compressed):
        return _core._inspect_compressed(x)
    return _core._inspect_dense(_array(x, "inspect"), pattern)


def pack(w, bf16: bool = False, bf16_activations: bool = False, int8_activations: bool = False) -> Packed:
    """Prepares a 2:4 matrix (a float32, bfloat16 or int8 Compressed, or a dense array that is already 2:4) for
    spmm; bfloat16 values pack as bf16 weights. bf16_activations: with bf16 or int8 weights, spmm of up to 16
    columns rounds x to bfloat16 where bf16_activations_supported() (AVX512_BF16 on AMD): faster, each
    activation within 2^-8 relative. int8_activations: with int8 weights, spmm of 2 to 16 columns quantises x
    to int8 per column and block of 64 rows (each activation within max|block| / 254) and multiplies in
    integers where int8_activations_supported() (AVX512_VNNI and AVX512_VBMI): faster. Not both."""
    if not isinstance(w, Compressed):
        w = compress(w)
    return _core._pack(w, bool(bf16), bool(bf16_activations), bool(int8_activations))


def load(path):
    """A .npy file -> ndarray; a compressed 2:4 file -> Compressed; another safetensors checkpoint ->
    dict of name -> ndarray or Compressed (sparse24 and sparse-24-bitmask layers decoded; an int8 matrix with
    scales, such as the tables `prune_model(..., int8=True)` writes, as its float32 values)."""
    return _core._load(os.fspath(path))


def save(path, obj, format: str = "sparse24") -> None:
    """Writes atomically: an ndarray as .npy, a Compressed as the compressed 2:4 file, a dict of
    name -> ndarray | Compressed as a safetensors checkpoint (format "sparse24", "sparse-24-bitmask" or
    "dense")."""
    path = os.fspath(path)
    if isinstance(obj, Compressed):
        _core._save_compressed(path, obj)
    elif isinstance(obj, dict):
        _core._save_checkpoint(path, {k: (v if isinstance(v, Compressed) else _array(v, str(k)))
                                      for k, v in obj.items()}, format)
    else:
        _core._save_npy(path, _array(obj, "save"))


def _stream(self, prompt, max_tokens: int = 64, temperature: float = 0.0, top_p: float = 1.0, seed: int = 1,
            chat: bool = False):
    """Yields the new text piece by piece as it is sampled: generate(prompt)'s text, or with chat=True
    chat(prompt)'s reply (prompt then as chat() takes messages, the KV cache reused the same way). A piece
    that would end inside a character waits for the rest of it."""
    if max_tokens < 0:
        raise Error(f"max_tokens {max_tokens}: expected >= 0")
    if chat:
        ids = self.apply_chat_template(prompt, tokenize=True)
    else:
        ids = self.tokenize(prompt) if isinstance(prompt, str) else list(prompt)
    self._begin(ids, chat, temperature, top_p, seed)
    out, shown = [], 0
    for _ in range(max_tokens):
        token = self._step()
        if token < 0:
            break
        out.append(token)
        text = self.detokenize(out)
        if not text.endswith("\ufffd"):
            yield text[shown:]
            shown = len(text)


Decoder.stream = _stream

