"""The cost of calling sparse24.spmm from Python: a 768x768 2:4 GEMV timed from Python and in a C++ loop
(sparse24._core._time_spmm: the same kernel call without the binding), interleaved, best of rounds.

    .venv/bin/python python/bench/bench_overhead.py [--rounds 30] [--reps 2000]
"""
import argparse
import time

import numpy as np

import sparse24


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--reps", type=int, default=2000)
    ap.add_argument("--size", type=int, default=768)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    p = sparse24.pack(sparse24.compress(rng.standard_normal((a.size, a.size)).astype(np.float32), prune=True))
    x = rng.standard_normal(a.size).astype(np.float32)
    spmm = sparse24.spmm
    py, cc = float("inf"), float("inf")
    for _ in range(a.rounds):
        t = time.perf_counter()
        for _ in range(a.reps):
            spmm(p, x)
        py = min(py, (time.perf_counter() - t) / a.reps)
        cc = min(cc, sparse24._core._time_spmm(p, x, a.reps, 1))
    print(f"{a.size}x{a.size} GEMV, ISA {p.isa}: Python {py * 1e6:.2f} us, C++ loop {cc * 1e6:.2f} us, "
          f"overhead {(py - cc) * 1e6:.2f} us per call")


if __name__ == "__main__":
    main()
