#!/usr/bin/env bash
# The main job: set up, then train the demo agent (number word -> digit) on a tiny local model
# through the whole pipeline: embedded store, concurrent runner processes, policy endpoint,
# reconstruction, cookbook datums, local PyTorch trainer. Extra arguments are config overrides.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
export LITELLM_LOCAL_MODEL_COST_MAP=True TINKER_TELEMETRY=0
exec .venv/bin/agl-tinker train "log_path=runs/demo-$(date +%Y%m%d-%H%M%S)" lr_schedule=linear "$@"
