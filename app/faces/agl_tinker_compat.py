"""The original example's training entry points (``agl_tinker.train``/``agl_tinker.llm``) on this project.

``Config`` takes the original's keyword arguments and returns a ``TrainConfig``; ``main`` trains it
like the original's ``main`` (store at ``store_address``, runners elsewhere); ``create_llm_proxy``
returns this project's policy endpoint and ``TinkerLLM`` is its LiteLLM provider. With
``app.faces.agl_algorithm.Tinker`` the original ``hello.py`` runs after changing its imports only.

What does not map, and what happens instead:

* ``model_name`` names a model on the Tinker service. Without ``TINKER_API_KEY`` (or ``base_url``)
  in reach, ``backend`` defaults to ``local``: the tiny offline model (or ``policy.model_path``
  given in ``overrides``) trains instead, with a warning naming ``model_name``.
* ``lora_rank`` defaults to 32 on Tinker and to 0 (all weights) locally.
* In-memory ``train_dataset``/``val_dataset`` of the builder are written to
  ``log_path/tasks/{train,test}.jsonl`` (a ``TrainConfig`` names task files), so a rerun resumes on
  the same tasks; each task stays the JSON value it was (``"007"`` stays a string).
* ``shuffle=False``, ``compute_post_kl``, ``enable_trace`` and ``llm_proxy_retry_attempts`` are
  ignored with a warning; ``load_checkpoint_path`` is refused (a run resumes from its own
  ``log_path``). ``adapter_agent_match`` becomes ``agent_match`` (only the calls of matching agents
  train, whichever the trajectory source). ``adapter_from_llm_proxy`` selects the
  ``trajectory_source``: unset or ``True`` uses what the endpoint recorded it served (this project's
  default: any client, helper LLMs never trained); an explicit ``False`` reads the agent's
  client-side spans as the original's default did.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from agentlightning import InMemoryLightningStore, LightningStore
from returns.result import Failure
from tinker_cookbook.renderers import get_renderer
from tinker_cookbook.tokenizer_utils import get_tokenizer

from adapters.cookbook.env import AGLDatasetBuilder
from adapters.endpoint.policy_endpoint import EndpointConfig, PolicyEndpoint
from adapters.endpoint.provider import PolicyProvider
from app.config import DEMO, TrainConfig, load_config
from app.launch import LaunchError, train
from app.usecases.steps import TrainingSummary
from ports.policy import Sampler

__all__ = ["Config", "TinkerLLM", "create_llm_proxy", "main"]

logger = logging.getLogger(__name__)

TinkerLLM = PolicyProvider
"""The LiteLLM provider serving the policy (the original's ``TinkerLLM``; its constructor differs)."""


def Config(  # the original class name, so that its scripts run unchanged
    *,
    learning_rate: float,
    dataset_builder: AGLDatasetBuilder[Any],
    model_name: str,
    renderer_name: str,
    log_path: str,
    compute_post_kl: bool = False,
    lora_rank: int | None = None,
    llm_proxy_port: int | None = None,
    kl_penalty_coef: float = 0.0,
    kl_discount_factor: float = 0.0,
    max_tokens: int = 2048,
    train_temperature: float = 1.0,
    eval_temperature: float = 1.0,
    top_k: int = -1,
    top_p: float = 1.0,
    store_address: str = "http://localhost:4747",
    adapter_from_llm_proxy: bool | None = None,
    adapter_agent_match: str | None = None,
    llm_proxy_retry_attempts: int = 0,
    concurrency: int = 16,
    loss_fn: Literal["importance_sampling", "ppo", "cispo"] = "importance_sampling",
    num_substeps: int = 1,
    wandb_project: str | None = None,
    wandb_name: str | None = None,
    base_url: str | None = None,
    enable_trace: bool = False,
    remove_constant_reward_groups: bool = False,
    eval_every: int = 20,
    save_every: int = 20,
    load_checkpoint_path: str | None = None,
    backend: Literal["local", "tinker"] | None = None,
    overrides: Sequence[str] = (),
) -> TrainConfig:
    """A ``TrainConfig`` from the original ``Config``'s arguments (defaults as the original's).

    ``backend`` and ``overrides`` (``key=value`` settings of ``TrainConfig``, applied last) are new.
    Raises ``ValueError`` with one line when an argument cannot be honoured.
    """
    if load_checkpoint_path is not None:
        raise ValueError("load_checkpoint_path is not supported: a run resumes from the checkpoints in its log_path")
    for name, value in [
        ("compute_post_kl", compute_post_kl),
        ("enable_trace", enable_trace),
        ("llm_proxy_retry_attempts", llm_proxy_retry_attempts),
    ]:
        if value:
            logger.warning("%s=%s is ignored by agl-tinker", name, value)
    log_path = os.path.expanduser(log_path)
    if backend is None:
        backend = "tinker" if base_url or os.environ.get("TINKER_API_KEY") else "local"
    policy: dict[str, object] = {"backend": backend, "renderer_name": renderer_name, "base_url": base_url}
    if backend == "tinker":
        policy.update(base_model=model_name, lora_rank=32 if lora_rank is None else lora_rank)
    else:
        policy.update(lora_rank=lora_rank or 0)
        if not any(o.startswith("policy.model_path=") for o in overrides):
            logger.warning("no Tinker service configured: training the tiny offline model, not %s", model_name)
    settings: dict[str, object] = {
        "log_path": log_path,
        "learning_rate": learning_rate,
        "max_tokens": max_tokens,
        "train_temperature": train_temperature,
        "eval_temperature": eval_temperature,
        "top_k": top_k,
        "top_p": top_p,
        "kl_penalty_coef": kl_penalty_coef,
        "kl_discount_factor": kl_discount_factor,
        "loss_fn": loss_fn,
        "num_substeps": num_substeps,
        "concurrency": concurrency,
        "remove_constant_reward_groups": remove_constant_reward_groups,
        "eval_every": eval_every,
        "save_every": save_every,
        "wandb_project": wandb_project,
        "wandb_name": wandb_name,
        "store_url": store_address,
        "n_runners": 0,
        "endpoint_port": llm_proxy_port,
        "trajectory_source": "client" if adapter_from_llm_proxy is False else "endpoint",
        "agent_match": adapter_agent_match,
        **_dataset_settings(dataset_builder, Path(log_path)),
    }
    pairs = [f"{key}={json.dumps(value)}" for key, value in settings.items()]
    pairs += [f"policy.{key}={json.dumps(value)}" for key, value in policy.items()]
    loaded = load_config(None, [*pairs, *overrides])
    if isinstance(loaded, Failure):
        raise ValueError(str(loaded.failure()))
    config: TrainConfig = loaded.unwrap()
    return config


def _dataset_settings(builder: AGLDatasetBuilder[Any], log_path: Path) -> dict[str, object]:
    """Batching from the builder; its task lists become task files, its split a ``test_split``."""
    if not builder.shuffle:
        logger.warning("shuffle=False is ignored: batches are shuffled per epoch (seeded)")
    settings: dict[str, object] = {
        "batch_size": builder.batch_size,
        "group_size": builder.group_size,
        "n_epochs": builder.n_epochs,
        "seed": builder.seed,
    }
    if builder.train_file is not None:
        settings["tasks"] = builder.train_file
    elif builder.train_dataset is not None:
        settings["tasks"] = _write_tasks(builder.train_dataset, log_path / "tasks" / "train.jsonl")
    else:
        settings["tasks"] = str(log_path / "tasks" / "train.jsonl")  # none: agl.Trainer.fit brings them
    if builder.val_file is not None:
        settings["test_tasks"] = builder.val_file
    elif builder.val_dataset is not None:
        settings["test_tasks"] = _write_tasks(builder.val_dataset, log_path / "tasks" / "test.jsonl")
    else:
        settings["test_split"] = 1 - builder.train_val_split
    return settings


def _write_tasks(tasks: Sequence[Any], path: Path) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        lines = [json.dumps(task) for task in tasks]
    except TypeError as error:
        raise ValueError(f"tasks must be JSON values to be written to {path}: {error}") from error
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


async def main(config: TrainConfig) -> TrainingSummary:
    """Train ``config`` (the original's ``main``): by default on the store at ``store_address``,
    whose runners were started elsewhere (``agl-tinker runner``, or an ``agl.Trainer`` in role runner).
    """
    if config.tasks != DEMO and not Path(config.tasks).is_file():
        raise LaunchError(
            f"no training tasks at {config.tasks}: give AGLDatasetBuilder train_dataset= or train_file=, "
            "or pass them to agl.Trainer(algorithm=Tinker(config)).fit"
        )
    return await train(config)


def create_llm_proxy(
    model_name: str,
    renderer_name: str,
    port: int = 1899,
    store: LightningStore | None = None,
    add_return_token_ids: bool = True,
    *,
    sampler: Sampler | None = None,
    host: str = "127.0.0.1",
) -> PolicyEndpoint:
    """This project's endpoint in place of the original's ``LLMProxy`` (not started: ``async with`` it).

    ``model_name`` must be a tokenizer found offline (a model directory); agents pass it as
    ``model``. Token ids are always returned, whatever ``add_return_token_ids`` says. It serves
    ``sampler`` (``await trainer.sampler(name)`` of a backend), or answers errors until
    ``set_sampler`` is called.
    """
    if not add_return_token_ids:
        logger.warning("add_return_token_ids=False is ignored: the endpoint always returns token ids")
    renderer = get_renderer(renderer_name, get_tokenizer(model_name))
    return PolicyEndpoint(
        store if store is not None else InMemoryLightningStore(thread_safe=True),
        renderer,
        EndpointConfig(model_name=model_name, host=host, port=port),
        sampler=sampler,
    )
