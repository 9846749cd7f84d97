#!/usr/bin/env bash
# Install what mirror needs on a Debian/Ubuntu machine: the registry binary for the demo and the tests,
# PostgreSQL for the replica tests, python3-venv, and a virtualenv in .venv with mirror and its dev tools; with
# --tests also promtool and chromium with its driver, which only the test suite uses. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

missing=()
command -v docker-registry >/dev/null 2>&1 || [ -x /usr/bin/docker-registry ] || missing+=(docker-registry)
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || missing+=(python3-venv)
command -v python3 >/dev/null 2>&1 || missing+=(python3)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)  # the README's webhook-signing example; test TLS CAs
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing+=(postgresql)  # the replicas' shared database
command -v unshare >/dev/null 2>&1 || missing+=(util-linux)  # tests at Docker Hub's and ACR's real host names
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
if [ "${1:-}" = "--tests" ]; then  # what only the test suite needs (scripts/test.sh); the demo goes without
  command -v promtool >/dev/null 2>&1 || missing+=(prometheus)  # the alert rules, checked and unit-tested
  command -v chromium >/dev/null 2>&1 || missing+=(chromium)  # the status page, tested in a real headless browser
  command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
  command -v tinyproxy >/dev/null 2>&1 || missing+=(tinyproxy)  # a real forward proxy for HTTPS_PROXY's tests
  command -v microsocks >/dev/null 2>&1 || missing+=(microsocks)  # a real SOCKS5 proxy for socks5:// HTTPS_PROXY
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "bootstrap: installing ${missing[*]} with apt-get" >&2
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
stamp=.venv/.bootstrap-stamp
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "bootstrap: installing mirror and its dev tools into .venv" >&2
  if ! .venv/bin/python -m pip install -e '.[dev]' >.venv/pip.log 2>&1; then
    tail -n 40 .venv/pip.log >&2
    exit 1
  fi
  touch "$stamp"
fi
