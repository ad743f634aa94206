"""``api.auth: jwt``: the caller is whoever a bearer JWT from the operator's identity provider says it is.

Why these choices:

- **PyJWT** (``PyJWT[crypto]``) verifies the signature, ``exp``, ``nbf``, ``iss`` and ``aud`` with a leeway, and its
  ``PyJWKClient`` fetches the provider's JWKS with a cache (``jwks_cache_seconds``) and refetches on an unknown
  ``kid`` at most once per ``jwks_refetch_seconds`` (a flood of made-up kids cannot hammer the provider). Its fetch
  is blocking urllib, so it runs in a worker thread, never on the event loop.
- **Asymmetric algorithms only** (RS*, PS*, ES*, EdDSA): the server holds no secret, and a token whose header asks
  for ``HS256`` (signed with the public key as an HMAC secret) or ``none`` fails the allow-list before any key is
  used. A JWK is used as its raw public key, so the configured algorithms (not the JWK's default) apply.
- **issuer and audience are required**: a token the same provider minted for another service is not a key here.
- The user is the ``user_claim`` claim (``sub``), checked like any user id (a value that cannot name a storage
  folder is 403, never a 500), or whatever ``api.auth_hook`` returns. Neither the token nor key material is
  ever logged or echoed.

The hook contract (``api.auth_hook: package.module:function``), loaded and checked when ``hartflow serve`` starts::

    def hook(claims: dict[str, Any], headers: Mapping[str, str]) -> str | None      # or ``async def``

``claims`` are the verified token's claims, ``headers`` the request's headers (lower-case names). It returns the
caller's user id, or None to refuse (401). It may raise ``fastapi.HTTPException`` to answer with that status (403
for "not in the right group", 503 while its own directory is down); any other exception refuses with 401 and one
log line. A plain function runs in a worker thread (it may block on I/O), an ``async def`` on the event loop.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa
from cryptography.hazmat.primitives.serialization import load_pem_public_key
from cryptography.x509 import load_pem_x509_certificate
from starlette.exceptions import HTTPException

from vocabulary.class_path import check_class_path
from vocabulary.paths import InvalidIdError, validate_user_id
from workers.api_settings import Algorithm, JwtSettings

_log = logging.getLogger("hartflow.api")

AuthHook = Callable[[dict[str, Any], Mapping[str, str]], "str | Awaitable[str | None] | None"]
_KEY_TYPES: dict[str, tuple[type, ...]] = {
    "RS": (rsa.RSAPublicKey,),
    "PS": (rsa.RSAPublicKey,),
    "ES": (ec.EllipticCurvePublicKey,),
    "Ed": (ed25519.Ed25519PublicKey, ed448.Ed448PublicKey),
}


class AuthConfigError(ValueError):
    """A problem with ``api.jwt`` or ``api.auth_hook`` found when the server starts; the message names the key."""


def load_auth_hook(value: str) -> AuthHook:
    """The function ``api.auth_hook`` names, checked to take ``(claims, headers)``."""
    module_name, name = check_class_path(value)
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # importing runs the module's code: whatever it raises is the setting's problem
        raise AuthConfigError(f"api.auth_hook: cannot import {module_name}: {type(exc).__name__}: {exc}") from None
    hook = getattr(module, name, None)
    if hook is None:
        raise AuthConfigError(f"api.auth_hook: module {module_name} has no {name!r}")
    if isinstance(hook, type) or not callable(hook):
        raise AuthConfigError(f"api.auth_hook: {value} is not a function")
    try:
        inspect.signature(hook).bind({}, {})
    except (TypeError, ValueError):
        raise AuthConfigError(f"api.auth_hook: {value} must accept two arguments (claims, headers)") from None
    return hook  # type: ignore[no-any-return]


@dataclass(frozen=True)
class Refusal:
    """Why a request is not let in: the status, the one-line detail, and the headers to send."""

    status: int
    detail: str
    headers: dict[str, str] = field(default_factory=dict)


def _invalid(detail: str) -> Refusal:
    return Refusal(401, detail, {"WWW-Authenticate": 'Bearer error="invalid_token"'})


class _KeyUnavailable(Exception):
    """The JWKS could not be fetched (503: the caller is not at fault)."""


class JwtAuthenticator:
    """Turns a presented token into a user id, or a :class:`Refusal`."""

    def __init__(self, settings: JwtSettings, hook: AuthHook | None) -> None:
        self._settings = settings
        self._hook = hook
        self._client: jwt.PyJWKClient | None = None
        self._file_keys: list[jwt.PyJWK] | None = None
        self._file_key: Any = None
        if settings.jwks_url is not None:
            self._client = jwt.PyJWKClient(
                settings.jwks_url,
                cache_keys=False,  # a key the provider withdrew stops working when the cached set expires
                cache_jwk_set=True,
                lifespan=settings.jwks_cache_seconds,
                timeout=settings.jwks_timeout_seconds,
                cooldown_duration=settings.jwks_refetch_seconds,
            )
        else:
            assert settings.key_file is not None
            self._file_key, self._file_keys = _read_key_file(settings.key_file, settings.algorithms)

    async def user_for(self, token: str, headers: Mapping[str, str]) -> str | Refusal:
        settings = self._settings
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            return _invalid("malformed bearer token")
        alg = header.get("alg")
        if alg not in settings.algorithms:
            return _invalid(f"token algorithm {str(alg)[:20]!r} is not in api.jwt.algorithms")
        try:
            key = await self._key_for(header)
        except _KeyUnavailable as exc:
            _log.warning("JWT keys unavailable: %s", exc)
            return Refusal(503, f"cannot verify tokens now: {exc}", {"Retry-After": "5"})
        if isinstance(key, Refusal):
            return key
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key,
                algorithms=list(settings.algorithms),
                audience=settings.audience,
                issuer=settings.issuer,
                leeway=settings.leeway_seconds,
                # sub is checked as a user id below (403 when it is not one), whatever its type
                options={"require": ["exp", "iss", "aud"], "verify_sub": False},
            )
        except jwt.PyJWTError as exc:
            return _invalid(f"token refused: {_reason(exc)}")
        except (ValueError, TypeError):  # a key unfit for the token's algorithm, odd claim types
            return _invalid("token refused: it cannot be verified with the configured keys")
        return await self._user_of(claims, headers)

    async def _key_for(self, header: dict[str, Any]) -> Any:
        kid = header.get("kid")
        if self._client is not None:
            if not isinstance(kid, str) or not kid:
                return _invalid("token has no kid: the JWKS key that signed it cannot be chosen")
            try:
                found = await asyncio.to_thread(self._client.get_signing_key, kid)
            except jwt.PyJWKClientConnectionError as exc:
                raise _KeyUnavailable(f"cannot fetch api.jwt.jwks_url: {_first_line(exc)}") from None
            except jwt.PyJWKSetError:
                raise _KeyUnavailable("api.jwt.jwks_url holds no usable key") from None
            except jwt.PyJWKClientError:
                return _invalid("token signed by a key the JWKS does not list")
            except ValueError:
                raise _KeyUnavailable("api.jwt.jwks_url did not answer with JSON") from None
            return found.key
        if self._file_keys is None:
            return self._file_key
        matches = [k for k in self._file_keys if k.key_id == kid or (kid is None and len(self._file_keys) == 1)]
        if not matches:
            return _invalid("token signed by a key api.jwt.key_file does not hold")
        return matches[0].key

    async def _user_of(self, claims: dict[str, Any], headers: Mapping[str, str]) -> str | Refusal:
        if self._hook is None:
            user = claims.get(self._settings.user_claim)
            source = f"claim {self._settings.user_claim!r}"
        else:
            source = "api.auth_hook"
            hook: Callable[..., Any] = self._hook
            try:
                if inspect.iscoroutinefunction(hook):
                    outcome = hook(dict(claims), headers)
                else:  # a plain function may block (a directory lookup): not on the event loop
                    outcome = await asyncio.to_thread(lambda: hook(dict(claims), headers))
                user = await outcome if inspect.isawaitable(outcome) else outcome
            except HTTPException as exc:
                return Refusal(exc.status_code, str(exc.detail), dict(exc.headers or {}))
            except Exception as exc:
                _log.warning("api.auth_hook raised %s: %s", type(exc).__name__, _first_line(exc))
                return _invalid("token refused by api.auth_hook")
            if user is None:
                return _invalid("token refused by api.auth_hook")
        if user is None:
            return Refusal(403, f"the token has no {source}: it names no user")
        try:
            return validate_user_id(user)
        except InvalidIdError:
            return Refusal(403, f"the token's {source} is not a user id (1-128 of A-Z, a-z, 0-9, '_', '-')")


def _read_key_file(path: Path, algorithms: list[Algorithm]) -> tuple[Any, list[jwt.PyJWK] | None]:
    """``(key, None)`` for a PEM public key or certificate; ``(None, keys)`` for a JWKS (or one JWK) file."""
    try:
        data = path.expanduser().read_bytes()
    except OSError as exc:
        raise AuthConfigError(f"api.jwt.key_file: cannot read {path}: {exc.strerror}") from None
    if b"PRIVATE KEY" in data:
        raise AuthConfigError(f"api.jwt.key_file: {path} holds a private key; give the server the public key only")
    if data.lstrip().startswith(b"-----BEGIN"):
        try:
            if b"CERTIFICATE" in data:
                key: Any = load_pem_x509_certificate(data).public_key()
            else:
                key = load_pem_public_key(data)
        except ValueError:
            raise AuthConfigError(f"api.jwt.key_file: {path} is not a readable PEM public key or certificate") from None
        if not any(isinstance(key, _KEY_TYPES[alg[:2]]) for alg in algorithms):
            raise AuthConfigError(f"api.jwt.algorithms: none of {algorithms} verifies the key in {path}")
        return key, None
    try:
        document = json.loads(data)
        entries = document["keys"] if isinstance(document, dict) and "keys" in document else [document]
        keys = [jwt.PyJWK(entry) for entry in entries if entry.get("use") in (None, "sig")]
    except (ValueError, TypeError, KeyError, AttributeError, jwt.PyJWTError):
        raise AuthConfigError(f"api.jwt.key_file: {path} is not a PEM public key, a certificate or a JWKS") from None
    if not keys:
        raise AuthConfigError(f"api.jwt.key_file: {path} holds no signing key")
    return None, keys


def _reason(exc: jwt.PyJWTError) -> str:
    reasons: list[tuple[type[jwt.PyJWTError], str]] = [
        (jwt.ExpiredSignatureError, "it has expired"),
        (jwt.ImmatureSignatureError, "it is not valid yet (nbf or iat in the future)"),
        (jwt.InvalidAudienceError, "wrong audience"),
        (jwt.InvalidIssuerError, "wrong issuer"),
        (jwt.MissingRequiredClaimError, "a required claim (exp, iss, aud) is missing"),
        (jwt.InvalidSignatureError, "bad signature"),
        (jwt.InvalidAlgorithmError, "algorithm not allowed"),
    ]
    for kind, reason in reasons:
        if isinstance(exc, kind):
            return reason
    return "malformed or unverifiable"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__
