"""An untrained helper or judge on a vLLM-style server, on a free loopback port: it always gives one reply,
with token ids beyond the policy's vocabulary, and keeps the requests it got."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class VllmStyleServer:
    def __init__(self, model: str, content: str, token_ids: Sequence[int], tokens: Sequence[str]) -> None:
        self.requests: list[dict[str, Any]] = []
        served = self
        reply = {
            "id": f"chatcmpl-{model}",
            "object": "chat.completion",
            "model": model,
            "prompt_token_ids": [900_000, 900_001],
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": content},
                    "token_ids": list(token_ids),
                    "logprobs": {"content": [{"token": t, "logprob": -0.5, "top_logprobs": []} for t in tokens]},
                }
            ],
            "usage": {"prompt_tokens": 2, "completion_tokens": len(token_ids), "total_tokens": 2 + len(token_ids)},
        }

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                served.requests.append(json.loads(self.rfile.read(int(self.headers.get("content-length", 0)))))
                body = json.dumps({**reply, "created": int(time.time())}).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    @contextmanager
    def serving(self) -> Iterator[VllmStyleServer]:
        thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self.server.shutdown()
            self.server.server_close()
