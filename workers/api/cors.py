"""Which web pages may call the server from a browser (CORS), and request bodies read as JSON whatever their type.

**CORS.** A page served from another origin (LangChain's Agent Chat UI on ``http://localhost:3000`` with the
server as its Deployment URL) reads the API only when the server allows its origin: the browser asks first with a
preflight ``OPTIONS`` and reads no answer without ``Access-Control-Allow-Origin``. ``api.cors_origins`` lists the
allowed origins (``*`` for any, with ``api.auth: bearer``/``jwt`` only); unset, only loopback origins
(``http(s)://localhost``, ``127.x.x.x``, ``[::1]``, any port) are, so a page elsewhere cannot drive a local server.
The same list decides which ``Origin`` may write to an ``api.auth: none`` server (``workers/api/loopback.py``:
loopback origins always may). The middleware sits outside the API guard: a preflight carries no token, and a
refusal (401, 403, 413) reaches the page with the headers it needs to be read. Exposed to the page's script:
``Content-Location`` (``langgraph-sdk`` reads the run id from it), ``Location``, and the pagination headers.

**JSON bodies.** ``langgraph-sdk`` sends ``Content-Type: application/json``, but a proxy may not: Agent Chat UI's
own ``/api`` passthrough forwards the body as a bare string, which ``fetch`` labels ``text/plain`` (or not at all).
LangGraph's server parses such a body as JSON anyway, and so does this one: a write whose type is neither a form nor
multipart (uploads) is relabelled ``application/json`` before the routes read it. The body cap still applies
(``api.max_body_bytes``, 413), and a body that is not JSON is still a 422. Relabelling opens no cross-site write:
``api.auth: none`` refuses writes from an origin it does not allow, and a token is needed otherwise.
"""

from __future__ import annotations

from fastapi import FastAPI
from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

from workers.api.loopback import SAFE_METHODS, loopback_origin
from workers.api_settings import ApiSettings

EXPOSED_HEADERS = ("Content-Location", "Location", "X-Pagination-Total", "X-Pagination-Next")
_FORM_TYPES = (b"multipart/", b"application/x-www-form-urlencoded")
_JSON = b"application/json"


class OriginPolicy:
    """The origins ``api.cors_origins`` allows (unset: the loopback ones)."""

    def __init__(self, settings: ApiSettings) -> None:
        configured = settings.cors_origins
        self._any = configured is not None and "*" in configured
        self._listed = frozenset(configured or ())
        self._loopback_default = configured is None

    def allows(self, origin: str) -> bool:
        text = origin.strip().rstrip("/").lower()
        return self._any or text in self._listed or (self._loopback_default and loopback_origin(text))

    def may_write(self, origin: str) -> bool:
        """An ``api.auth: none`` server takes writes from loopback origins and from the allowed ones."""
        return loopback_origin(origin) or self.allows(origin)


class _PolicyCors(CORSMiddleware):
    """Starlette's CORS handling with the origin decided by an :class:`OriginPolicy`."""

    def __init__(self, app: ASGIApp, *, policy: OriginPolicy) -> None:
        super().__init__(
            app, allow_origins=(), allow_methods=("*",), allow_headers=("*",), expose_headers=EXPOSED_HEADERS
        )
        self._policy = policy

    def is_allowed_origin(self, origin: str) -> bool:
        return self._policy.allows(origin)


class JsonBodies:
    """ASGI middleware: a write's body is JSON unless it says it is a form or multipart."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] not in SAFE_METHODS:
            headers = [(name, value) for name, value in scope["headers"] if name != b"content-type"]
            declared = next((value for name, value in scope["headers"] if name == b"content-type"), b"")
            kind = declared.split(b";")[0].strip().lower()
            if not (kind.startswith(_FORM_TYPES) or kind == _JSON or kind.endswith(b"+json")):
                scope = {**scope, "headers": [*headers, (b"content-type", _JSON)]}
        await self._app(scope, receive, send)


def install(app: FastAPI, policy: OriginPolicy) -> None:
    """Mount both, outside the API guard (call after ``install_api_guard``: the last mounted runs first)."""
    app.add_middleware(JsonBodies)
    app.add_middleware(_PolicyCors, policy=policy)
