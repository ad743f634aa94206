"""An OpenAI-compatible chat provider for the live-token benchmark: every streamed piece carries the wall-clock
time it was sent, so a client on the same machine knows how long each chunk took to reach it.

``POST /chat/completions`` with ``"stream": true`` answers ``PIECES`` server-sent ``chat.completion.chunk``
events ``PIECE_SECONDS`` apart, each piece's text ``<sent:UNIX_SECONDS> ``, then the finish reason and ``[DONE]``;
without ``stream`` it answers ``"Benchmark"`` in one piece (the title and other single prompts of a run).
Both hartflow (a ``models:`` entry ``langchain_openai:ChatOpenAI``) and the ``langgraph dev`` peer
(``bench/token_peer_graph.py``) call it, so they stream the same provider on the same timings.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PIECES = 40
PIECE_SECONDS = 0.05
_STAMP = re.compile(r"<sent:(\d+\.\d+)>")


def sent_times(text: str) -> list[float]:
    """The send times stamped in a chunk's text, in order."""
    return [float(found) for found in _STAMP.findall(text)]


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    body = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": "bench-timed",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return f"data: {json.dumps(body)}\n\n".encode()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        if not body.get("stream"):
            self._whole()
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(_chunk({"role": "assistant", "content": ""}))
        for index in range(PIECES):
            if index:
                time.sleep(PIECE_SECONDS)
            self.wfile.write(_chunk({"content": f"<sent:{time.time():.6f}> "}))
            self.wfile.flush()
        self.wfile.write(_chunk({}, "stop") + b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True

    def _whole(self) -> None:
        message = {"role": "assistant", "content": "Benchmark"}
        reply = {
            "id": "chatcmpl-bench",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": "bench-timed",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the benchmark prints its own table."""


@contextmanager
def timed_provider() -> Iterator[str]:
    """The provider on a free loopback port; yields its base URL (``…/v1``)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
