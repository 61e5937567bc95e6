#!/usr/bin/env bash
# The trainer's cost per rollout and per request, and its memory, in one run, one benchmark after
# another (each measures its rows side by side): throughput, latency (64 x 0.5 s on one runner, and
# 8 runner processes with 512 rollouts in flight), the soak, the demo against the direct loop, the
# demo's memory over 300 batches, and the endpoint (with rows over SkyRL's Tinker API when Python 3.12
# is there). About 30 minutes on 2 cores; the output goes to the terminal and to bench-trainer.log.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
export LITELLM_LOCAL_MODEL_COST_MAP=True TINKER_TELEMETRY=0
py=.venv/bin/python
tinker=()
if $py -m adapters.tinker.server.skyrl --install-only >/dev/null 2>&1; then tinker=(--tinker); fi
failed=()
{
  echo "commit $(git rev-parse --short HEAD), $(date -u +%FT%TZ)"
  for bench in \
    "bench/bench_throughput.py --rollouts 512 --stock-rollouts 128" \
    "bench/bench_latency.py --only wall --rollouts 64" \
    "bench/bench_latency.py --only scaled" \
    "bench/bench_soak.py" \
    "bench/bench_demo.py --max-batches 30 --target 2.0" \
    "bench/bench_demo_memory.py" \
    "bench/bench_endpoint.py ${tinker[*]}"; do
    echo "=== $bench ($(date -u +%T))"
    set +e
    # shellcheck disable=SC2086
    $py $bench 2>&1 | grep -v -e "WARNING" -e "^INFO:" -e "No access host" -e "LITELLM_MASTER_KEY"
    status=${PIPESTATUS[0]}
    set -e
    if [ "$status" -ne 0 ]; then
      failed+=("$bench")
      echo "=== FAILED (exit $status): $bench"
    fi
  done
  echo "=== done ($(date -u +%T)), load average $(cut -d' ' -f1-3 /proc/loadavg)"
  if [ ${#failed[@]} -gt 0 ]; then
    echo "error: ${#failed[@]} benchmark(s) failed: ${failed[*]}"
    exit 1
  fi
} 2>&1 | tee bench-trainer.log
