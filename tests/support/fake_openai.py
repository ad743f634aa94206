"""A fake OpenAI-compatible provider: a real HTTP server on loopback answering ``POST /v1/chat/completions``
from a script, because no real provider is reachable from the tests.

Each request takes the next :class:`Reply` (status, JSON body, headers), so a test scripts tool calls, usage,
``429`` with ``Retry-After``, ``401`` or ``503`` exactly as a provider sends them, and ``ChatOpenAI`` (the real
langchain-openai client over httpx) parses them. Every request is recorded with its headers, body and arrival
time; a request past the end of the script gets a ``500`` naming the fake, so a test that calls more often than
it scripted fails loudly.

A request with ``"stream": true`` gets the same reply as server-sent events, the way OpenAI streams it: the text
in ``Reply.pieces`` (default: word by word), each tool call as deltas (name and id first, the arguments in two
halves), the finish reason, then usage in a last chunk without choices (when ``stream_options.include_usage``),
then ``data: [DONE]``. ``Reply.cut_after`` ends the connection after that many chunks instead: a provider lost
mid-stream. Error replies are sent as they are (the SDK raises on the status before reading a stream).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["FakeOpenAI", "RecordedRequest", "Reply", "completion", "error_reply", "raw_tool_call"]


@dataclass(frozen=True)
class Reply:
    body: dict[str, Any]
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    pieces: list[str] | None = None
    """How a streamed reply's text is split (``None``: word by word)."""
    cut_after: int | None = None
    """A streamed reply's connection ends after this many chunks, without ``[DONE]``."""


def stream_chunks(reply: Reply, include_usage: bool) -> list[dict[str, Any]]:
    """The ``chat.completion.chunk`` objects a streaming provider sends for ``reply``."""
    body = reply.body
    choice = body["choices"][0]
    message = choice["message"]
    head = {"id": body["id"], "object": "chat.completion.chunk", "created": body["created"], "model": body["model"]}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    text = message.get("content") or ""
    pieces = reply.pieces if reply.pieces is not None else re.findall(r"\S+\s*|\s+", text)
    chunks = [chunk({"role": "assistant", "content": ""})]
    chunks += [chunk({"content": piece}) for piece in pieces]
    for index, call in enumerate(message.get("tool_calls") or []):
        arguments = call["function"]["arguments"]
        half = len(arguments) // 2
        start = {"index": index, "id": call["id"], "type": "function", "function": {"name": call["function"]["name"]}}
        chunks.append(chunk({"tool_calls": [{**start, "function": {**start["function"], "arguments": ""}}]}))
        for part in (arguments[:half], arguments[half:]):
            chunks.append(chunk({"tool_calls": [{"index": index, "function": {"arguments": part}}]}))
    chunks.append(chunk({}, choice["finish_reason"]))
    if include_usage and "usage" in body:
        chunks.append({**head, "choices": [], "usage": body["usage"]})
    return chunks


@dataclass(frozen=True)
class RecordedRequest:
    path: str
    headers: dict[str, str]
    """Names lower-cased."""
    body: dict[str, Any]
    received_at: float
    """``time.time()`` when the request arrived."""


def raw_tool_call(name: str, arguments: str, call_id: str) -> dict[str, Any]:
    """One entry of an OpenAI ``message.tool_calls`` list; ``arguments`` is the raw string the provider sends."""
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def completion(
    content: str | None = None,
    *,
    tool_calls: list[dict[str, Any]] | None = None,
    usage: tuple[int, int] | None = None,
    model: str = "fake-model",
) -> Reply:
    """A ``chat.completion`` with one choice."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    body: dict[str, Any] = {
        "id": f"chatcmpl-{time.monotonic_ns()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if tool_calls else "stop"}],
    }
    if usage is not None:
        prompt, completion_tokens = usage
        body["usage"] = {
            "prompt_tokens": prompt,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt + completion_tokens,
        }
    return Reply(body)


def error_reply(status: int, message: str, *, code: str | None = None, headers: dict[str, str] | None = None) -> Reply:
    """An error response shaped as OpenAI sends it (``{"error": {message, type, code}}``)."""
    body = {"error": {"message": message, "type": "fake_provider_error", "param": None, "code": code}}
    return Reply(body, status=status, headers=dict(headers or {}))


class FakeOpenAI:
    """``with FakeOpenAI([...]) as provider:`` serves the script at ``provider.base_url``."""

    def __init__(self, replies: list[Reply] | None = None) -> None:
        self._replies = list(replies or [])
        self._lock = threading.Lock()
        self.requests: list[RecordedRequest] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-openai", daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def __enter__(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def completions(self) -> Iterator[RecordedRequest]:
        return (r for r in self.requests if r.path == "/v1/chat/completions")

    def _next(self, request: RecordedRequest) -> Reply:
        with self._lock:
            self.requests.append(request)
            if not self._replies:
                return error_reply(500, f"fake provider: script exhausted at request #{len(self.requests)}")
            return self._replies.pop(0)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as httpx expects of a real provider

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else {}
                headers = {name.lower(): value for name, value in self.headers.items()}
                recorded = RecordedRequest(self.path, headers, body, time.time())
                if self.path != "/v1/chat/completions":
                    self._send(error_reply(404, f"fake provider: no route {self.path}"))
                    return
                reply = fake._next(recorded)
                if body.get("stream") and reply.status == 200:
                    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
                    self._stream(reply, stream_chunks(reply, include_usage))
                else:
                    self._send(reply)

            def _stream(self, reply: Reply, chunks: list[dict[str, Any]]) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                for index, chunk in enumerate(chunks):
                    if reply.cut_after is not None and index >= reply.cut_after:
                        self.close_connection = True
                        return
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    self.wfile.flush()
                self.wfile.write(b"data: [DONE]\n\n")
                self.close_connection = True

            def _send(self, reply: Reply) -> None:
                data = json.dumps(reply.body).encode()
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # the requests are recorded; stderr stays readable

        return Handler
