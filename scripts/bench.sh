#!/usr/bin/env bash
# The benchmark: mirror vs skopeo on local registries. Writes bench/results/latest.md.
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
exec .venv/bin/python bench/run.py "$@"
