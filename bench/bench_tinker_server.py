"""The demo trained through Tinker's API (SkyRL's server behind the proxy) and on the local backend, side by side.

Both runs use the same tiny model directory, seed, config, warm start and batches, and the whole
pipeline (store, runner processes, endpoint, reconstruction); only ``policy.backend`` differs. The
table gives the median time per batch to sample and to train, and the test reward before and after,
so learning through Tinker's API is shown, not only wiring.

    .venv/bin/python bench/bench_tinker_server.py [--batches 30] [--rank 32] [key=value ...]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("TINKER_TELEMETRY", "0")
os.environ.setdefault("TINKER_API_KEY", "tml-local-bench")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from adapters.tinker_server.skyrl import SkyrlServer, install, tiny_model_dir
from app.config import load_config
from app.launch import train


async def run(name: str, overrides: list[str], log_path: Path) -> str:
    config = load_config(None, [*overrides, f"log_path={log_path}"]).unwrap()
    started = time.perf_counter()
    summary = await train(config)
    seconds = time.perf_counter() - started
    lines = [json.loads(line) for line in (log_path / "metrics.jsonl").read_text().splitlines()]
    batches = [m for m in lines if "progress/batch" in m]
    sample = statistics.median(m["time/sample"] for m in batches)
    trained = statistics.median(m["time/train"] for m in batches)
    return (
        f"| {name} | {len(batches)} | {sample:.2f} | {trained:.2f} | "
        f"{summary.reward_before or 0.0:.2f} -> {summary.reward_after or 0.0:.2f} | {seconds:.0f} |"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--batches", type=int, default=30)
    parser.add_argument("--rank", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("overrides", nargs="*", help="config key=value for both runs")
    args = parser.parse_args()
    install()
    root = Path(tempfile.mkdtemp(prefix="bench-tinker-server-"))
    common = [
        f"max_batches={args.batches}",
        f"seed={args.seed}",
        f"policy.lora_rank={args.rank}",
        "kl_penalty_coef=0",  # SkyRL 0.4.0 cannot score a KL reference beside training (see the proxy)
        "save_every=0",
        *args.overrides,
    ]
    with tiny_model_dir(root, seed=args.seed) as model, SkyrlServer(model, root / "server") as server:
        rows = [
            await run("local", [*common, f"policy.model_path={model}"], root / "local"),
            await run(
                "tinker (SkyRL)",
                [*common, "policy.backend=tinker", f"policy.base_url={server.url}", f"policy.base_model={model}"],
                root / "tinker",
            ),
        ]
    print("| backend | batches | sample s/batch (median) | train s/batch (median) | test reward | total s |")
    print("|---|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    asyncio.run(main())
