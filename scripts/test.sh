#!/usr/bin/env bash
# The whole test suite: lint, strict types, unit + property + integration tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
export LITELLM_LOCAL_MODEL_COST_MAP=True TINKER_TELEMETRY=0
# The Tinker-API server the Tinker tests train against (SkyRL, own Python 3.12 environment, cached);
# without Python 3.12 those tests skip and say why.
.venv/bin/python -m adapters.tinker.server.skyrl --install-only || echo "Tinker-API server not installed: its tests will skip"
# faketime shifts a runner's clock in the clock-skew tests: installed where apt-get can (as root), else they skip.
if ! command -v faketime >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null && (apt-get update -qq && apt-get install -y -qq faketime) >/dev/null 2>&1; then
    echo "installed faketime"
  else
    echo "faketime not installed: the clock-skew tests will skip"
  fi
fi
.venv/bin/ruff check domain ports adapters app tests bench examples
.venv/bin/mypy domain ports app
# -rsx: name every skipped and xfailed test with its reason; --durations: the slowest tests, where the time goes.
# Two test processes (pytest-xdist), each taking whole modules so a module's server or model is built once;
# most tests wait on child processes, so two keep both cores busy. AGL_TINKER_TEST_WORKERS=0: one process.
# --no-loadscope-reorder: modules go out in tests/conftest.py's order, the longest first (xdist's own order, by
# number of tests, sent the learning checks last, to run alone at the end).
.venv/bin/python -m pytest -q -rsx --durations=15 -n "${AGL_TINKER_TEST_WORKERS:-2}" --dist loadfile \
  --no-loadscope-reorder "$@"
