#!/usr/bin/env python3
"""Every code point through HF's byte-level pre-tokenizer and through `sparse24 tokenize --words`.

  sweep_bpe_codepoints.py HF_MODEL_DIR --sparse24 BIN [--model PATH] [--hf-pre-tokenizer smollm]

Each line is "a{c}b {c}{c}x 1{c} {c}" for one code point c (surrogates and '\\n' skipped): c after a letter,
doubled before one, after a digit and after a space, which exercises every class of the GPT-2 regex (and, with
the smollm pre-tokenizer, of Digits) for c. --model and --hf-pre-tokenizer as in compare_tokenizer.py. Prints
up to 20 differing code points and exits 1 if any differs. A few minutes; a development tool, not a CTest test.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("--sparse24", required=True)
    ap.add_argument("--model")
    ap.add_argument("--hf-pre-tokenizer", choices=["smollm"])
    a = ap.parse_args()
    from tokenizers import Tokenizer, pre_tokenizers

    tok = Tokenizer.from_file(os.path.join(a.model_dir, "tokenizer.json"))
    if a.hf_pre_tokenizer == "smollm":
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True),
             pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    cps = [c for c in range(0x110000) if c != 10 and not 0xD800 <= c <= 0xDFFF]
    lines = [f"a{chr(c)}b {chr(c)}{chr(c)}x 1{chr(c)} {chr(c)}" for c in cps]
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", suffix=".txt", delete=False) as f:
        f.write("\n".join(lines) + "\n")
    try:
        out = subprocess.run([a.sparse24, "tokenize", a.model or a.model_dir, "--input", f.name, "--words"],
                             capture_output=True, check=True).stdout.decode()
    finally:
        os.unlink(f.name)
    ours = [json.loads(x) for x in out.split("\n") if x]
    bad = 0
    for c, line, mine in zip(cps, lines, ours):
        theirs = [w for w, _ in tok.pre_tokenizer.pre_tokenize_str(line)]
        if mine != theirs:
            bad += 1
            if bad <= 20:
                print(f"U+{c:04X}: sparse24 {mine} hf {theirs}")
    print(f"{bad} of {len(cps)} code points differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
