"""One TLS context per set of settings for the HTTP clients an agent builds in a runner process.

The README's agent builds an ``AsyncOpenAI`` client in every rollout. Each client's httpx transport
builds a fresh ``ssl.SSLContext`` and parses the CA bundle into it (``load_verify_locations``): 30-50 ms
of CPU on the runner's one event loop, for a policy endpoint on plain HTTP that never uses it. With 64
rollouts at once that is 2-3 s of the loop that every rollout waits behind (``bench/README.md``,
bench_latency's quick-start case).

httpx lets clients share a context (``verify=<ssl.SSLContext>``). Here a transport that would build the
default one (``verify=True``, no client certificate) gets one built once, by the library's own function,
per (``trust_env``, ``http1``, ``http2``, and the environment variables the context reads:
``SSL_CERT_FILE``, ``SSL_CERT_DIR``, ``SSLKEYLOGFILE``): the same verification, CA store and ALPN
protocols the client would have had (httpcore sets ALPN on the context per connection, from the
transport's ``http1``/``http2``, so transports that share one set the same list). Transports given their
own context, a path, ``verify=False`` or a certificate are left alone. Covers ``httpx`` and ``httpx2``
(openai >= 3), whichever are installed. ``AGL_TINKER_SHARED_TLS=0`` turns it off.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import os
import ssl
import threading
from collections.abc import Callable
from typing import Any

SWITCH_ENV = "AGL_TINKER_SHARED_TLS"
_ENV_KEYS = ("SSL_CERT_FILE", "SSL_CERT_DIR", "SSLKEYLOGFILE")
_LIBRARIES = ("httpx", "httpx2")
_TRANSPORTS = ("HTTPTransport", "AsyncHTTPTransport")
_MARK = "_agl_tinker_shared_tls"

_contexts: dict[tuple[object, ...], ssl.SSLContext] = {}
_lock = threading.Lock()


def enabled() -> bool:
    """Whether sharing is on (``AGL_TINKER_SHARED_TLS`` unset or anything but ``0``/``false``/``no``/``off``)."""
    return os.environ.get(SWITCH_ENV, "1").strip().lower() not in {"0", "false", "no", "off"}


def share_default_tls_contexts() -> list[str]:
    """Make the installed httpx libraries' transports share their default TLS context; the classes patched.

    Idempotent. A library that is not installed, or whose transport does not look as expected, is skipped.
    """
    if not enabled():
        return []
    patched = []
    for library in _LIBRARIES:
        try:
            module = importlib.import_module(f"{library}._transports.default")
        except ImportError:
            continue
        create = getattr(module, "create_ssl_context", None)
        if create is None:
            continue
        for name in _TRANSPORTS:
            cls = getattr(module, name, None)
            if cls is None or getattr(cls.__init__, _MARK, False):
                continue
            if "verify" not in inspect.signature(cls.__init__).parameters:
                continue
            cls.__init__ = _sharing_init(cls.__init__, create, library)
            patched.append(f"{library}.{name}")
    return patched


def _sharing_init(original: Callable[..., None], create: Callable[..., ssl.SSLContext], library: str) -> Any:
    signature = inspect.signature(original)

    @functools.wraps(original)
    def __init__(self: object, *args: Any, **kwargs: Any) -> None:
        bound = signature.bind(self, *args, **kwargs)
        given = bound.arguments
        if given.get("verify", True) is True and given.get("cert") is None:
            trust_env = given.get("trust_env", True)
            key = (
                library,
                bool(trust_env),
                bool(given.get("http1", True)),
                bool(given.get("http2", False)),
                *(os.environ.get(k) for k in _ENV_KEYS),
            )
            given["verify"] = _context(key, lambda: create(verify=True, cert=None, trust_env=trust_env))
        original(*bound.args, **bound.kwargs)

    setattr(__init__, _MARK, True)
    return __init__


def _context(key: tuple[object, ...], make: Callable[[], ssl.SSLContext]) -> ssl.SSLContext:
    with _lock:
        context = _contexts.get(key)
        if context is None:
            context = _contexts[key] = make()
        return context
