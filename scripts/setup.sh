#!/usr/bin/env bash
# Set up a fresh machine: a virtual environment in .venv with stint and everything it needs.
# Idempotent: re-running it only installs what changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
# The dashboard's browser test drives Debian's chromium with Playwright: never a browser download.
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1
if ! command -v chromium >/dev/null && [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver
fi
[[ -x .venv/bin/python ]] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# The CPU build of torch 2.13.0 is on this disk; install it first so nothing pulls a CUDA build.
.venv/bin/python -m pip install -q torch==2.13.0
.venv/bin/python -m pip install -q -e ".[dev]"
# The live fleet test (tests/runtime/test_live_fleet.py) makes network namespaces and limits a
# link with ip and tc (iproute2); as root, install them if missing.
if [[ $(id -u) == 0 ]] && ! command -v tc >/dev/null; then
  apt-get update -qq && apt-get install -y -qq iproute2 >/dev/null \
    || echo "warning: could not install iproute2; the live fleet test will be skipped" >&2
fi
