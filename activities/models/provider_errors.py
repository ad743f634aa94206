"""The provider-like errors a scripted model call raises (a script's ``error`` entries:
``activities/models/script.py``).

Their attributes mirror the ``openai`` SDK's, and any class name a script gives is created on first use, so the
error classification (``activities/llm_errors.py``) treats a scripted failure as it treats a provider's.
"""

from __future__ import annotations

from typing import Any, cast

__all__ = [
    "APIStatusError",
    "AuthenticationError",
    "InternalServerError",
    "PermissionDeniedError",
    "RateLimitError",
    "ScriptedProviderError",
    "default_error_type",
    "provider_error_class",
]


class ScriptedProviderError(Exception):
    """Base of the provider-like errors a script raises.

    The attributes mirror the ``openai`` SDK's ``APIStatusError`` (plus ``headers`` and ``retry_after``,
    which the SDK keeps on ``response``) so error classification code can treat both alike.
    """

    def __init__(
        self,
        message: str,
        *,
        status_code: int | None,
        body: dict[str, Any],
        headers: dict[str, str],
        retry_after: float | None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status_code = status_code
        self.body = body
        self.headers = headers
        self.retry_after = retry_after
        self.code = code


class RateLimitError(ScriptedProviderError):
    pass


class AuthenticationError(ScriptedProviderError):
    pass


class PermissionDeniedError(ScriptedProviderError):
    pass


class InternalServerError(ScriptedProviderError):
    pass


class APIStatusError(ScriptedProviderError):
    pass


_ERROR_CLASSES: dict[str, type[ScriptedProviderError]] = {
    cls.__name__: cls
    for cls in (
        RateLimitError,
        AuthenticationError,
        PermissionDeniedError,
        InternalServerError,
        APIStatusError,
    )
}


_BUILTIN_BASES: dict[str, tuple[type[Exception], ...]] = {"IndexError": (IndexError,)}
"""Names a provider path raises as a Python builtin, which a scripted error of that name therefore is too:
langchain raises ``IndexError`` when a provider answers with an empty ``generations`` list."""


def provider_error_class(name: str) -> type[ScriptedProviderError]:
    """The error class called ``name``, created on first use so scripts can name any SDK error class.

    Classification keys on class names (``APITimeoutError``, ``APIConnectionError``...), so a script
    must be able to raise them without this module predefining every provider's hierarchy. Classes are
    cached so one name is always one class.
    """
    cls = _ERROR_CLASSES.get(name)
    if cls is None:
        bases: tuple[type, ...] = (ScriptedProviderError, *_BUILTIN_BASES.get(name, ()))
        created = type(name, bases, {"__module__": __name__})
        cls = cast("type[ScriptedProviderError]", created)
        _ERROR_CLASSES[name] = cls
    return cls


def default_error_type(status: int | None) -> str:
    if status == 429:
        return "RateLimitError"
    if status == 401:
        return "AuthenticationError"
    if status == 403:
        return "PermissionDeniedError"
    if status is not None and status >= 500:
        return "InternalServerError"
    return "APIStatusError"
