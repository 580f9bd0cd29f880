#!/usr/bin/env python3
"""Compares `sparse24 tokenize` with Hugging Face `tokenizers` line by line.

  compare_tokenizer.py MODEL_DIR --sparse24 BIN --input FILE [--max-length L]

HF side: Tokenizer.from_file(MODEL_DIR/tokenizer.json), the file's padding switched off, truncation set to L
with enable_truncation(L) (or switched off), encode(line, add_special_tokens=True). Lines are the file split on
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

    cmd = [a.sparse24, "tokenize", a.model_dir, "--input", a.input, "--max-length", str(a.max_length), "--timing"]
    run = subprocess.run(cmd, capture_output=True)
    if run.returncode != 0:
        print(f"FAIL: {' '.join(cmd)} exited {run.returncode}: {run.stderr.decode(errors='replace')}")
        return 1
    sys.stdout.write(run.stderr.decode(errors="replace"))
    ours = [json.loads(x) for x in run.stdout.decode().split("\n") if x]

    tok = Tokenizer.from_file(f"{a.model_dir}/tokenizer.json")
    tok.no_padding()
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
    print(f"{len(lines)} lines identical ({a.model_dir}, max_length {a.max_length or 'none'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
