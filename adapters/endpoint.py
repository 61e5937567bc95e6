"""The agent-facing endpoint: an OpenAI-compatible chat API served by Agent-lightning's LLMProxy.

Agents call ``llm.endpoint`` with any OpenAI-compatible client (streaming too: the proxy's
middleware serves a stream from one completion); the proxy attributes each call to its rollout
and the provider (``adapters.endpoint_provider``) samples from the current policy, extends the
rollout's earlier turns token for token, and records every completion it served in the store
(``adapters.endpoint_capture``).
After each train step ``set_sampler`` swaps the weights for the next request, so the proxy,
its port and the running agents never restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import io
import ipaddress
import logging
import os
from dataclasses import dataclass, field
from types import TracebackType

from agentlightning import LLM, LightningStore, LLMProxy
from agentlightning.utils.server_launcher import PythonServerLauncherArgs
from litellm.proxy.shutdown.graceful_shutdown_manager import GracefulShutdownManager
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send
from tinker_cookbook import renderers

from adapters.endpoint_provider import LoopBridge, PolicyProvider, PolicySnapshot
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


_required_key_env: list[str] = []
"""The environment variable holding the key the running endpoint requires (empty: none required)."""


class MasterKeyAuth:
    """Answers 401 to a request without the endpoint's key, before LiteLLM (which answers 500/400).

    LiteLLM serves one FastAPI app per process, so this is installed once and reads which key is
    required, if any, from ``_required_key_env``; the key itself stays in the environment. A plain
    ASGI middleware, so that it costs next to nothing on the loopback path where no key is required.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and _required_key_env and not scope["path"].startswith("/health/liveliness"):
            expected = os.environ.get(_required_key_env[0], "")
            headers = dict(scope["headers"])
            supplied = headers.get(b"authorization", b"").decode("latin-1").removeprefix("Bearer ").strip()
            supplied = supplied or headers.get(b"x-api-key", b"").decode("latin-1")
            if not expected or not hmac.compare_digest(supplied.encode(), expected.encode()):
                response = JSONResponse(
                    {"error": {"message": "missing or wrong API key", "type": "authentication_error", "code": "401"}},
                    status_code=401,
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


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


class PolicyEndpoint:
    """Owns the ``LLMProxy`` and the provider; the training loop swaps samplers through it.

    Start it from the event loop that owns the samplers: requests arriving on the proxy's own
    loop (a thread) are run on that loop, so a sampler never sees a foreign loop.
    """

    def __init__(
        self,
        store: LightningStore,
        renderer: renderers.Renderer,
        config: EndpointConfig | None = None,
        sampler: Sampler | None = None,
    ) -> None:
        self._config = config or EndpointConfig()
        self._litellm_config = _litellm_config(self._config)
        self._store = store
        self._provider = PolicyProvider(
            renderer,
            PolicySnapshot(sampler=sampler, defaults=self._config.defaults, version=0),
            request_timeout_s=self._config.request_timeout_s,
            recorder=store.add_span,
        )
        self._proxy: LLMProxy | None = None

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
        return self._proxy is not None and self._proxy.is_running()

    @property
    def endpoint(self) -> str:
        """Base URL of the OpenAI-compatible API (ends in ``/v1``)."""
        return f"{self._running_proxy().server_launcher.access_endpoint}/v1"

    def set_sampler(self, sampler: Sampler) -> int:
        """Serve new weights from the next request on; in-flight requests finish on the old ones."""
        return self._provider.set_sampler(sampler)

    def take_metrics(self) -> dict[str, float]:
        """Counts since the last call: completions recorded per rollout, and how each turn's prompt was built."""
        return {f"endpoint/{k}": float(v) for k, v in self._provider.take_counters().items()}

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
        """Register the provider and start the proxy (thread mode) bound to ``config.host``."""
        if self.is_running:
            return
        if not self._store.capabilities.get("thread_safe", False):
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
            middlewares=["rollout_attempt", "stream_conversion", MasterKeyAuth],
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
        logger.info("policy endpoint serving %r at %s", config.model_name, self.endpoint)

    async def stop(self) -> None:
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
        return self._running_proxy().as_resource(
            model=self._config.model_name,
            sampling_parameters={"temperature": defaults.temperature, "top_p": defaults.top_p},
        )

    def _running_proxy(self) -> LLMProxy:
        if self._proxy is None:
            raise EndpointError("the endpoint is not started")
        return self._proxy

    async def __aenter__(self) -> PolicyEndpoint:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()
