"""The agent-facing endpoint: an OpenAI-compatible chat API over the current policy.

Two servers answer the same API. ``server="lean"`` (the default) is a small Starlette app served
on the event loop that owns the samplers (``adapters.endpoint.server``); ``server="litellm"`` is
Agent-lightning's LiteLLM-based ``LLMProxy`` in a thread, whose per-request overhead is about
three times higher. Agents call ``llm.endpoint`` with any OpenAI-compatible client (streaming
too: one completion is served as a stream); each call under a rollout's URL is attributed to
that rollout and the provider (``adapters.endpoint.provider``) samples from the current policy,
extends the rollout's earlier turns token for token, and records every completion it served in
the store (``adapters.endpoint.capture``).
After each train step ``set_sampler`` swaps the weights for the next request, so the server,
its port and the running agents never restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import ipaddress
import logging
import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Literal

from agentlightning import LLM, LightningStore, LLMProxy, ProxyLLM
from agentlightning.utils.server_launcher import PythonServerLauncherArgs
from litellm.proxy.shutdown.graceful_shutdown_manager import GracefulShutdownManager
from tinker_cookbook import renderers

from adapters.endpoint.provider import LoopBridge, PolicyProvider, PolicySnapshot
from adapters.endpoint.server import (
    LeanServer,
    MasterKeyAuth,
    RefuseResponses,
    RequestFailures,
    ServerStartError,
    _required_key_env,
    build_app,
)
from adapters.endpoint.span_log import RolloutGate, SpanRecorder
from domain.sampling import SamplingDefaults
from ports.policy import Sampler

logger = logging.getLogger(__name__)

MASTER_KEY_ENV = "AGL_TINKER_MASTER_KEY"
"""Environment variable holding the proxy's master key when it binds a non-loopback host."""


class EndpointError(RuntimeError):
    """The endpoint cannot start as configured."""


class MasterKeyRequired(EndpointError):
    """A non-loopback bind was asked for without a master key in the environment."""


def is_loopback(host: str) -> bool:
    """Whether only this machine can reach ``host``."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True, slots=True)
class EndpointConfig:
    """How the endpoint is served. Loopback by default: the proxy otherwise binds 0.0.0.0."""

    model_name: str = "policy"
    """The ``model`` agents pass; the resource carries it."""
    host: str = "127.0.0.1"
    port: int | None = None
    """None picks a free port."""
    defaults: SamplingDefaults = field(default_factory=SamplingDefaults)
    request_timeout_s: float = 300.0
    """Upper bound on one sampler call before the request fails with a timeout."""
    provider_name: str = "agl-tinker-policy"
    """LiteLLM provider name the model list routes to."""
    master_key_env: str = MASTER_KEY_ENV
    lean_spans: bool = True
    """Skip LiteLLM's own OpenTelemetry spans (the client-side span keeps ids and logprobs)."""
    startup_timeout_s: float = 60.0
    quiet: bool = True
    """Keep LiteLLM's start-up banner off stdout and the server's request logs below warnings."""
    server: Literal["lean", "litellm"] = "lean"
    """``lean``: the Starlette server on the owner loop; ``litellm``: Agent-lightning's ``LLMProxy``."""
    eval_temperature: float | None = None
    """Default temperature of evaluation requests (1.x agents' ``mode/val`` URLs); None: the current default."""
    require_key: bool = False
    """Require the key in ``master_key_env`` on loopback too (agents of a 1.x server send its key)."""


__all__ = ["EndpointConfig", "EndpointError", "MasterKeyAuth", "MasterKeyRequired", "PolicyEndpoint", "is_loopback"]


def _litellm_config(config: EndpointConfig) -> dict[str, object]:
    """LiteLLM settings; the weak-key waiver is only ever granted on loopback."""
    if is_loopback(config.host):
        general: dict[str, object] = {"dangerously_permit_weak_or_unset_master_key": True}
    else:
        key = os.environ.get(config.master_key_env, "")
        if not key:
            raise MasterKeyRequired(
                f"binding {config.host} exposes the policy beyond this machine: set {config.master_key_env} "
                "to a master key (agents then pass it as their API key), or bind 127.0.0.1"
            )
        # A reference, not the key: LiteLLM's config goes to a temporary YAML file on disk.
        general = {"master_key": f"os.environ/{config.master_key_env}"}
    return {"general_settings": general, "litellm_settings": {"drop_params": True}}


