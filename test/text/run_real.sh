#!/usr/bin/env bash
# CTest wrapper for compare_tokenizer.py on a real model: skips (exit 77) when the project's .venv or the
# model directory is missing (fails under CI); INPUT "kjv" means every verse of the King James Bible (generated once into
# BUILD_DIR with Debian's `bible`).
#   run_real.sh SOURCE_DIR BUILD_DIR SPARSE24_BIN MODEL_NAME INPUT MAX_LENGTH [SPARSE24_MODEL [HF_PRE]]
# SPARSE24_MODEL (under models/): what sparse24 tokenizes with instead of MODEL_NAME (e.g. a GGUF file);
# HF_PRE: compare_tokenizer.py's --hf-pre-tokenizer.
set -euo pipefail
src=$1 build=$2 bin=$3 model=$4 input=$5 maxlen=$6 ours=${7:-} hf_pre=${8:-}
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
extra=()
if [ -n "$ours" ]; then
  [ -e "$src/models/$ours" ] || { echo "missing: $src/models/$ours (the setup unpacks models/)"; exit $missing; }
  extra+=(--model "$src/models/$ours")
fi
[ -n "$hf_pre" ] && extra+=(--hf-pre-tokenizer "$hf_pre")
exec "$py" "$src/test/text/compare_tokenizer.py" "$dir" --sparse24 "$bin" --input "$input" --max-length "$maxlen" \
  "${extra[@]}"
