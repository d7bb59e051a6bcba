#!/usr/bin/env bash
# Installs what dlbench needs from Debian's packages (only what is missing), configures and builds it into
# build/. Run as root on Debian 12 or later. Safe to run again: it only does what is left to do.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# ocl-icd-opencl-dev: Debian's oneDNN is built with its OpenCL runtime, and its CMake config looks for OpenCL.
packages=(
  build-essential cmake ninja-build git pkg-config
  libdnnl-dev ocl-icd-opencl-dev libfmt-dev nlohmann-json3-dev libcli11-dev libgtest-dev zlib1g-dev libjpeg62-turbo-dev
  clang libclang-rt-14-dev
  libopenmpi-dev openmpi-bin
  dataset-fashion-mnist
  gnuplot-nox chromium libxml2-utils  # `dlbench report`'s figures; its tests render the page and check the SVGs
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "bootstrap: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The CUDA backend is built when the CUDA toolkit is there (it need not have a GPU).
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
if [ ! -f build/build.ninja ]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release ${DLBENCH_CMAKE_ARGS:-}
fi
cmake --build build -j"$(nproc)"