def _access_host(host: str) -> str:
    if host in ("0.0.0.0", "::"):
        # Same choice as Agent-lightning's server launcher (its helper is private).
        with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("8.8.8.8", 80))
            return str(probe.getsockname()[0])
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host


class PolicyEndpoint:
    """Owns the server (lean or ``LLMProxy``) and the provider; the training loop swaps samplers through it.

    Start it from the event loop that owns the samplers: the lean server runs on that loop, and
    requests arriving on the LiteLLM proxy's own loop (a thread) are run on it, so a sampler
    never sees a foreign loop.
    """

    def __init__(
        self,
        store: LightningStore | SpanRecorder,
        renderer: renderers.Renderer,
        config: EndpointConfig | None = None,
        sampler: Sampler | None = None,
        gate: RolloutGate | None = None,
    ) -> None:
        """``store`` records what is served (a 0.x store, or a ``SpanLog`` for a store without spans); ``gate``
        says which rollouts are served (``None``: any)."""
        self._config = config or EndpointConfig()
        self._litellm_config = _litellm_config(self._config)
        self._store = store
        self._gate = gate
        self._provider = PolicyProvider(
            renderer,
            PolicySnapshot(sampler=sampler, defaults=self._config.defaults, version=0),
            request_timeout_s=self._config.request_timeout_s,
            recorder=store.add_span,
            sequence_ids=store.get_next_span_sequence_id,
            eval_temperature=self._config.eval_temperature,
        )
        self._proxy: LLMProxy | None = None
        self._lean: LeanServer | None = None
        self._failures = RequestFailures()

    @property
    def config(self) -> EndpointConfig:
        return self._config

    @property
    def policy_version(self) -> int:
        """How many times ``set_sampler`` ran; responses carry it as ``system_fingerprint``."""
        return self._provider.snapshot.version

    @property
    def sampling_defaults(self) -> SamplingDefaults:
        return self._provider.snapshot.defaults

    @property
    def is_running(self) -> bool:
        if self._lean is not None:
            return self._lean.is_running()
        return self._proxy is not None and self._proxy.is_running()

    @property
    def endpoint(self) -> str:
        """Base URL of the OpenAI-compatible API (ends in ``/v1``)."""
        return f"{self._access_endpoint()}/v1"

    def set_sampler(self, sampler: Sampler) -> int:
        """Serve new weights from the next request on; in-flight requests finish on the old ones."""
        return self._provider.set_sampler(sampler)

    def seed_rollouts(self, seeds: Mapping[str, int]) -> None:
        """Sample each of these rollouts (id -> seed) from its own seed, whatever order its requests arrive in."""
        self._provider.seed_rollouts(seeds)

    def forget(self, rollout_ids: Sequence[str]) -> None:
        """Drop what the endpoint holds for these finished rollouts (their served turns and seeds)."""
        self._provider.forget(rollout_ids)

    @property
    def rollouts_held(self) -> int:
        """Rollouts whose served turns the endpoint holds."""
        return self._provider.rollouts_held

    def take_metrics(self) -> dict[str, float]:
        """Counts since the last call: completions recorded, how prompts were built, errors answered by status."""
        counts = {**self._provider.take_counters(), **self._failures.take_counts()}
        return {f"endpoint/{k}": float(v) for k, v in counts.items()}

    def backend_failure(self) -> str | None:
        """Why requests fail: the policy backend's failure on the latest request that reached it, if it
        failed; otherwise the error the lean server answered most often (``404 on POST .../responses``),
        if it answered any."""
        return self._provider.last_failure or self._failures.most_common()

    def set_sampling_defaults(self, defaults: SamplingDefaults) -> SamplingDefaults:
        """Replace the defaults (e.g. a greedy eval); returns the previous ones to restore later."""
        previous = self._provider.snapshot.defaults
        self._provider.set_defaults(defaults)
        return previous

    def set_temperature(self, temperature: float) -> SamplingDefaults:
        """Shortcut for ``set_sampling_defaults`` changing only the default temperature."""
        previous = self._provider.snapshot.defaults
        self._provider.set_defaults(previous.with_temperature(temperature))
        return previous

    async def start(self) -> None:
        """Start the configured server bound to ``config.host``."""
        if self.is_running:
            return
        if self._config.server == "lean":
            await self._start_lean()
        else:
            await self._start_litellm()
        logger.info("policy endpoint serving %r at %s", self._config.model_name, self.endpoint)

    async def _start_lean(self) -> None:
        config = self._config
        self._provider.bind_loop(None)  # served on this loop: samplers are called directly
        key_envs = [] if is_loopback(config.host) and not config.require_key else [config.master_key_env]
        if key_envs and not os.environ.get(config.master_key_env):
            raise MasterKeyRequired(f"the policy endpoint requires a key: set {config.master_key_env}")
        app = MasterKeyAuth(
            build_app(self._provider, self._store, config.model_name, self._failures, self._gate), key_envs
        )
        server = LeanServer(app, config.host, config.port, startup_timeout_s=config.startup_timeout_s)
        try:
            await server.start()
        except ServerStartError as error:
            raise EndpointError(f"the policy endpoint cannot start: {error}") from error
        self._lean = server

    async def _start_litellm(self) -> None:
        """Register the provider and start the proxy (thread mode)."""
        if not isinstance(self._store, LightningStore) or not self._store.capabilities.get("thread_safe", False):
            raise EndpointError("the proxy serves from a thread: use InMemoryLightningStore(thread_safe=True)")
        config = self._config
        self._provider.bind_loop(LoopBridge(asyncio.get_running_loop()))
        self._provider.register(config.provider_name)
        proxy = LLMProxy(
            model_list=[
                {
                    "model_name": config.model_name,
                    "litellm_params": {"model": f"{config.provider_name}/{config.model_name}"},
                }
            ],
            store=self._store,
            litellm_config=dict(self._litellm_config),
            launcher_args=PythonServerLauncherArgs(
                host=config.host,
                port=config.port,
                launch_mode="thread",
                # /health would sample from the policy (and needs the key); liveliness does neither.
                healthcheck_url="/health/liveliness",
                startup_timeout=config.startup_timeout_s,
                log_level=logging.WARNING if config.quiet else logging.INFO,
            ),
            callbacks=["return_token_ids"] if config.lean_spans else None,
            middlewares=["rollout_attempt", "stream_conversion", MasterKeyAuth, RefuseResponses],
        )
        # A stopped proxy leaves LiteLLM's process-wide shutdown flag set, and the liveliness probe
        # of the next proxy in this process would then answer 503 until the startup timeout.
        GracefulShutdownManager.reset()
        _required_key_env[:] = [] if is_loopback(config.host) else [config.master_key_env]
        try:
            with contextlib.redirect_stdout(io.StringIO()) if config.quiet else contextlib.nullcontext():
                await proxy.start()
        except BaseException:
            self._provider.unregister(config.provider_name)
            raise
        self._proxy = proxy

    async def stop(self) -> None:
        lean, self._lean = self._lean, None
        if lean is not None:
            await lean.stop()
            return
        proxy, self._proxy = self._proxy, None
        if proxy is not None and proxy.is_running():
            await proxy.stop()
        self._provider.unregister(self._config.provider_name)
        self._provider.bind_loop(None)
        _required_key_env.clear()

    def as_resource(self) -> LLM:
        """The resource to register (``store.add_resources({"main_llm": ...})``).

        It is a ``ProxyLLM``: each rollout reads an endpoint with its rollout and attempt ids,
        which is how the proxy attributes calls. It carries no API key: off-loopback agents read
        the master key from their own environment.
        """
        defaults = self._provider.snapshot.defaults
        # The form LLMProxy.as_resource gives: no /v1, so get_base_url(rid, aid) adds none either.
        return ProxyLLM(
            endpoint=self._access_endpoint(),
            model=self._config.model_name,
            sampling_parameters={"temperature": defaults.temperature, "top_p": defaults.top_p},
        )

    def _access_endpoint(self) -> str:
        """``http://host:port`` as clients reach it (a bind to all interfaces is reached by this machine's address)."""
        if self._lean is not None:
            return f"http://{_access_host(self._config.host)}:{self._lean.port}"
        if self._proxy is None:
            raise EndpointError("the endpoint is not started")
        return str(self._proxy.server_launcher.access_endpoint)

    async def __aenter__(self) -> PolicyEndpoint:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()
