#!/usr/bin/env bash
# The whole test suite: lint, types, then pytest (offline, 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
"$VENV/bin/ruff" check .
"$VENV/bin/ruff" format --check .
"$VENV/bin/mypy" --strict dprag_core langchain_dprag llamaindex_dprag
# PostgreSQL ledger tests run against a throwaway loopback server (installed when missing).
if [[ -z "${DPRAG_TEST_POSTGRES_DSN:-}" ]]; then
  eval "$(scripts/postgres_for_tests.sh)"
  # the server is ours alone: the least-privilege tests may create and drop a login role
  export DPRAG_TEST_POSTGRES_ROLES=1
  trap 'scripts/postgres_for_tests.sh stop >/dev/null 2>&1 || true' EXIT
fi
# llama.cpp's server for tests/models/test_llama_server.py: built once, cached by version
# (docs/servers.md); where it cannot be built, those tests skip and say why.
if [[ -z "${DPRAG_SKIP_LLAMA_SERVER_BUILD:-}${DPRAG_LLAMA_SERVER:-}" ]]; then
  build_log="${TMPDIR:-/tmp}/dprag-llama-server-build.log"
  PIP="$VENV/bin/pip" scripts/build_llama_server.sh >/dev/null 2>"$build_log" \
    || echo "llama-server not built (see $build_log): its tests will skip" >&2
fi
"$VENV/bin/python" -m pytest -n 2 --dist loadfile -q "$@"
# The adapter tests again under the lowest declared framework versions (a venv of their
# own, built on the first run); DPRAG_TEST_LOWEST=0 skips them (e.g. on a shared machine).
if [[ "${DPRAG_TEST_LOWEST:-1}" != 0 ]]; then
  bash scripts/test_lowest.sh
fi
