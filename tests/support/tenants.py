"""Two users of one API server, alice and bob, as the per-user tests set them up: their bearer tokens
(``api.auth: bearer``, ``workers/api/auth.py``), the ``api`` settings that admit them, and a client that speaks as
one of them (plain HTTP or ``langgraph-sdk``)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient

from tests.support import model_specs

TOKENS = {"alice": "alice-token-0123456789", "bob": "bob-token-9876543210"}
"""Each role's bearer token, by role (``alice``, ``bob``)."""


def hashed_tokens(users: Mapping[str, str] | None = None) -> list[dict[str, str]]:
    """``api.tokens``: each role's token as its SHA-256, for the user id ``users`` maps the role to (the role's own
    name when ``users`` is not given: a test whose users must be its own passes unique ids)."""
    return [
        {"user_id": role if users is None else users[role], "token_sha256": hashlib.sha256(token.encode()).hexdigest()}
        for role, token in TOKENS.items()
    ]


def bearer_api(
    scripts_dir: Path | None = None, *, users: Mapping[str, str] | None = None, **settings: Any
) -> dict[str, Any]:
    """The ``api`` settings that admit both users by their tokens (:func:`hashed_tokens` of ``users``). With
    ``scripts_dir``, a run may name its own scripted model from that folder (``api.allow_model_specs``,
    ``api.model_scripts_dir``); ``settings`` are further ``api`` settings."""
    api = {"auth": "bearer", "tokens": hashed_tokens(users), **settings}
    return api if scripts_dir is None else model_specs(scripts_dir, **api)


def as_user(url: str, user: str) -> httpx.AsyncClient:
    """An HTTP client of the server at ``url`` that sends the role ``user``'s token (``Authorization: Bearer``);
    its timeout is a ceiling for a slow machine, not something a test measures."""
    return httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {TOKENS[user]}"}, timeout=120)


def sdk_as(url: str, user: str) -> LangGraphClient:
    """A ``langgraph-sdk`` client of the server at ``url`` that sends the role ``user``'s token (as the SDK sends
    an API key: ``x-api-key``)."""
    return get_client(url=url, api_key=TOKENS[user])
