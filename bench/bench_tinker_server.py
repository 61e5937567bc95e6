"""The demo trained through Tinker's API (SkyRL's server behind the proxy) and on the local backend, side by side.

Both runs start from the same model directory and seed and run the same config and batches through the
whole pipeline (store, runner processes, endpoint, reconstruction); only ``policy.backend`` differs.
The model is the tiny Qwen3 after the demo's supervised format warm start, done once here with full
fine-tuning: LoRA on attention and MLP (all SkyRL trains) does not learn the format on this tied-
embedding model (warm-start loss 6.6 -> 5.9 in 250 steps, against 0.6 with full fine-tuning), while
RL only has to move the digit choice. The table gives the median time per batch to sample and to
train, and the test reward before and after, so learning through Tinker's API is shown, not only wiring.

    .venv/bin/python bench/bench_tinker_server.py [--batches 30] [--rank 32] [--agent module:attr] [key=value ...]

``--agent tests.integration.training_agents:always_seven_agent`` rewards the reply "7" whatever the
word: a target LoRA on attention and MLP can reach, so learning itself is visible within 15 batches.
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

import shutil

from tinker_cookbook.renderers import get_renderer
from tinker_cookbook.tokenizer_utils import get_tokenizer

from adapters.cookbook.training import chat_datum
from adapters.local import LocalTrainer
from adapters.tinker.server.skyrl import SkyrlServer, install, tiny_model_dir
from app.config import load_config
from app.launch import train, warm_start_chats
from app.usecases.steps import WarmStartSettings, warm_start


async def warmed_up(base: Path, out: Path, seed: int) -> Path:
    """``base`` after the demo's format warm start (full fine-tuning), written as a model directory at ``out``."""
    config = load_config(None, [f"seed={seed}"]).unwrap()
    trainer = LocalTrainer(base, lora_rank=0, seed=seed, checkpoint_dir=out.parent / "warm-start")
    try:
        renderer = get_renderer(config.policy.renderer_name, get_tokenizer(str(base)))
        data = [chat_datum(chat, renderer) for chat in warm_start_chats(config)]
        ws = config.warm_start
        await warm_start(trainer, data, WarmStartSettings(ws.steps, ws.batch_size, ws.learning_rate), print)
        shutil.copytree(base, out)
        trainer.model.save_pretrained(out)  # Hugging Face's layout, tied embeddings included, for both backends
    finally:
        trainer.close()
    return out


async def run(name: str, overrides: list[str], log_path: Path) -> str:
    config = load_config(None, [*overrides, f"log_path={log_path}"]).unwrap()
    started = time.perf_counter()
    await train(config)
    (log_path / "seconds").write_text(f"{time.perf_counter() - started:.1f}")
    return row(name, log_path)


def row(name: str, log_path: Path) -> str:
    """One table row from a run's ``metrics.jsonl`` (and its wall time, when this script ran it)."""
    lines = [json.loads(line) for line in (log_path / "metrics.jsonl").read_text().splitlines()]
    batches = [m for m in lines if "progress/batch" in m]
    tests = [m[TEST_REWARD] for m in lines if TEST_REWARD in m]
    rewards = [m.get(TRAIN_REWARD, 0.0) for m in batches]
    first, last = rewards[:10], rewards[-10:]
    seconds = (log_path / "seconds").read_text() if (log_path / "seconds").is_file() else "?"
    return (
        f"| {name} | {len(batches)} | {statistics.median(m['time/sample'] for m in batches):.2f} | "
        f"{statistics.median(m['time/train'] for m in batches):.2f} | "
        f"{sum(first) / len(first):.2f} -> {sum(last) / len(last):.2f} | "
        f"{tests[0]:.2f} -> {tests[-1]:.2f} | {seconds} |"
    )


HEADER = (
    "| backend | batches | sample s/batch (median) | train s/batch (median) | train reward, first -> last 10 batches "
    "| test reward before -> after | total s |\n|---|---|---|---|---|---|---|"
)
TRAIN_REWARD, TEST_REWARD = "env/all/reward/total", "test/env/all/reward/total"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--batches", type=int, default=30)
    parser.add_argument("--rank", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--agent", default=None, help="module:attr of the agent (default: the demo's)")
    parser.add_argument("--from", dest="source", type=Path, help="summarise a kept run directory instead")
    parser.add_argument("overrides", nargs="*", help="config key=value for both runs")
    args = parser.parse_args()
    if args.source is not None:
        print(HEADER)
        print(row("local", args.source / "local"))
        print(row("tinker (SkyRL)", args.source / "tinker"))
        return
    install()
    root = Path(tempfile.mkdtemp(prefix="bench-tinker-server-"))
    common = [
        f"max_batches={args.batches}",
        "warm_start.steps=0",  # done once, below, for both
        f"seed={args.seed}",
        f"policy.lora_rank={args.rank}",
        "policy.train_unembed=false",  # what SkyRL trains, and what the local backend's LoRA adapts
        "kl_penalty_coef=0",  # SkyRL 0.4.0 cannot score a KL reference beside training (see the proxy)
        "save_every=0",
        *([f"agent={args.agent}"] if args.agent else []),
        *args.overrides,
    ]
    with tiny_model_dir(root, seed=args.seed) as tiny:
        model = await warmed_up(tiny, root / "warm-model", args.seed)
    with SkyrlServer(model, root / "server") as server:
        rows = [
            await run("local", [*common, f"policy.model_path={model}"], root / "local"),
            await run(
                "tinker (SkyRL)",
                [*common, "policy.backend=tinker", f"policy.base_url={server.url}", f"policy.base_model={model}"],
                root / "tinker",
            ),
        ]
    print(f"runs kept in {root}")
    print(HEADER)
    print("\n".join(rows))


if __name__ == "__main__":
    asyncio.run(main())
