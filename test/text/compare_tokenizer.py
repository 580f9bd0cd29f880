#!/usr/bin/env python3
"""Compares `sparse24 tokenize` with Hugging Face `tokenizers` line by line.

  compare_tokenizer.py MODEL_DIR --sparse24 BIN --input FILE [--max-length L] [--model PATH]
                       [--hf-pre-tokenizer smollm]

HF side: Tokenizer.from_file(MODEL_DIR/tokenizer.json), the file's padding switched off, truncation set to L
with enable_truncation(L) (or switched off), encode(line, add_special_tokens=True). sparse24 side:
`sparse24 tokenize PATH` (PATH: MODEL_DIR unless --model gives another, e.g. the model's GGUF file).
--hf-pre-tokenizer smollm replaces HF's pre-tokenizer with what llama.cpp's "smollm" means, Sequence[Digits
(individual_digits), ByteLevel(add_prefix_space false)] (the original SmolLM2 tokenizer.json has it; the one
transformers writes from the GGUF file has ByteLevel alone). Lines are the file split on
'\\n' only (as `sparse24 tokenize --input` splits it). Exit 0 and "N lines identical" when every line's ids
agree; exit 1 printing the first differing line otherwise; exit 77 (skip) when `tokenizers` is missing.
"""
import argparse
import json
import subprocess
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("--sparse24", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--max-length", type=int, default=0)
    ap.add_argument("--model", help="what sparse24 loads (default: MODEL_DIR)")
    ap.add_argument("--hf-pre-tokenizer", choices=["smollm"])
    a = ap.parse_args()
    try:
        from tokenizers import Tokenizer
    except ImportError:
        print("skip: the Python package `tokenizers` is not installed")
        return 77

    with open(a.input, "rb") as f:
        lines = f.read().decode("utf-8").split("\n")
    if lines and lines[-1] == "":
        lines.pop()

    cmd = [a.sparse24, "tokenize", a.model or a.model_dir, "--input", a.input, "--max-length", str(a.max_length), "--timing"]
    run = subprocess.run(cmd, capture_output=True)
    if run.returncode != 0:
        print(f"FAIL: {' '.join(cmd)} exited {run.returncode}: {run.stderr.decode(errors='replace')}")
        return 1
    sys.stdout.write(run.stderr.decode(errors="replace"))
    ours = [json.loads(x) for x in run.stdout.decode().split("\n") if x]

    tok = Tokenizer.from_file(f"{a.model_dir}/tokenizer.json")
    tok.no_padding()
    if a.hf_pre_tokenizer == "smollm":
        from tokenizers import pre_tokenizers

        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True),
             pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    if a.max_length > 0:
        tok.enable_truncation(a.max_length)
    else:
        tok.no_truncation()
    t0 = time.perf_counter()
    theirs = [tok.encode(line, add_special_tokens=True).ids for line in lines]
    print(f"hf tokenizers: {len(lines)} lines in {(time.perf_counter() - t0) * 1e3:.1f} ms (one by one)")

    if len(ours) != len(theirs):
        print(f"FAIL: sparse24 printed {len(ours)} lines, the input has {len(theirs)}")
        return 1
    for i, (x, y) in enumerate(zip(ours, theirs)):
        if x != y:
            print(f"FAIL: line {i + 1} differs: {lines[i]!r}")
            print(f"  sparse24: {x}")
            print(f"  hf:       {y}")
            print(f"  hf tokens: {tok.encode(lines[i]).tokens}")
            return 1
    print(f"{len(lines)} lines identical ({a.model or a.model_dir} vs HF {a.model_dir}"
          f"{' with the smollm pre-tokenizer' if a.hf_pre_tokenizer else ''}, max_length {a.max_length or 'none'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
