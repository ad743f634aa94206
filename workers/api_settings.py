"""The ``api:`` key of ``hartflow.yaml`` as settings models only: who may call ``hartflow serve`` and how much
they may send (what each setting does is told in ``workers/api/auth.py`` and ``workers/api/jwt_auth.py``).

Apart from the server on purpose: ``workers/config.py`` validates the whole config in every process (a worker, the
CLI, the bench), and none of them should import FastAPI, PyJWT or the cryptography package to read it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from vocabulary.class_path import ClassPathError, check_class_path

DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024
_ORIGIN = re.compile(r"https?://(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+)(:[0-9]{1,5})?/?")
Algorithm = Literal["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"]


class JwtSettings(BaseModel):
    """The ``api.jwt`` key: where the signing keys are and what a token must say."""

    model_config = ConfigDict(extra="forbid")

    jwks_url: str | None = Field(None, pattern=r"^https?://", description="the provider's JWKS (http or https)")
    key_file: Path | None = Field(None, description="instead of jwks_url: a PEM public key or certificate, or a JWKS")
    issuer: str = Field(min_length=1, description="the token's iss must equal this")
    audience: str | list[str] = Field(min_length=1, description="the token's aud must contain this (or one of these)")
    algorithms: list[Algorithm] = Field(["RS256"], min_length=1, description="accepted signature algorithms")
    leeway_seconds: float = Field(30, ge=0, le=600, description="clock skew allowed on exp, nbf and iat")
    user_claim: str = Field("sub", min_length=1, description="the claim whose value is the user id")
    jwks_cache_seconds: float = Field(300, gt=0, description="how long a fetched JWKS is used before a refetch")
    jwks_refetch_seconds: float = Field(30, ge=0, description="at most one refetch per this long for unknown kids")
    jwks_timeout_seconds: float = Field(5, gt=0, le=60, description="how long one JWKS fetch may take")

    @model_validator(mode="after")
    def _one_key_source(self) -> JwtSettings:
        if (self.jwks_url is None) == (self.key_file is None):
            raise ValueError("api.jwt needs exactly one of jwks_url and key_file")
        if isinstance(self.audience, list) and not all(self.audience):
            raise ValueError("api.jwt.audience entries must not be empty")
        return self


def check_hook_path(value: str) -> str:
    """``api.auth_hook`` names a function as ``package.module:function`` (checked without importing it: the hook
    is loaded when the server starts, ``workers/api/jwt_auth.py``)."""
    try:
        check_class_path(value)
    except ClassPathError as exc:
        raise ValueError(f"{exc} (a function: 'package.module:function')") from None
    return value


class ApiToken(BaseModel):
    model_config = ConfigDict(extra="forbid")

    user_id: str = Field(min_length=1, description="the user this token acts as")
    token_sha256: str = Field(
        pattern=r"^[0-9a-fA-F]{64}$", description="hex sha256 of the token (printf %s T | sha256sum)"
    )

    @field_validator("token_sha256")
    @classmethod
    def _lowercase(cls, digest: str) -> str:
        return digest.lower()


class UploadLimits(BaseModel):
    """The ``api.uploads`` key: what one upload request may carry (DeerFlow's defaults). The app reads them from
    ``GET /threads/{id}/uploads/limits`` to check files before sending; the upload route enforces them (413)."""

    model_config = ConfigDict(extra="forbid")

    max_files: int = Field(10, ge=1, description="files one upload request may carry")
    max_file_size: int = Field(50 * 1024 * 1024, ge=1, description="bytes one uploaded file may have")
    max_total_size: int = Field(100 * 1024 * 1024, ge=1, description="bytes the files of one request may have")


class InputPolishSettings(BaseModel):
    """The ``api.input_polish`` key: DeerFlow's rewrite of the composer's draft (``POST /api/input-polish``)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(True, description="serve POST /api/input-polish (off: 404, as DeerFlow)")
    max_chars: int = Field(4000, ge=1, description="longest draft accepted, after trimming")


class SuggestionsSettings(BaseModel):
    """The ``api.suggestions`` key: DeerFlow's follow-up questions after an answer."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(True, description="generate follow-up suggestions (off: the app shows none)")
    max_suggestions: int = Field(3, ge=1, le=5, description="most suggestions asked of the model")


class ApiSettings(BaseModel):
    """The ``api:`` key: who may call ``hartflow serve`` and what they may ask of it."""

    model_config = ConfigDict(extra="forbid")

    auth: Literal["none", "bearer", "jwt"] = Field(
        "none",
        description="none: loopback only, every caller is user_id; bearer: api.tokens decide the user; "
        "jwt: a verified JWT (api.jwt) does",
    )
    tokens: list[ApiToken] = Field(default_factory=list, description="with auth: bearer, the accepted tokens")
    jwt: JwtSettings | None = Field(None, description="with auth: jwt, how tokens are verified")
    auth_hook: str | None = Field(
        None, description="with auth: jwt, package.module:function(claims, headers) -> user id or None (401)"
    )
    allow_model_specs: bool = Field(
        False, description="accept a raw model spec (scripted:PATH, openai:NAME) as a run's model_name"
    )
    model_scripts_dir: Path | None = Field(
        None, description="with allow_model_specs, the only folder a caller's scripted:PATH may name a file in"
    )
    max_body_bytes: int = Field(DEFAULT_MAX_BODY_BYTES, ge=1024, description="largest request body accepted")
    uploads: UploadLimits = Field(default_factory=UploadLimits, description="what one upload request may carry")
    input_polish: InputPolishSettings = Field(default_factory=InputPolishSettings)
    suggestions: SuggestionsSettings = Field(default_factory=SuggestionsSettings)
    oneshot_timeout_seconds: float = Field(
        60, gt=0, le=600, description="how long input polish or suggestions wait for a worker's model answer (504)"
    )
    cors_origins: list[str] | None = Field(
        None,
        description="web origins (scheme://host[:port], or '*' with bearer/jwt) whose pages may call the server; "
        "unset: loopback origins only (http(s)://localhost, 127.x.x.x, [::1], any port)",
    )

    @field_validator("cors_origins")
    @classmethod
    def _origins_are_origins(cls, origins: list[str] | None) -> list[str] | None:
        for origin in origins or []:
            if origin != "*" and not _ORIGIN.fullmatch(origin):
                raise ValueError(f"{origin[:80]!r} is not an origin: scheme://host[:port], no path, or '*'")
        return None if origins is None else [origin.rstrip("/").lower() for origin in origins]

    @model_validator(mode="after")
    def _tokens_fit_auth(self) -> ApiSettings:
        if self.auth == "bearer" and not self.tokens:
            raise ValueError("auth 'bearer' needs at least one entry in api.tokens")
        if self.auth == "jwt" and self.jwt is None:
            raise ValueError("auth 'jwt' needs api.jwt (jwks_url or key_file, issuer, audience)")
        if self.auth != "jwt" and (self.jwt is not None or self.auth_hook is not None):
            raise ValueError(f"api.jwt and api.auth_hook apply only with auth 'jwt', not {self.auth!r}")
        if self.auth_hook is not None:
            check_hook_path(self.auth_hook)
        if self.auth == "none" and "*" in (self.cors_origins or []):
            raise ValueError("api.cors_origins '*' needs auth bearer or jwt: with 'none' any web page could drive it")
        digests = [token.token_sha256 for token in self.tokens]
        if len(set(digests)) != len(digests):
            raise ValueError("api.tokens lists the same token_sha256 twice")
        return self
