"""A scripted policy on an OpenAI-compatible chat server, on a free loopback port.

``reply(request)`` turns each ``POST .../chat/completions`` body into the assistant message to send
back (``content`` and/or ``tool_calls``); the server keeps every request. It lets a test drive a
framework's agent (AutoGen, CrewAI) through a known conversation, where the tiny model would only
ever say nonsense.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Reply = Callable[[dict[str, Any]], dict[str, Any]]


class ScriptedPolicy:
    def __init__(self, reply: Reply) -> None:
        self.requests: list[dict[str, Any]] = []
        served = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
                served.requests.append(body)
                message = {"role": "assistant", "content": None, **reply(body)}
                finish = "tool_calls" if message.get("tool_calls") else "stop"
                payload = {
                    "id": f"chatcmpl-scripted-{len(served.requests)}",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": body.get("model", "policy"),
                    "choices": [{"index": 0, "finish_reason": finish, "message": message}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                }
                data = json.dumps(payload).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    @contextmanager
    def serving(self) -> Iterator[ScriptedPolicy]:
        thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self.server.shutdown()
            self.server.server_close()


def tool_call(name: str, arguments: str, call_id: str = "call_1") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def last_message(request: dict[str, Any]) -> dict[str, Any]:
    messages: list[dict[str, Any]] = request.get("messages") or [{}]
    return messages[-1]


def message_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content or "")
