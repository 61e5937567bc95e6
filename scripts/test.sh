#!/usr/bin/env bash
# The whole test suite: lint, strict types, unit + property + integration tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
export LITELLM_LOCAL_MODEL_COST_MAP=True TINKER_TELEMETRY=0
.venv/bin/ruff check domain ports adapters app tests bench examples
.venv/bin/mypy domain ports app
.venv/bin/python -m pytest -q "$@"
