#!/usr/bin/env bash
# Install everything k3doctor and its test rig need on a fresh Debian 12 machine (run as root).
# The rig itself (tests, `k3doctor demo`) starts its own sshd and dockerd processes.
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive
need=(openssh-server docker.io busybox-static iproute2 procps util-linux)
missing=()
for pkg in "${need[@]}"; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
if [ ${#missing[@]} -gt 0 ]; then
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
python3 -m pip install -q --disable-pip-version-check -e '.[test]'
# The all_reduce probe's ranks on the simulated rack run on gloo with the CPU build of torch.
python3 -m pip install -q --disable-pip-version-check 'torch==2.13.0'
