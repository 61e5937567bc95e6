"""Train the hello agent the original example's way, on the tiny offline model.

From the repository root, one command (``agl.Trainer`` serves its store, runs two runner
processes, and ``Tinker`` trains with this project's loop)::

    python -m examples.hello.train_hello

or spread out like the original's ``algo``/``runner`` modes (store, runners, trainer)::

    agl-tinker store --port 4747
    python -m examples.hello.run_runners --store http://127.0.0.1:4747 -n 2
    python -m examples.hello.train_hello --store http://127.0.0.1:4747

Only the imports differ from the original ``hello.py``, plus ``backend="local"`` (no Tinker service
here) and a runner that polls every 50 ms instead of Agent-lightning's 5 s.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network at litellm import
os.environ.setdefault("TINKER_TELEMETRY", "0")
os.environ.setdefault("AGENTOPS_LOG_LEVEL", "ERROR")  # no "Session Replay" line per rollout

import agentlightning as agl

from app.config import TrainConfig
from app.faces.agl_algorithm import Tinker
from app.faces.compat import AGLDatasetBuilder, Config, main
from examples.hello.hello import hello


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def hello_config(
    log_path: str, builder: AGLDatasetBuilder[str], store_address: str = "http://localhost:4747"
) -> TrainConfig:
    return Config(
        learning_rate=1e-3,
        dataset_builder=builder,
        renderer_name="qwen3_instruct",
        model_name="Qwen/Qwen3-30B-A3B-Instruct-2507",  # named, not used: the local backend trains the tiny model
        log_path=log_path,
        max_tokens=16,
        eval_every=2,
        backend="local",
        store_address=store_address,  # used by main(); agl.Trainer brings its own store
    )


def oneclick(log_path: str, n_batches: int) -> None:
    config = hello_config(log_path, AGLDatasetBuilder(batch_size=4, group_size=4, seed=42, n_epochs=1))
    trainer = agl.Trainer(
        algorithm=Tinker(config),
        n_runners=2,
        port=free_port(),
        runner=agl.LitAgentRunner(tracer=agl.AgentOpsTracer(), poll_interval=0.05),
    )
    trainer.fit(
        hello,
        train_dataset=[str(i) for i in range(4 * n_batches)],
        val_dataset=[str(i) for i in range(100, 104)],
    )


def algo(log_path: str, n_batches: int, store: str) -> None:
    builder = AGLDatasetBuilder(
        batch_size=4,
        group_size=4,
        seed=42,
        train_dataset=[str(i) for i in range(4 * n_batches)],
        val_dataset=[str(i) for i in range(100, 104)],
    )
    asyncio.run(main(hello_config(log_path, builder, store)))


def cli() -> None:
    parser = argparse.ArgumentParser(description="Train the hello agent (agl.Trainer + Tinker algorithm).")
    parser.add_argument("--batches", type=int, default=4, help="training tasks = 4 x batches")
    parser.add_argument("--log-path", default="runs/hello")
    parser.add_argument("--store", help="train against this store URL, runners started elsewhere")
    args = parser.parse_args()
    if args.store:
        algo(args.log_path, args.batches, args.store)
    else:
        oneclick(args.log_path, args.batches)


if __name__ == "__main__":
    cli()
