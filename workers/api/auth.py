"""Who may call the Agent Server, and how much they may send: the ``api:`` key of ``hartflow.yaml``.

- ``api.auth: none`` — every request acts as the config's ``user_id``. Allowed only on a loopback address:
  ``hartflow serve`` asks :func:`unsafe_bind_problem` and exits 2 when another address would be open to anyone;
  and only for loopback clients naming a loopback ``Host``, with cross-site writes refused (403: see
  ``workers/api/loopback.py`` for why binding loopback alone is not enough). Which web pages may call from a
  browser (CORS, ``api.cors_origins``) and how a body without a JSON type is read: ``workers/api/cors.py``.
- ``api.auth: bearer`` — every request carries ``Authorization: Bearer T`` or the SDK's ``x-api-key: T``, else
  401. ``api.tokens`` lists ``{user_id, token_sha256}``: the server keeps only digests, compares the presented
  token's digest against every one of them in constant time, and the match acts as its ``user_id``.
  ``GET /ok`` (and ``/api/ok``) stays open: a readiness probe carries no token and the route reveals nothing.
- ``api.auth: jwt`` — the same headers carry a JWT from the operator's identity provider, verified against
  ``api.jwt`` (its JWKS URL or key file, issuer, audience, expiry), its ``sub`` (or ``api.jwt.user_claim``) the
  user, or what ``api.auth_hook`` decides: ``workers/api/jwt_auth.py``.
- ``api.max_body_bytes`` caps every request body: a declared ``Content-Length`` over the cap is refused before the
  app runs (413); a chunked body is counted as it is read and refused at the first byte over (413).

:func:`install_api_guard` mounts both checks as one ASGI middleware; :func:`current_user` is the FastAPI
dependency a route uses to learn the caller.
"""

from __future__ import annotations

import hashlib
import hmac

from fastapi import FastAPI, HTTPException, Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from workers.api import cors, loopback
from workers.api.cors import OriginPolicy
from workers.api.jwt_auth import AuthHook, JwtAuthenticator, Refusal, load_auth_hook
from workers.api.loopback import is_loopback
from workers.api_settings import ApiSettings
from workers.config import HartflowConfig

OPEN_PATHS = frozenset({"/ok", "/api/ok"})
_USER_KEY = "hartflow_user_id"
__all__ = ["ApiSettings", "current_user", "install_api_guard", "is_loopback", "unsafe_bind_problem"]


def unsafe_bind_problem(settings: ApiSettings, host: str) -> str | None:
    """Why serving on ``host`` with these settings is refused (the serve command exits 2), or None."""
    if settings.auth == "none" and not is_loopback(host):
        return (
            f"api.auth is 'none', so the server may bind only a loopback address, not {host!r}: "
            "set api.auth: bearer with api.tokens, or serve on 127.0.0.1"
        )
    return None


_MISSING = Refusal(
    401, "missing or unknown API token (send Authorization: Bearer TOKEN or x-api-key)", {"WWW-Authenticate": "Bearer"}
)


class Authenticator:
    """The caller's user id from the request's headers, as ``api.auth`` says, or why it is refused."""

    def __init__(self, settings: ApiSettings, default_user: str) -> None:
        self._open = settings.auth == "none"
        self._default_user = default_user
        self._tokens = [(bytes.fromhex(token.token_sha256), token.user_id) for token in settings.tokens]
        self._jwt: JwtAuthenticator | None = None
        if settings.jwt is not None:
            hook: AuthHook | None = load_auth_hook(settings.auth_hook) if settings.auth_hook else None
            self._jwt = JwtAuthenticator(settings.jwt, hook)

    async def user_for(self, headers: dict[bytes, bytes]) -> str | Refusal:
        if self._open:
            return self._default_user
        token = _presented_token(headers)
        if not token:
            return _MISSING
        if self._jwt is not None:
            text = {name.decode("latin-1"): value.decode("latin-1") for name, value in headers.items()}
            return await self._jwt.user_for(token, text)
        presented = hashlib.sha256(token.encode("utf-8")).digest()
        found: str | None = None
        for digest, user_id in self._tokens:  # no early exit: every digest is compared
            if hmac.compare_digest(presented, digest):
                found = user_id
        return _MISSING if found is None else found


def _presented_token(headers: dict[bytes, bytes]) -> str | None:
    authorization = headers.get(b"authorization", b"").decode("latin-1").strip()
    scheme, _, credentials = authorization.partition(" ")
    if scheme.lower() == "bearer" and credentials.strip():
        return credentials.strip()
    api_key = headers.get(b"x-api-key", b"").decode("latin-1").strip()
    return api_key or None


class ApiGuard:
    """ASGI middleware: with auth none the loopback checks, then the body cap, then the caller's identity (put in
    the request state for current_user)."""

    def __init__(
        self, app: ASGIApp, *, settings: ApiSettings, authenticator: Authenticator, origins: OriginPolicy
    ) -> None:
        self._app = app
        self._origins = origins
        self._max_body = settings.max_body_bytes
        self._loopback_only = settings.auth == "none"
        self._authenticator = authenticator

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        problem = loopback.refusal(scope, headers, self._origins.may_write) if self._loopback_only else None
        if problem is not None:
            await _refuse(Refusal(403, problem), scope, receive, send)
            return
        declared = headers.get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self._max_body):
            status, detail = (413, self._too_large()) if declared.isdigit() else (400, "bad Content-Length header")
            await _refuse(Refusal(status, detail), scope, receive, send)
            return
        if scope["path"] not in OPEN_PATHS:
            user = await self._authenticator.user_for(headers)
            if isinstance(user, Refusal):
                await _refuse(user, scope, receive, send)
                return
            scope.setdefault("state", {})[_USER_KEY] = user
        await self._app(scope, self._capped(receive), send)

    def _too_large(self) -> str:
        return f"request body is larger than api.max_body_bytes ({self._max_body} bytes)"

    def _capped(self, receive: Receive) -> Receive:
        received = 0

        async def capped_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self._max_body:
                    raise HTTPException(status_code=413, detail=self._too_large())
            return message

        return capped_receive


async def _refuse(refusal: Refusal, scope: Scope, receive: Receive, send: Send) -> None:
    response = JSONResponse({"detail": refusal.detail}, status_code=refusal.status, headers=refusal.headers)
    await response(scope, receive, send)


def install_api_guard(app: FastAPI, config: HartflowConfig) -> None:
    """Mount the auth + body-cap middleware on ``app``, and outside it CORS and lenient JSON bodies (call once, in
    create_app). Raises
    :class:`~workers.api.jwt_auth.AuthConfigError` when ``api.jwt``'s key file or ``api.auth_hook`` is unusable."""
    authenticator = Authenticator(config.api, config.user_id)
    origins = OriginPolicy(config.api)
    app.add_middleware(ApiGuard, settings=config.api, authenticator=authenticator, origins=origins)
    cors.install(app, origins)


def current_user(request: Request) -> str:
    """FastAPI dependency: the caller's user id (``api.auth: none``: the config's ``user_id``)."""
    user = request.scope.get("state", {}).get(_USER_KEY)
    if not isinstance(user, str):
        raise RuntimeError("the API guard is not installed: call install_api_guard(app, config) in create_app")
    return user
