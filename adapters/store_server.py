"""The store server this project runs: Agent-lightning's ``LightningStoreServer`` with what the project adds.

Every store server the project starts (the embedded one of ``train``, ``agl-tinker store``, the
``store_process=true`` child) is made here, so they answer alike: the token check
(``adapters.store_auth``, when a token is given), a finished rollout in one request
(``adapters.store_finish``), forgetting trained rollouts (``adapters.store_forget``) and the lean
error middleware (``adapters.store_middleware``).
"""

from __future__ import annotations

from typing import Any

from agentlightning import LightningStore, LightningStoreServer

from adapters.store_auth import protect
from adapters.store_finish import serve_finish
from adapters.store_forget import serve_forget
from adapters.store_middleware import lean_store_server


def project_store_server(store: LightningStore, token: str | None, **server_args: Any) -> LightningStoreServer:
    """``LightningStoreServer(store, **server_args)`` with the project's additions; not started."""
    server = serve_forget(serve_finish(lean_store_server(LightningStoreServer(store, **server_args))))
    return protect(server, token) if token is not None else server
