#!/usr/bin/env python3
"""Every tensor of a GGUF file dequantized by sparse24 equals the gguf Python package's dequantization.

  compare_gguf.py --helper GGUF_DEQUANTIZE_BIN --work DIR [--gguf FILE] [--synthetic SEED]

--gguf FILE: the helper (test/io/gguf_dequantize.cc) writes each tensor as fp32 .npy; the reference is
gguf.GGUFReader(FILE) + gguf.quants.dequantize. Values must be bit-identical (two NaNs count as equal).
--synthetic SEED: first writes, with gguf.GGUFWriter, a file holding random bytes in tensors of every type
sparse24 dequantizes (F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K Q4_K Q5_K Q6_K IQ4_NL IQ4_XS) and compares that file the same way, so the
types the real model lacks are checked against the reference too. Exit 0 when all agree, 1 on the first
difference, 77 (skip) when the gguf package is missing.
"""
import argparse
import os
import shutil
import subprocess
import sys
import time

import numpy as np


def write_synthetic(path, seed):
    import gguf

    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(path, arch="synthetic")
    w.add_uint32("synthetic.seed", seed % (1 << 32))
    w.add_array("synthetic.strings", ["a", "Ġb", ""])
    Q = gguf.GGMLQuantizationType
    for qt, shape in [(Q.F32, (3, 7)), (Q.F16, (5, 6)), (Q.BF16, (2, 9)), (Q.Q4_0, (3, 64)),
                      (Q.Q4_1, (4, 96)), (Q.Q5_0, (3, 64)), (Q.Q5_1, (2, 96)), (Q.Q8_0, (2, 128)),
                      (Q.Q2_K, (2, 512)), (Q.Q3_K, (3, 256)), (Q.Q4_K, (3, 512)), (Q.Q5_K, (2, 512)),
                      (Q.Q6_K, (2, 768)), (Q.IQ4_NL, (3, 64)), (Q.IQ4_XS, (2, 512))]:
        block, block_bytes = gguf.GGML_QUANT_SIZES[qt]
        rows, cols = shape
        raw = rng.integers(0, 256, size=(rows, cols // block * block_bytes), dtype=np.uint8)
        if qt in (Q.F32, Q.F16):  # plain float types are added as their numpy dtype
            w.add_tensor(f"t.{qt.name}", raw.view(np.float32 if qt == Q.F32 else np.float16))
        else:  # raw bytes with the type given (raw_shape: rows x bytes per row)
            w.add_tensor(f"t.{qt.name}", raw, raw_shape=raw.shape, raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def compare(helper, path, work):
    import gguf

    out = os.path.join(work, "deq")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    t0 = time.perf_counter()
    run = subprocess.run([helper, path, out], capture_output=True)
    if run.returncode != 0:
        print(f"FAIL: {helper} {path} exited {run.returncode}: {run.stderr.decode(errors='replace')}")
        return 1
    t1 = time.perf_counter()
    names = [line.split(" ") for line in open(os.path.join(out, "tensors.txt")).read().splitlines()]
    reader = gguf.GGUFReader(path)
    if len(names) != len(reader.tensors):
        print(f"FAIL: sparse24 saw {len(names)} tensors, gguf {len(reader.tensors)}")
        return 1
    counts = {}
    for i, t in enumerate(reader.tensors):
        if names[i][0] != t.name or names[i][1] != t.tensor_type.name:
            print(f"FAIL: tensor {i}: sparse24 {names[i]}, gguf {t.name} {t.tensor_type.name}")
            return 1
        ref = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        ref = ref.reshape([int(d) for d in reversed(t.shape)])
        ours = np.load(os.path.join(out, f"{i}.npy"))
        if ours.dtype != np.float32 or ours.shape != ref.shape:
            print(f"FAIL: {t.name}: sparse24 {ours.dtype} {ours.shape}, gguf {ref.shape}")
            return 1
        same = (ours.view(np.uint32) == ref.view(np.uint32)) | (np.isnan(ours) & np.isnan(ref))
        if not same.all():
            k = int(np.argmin(same.reshape(-1)))
            print(f"FAIL: {t.name} ({t.tensor_type.name}) element {k}: sparse24 {ours.reshape(-1)[k]!r}, "
                  f"gguf {ref.reshape(-1)[k]!r}; {int((~same).sum())} of {same.size} differ")
            return 1
        counts[t.tensor_type.name] = counts.get(t.tensor_type.name, 0) + 1
        os.remove(os.path.join(out, f"{i}.npy"))
    shutil.rmtree(out, ignore_errors=True)
    print(f"{path}: {len(names)} tensors bit-identical to gguf.quants.dequantize "
          f"({', '.join(f'{v} {k}' for k, v in sorted(counts.items()))}); sparse24 took {t1 - t0:.1f} s "
          "including the .npy writes")
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--helper", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--gguf")
    ap.add_argument("--synthetic", type=int)
    a = ap.parse_args()
    try:
        import gguf  # noqa: F401
    except ImportError:
        print("skip: the Python package `gguf` is not installed")
        return 77
    os.makedirs(a.work, exist_ok=True)
    if a.synthetic is not None:
        print(f"synthetic seed {a.synthetic} (replay with --synthetic {a.synthetic})")
        path = os.path.join(a.work, "synthetic.gguf")
        write_synthetic(path, a.synthetic)
        if compare(a.helper, path, a.work):
            return 1
    if a.gguf:
        if not os.path.exists(a.gguf):
            print(f"FAIL: missing {a.gguf} (scripts/setup.sh makes models/)")
            return 1
        if compare(a.helper, a.gguf, a.work):
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
