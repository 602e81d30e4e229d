"""A scripted OpenAI-compatible chat server on 127.0.0.1, for running agents offline.

Each ``POST /v1/chat/completions`` gets the next reply of the script: a
string is a final answer, a list of ``(tool_name, arguments)`` pairs is one
assistant message with that many parallel tool calls. Streaming (SSE) and
plain JSON answers are both supported; every other path answers 404, which
is what an agent's model-metadata probes get from a server that has none.

    with ScriptedOpenAI([[("web_search", {"query": "a"})], "done"]) as llm:
        llm.base_url        # http://127.0.0.1:<port>/v1
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

Reply = str | Sequence[tuple[str, dict[str, Any]]]


def _assistant(reply: Reply, number: int) -> tuple[dict[str, Any], str]:
    if isinstance(reply, str):
        return {"role": "assistant", "content": reply}, "stop"
    calls = [
        {
            "id": f"call_{number}_{index}",
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)},
        }
        for index, (name, arguments) in enumerate(reply)
    ]
    return {"role": "assistant", "content": None, "tool_calls": calls}, "tool_calls"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the example prints its own transcript."""

    def _json(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._json(404, {"error": "not found"})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        if not self.path.endswith("/chat/completions"):
            self._json(404, {"error": "not found"})
            return
        number, reply = self.server.next_reply()
        message, finish = _assistant(reply, number)
        base = {"id": f"chatcmpl-{number}", "created": int(time.time()), "model": body.get("model")}
        usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        if not body.get("stream"):
            choice = {"index": 0, "message": message, "finish_reason": finish}
            self._json(
                200, {**base, "object": "chat.completion", "choices": [choice], "usage": usage}
            )
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()

        def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> None:
            choice = {"index": 0, "delta": delta, "finish_reason": finish_reason}
            event = {**base, "object": "chat.completion.chunk", "choices": [choice]}
            if finish_reason is not None:
                event["usage"] = usage
            self.wfile.write(b"data: " + json.dumps(event).encode() + b"\n\n")

        chunk({"role": "assistant", "content": ""})
        for index, call in enumerate(message.get("tool_calls") or []):
            chunk({"tool_calls": [{"index": index, **call}]})
        if message.get("content"):
            chunk({"content": message["content"]})
        chunk({}, finish_reason=finish)
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, script: Sequence[Reply]) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.script = list(script)
        self.lock = threading.Lock()
        self.served = 0

    def next_reply(self) -> tuple[int, Reply]:
        with self.lock:
            number = self.served
            self.served += 1
        if number < len(self.script):
            return number, self.script[number]
        return number, "(the script has no more replies)"


class ScriptedOpenAI:
    """The server, as a context manager; ``base_url`` ends in ``/v1``."""

    def __init__(self, script: Sequence[Reply]) -> None:
        self._server = _Server(script)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> ScriptedOpenAI:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
