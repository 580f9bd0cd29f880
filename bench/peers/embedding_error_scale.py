"""How close must a compressed encoder's embeddings be to the dense model's for the metrics of eval-embed
(and embed_quality.py) to reach a given value? Two scales for issue 15's retraining target (recall@10 >= 0.95,
Spearman >= 0.98), printed as a Markdown table:
 1. the dense embeddings with isotropic Gaussian noise of growing size (renormalised): the mean cosine each
    recall@10 and Spearman needs;
 2. compressions through sentence-transformers / PyTorch themselves: the Linear weights rounded to bf16, and
    PyTorch's dynamic int8 quantization (torch.ao quantize_dynamic).

  .venv/bin/python bench/peers/embedding_error_scale.py MODEL_DIR TEXT_FILE
"""
import common
from embed_quality import quality, unit_embeddings


def main():
    p = common.Parser(description=__doc__.splitlines()[0])
    p.add_argument("model_dir")
    p.add_argument("input", help="UTF-8 text file, one text per line")
    a = p.parse_args()
    model_dir = common.model_dir(a.model_dir)
    lines = common.read_lines(a.input)
    if len(lines) < 11:
        raise common.Error(f"{a.input}: {len(lines)} lines; recall@10 needs at least 11")

    import numpy as np
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(1)

    def row(name, e):
        q = quality(e, dense)
        print(f"| {name} | {q['mean_cosine']:.4f} | {q['spearman']:.4f} | {q['recall_at_10']:.4f} |", flush=True)

    dense = unit_embeddings(SentenceTransformer(model_dir, device="cpu"), lines, 64)
    print(f"{len(lines)} texts from {a.input}; dense embeddings from sentence-transformers ({model_dir})")
    print("| embeddings | mean cos | Spearman | recall@10 |")
    print("|---|---|---|---|")
    rng = np.random.default_rng(1)
    for sigma in [0.004, 0.006, 0.01, 0.015, 0.02, 0.03, 0.05]:
        e = dense + sigma * rng.standard_normal(dense.shape)
        row(f"dense + noise (sigma {sigma:.3f} per dimension)", e / np.linalg.norm(e, axis=1, keepdims=True))

    m = SentenceTransformer(model_dir, device="cpu")
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, torch.nn.Linear):
                mod.weight.copy_(mod.weight.to(torch.bfloat16).float())
    row("Linear weights rounded to bf16", unit_embeddings(m, lines, 64))
    q = torch.ao.quantization.quantize_dynamic(SentenceTransformer(model_dir, device="cpu"), {torch.nn.Linear},
                                               dtype=torch.qint8)
    row("PyTorch dynamic int8 (quantize_dynamic)", unit_embeddings(q, lines, 64))


if __name__ == "__main__":
    common.run(main)
