"""Reference sentence embeddings: sentence-transformers in PyTorch (the model's own modules: transformer,
pooling, Normalize), float32 [lines, dim], one row per input line.

  .venv/bin/python bench/peers/embed_ref.py models/all-MiniLM-L6-v2 --input texts.txt -o emb.npy
"""
import common


def main():
    p = common.Parser(description=__doc__.splitlines()[0])
    p.add_argument("model_dir")
    p.add_argument("--input", required=True, help="UTF-8 text file, one text per line")
    p.add_argument("-o", "--output", required=True, help=".npy file, float32 [lines, dim]")
    p.add_argument("--batch", type=common.positive("--batch"), default=32)
    p.add_argument("--max-lines", type=common.positive("--max-lines"), default=None)
    p.add_argument("--threads", type=common.positive("--threads"), default=None,
                   help="torch intra-op threads (default: torch's own choice)")
    a = p.parse_args()

    model_dir = common.model_dir(a.model_dir)
    lines = common.read_lines(a.input, a.max_lines)

    import numpy as np
    import torch
    from sentence_transformers import SentenceTransformer

    if a.threads:
        torch.set_num_threads(a.threads)
    model = SentenceTransformer(model_dir, device="cpu")
    with torch.inference_mode():
        emb = model.encode(lines, batch_size=a.batch, convert_to_numpy=True, show_progress_bar=False)
    emb = np.ascontiguousarray(emb, dtype=np.float32)
    if emb.shape[0] != len(lines):
        raise common.Error(f"got {emb.shape[0]} embeddings for {len(lines)} lines")
    common.save_npy(a.output, emb)


if __name__ == "__main__":
    common.run(main)
