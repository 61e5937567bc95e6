#!/usr/bin/env bash
# A Tinker-API server on this machine: SkyRL 0.4.0 (own Python 3.12 environment, cached) behind the
# compatibility proxy, on 127.0.0.1. `--install-only` installs and exits; `--help` lists the options.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
export LITELLM_LOCAL_MODEL_COST_MAP=True TINKER_TELEMETRY=0
exec .venv/bin/python -m adapters.tinker.server.skyrl "$@"
