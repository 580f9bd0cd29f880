"""Reference token ids: Hugging Face `tokenizers` (the fast tokenizer of MODEL_DIR/tokenizer.json), one
JSON array of ints per input line, with the special tokens, truncated to --max-length (default: the
model's sentence-transformers max_seq_length). The C++ tokenizer is tested against this.

  .venv/bin/python bench/peers/tokenize_ref.py models/all-MiniLM-L6-v2 --input texts.txt -o ids.jsonl
"""
import json
import os

import common


def main():
    p = common.Parser(description=__doc__.splitlines()[0])
    p.add_argument("model_dir")
    p.add_argument("--input", required=True, help="UTF-8 text file, one text per line")
    p.add_argument("-o", "--output", required=True, help="JSONL file, one array of token ids per line")
    p.add_argument("--max-length", type=int, default=None,
                   help="truncate to L tokens including the special ones; 0 = no truncation")
    p.add_argument("--max-lines", type=common.positive("--max-lines"), default=None)
    a = p.parse_args()

    model = common.model_dir(a.model_dir)
    path = os.path.join(model, "tokenizer.json")
    if not os.path.isfile(path):
        raise common.Error(f"{model}: no tokenizer.json")
    if a.max_length is not None and a.max_length < 0:
        raise common.Error(f"--max-length must be >= 0, got {a.max_length}")
    max_length = a.max_length if a.max_length is not None else common.max_seq_length(model)
    lines = common.read_lines(a.input, a.max_lines)

    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(path)
    tok.no_padding()
    if max_length:
        tok.enable_truncation(max_length)
    else:
        tok.no_truncation()
    encodings = tok.encode_batch(lines, add_special_tokens=True)

    def write(tmp):
        with open(tmp, "w", encoding="utf-8") as f:
            for e in encodings:
                f.write(json.dumps(e.ids, separators=(",", ":")) + "\n")
    common.atomic_write(a.output, write)


if __name__ == "__main__":
    common.run(main)
