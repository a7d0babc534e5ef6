#!/usr/bin/env bash
# Idempotent set-up on a fresh machine: system packages (as root), a virtual environment in .venv with
# the CPU build of torch pinned first (a plain `torch` pulls a multi-GB CUDA build), the project in
# editable mode (tasks/ and agents/ are read from the checkout), and the test extras.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES="bubblewrap chromium chromium-driver"
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null; then
  missing=""
  for p in $APT_PACKAGES; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
  if [ -n "$missing" ]; then
    echo "setup: apt-get install$missing" >&2
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
  fi
else
  echo "setup: not root: skipping system packages ($APT_PACKAGES); the sandbox falls back to weaker layers" >&2
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.kernelgym_gap-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/pip install -q --disable-pip-version-check "torch==2.13.0" "triton==3.7.1" -e ".[test,tilelang,web,scale,trl,verl,verifiers]"
  touch "$stamp"
fi
