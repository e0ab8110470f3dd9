#!/usr/bin/env bash
# Install everything k3doctor and its test rig need on a fresh Debian 12 machine (run as root).
# The rig itself (tests, `k3doctor demo`) starts its own sshd and dockerd processes.
set -euo pipefail
cd "$(dirname "$0")/.."
# PIP_BREAK_SYSTEM_PACKAGES: on a Debian 12 whose python3 is the system one (PEP 668) install anyway.
export DEBIAN_FRONTEND=noninteractive PIP_ROOT_USER_ACTION=ignore PIP_BREAK_SYSTEM_PACKAGES=1
need=(openssh-server docker.io busybox-static iproute2 procps util-linux python3-pip sudo openssl bubblewrap)
missing=()
for pkg in "${need[@]}"; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
if [ ${#missing[@]} -gt 0 ]; then
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# headless Chromium reads the HTML report in the tests (screenshot + DOM); DejaVu so its text has a font
dpkg -s chromium fonts-dejavu-core >/dev/null 2>&1 || { apt-get update -qq; apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null; }
# k3doctor with its test tools, and the simulated rack (its own package under rig/: tests and `k3doctor demo`).
# setup.cfg names bcrypt itself: `watch --web-config` checks basic_auth_users' bcrypt hashes (paramiko brings
# it too, but k3doctor imports it directly and must not depend on paramiko's choice).
python3 -m pip install -q --disable-pip-version-check -e '.[test]' -e ./rig
# The all_reduce probe's ranks run on gloo with the CPU build of torch: in the tests' own python, and
# in the system python that the simulated nodes see (their namespaces hide /root, and pyenv with it).
python3 -m pip install -q --disable-pip-version-check 'torch==2.13.0'
/usr/bin/python3 -c 'import torch' 2>/dev/null ||
  /usr/bin/python3 -m pip install -q --disable-pip-version-check --break-system-packages 'torch==2.13.0'
# py-spy (triage --stacks) where the simulated nodes see it: their namespaces hide /root, not /usr/local.
[ -x /usr/local/bin/py-spy ] ||
  /usr/bin/python3 -m pip install -q --disable-pip-version-check --break-system-packages 'py-spy>=0.4'
# Slurm (slurmctld, slurmd, scontrol; munge) for the `k3doctor node --slurm-drain` tests, which start their own daemons.
dpkg -s slurm-wlm >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq --no-install-recommends slurm-wlm >/dev/null; }
