#!/usr/bin/env bash
# The LangChain and LlamaIndex adapter tests, and the transformers engine's tests, under the
# lowest versions that pyproject.toml declares (scripts/lowest-versions.txt), in a virtualenv of their own
# ($LOWEST_VENV, default .venv-lowest; built here when missing or older than the pins).
set -euo pipefail
cd "$(dirname "$0")/.."
LOW=${LOWEST_VENV:-.venv-lowest}
PINS=scripts/lowest-versions.txt
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
if [[ ! -f "$LOW/.installed" || "$PINS" -nt "$LOW/.installed" || pyproject.toml -nt "$LOW/.installed" ]]; then
  test -x "$LOW/bin/python" || python3 -m venv "$LOW"
  "$LOW/bin/python" -m pip install -q --upgrade pip
  "$LOW/bin/python" -m pip install -q torch==2.13.0
  # not the stores extra: tests/stores run in .venv only (the stores' own floors are untested)
  "$LOW/bin/python" -m pip install -q ".[all,test]" -c "$PINS"
  touch "$LOW/.installed"
fi
# the run must test the floors: every exact pin is what is installed
"$LOW/bin/python" - "$PINS" <<'PY'
import sys
from importlib.metadata import version

pins = [l.split("#")[0].strip() for l in open(sys.argv[1])]
wrong = [
    f"{name} {version(name)} (pinned {want})"
    for name, want in (p.split("==") for p in pins if "==" in p)
    if version(name) != want
]
sys.exit(f"not the lowest versions: {', '.join(wrong)}" if wrong else 0)
PY
# one run per adapter: both test folders have a conftest.py of the same name
"$LOW/bin/python" -m pytest -q -p no:cacheprovider -n 2 tests/langchain langchain_dprag
"$LOW/bin/python" -m pytest -q -p no:cacheprovider -n 2 tests/llamaindex llamaindex_dprag
# the engines on the transformers floor (the forward's cache argument, every engine the CPU runs)
"$LOW/bin/python" -m pytest -q -p no:cacheprovider -n 2 -W error::FutureWarning \
  tests/models/test_transformers_compat.py tests/models/test_hf_engine.py \
  tests/models/test_hf_static.py tests/models/test_lookahead.py tests/algorithms/test_words.py
