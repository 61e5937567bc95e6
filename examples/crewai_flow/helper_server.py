"""A scripted helper model: a tiny OpenAI-compatible chat server with a deterministic reply.

It stands in for the untrained helper model of the CrewAI flow (a vLLM or hosted model in real
use). ``POST /v1/chat/completions`` (or ``/chat/completions``) answers with the first integer in the
last user message, or ``none`` when there is none: a perfect "extract the number" model. Streaming
is not served.

    python examples/crewai_flow/helper_server.py --port 8765     # prints its base URL, serves until Ctrl-C
    HELPER_BASE_URL=http://127.0.0.1:8765/v1 agl-tinker train agent=examples.crewai_flow.agent:crewai_number_flow ...

In Python: ``with HelperServer() as helper: ... helper.url ... helper.requests``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "helper"


def helper_reply(messages: list[dict[str, Any]]) -> str:
    """The first integer in the last user message's text, else ``none``."""
    text = ""
    for message in reversed(messages):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):  # text parts
                content = " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
            text = str(content or "")
            break
    match = re.search(r"-?\d+", text)
    return match.group() if match else "none"


def completion(body: dict[str, Any]) -> dict[str, Any]:
    content = helper_reply(list(body.get("messages") or []))
    return {
        "id": f"chatcmpl-helper-{time.monotonic_ns()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": str(body.get("model") or MODEL),
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


class HelperServer:
    """The helper on ``127.0.0.1:port`` (0: a free port) in a background thread; ``url`` ends in ``/v1``."""

    def __init__(self, port: int = 0) -> None:
        self.requests: list[dict[str, Any]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                try:
                    body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                except json.JSONDecodeError as error:
                    self._send(400, {"error": {"message": f"invalid JSON: {error}"}})
                    return
                server.requests.append(body)
                self._send(200, completion(body))

            def do_GET(self) -> None:
                if self.path.rstrip("/") in ("/v1/models", "/models"):
                    self._send(200, {"object": "list", "data": [{"id": MODEL, "object": "model"}]})
                else:
                    self._send(404, {"error": {"message": f"no route {self.path}"}})

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

        self._http = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._http.daemon_threads = True
        self._thread = threading.Thread(target=self._http.serve_forever, name="helper-server", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._http.server_address[1]}/v1"

    def start(self) -> HelperServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._http.shutdown()
        self._http.server_close()

    def __enter__(self) -> HelperServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description="A scripted OpenAI-compatible helper model.")
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args()
    with HelperServer(args.port) as helper:
        print(f"helper model serving at {helper.url} (Ctrl-C to stop)", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()


if __name__ == "__main__":
    main()
