#!/usr/bin/env bash
# The whole test suite, from a fresh Debian 12 machine: installs what is missing, builds with warnings as
# errors, runs every test, checks formatting, builds and runs the find_package consumer against an installed
# copy, fuzzes every file reader for a fixed time, then builds and runs the tests again (but the libtorch
# training ones) under AddressSanitizer + UndefinedBehaviorSanitizer. Each stage prints when it started.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each stage's start in minutes:seconds since this script began (where CI's time goes).
stage() { printf '== %s (at %d:%02d)\n' "$*" $((SECONDS / 60)) $((SECONDS % 60)); }
stage "setup"
bash scripts/setup.sh

jobs=$(nproc)
source scripts/ccache_env.sh
# A clean run writes about 10 GB (three build trees, pytest's model copies, fuzz corpora); a full disk shows
# up late, as an assembler or linker error, so say it first.
free_kb=$(df -Pk . | awk 'NR == 2 {print $4}')
if [ "$free_kb" -lt $((10 * 1024 * 1024)) ]; then
  echo "warning: $((free_kb / 1024 / 1024)) GB free on this disk; a clean run needs about 10 GB" >&2
fi
stage "release build and tests"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DSPARSE24_WERROR=ON >/dev/null
cmake --build build -j"$jobs"
ctest --test-dir build --output-on-failure -j"$jobs"

stage "Python package (installed into .venv by scripts/setup.sh): pytest python/tests"
if [ -x .venv/bin/python ]; then
  # pytest fails the suite on a failing test and on collecting none (exit 5); SPARSE24_CLI makes the tests
  # against the C++ tool required.
  SPARSE24_CLI="$PWD/build/sparse24" .venv/bin/python -m pytest python/tests -q -p no:cacheprovider
else
  echo "no .venv (SPARSE24_SKIP_VENV=1): Python package not tested"
fi

stage "formatting (clang-format --dry-run)"
git ls-files '*.cc' '*.h' | xargs clang-format --dry-run --Werror

stage "install + find_package consumer (examples/consumer)"
rm -rf build/install build/consumer
cmake --install build --prefix build/install >/dev/null
cmake -S examples/consumer -B build/consumer -G Ninja -DCMAKE_PREFIX_PATH="$PWD/build/install" >/dev/null
cmake --build build/consumer
build/consumer/consumer

stage "fuzzing (libFuzzer + ASan + UBSan, clang-14): each harness for a fixed time"
bash test/fuzz/run.sh

stage "sanitizer build (ASan + UBSan) and tests"
# Without the libtorch training code and its tests (the release build runs them): libtorch itself is not
# instrumented, and that code is over a third of the compile time (498 of 1,386 CPU-seconds, release).
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DSPARSE24_SANITIZE=ON -DSPARSE24_BUILD_BENCH=OFF \
  -DSPARSE24_BUILD_TRAIN=OFF -DSPARSE24_WERROR=ON >/dev/null
cmake --build build-asan -j"$jobs"
ctest --test-dir build-asan --output-on-failure -j"$jobs"
stage "all tests passed"
