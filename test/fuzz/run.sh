#!/usr/bin/env bash
# Builds the libFuzzer harnesses with clang++-14 (-fsanitize=fuzzer,address,undefined) straight from the library
# sources they need (nproc compiles at a time), writes seed corpora with the library, and runs each harness for
# a fixed time (nproc harnesses side by side, one core each). Any crash, sanitizer report, leak, timeout or
# failed invariant fails the script (and leaves the reproducer in the build directory; copy it to
# test/fuzz/corpus/<harness>/ to keep it as a regression input).
#
#   FUZZ_SECONDS=20 (per harness)   FUZZ_BUILD_DIR=build-fuzz   FUZZ_ONLY="npy safetensors"
set -euo pipefail
cd "$(dirname "$0")/../.."

seconds=${FUZZ_SECONDS:-20}
out=${FUZZ_BUILD_DIR:-build-fuzz}
cxx=${FUZZ_CXX:-clang++-14}
harnesses=(${FUZZ_ONLY:-safetensors gguf compressed_file bitmask24 npy metadata engine_model tokenizer bpe hf_encoder hf_decoder gguf_decoder jinja})
lib_sources=(src/core/dtype.cc src/core/tensor.cc src/core/pattern.cc src/core/mask.cc src/core/compressed.cc
             src/kernels/convert.cc src/kernels/convert_avx2.cc src/kernels/pack.cc src/kernels/lanes_stored.cc
             src/io/file.cc src/io/npy.cc src/io/safetensors.cc src/io/gguf.cc src/io/gguf_dequant.cc src/io/compressed_file.cc src/io/bitmask24.cc
             src/io/checkpoint.cc src/io/model_dir.cc src/io/net_spec.cc src/io/hf_dir.cc
             src/engine/model.cc src/engine/builder.cc src/engine/hf_encoder.cc src/engine/hf_decoder.cc src/engine/gguf_names.cc
             src/engine/decoder_model.cc
             src/text/wordpiece.cc src/text/bpe.cc src/text/bpe_load.cc src/text/bpe_split.cc src/text/unicode.cc src/text/jinja.cc src/text/jinja_parse.cc
             src/text/jinja_values.cc)
flags=(-std=c++20 -g -O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all
       -Iinclude -Isrc -Itest/fuzz)

command -v "$cxx" >/dev/null || { echo "fuzz: $cxx not found (apt-get install clang-14 libclang-rt-14-dev)"; exit 1; }
mkdir -p "$out/obj"
source scripts/ccache_env.sh
jobs=$(nproc)
# At most $jobs background steps at a time; a failed one fails the script.
pending=0
limit() {
  if [ "$pending" -ge "$jobs" ]; then wait -n || exit 1; pending=$((pending - 1)); fi
  pending=$((pending + 1))
}
drain() {
  while [ "$pending" -gt 0 ]; do wait -n || exit 1; pending=$((pending - 1)); done
}
objects=()
for src in "${lib_sources[@]}"; do
  obj="$out/obj/$(basename "${src%.cc}").o"
  # Rebuild when the source or any project header is newer than the object.
  if [ ! -f "$obj" ] || [ -n "$(find "$src" include src/io/io_util.h src/io/*.h src/engine/*.h src/text/*.h src/text/*.inc src/kernels/convert.h src/kernels/huge_pages.h src/kernels/ggml_*.h src/kernels/packed.h src/kernels/lanes_stored.h src/kernels/kernel_list.h src/kernels/kernel_list.inc -newer "$obj" -print -quit)" ]; then
    isa=()  # an ISA file gets its flags (it runs only after the CPU check)
    [ "$src" = src/kernels/convert_avx2.cc ] && isa=(-mavx2 -mf16c)
    limit
    "${ccache_prefix[@]}" "$cxx" "${flags[@]}" "${isa[@]}" -fsanitize=fuzzer-no-link -c "$src" -o "$obj" &
  fi
  objects+=("$obj")
done
drain

"$cxx" "${flags[@]}" test/fuzz/make_seeds.cc "${objects[@]}" -lutf8proc -o "$out/make_seeds"
rm -rf "$out/seeds"
ASAN_OPTIONS=detect_leaks=1 "$out/make_seeds" "$out/seeds"

for h in "${harnesses[@]}"; do
  limit
  "$cxx" "${flags[@]}" -fsanitize=fuzzer "test/fuzz/${h}_fuzz.cc" "${objects[@]}" -lutf8proc -o "$out/${h}_fuzz" &
done
drain

# Each harness for $seconds, $jobs side by side (one core each); the reports are printed in the list's order.
fuzz_one() {
  local h=$1
  mkdir -p "$out/corpus/$h" "$out/artifacts/$h"
  local dirs=("$out/corpus/$h" "$out/seeds/$h")
  [ -d "test/fuzz/corpus/$h" ] && dirs+=("test/fuzz/corpus/$h")
  if nice -n 19 "$out/${h}_fuzz" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
      -artifact_prefix="$out/artifacts/$h/" -print_final_stats=1 "${dirs[@]}" >"$out/$h.log" 2>&1; then
    echo ok >"$out/$h.status"
  else
    echo failed >"$out/$h.status"
  fi
}
for h in "${harnesses[@]}"; do
  rm -f "$out/$h.status"
  limit
  fuzz_one "$h" &
done
drain

status=0
for h in "${harnesses[@]}"; do
  echo "== fuzz $h (${seconds}s)"
  if [ "$(cat "$out/$h.status" 2>/dev/null)" != ok ]; then
    echo "fuzz: $h FAILED; log $out/$h.log, reproducer in $out/artifacts/$h/:"
    tail -40 "$out/$h.log"
    status=1
  else
    grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "$out/$h.log" | tr '\n' ' '
    echo
  fi
done
exit $status
