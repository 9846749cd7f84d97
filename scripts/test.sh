#!/usr/bin/env bash
# The whole check: lint, types, and the test suite against real local registries.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh --tests
echo "== ruff"
.venv/bin/ruff check mirror tests bench
echo "== ruff format"
.venv/bin/ruff format --check mirror tests bench
echo "== hadolint"
.venv/bin/hadolint Dockerfile
echo "== mypy"
.venv/bin/mypy
.venv/bin/mypy bench/run.py
echo "== pytest"
exec .venv/bin/pytest -n 2 "$@"
