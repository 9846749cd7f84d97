#!/usr/bin/env bash
# The benchmark: mirror vs skopeo on local registries. Writes bench/results/latest.md (--out DIR elsewhere).
# Every part but `scaling` by default (about 13 minutes on 2 idle cores); one or a few alone with `--only scale,tls`,
# the TLS/HTTP2 comparison alone with `--tls`; `--help` lists the parts and their settings.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
missing=()
command -v skopeo >/dev/null 2>&1 || missing+=(skopeo)
command -v curl >/dev/null 2>&1 || missing+=(curl)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ]; then apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null
  else sudo apt-get update -qq && sudo apt-get install -y -qq "${missing[@]}" >/dev/null; fi
fi
# mirror itself runs from a venv of what the container image installs (its Dockerfile's EXTRAS), not from the
# development venv, whose test tools bring packages mirror would import (trio, through httpcore) but never ships.
extras=$(sed -n 's/^ARG EXTRAS=//p' Dockerfile | head -1)
[ -x .venv-bench/bin/python ] || python3 -m venv .venv-bench
.venv-bench/bin/pip install -q --disable-pip-version-check ".[${extras}]"
BENCH_MIRROR_PYTHON="$PWD/.venv-bench/bin/python" exec .venv/bin/python bench/run.py "$@"
