"""How close a pruned sentence-transformers model's embeddings are to its dense original's, in PyTorch
(sentence-transformers): the Python stand-in for `sparse24 eval-embed` (issue 15's metrics), used for the
llm-compressor peer when the engine's command is not at hand.

  .venv/bin/python bench/peers/embed_quality.py PRUNED_DIR REFERENCE_DIR --input FILE [--json FILE] \
      [--reference-cache FILE.npy]

--reference-cache: the reference model's embeddings of these lines, read when the file exists (and has one
row per line), else computed and written there, so several pruned models are compared at one reference cost.

Over the input lines (one text each): mean_cosine (mean over lines of the cosine of a line's two embeddings);
spearman (Spearman rank correlation between the two models' cosine similarities over every pair of distinct
lines); recall_at_10 (for each line, the share of its 10 nearest other lines under the reference model that
are also among its 10 nearest under the pruned model, averaged).
"""
import json

import common


def unit_embeddings(model, lines, batch=32):
    """A sentence-transformers model's embeddings of the lines, float64, each row scaled to unit norm."""
    import numpy as np
    import torch

    with torch.inference_mode():
        e = model.encode(lines, batch_size=batch, convert_to_numpy=True, show_progress_bar=False)
    e = e.astype(np.float64)
    return e / np.maximum(np.linalg.norm(e, axis=1, keepdims=True), 1e-12)


def quality(x, r, k=10):
    """The three metrics of x's rows against r's (unit-norm embeddings of the same lines, one per row)."""
    import numpy as np
    from scipy.stats import spearmanr

    n = len(x)
    mean_cosine = float(np.mean(np.sum(x * r, axis=1)))
    sx, sr = x @ x.T, r @ r.T
    iu = np.triu_indices(n, k=1)
    spearman = float(spearmanr(sx[iu], sr[iu]).statistic)
    np.fill_diagonal(sx, -np.inf)
    np.fill_diagonal(sr, -np.inf)
    top_x = np.argpartition(-sx, k, axis=1)[:, :k]
    top_r = np.argpartition(-sr, k, axis=1)[:, :k]
    recall = float(np.mean([len(set(top_x[i]) & set(top_r[i])) / k for i in range(n)]))
    return {"mean_cosine": mean_cosine, "spearman": spearman, "recall_at_10": recall,
            "lines": n, "pairs": int(len(iu[0]))}


def main():
    p = common.Parser(description=__doc__.splitlines()[0])
    p.add_argument("model_dir")
    p.add_argument("reference_dir")
    p.add_argument("--input", required=True, help="UTF-8 text file, one text per line")
    p.add_argument("--json", help="write the metrics here too")
    p.add_argument("--reference-cache", help=".npy of the reference embeddings (read if present, else written)")
    p.add_argument("--batch", type=common.positive("--batch"), default=32)
    p.add_argument("--threads", type=common.positive("--threads"), default=None)
    a = p.parse_args()

    model_dir = common.model_dir(a.model_dir)
    ref_dir = common.model_dir(a.reference_dir)
    lines = common.read_lines(a.input)
    if len(lines) < 11:
        raise common.Error(f"{a.input}: {len(lines)} lines; recall@10 needs at least 11")

    import numpy as np
    import torch
    from sentence_transformers import SentenceTransformer

    if a.threads:
        torch.set_num_threads(a.threads)

    def embed(d):
        return unit_embeddings(SentenceTransformer(d, device="cpu"), lines, a.batch)

    x = embed(model_dir)
    r = None
    if a.reference_cache:
        import os
        if os.path.isfile(a.reference_cache):
            r = np.load(a.reference_cache)
            if r.shape != x.shape:
                raise common.Error(f"{a.reference_cache}: shape {r.shape}, expected {x.shape} (other lines or model?)")
    if r is None:
        r = embed(ref_dir)
        if a.reference_cache:
            common.save_npy(a.reference_cache, r)
    out = quality(x, r)
    print(json.dumps(out))
    if a.json:
        def write(tmp):
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(out, f, indent=2)
                f.write("\n")
        common.atomic_write(a.json, write)


if __name__ == "__main__":
    common.run(main)
