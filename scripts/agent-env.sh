#!/usr/bin/env bash
# Build (once, cached) an agent's own Python environment from its requirements file and print its Python
# on the last line: `agl-tinker train ... runner_python=$(bash scripts/agent-env.sh examples/autogen_mcp/requirements.txt)`.
# Progress and errors go to stderr. See adapters/runner/agent_env.py.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
args=()
for arg in "$@"; do  # relative paths are the caller's
  if [[ "$arg" != -* && -e "$arg" ]]; then arg="$(cd "$(dirname "$arg")" && pwd)/$(basename "$arg")"; fi
  args+=("$arg")
done
# The module is standard library only; with the trainer's venv (when there is one) the environment is made
# from the same base Python 3.11 by the venv's uv, else by a python3 and a uv found on PATH.
python="$root/.venv/bin/python"
[ -x "$python" ] || python="$(command -v python3)"
cd "$root"
exec "$python" -m adapters.runner.agent_env "${args[@]}"
