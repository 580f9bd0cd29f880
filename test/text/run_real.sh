#!/usr/bin/env bash
# CTest wrapper for compare_tokenizer.py on a real model: skips (exit 77) when the project's .venv or the
# model directory is missing; INPUT "kjv" means every verse of the King James Bible (generated once into
# BUILD_DIR with Debian's `bible`).
#   run_real.sh SOURCE_DIR BUILD_DIR SPARSE24_BIN MODEL_NAME INPUT MAX_LENGTH
set -euo pipefail
src=$1 build=$2 bin=$3 model=$4 input=$5 maxlen=$6
py="$src/.venv/bin/python"
dir="$src/models/$model"
[ -x "$py" ] || { echo "skip: $py is missing (the setup creates .venv)"; exit 77; }
[ -f "$dir/tokenizer.json" ] || { echo "skip: $dir/tokenizer.json is missing (the setup unpacks models/)"; exit 77; }
if [ "$input" = kjv ]; then
  input="$build/kjv_verses.txt"
  if [ ! -s "$input" ]; then
    bible -f Gen1:1-Rev22:21 >"$input.tmp.$$"
    mv "$input.tmp.$$" "$input"
  fi
fi
exec "$py" "$src/test/text/compare_tokenizer.py" "$dir" --sparse24 "$bin" --input "$input" --max-length "$maxlen"
