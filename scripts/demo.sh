#!/usr/bin/env bash
# The demo: two throwaway local registries, a sample multi-arch release, a real `mirror sync`, the values.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
exec .venv/bin/python -m mirror.demo "$@"
