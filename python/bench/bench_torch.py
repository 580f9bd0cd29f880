"""sparse24.torch.SparseLinear against nn.Linear in the same run, and a real model with its Linears swapped.

    .venv/bin/python python/bench/bench_torch.py [--threads 1 2] [--reps 20] [--model models/all-MiniLM-L6-v2]

Part 1: BERT-base shapes (768x768, 3072x768, 768x3072) at 128 tokens. Part 2: a sentence-transformers model's
transformer (AutoModel) on 128 tokens, batch 1, unswapped against sparsify_(model) (every Linear 2:4 by
magnitude). Each pair is timed interleaved, best of `reps` rounds, so both see the same machine load.
"""
import argparse
import copy
import time

import torch

import sparse24
from sparse24.torch import SparseLinear, sparsify_


def best_of(fns, reps, inner):
    best = [float("inf")] * len(fns)
    for _ in range(reps):
        for i, f in enumerate(fns):
            t = time.perf_counter()
            for _ in range(inner):
                f()
            best[i] = min(best[i], (time.perf_counter() - t) / inner)
    return best


def cpu_name():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--model", default="models/all-MiniLM-L6-v2")
    a = ap.parse_args()
    print(f"CPU {cpu_name()}, kernel ISA {sparse24.isa()}, torch {torch.__version__}")
    torch.manual_seed(0)
    print("\n| threads | out x in | tokens | nn.Linear ms | SparseLinear ms | speedup |")
    print("|---|---|---|---|---|---|")
    for threads in a.threads:
        torch.set_num_threads(threads)
        for out_f, in_f in [(768, 768), (3072, 768), (768, 3072)]:
            lin = torch.nn.Linear(in_f, out_f)
            sl = SparseLinear.from_dense(lin)
            x = torch.randn(a.tokens, in_f)
            with torch.inference_mode():
                d, s = best_of([lambda: lin(x), lambda: sl(x)], a.reps, 5)
            print(f"| {threads} | {out_f}x{in_f} | {a.tokens} | {d * 1e3:.3f} | {s * 1e3:.3f} | {d / s:.2f}x |")

    from transformers import AutoModel, AutoTokenizer
    tok = AutoTokenizer.from_pretrained(a.model)
    dense = AutoModel.from_pretrained(a.model).eval()
    sparse = copy.deepcopy(dense)
    swapped = sparsify_(sparse)
    text = " ".join(["In the beginning God created the heaven and the earth."] * 20)
    enc = tok(text, truncation=True, max_length=a.tokens, padding="max_length", return_tensors="pt")
    print(f"\n{a.model}: {len(swapped)} Linear layers swapped, {enc['input_ids'].shape[1]} tokens, batch 1")
    print("\n| threads | unswapped ms | swapped (2:4) ms | speedup |")
    print("|---|---|---|---|")
    for threads in a.threads:
        torch.set_num_threads(threads)
        with torch.inference_mode():
            d, s = best_of([lambda: dense(**enc), lambda: sparse(**enc)], a.reps, 2)
        print(f"| {threads} | {d * 1e3:.2f} | {s * 1e3:.2f} | {d / s:.2f}x |")


if __name__ == "__main__":
    main()
