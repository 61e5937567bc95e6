#!/usr/bin/env bash
# The main job: set up, then run the end-to-end demo (see README for what it does today).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
export LITELLM_LOCAL_MODEL_COST_MAP=True TINKER_TELEMETRY=0
exec .venv/bin/python -m app.demo "$@"
