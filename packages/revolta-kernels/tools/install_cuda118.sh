#!/usr/bin/env bash
# Install Debian's CUDA 11.8 toolkit: the newest nvcc that still targets sm_70 (Volta).
# CUDA 13 dropped Volta code generation (12.x only deprecated it); Debian packages 11.8, so the Volta/Turing
# library is built with it.
# Needs root and the Debian bookworm mirror; adds the contrib and non-free components.
set -euo pipefail

if [[ -x /usr/bin/nvcc ]] && /usr/bin/nvcc --version | grep -q "release 11.8"; then
  echo "CUDA 11.8 nvcc already installed at /usr/bin/nvcc"
  exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "install_cuda118.sh must run as root (apt-get install nvidia-cuda-toolkit)" >&2
  exit 1
fi
sources=/etc/apt/sources.list.d/debian.sources
if [[ -f $sources ]] && ! grep -q "non-free" "$sources"; then
  sed -i 's/^Components: main$/Components: main contrib non-free non-free-firmware/' "$sources"
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends nvidia-cuda-toolkit >/dev/null
/usr/bin/nvcc --version | tail -2
