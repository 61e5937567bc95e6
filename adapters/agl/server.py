"""The store server this project runs: Agent-lightning's ``LightningStoreServer`` with what the project adds.

Every store server the project starts (the embedded one of ``train``, ``agl-tinker store``, the
``store_process=true`` child) is made here, so they answer alike: the token check
(``adapters.agl.auth``, when a token is given), a finished rollout in one request
(``adapters.agl.finish``), a dequeue that waits for a rollout (``adapters.agl.dequeue``),
forgetting trained rollouts (``adapters.agl.forget``) and the lean error middleware
(``adapters.agl.middleware``).
"""

from __future__ import annotations

import asyncio
import logging
import signal
from typing import Any

from agentlightning import LightningStore, LightningStoreServer
from agentlightning.store.client_server import API_V1_AGL_PREFIX

from adapters.agl.auth import protect
from adapters.agl.dequeue import serve_dequeue
from adapters.agl.finish import serve_finish
from adapters.agl.forget import serve_forget
from adapters.agl.middleware import lean_store_server


def project_store_server(store: LightningStore, token: str | None, **server_args: Any) -> LightningStoreServer:
    """``LightningStoreServer(store, **server_args)`` with the project's additions; not started."""
    server = serve_forget(serve_dequeue(serve_finish(lean_store_server(LightningStoreServer(store, **server_args)))))
    return protect(server, token) if token is not None else server


def serve_store_process(host: str, port: int, token: str) -> None:
    """A store process's work (``adapters.agl.store_process``): an in-memory store on ``host:port`` until killed."""
    import agentlightning as agl
    from agentlightning.utils.server_launcher import PythonServerLauncherArgs

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when the store stops
    logging.getLogger("agentlightning").setLevel(logging.WARNING)
    args = PythonServerLauncherArgs(
        host=host,
        port=port,
        launch_mode="asyncio",
        healthcheck_url=API_V1_AGL_PREFIX + "/health",
        log_level=logging.WARNING,
    )
    server = project_store_server(agl.InMemoryLightningStore(), token, launcher_args=args)
    asyncio.run(server.run_forever())
