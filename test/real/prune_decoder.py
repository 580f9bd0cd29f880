"""One-shot pruning of a real pretrained decoder LM (SmolLM2-135M-Instruct), end to end through the CLI:
prune-model by magnitude, Wanda and SparseGPT (calibration from the KJV training books, a small sample),
then `perplexity` of each on held-out books (docs/accuracy.md has the full table from prune-experiment).
Asserts that each calibrated method's perplexity is below magnitude's (and above the dense model's), and
that the SparseGPT directory, converted to dense weights, is a transformers LlamaForCausalLM whose
perplexity on the same tokens equals sparse24's (the checkpoint is a real, usable model); so is the
directory `prune-model --int8` writes (int8 2:4 values and an int8 embedding table, dequantized by convert).

  .venv/bin/python test/real/prune_decoder.py --sparse24 build/sparse24 \\
      --model models/SmolLM2-135M-Instruct-hf --corpora build/corpora --work DIR
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

CTX = 512
WINDOWS = 2


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"FAILED ({r.returncode}): {' '.join(cmd)}\n{r.stderr[-2000:]}")
    return r.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sparse24", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--corpora", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    import torch
    from transformers import AutoTokenizer, LlamaForCausalLM

    torch.set_num_threads(1)
    # The evaluation tokens: the held-out books' first WINDOWS windows, tokenized by transformers.
    tok = AutoTokenizer.from_pretrained(a.model)
    text = open(os.path.join(a.corpora, "kjv-heldout.txt")).read()
    ids = tok(text[:20000], add_special_tokens=False)["input_ids"][: CTX * WINDOWS]
    assert len(ids) == CTX * WINDOWS, len(ids)
    ids_file = os.path.join(a.work, "ids.txt")
    open(ids_file, "w").write(" ".join(map(str, ids)) + "\n")

    def perplexity(model_dir, name):
        js = os.path.join(a.work, name + ".json")
        print(run([a.sparse24, "perplexity", model_dir, "--input-ids", ids_file, "--ctx", str(CTX),
                   "--json", js]).strip())
        return json.load(open(js))["perplexity"]

    ppl = {"dense": perplexity(a.model, "dense")}
    train = os.path.join(a.corpora, "kjv-train.txt")
    for method in ("magnitude", "wanda", "sparsegpt"):
        out = os.path.join(a.work, method)
        cmd = [a.sparse24, "prune-model", a.model, "-o", out, "--method", method]
        if method != "magnitude":
            cmd += ["--calib", train, "--calib-lines", "64"]
        print(run(cmd).strip().splitlines()[-1])
        ppl[method] = perplexity(out, method)
    print("perplexity:", ", ".join(f"{k} {v:.2f}" for k, v in ppl.items()))
    failed = []
    for method in ("wanda", "sparsegpt"):
        if not ppl["dense"] < ppl[method] < ppl["magnitude"]:
            failed.append(f"{method} {ppl[method]:.2f} not between dense {ppl['dense']:.2f} and magnitude "
                          f"{ppl['magnitude']:.2f}")

    # int8: magnitude pruning with --int8 (2:4 values and the tied embedding table as int8 with scales).
    out = os.path.join(a.work, "magnitude-int8")
    print(run([a.sparse24, "prune-model", a.model, "-o", out, "--int8"]).strip().splitlines()[-1])
    ppl["magnitude-int8"] = perplexity(out, "magnitude-int8")

    # The SparseGPT checkpoint, and the int8 one, in transformers (converted to dense: the int8 values and
    # table dequantized, the very values sparse24 multiplies by).
    for name in ("sparsegpt", "magnitude-int8"):
        dense_dir = os.path.join(a.work, name + "-dense")
        run([a.sparse24, "convert", os.path.join(a.work, name), dense_dir, "--to", "dense"])
        model = LlamaForCausalLM.from_pretrained(dense_dir, torch_dtype=torch.float32).eval()
        nll, n = 0.0, 0
        with torch.no_grad():
            for w in range(WINDOWS):
                x = torch.tensor([ids[w * CTX:(w + 1) * CTX]])
                logp = torch.log_softmax(model(x).logits[0].double(), -1)
                nll -= logp[torch.arange(CTX - 1), x[0, 1:]].sum().item()
                n += CTX - 1
        ref = math.exp(nll / n)
        print(f"transformers on the {name} checkpoint: perplexity {ref:.4f} (sparse24 {ppl[name]:.4f})")
        if abs(ref - ppl[name]) > 1e-3 * ref:
            failed.append(f"{name}: transformers perplexity {ref:.4f} != sparse24 {ppl[name]:.4f}")
    if failed:
        sys.exit("FAILED: " + "; ".join(failed))
    print("OK")


if __name__ == "__main__":
    main()
