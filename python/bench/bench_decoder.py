"""sparse24.Decoder against transformers' generate on the same decoder, batch 1, in the same process.

    .venv/bin/python python/bench/bench_decoder.py [--model models/SmolLM2-135M-Instruct-hf] [--threads 1]
        [--prompt 64] [--generate 64] [--reps 3]

transformers runs the checkpoint as PyTorch does on CPU (fp32, dense: it has no 2:4 path; torch.compile
left out, as a user's first try would); sparse24 runs the same weights pruned 2:4 by magnitude in memory
(speed, not accuracy: docs/accuracy.md for pruning that keeps quality) with fp32, bf16 and int8 values, and
dense. Each method generates `generate` greedy tokens after a `prompt`-token prompt (EOS ignored for
transformers, and a prompt whose greedy continuation has no EOS for sparse24); methods alternate, best of
`reps` rounds; tokens/s of the generation phase (prompt excluded) and of the prompt.
"""
import argparse
import time

import torch
import transformers

import sparse24
from bench_torch import cpu_name  # this folder is on the path when the script runs

TEXT = ("In the beginning God created the heaven and the earth. And the earth was without form, and void; "
        "and darkness was upon the face of the deep. And the Spirit of God moved upon the face of the waters. "
        "And God said, Let there be light: and there was light. And God saw the light, that it was good: and "
        "God divided the light from the darkness. And God called the light Day, and the darkness he called "
        "Night. And the evening and the morning were the first day.")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="models/SmolLM2-135M-Instruct-hf")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--generate", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    ctx = a.prompt + a.generate
    lms = {
        "sparse24 dense fp32": sparse24.Decoder.load(a.model, mode="dense", threads=a.threads, max_context=ctx),
        **{f"sparse24 2:4 {w}": sparse24.Decoder.load(a.model, weights=w, prune=True, threads=a.threads,
                                                    max_context=ctx) for w in ("fp32", "bf16", "int8")},
    }
    ids = next(iter(lms.values())).tokenize(TEXT)[:a.prompt]
    if len(ids) < a.prompt:
        raise SystemExit(f"the text has only {len(ids)} tokens")
    ref = transformers.AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32).eval()

    def run_sparse24(lm):
        t0 = time.perf_counter()
        lm.reset()
        lm.forward(ids)
        t1 = time.perf_counter()
        new = lm.generate(ids, max_tokens=a.generate)  # prefill again, then the tokens
        t2 = time.perf_counter()
        return t1 - t0, (t2 - t1) - (t1 - t0), len(new)

    def run_torch():
        x = torch.tensor([ids])
        with torch.inference_mode():
            t0 = time.perf_counter()
            ref(x)
            t1 = time.perf_counter()
            out = ref.generate(x, max_new_tokens=a.generate, min_new_tokens=a.generate, do_sample=False)
            t2 = time.perf_counter()
        return t1 - t0, (t2 - t1) - (t1 - t0), out.shape[1] - len(ids)

    methods = {"transformers fp32 (dense)": run_torch, **{k: (lambda lm=lm: run_sparse24(lm)) for k, lm in lms.items()}}
    best = {k: (float("inf"), float("inf"), 0) for k in methods}
    for _ in range(a.reps):
        for k, f in methods.items():
            p, g, n = f()
            b = best[k]
            best[k] = (min(b[0], p), min(b[1], g) if n == a.generate else b[1], max(b[2], n))
    print(f"CPU {cpu_name()}, kernel ISA {sparse24.isa()}, torch {torch.__version__}, transformers "
          f"{transformers.__version__}, {a.threads} thread(s), prompt {a.prompt} tokens, {a.generate} generated")
    print("\n| runtime | prompt tok/s | decode tok/s | decode vs transformers |")
    print("|---|---:|---:|---:|")
    ref_rate = a.generate / best["transformers fp32 (dense)"][1]
    for k, (p, g, n) in best.items():
        if n != a.generate:
            print(f"| {k} | {a.prompt / p:.1f} | stopped after {n} tokens | - |")
            continue
        rate = a.generate / g
        print(f"| {k} | {a.prompt / p:.1f} | {rate:.1f} | {rate / ref_rate:.2f}x |")


if __name__ == "__main__":
    main()
