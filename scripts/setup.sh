#!/usr/bin/env bash
# Idempotent set-up on a fresh machine: system packages (as root), a virtual environment in .venv with
# the CPU build of torch pinned first (a plain `torch` pulls a multi-GB CUDA build), the project in
# editable mode (tasks/ and agents/ are read from the checkout), and the extras.
#
#   bash scripts/setup.sh             everything: bubblewrap and chromium (the web tests' browser), the
#                                     tilelang, web, scale (ray), plots (matplotlib) and test extras
#   bash scripts/setup.sh --minimal   the environment only: bubblewrap, torch (CPU build, pinned), triton,
#                                     gymnasium; no chromium, no tilelang/web/ray/test extras (`run` then
#                                     skips the TileLang solutions and says why). A later plain run adds
#                                     the rest.
set -euo pipefail
cd "$(dirname "$0")/.."

MODE=full
case "${1:-}" in
  --minimal) MODE=minimal ;;
  "") ;;
  -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "setup: unknown option $1 (use --minimal, or nothing for the full install)" >&2; exit 2 ;;
esac

if [ "$MODE" = minimal ]; then
  APT_PACKAGES="bubblewrap"
  EXTRAS=""
else
  APT_PACKAGES="bubblewrap chromium chromium-driver"
  EXTRAS="[test,tilelang,web,scale,plots,trl,verl,verifiers]"
fi
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
full_stamp=.venv/.kernelgym_gap-installed
stamp=$full_stamp
[ "$MODE" = minimal ] && stamp=.venv/.kernelgym_gap-installed-minimal
if [ -f "$full_stamp" ] && [ ! pyproject.toml -nt "$full_stamp" ]; then
  exit 0                                   # the full install covers the minimal one
fi
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/pip install -q --disable-pip-version-check "torch==2.13.0" "triton==3.7.1" -e ".$EXTRAS"
  touch "$stamp"
fi
