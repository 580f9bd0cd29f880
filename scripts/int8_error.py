# The int8 rounding error of 2:4 weights (magnitude-pruned) on real weight matrices, per row and per group
# of 32/64 positions along K: relative Frobenius error of W and of W X (X: 8 random normal columns).
# Mirrors quantize_int8 (scale = max|w| / 127, round to nearest even, clamp to +-127).
# Usage: .venv/bin/python scripts/int8_error.py models/*/model.safetensors
import numpy as np, sys, re
from safetensors.numpy import load_file
rng = np.random.default_rng(17)
def prune24(w):
    r, k = w.shape
    g = w.reshape(r, k // 4, 4)
    idx = np.argsort(-np.abs(g), axis=2, kind="stable")[:, :, 2:]
    g = g.copy(); np.put_along_axis(g, idx, 0, axis=2)
    return g.reshape(r, k)
def quant(w, group):
    r, k = w.shape
    gs = k if group == 0 else group
    wg = w.reshape(r, k // gs, gs)
    s = np.abs(wg).max(axis=2, keepdims=True) / 127.0
    s[s == 0] = 1
    q = np.clip(np.rint(wg / s), -127, 127)
    return (q * s).reshape(r, k)
def fro(a, b): return np.linalg.norm(a - b) / np.linalg.norm(b)
res = {}
for path in sys.argv[1:]:
    t = load_file(path)
    for name, w in t.items():
        if w.ndim != 2 or not name.endswith("weight") or "embed" in name or w.shape[1] % 64 or min(w.shape) < 256: continue
        w = prune24(w.astype(np.float32))
        x = rng.standard_normal((w.shape[1], 8)).astype(np.float32)
        y = w @ x
        for g in (0, 64, 32):
            wq = quant(w, g)
            res.setdefault((path.split('/')[1], g), []).append((fro(wq, w), fro(wq @ x, y)))
for (m, g), v in sorted(res.items()):
    a = np.array(v)
    print(f"{m:28s} group {g if g else 'row':>4}: matrices {len(v):3d}  W rel err mean {a[:,0].mean():.2e} max {a[:,0].max():.2e}   WX mean {a[:,1].mean():.2e} max {a[:,1].max():.2e}")
