"""The one-shot pruning methods on a real pretrained encoder (all-MiniLM-L6-v2), end to end through the CLI:
prune-model by magnitude, Wanda and SparseGPT (calibration from the KJV training books), then eval-embed of
each against the dense model on held-out books (docs/accuracy.md has the full table from prune-experiment).
Asserts that the calibrated methods beat magnitude on every metric and that the pruned directories load in
sentence-transformers (after `convert --to dense`) with the same embeddings as sparse24 gives (the checkpoint is
a real, usable model)."""
import argparse
import json
import os
import shutil
import subprocess
import sys


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
    train = os.path.join(a.corpora, "kjv-train.txt")
    heldout = os.path.join(a.corpora, "kjv-heldout.txt")
    metrics = {}
    for method in ("magnitude", "wanda", "sparsegpt"):
        out = os.path.join(a.work, method)
        cmd = [a.sparse24, "prune-model", a.model, "-o", out, "--method", method]
        if method != "magnitude":
            cmd += ["--calib", train, "--calib-lines", "128"]
        print(run(cmd).strip())
        js = os.path.join(a.work, method + ".json")
        print(run([a.sparse24, "eval-embed", out, a.model, "--input", heldout, "--max-lines", "400",
                   "--json", js]).strip())
        metrics[method] = json.load(open(js))
    failed = []
    for method in ("wanda", "sparsegpt"):
        for key in ("mean_cosine", "spearman", "recall_at_10"):
            if not metrics[method][key] > metrics["magnitude"][key]:
                failed.append(f"{method} {key} {metrics[method][key]:.4f} <= magnitude {metrics['magnitude'][key]:.4f}")
    # The SparseGPT directory, converted to dense weights (what transformers reads), is a sentence-transformers
    # model whose embeddings equal sparse24's.
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    import numpy as np
    from sentence_transformers import SentenceTransformer

    texts = open(heldout).read().splitlines()[:16]
    lines = os.path.join(a.work, "texts.txt")
    open(lines, "w").write("\n".join(texts) + "\n")
    npy = os.path.join(a.work, "sgpt.npy")
    run([a.sparse24, "embed", os.path.join(a.work, "sparsegpt"), "--input", lines, "-o", npy, "--mode", "dense"])
    mine = np.load(npy)
    dense = os.path.join(a.work, "sparsegpt-dense")
    run([a.sparse24, "convert", os.path.join(a.work, "sparsegpt"), dense, "--to", "dense"])
    theirs = SentenceTransformer(dense, device="cpu").encode(texts)
    diff = float(np.abs(mine - theirs).max())
    print(f"sparsegpt checkpoint: sparse24 vs sentence-transformers max abs difference {diff:.2e}")
    if diff > 1e-4:
        failed.append(f"the pruned checkpoint embeds differently in sentence-transformers ({diff:.2e})")
    if failed:
        sys.exit("FAILED: " + "; ".join(failed))
    print("ok")


if __name__ == "__main__":
    main()
