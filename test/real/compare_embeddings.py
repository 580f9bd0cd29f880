"""sparse24's embeddings of real text against sentence-transformers (PyTorch) on the same weights.

For one model directory: 1,000 King James verses (every 31st of the 31,102); sparse24 `embed` in dense mode on
the original weights and in sparse mode on a `prune-model` copy (2:4 by magnitude), each at batch 1 and batch
8; sentence-transformers on the original and on the pruned copy converted back to dense with its zeros
stored (`sparse24 convert DIR OUT --to dense`, which transformers loads). Every sentence's cosine must be
>= 0.99999 and every element within 1e-4. Exit 1 naming the first failure.

  .venv/bin/python test/real/compare_embeddings.py --sparse24 build/sparse24 --model models/all-MiniLM-L6-v2 \
      --verses kjv.txt --work DIR
"""
import argparse
import os
import shutil
import subprocess
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import numpy as np  # noqa: E402


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"compare_embeddings: {' '.join(cmd)} failed:\n{r.stdout}{r.stderr}")
    return r


def reference(model_dir, lines, threads):
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(threads)
    model = SentenceTransformer(model_dir, device="cpu")
    with torch.inference_mode():
        return model.encode(lines, batch_size=8, convert_to_numpy=True, show_progress_bar=False).astype(np.float32)


def compare(name, ours, ref, lines):
    if ours.shape != ref.shape:
        sys.exit(f"compare_embeddings: {name}: shape {ours.shape}, reference {ref.shape}")
    cos = (ours * ref).sum(1) / (np.linalg.norm(ours, axis=1) * np.linalg.norm(ref, axis=1))
    diff = np.abs(ours - ref).max(1)
    print(f"{name}: {len(lines)} sentences, min cosine {cos.min():.8f}, max abs difference {diff.max():.2e}")
    bad = np.nonzero((cos < 0.99999) | (diff > 1e-4))[0]
    if len(bad):
        i = bad[0]
        sys.exit(f"compare_embeddings: {name}: sentence {i} ({lines[i]!r}): cosine {cos[i]:.8f}, "
                 f"max abs difference {diff[i]:.2e} ({len(bad)} sentences fail)")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sparse24", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--verses", required=True, help="the whole KJV, one verse per line")
    p.add_argument("--work", required=True)
    p.add_argument("--count", type=int, default=1000)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()

    with open(a.verses, encoding="utf-8") as f:
        verses = [line.rstrip("\n") for line in f]
    lines = verses[::31][: a.count]
    if len(lines) < a.count:
        sys.exit(f"compare_embeddings: {a.verses}: only {len(lines)} verses")
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    text = os.path.join(a.work, "verses.txt")
    with open(text, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    pruned = os.path.join(a.work, "pruned")
    zeros = os.path.join(a.work, "pruned-dense")
    run([a.sparse24, "prune-model", a.model, "-o", pruned])
    run([a.sparse24, "convert", pruned, zeros, "--to", "dense"])

    threads = str(a.threads)
    for label, model_dir, ref_dir, mode in (("dense", a.model, a.model, "dense"),
                                            ("2:4 sparse", pruned, zeros, "sparse")):
        ref = reference(ref_dir, lines, a.threads)
        for batch in ("1", "8"):
            out = os.path.join(a.work, f"{mode}-{batch}.npy")
            run([a.sparse24, "embed", model_dir, "--input", text, "-o", out, "--batch", batch, "--threads",
                 threads, "--mode", mode])
            compare(f"{os.path.basename(a.model.rstrip('/'))} {label} batch {batch}", np.load(out), ref, lines)
    shutil.rmtree(a.work, ignore_errors=True)


if __name__ == "__main__":
    main()
