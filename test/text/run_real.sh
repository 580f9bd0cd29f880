#!/usr/bin/env bash
# CTest wrapper for compare_tokenizer.py on a real model: skips (exit 77) when the project's .venv or the
# model directory is missing (fails under CI); INPUT "kjv" means every verse of the King James Bible (generated once into
# BUILD_DIR with Debian's `bible`).
#   run_real.sh SOURCE_DIR BUILD_DIR SPARSE24_BIN MODEL_NAME INPUT MAX_LENGTH
set -euo pipefail
src=$1 build=$2 bin=$3 model=$4 input=$5 maxlen=$6
py="$src/.venv/bin/python"
dir="$src/models/$model"
# Under CI (CI=true) nothing may be missing: scripts/setup.sh makes both.
missing=77
[ "${CI:-}" = true ] && missing=1
[ -x "$py" ] || { echo "missing: $py (the setup creates .venv)"; exit $missing; }
[ -f "$dir/tokenizer.json" ] || { echo "missing: $dir/tokenizer.json (the setup unpacks models/)"; exit $missing; }
if [ "$input" = kjv ]; then
  input="$build/kjv_verses.txt"
  if [ ! -s "$input" ]; then
    bible -f Gen1:1-Rev22:21 >"$input.tmp.$$"
    mv "$input.tmp.$$" "$input"
  fi
fi
exec "$py" "$src/test/text/compare_tokenizer.py" "$dir" --sparse24 "$bin" --input "$input" --max-length "$maxlen"
