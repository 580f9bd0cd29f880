#!/usr/bin/env python3
"""Every code point through HF's normalizer + pre-tokenizer and through `sparse24 tokenize --words`.

  sweep_codepoints.py MODEL_DIR --sparse24 BIN [--first 0] [--last 0x10FFFF]

Each line is "a{c}b {c}{c}x" for one code point c (surrogates and '\\n' skipped), which exercises clean_text,
CJK spacing, NFD + Mn removal, lowercasing and punctuation splitting for c. Prints every code point whose words
differ (at most 50) and exits 1 if any does. Slow in HF (a minute or so); a development tool, not a CTest test.
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
    ap.add_argument("--first", type=lambda s: int(s, 0), default=0)
    ap.add_argument("--last", type=lambda s: int(s, 0), default=0x10FFFF)
    a = ap.parse_args()
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(os.path.join(a.model_dir, "tokenizer.json"))
    cps = [c for c in range(a.first, a.last + 1) if c != 10 and not 0xD800 <= c <= 0xDFFF]
    lines = [f"a{chr(c)}b {chr(c)}{chr(c)}x" for c in cps]
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", suffix=".txt", delete=False) as f:
        f.write("\n".join(lines) + "\n")
    try:
        out = subprocess.run([a.sparse24, "tokenize", a.model_dir, "--input", f.name, "--words"],
                             capture_output=True, check=True).stdout.decode()
    finally:
        os.unlink(f.name)
    ours = [json.loads(x) for x in out.split("\n") if x]
    bad = 0
    for c, line, mine in zip(cps, lines, ours):
        theirs = [w for w, _ in tok.pre_tokenizer.pre_tokenize_str(tok.normalizer.normalize_str(line))]
        if theirs != mine:
            bad += 1
            if bad <= 80:
                print(f"U+{c:04X}: sparse24 {mine} hf {theirs}")
    print(f"{len(cps)} code points, {bad} differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
