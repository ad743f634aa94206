"""``api.auth_hook`` functions the JWT tests configure (``tests.support.auth_hooks:NAME``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi import HTTPException


def team_user(claims: dict[str, Any], headers: Mapping[str, str]) -> str | None:
    """The user is ``TEAM-SUB``; a ``group: blocked`` claim is 403, ``boom`` a bug, ``x-team: none`` a refusal."""
    if claims.get("group") == "blocked":
        raise HTTPException(status_code=403, detail="group 'blocked' may not use the agent")
    if claims.get("boom"):
        raise RuntimeError("the directory lookup failed")
    if headers.get("x-team") == "none":
        return None
    return f"{claims.get('team', 'noteam')}-{claims['sub']}"


async def async_user(claims: dict[str, Any], headers: Mapping[str, str]) -> str | None:
    """An ``async def`` hook: the user is the ``email`` claim's local part."""
    email = claims.get("email")
    return email.split("@")[0] if isinstance(email, str) else None


class NotAFunction:
    def __call__(self, claims: dict[str, Any], headers: Mapping[str, str]) -> str:
        return "x"


def one_argument(claims: dict[str, Any]) -> str:
    return "x"
