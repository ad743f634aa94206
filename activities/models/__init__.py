"""Turn a model spec string into a langchain-core chat model for one model call.

Specs:

* ``scripted:PATH`` — :class:`~activities.models.scripted.ScriptedChatModel` answering from a JSON
  script (relative paths are resolved against the current directory);
* ``openai:MODEL`` — langchain-openai's ``ChatOpenAI``; any OpenAI-compatible endpoint works through
  the ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` environment variables.

A configured ``models:`` entry is built by :mod:`activities.models.catalog`.

Provider SDK retries are switched off (``max_retries=0``): Temporal's activity retry policy owns retries,
so each SDK request is exactly one activity attempt and its error reaches the error classification.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

from langchain_core.language_models import BaseChatModel

from activities.models import tool_args
from activities.models.script import Script
from activities.models.script_file import ScriptError, load_script
from activities.models.scripted import ScriptedChatModel
from vocabulary.contracts import ModelPurpose

__all__ = [
    "CallCoordinates",
    "InvalidModelSpecError",
    "ScriptError",
    "build_chat_model",
    "validate_model_spec",
]

_PREFIXES = ("scripted", "openai")


class InvalidModelSpecError(ValueError):
    """A model spec that names no buildable model; the message is one line meant for the user."""


@dataclass(frozen=True)
class CallCoordinates:
    """Which model call this is: scripted models answer by these, real providers ignore them."""

    purpose: ModelPurpose
    call_index: int
    attempt: int


def _split(spec: str) -> tuple[str, str]:
    prefix, sep, rest = spec.partition(":")
    if not sep or prefix not in _PREFIXES:
        raise InvalidModelSpecError(f"unknown model spec {spec!r}: expected scripted:PATH or openai:MODEL")
    if not rest.strip():
        what = "a script path" if prefix == "scripted" else "a model name"
        raise InvalidModelSpecError(f"model spec {spec!r} is missing {what}")
    return prefix, rest


def _script(raw_path: str) -> Script:
    path = Path(raw_path).expanduser().resolve()
    try:
        stat = path.stat()
    except OSError:
        return load_script(path)  # raises the ScriptError that names the missing file
    return _parse_script(path, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=64)
def _parse_script(path: Path, mtime_ns: int, size: int) -> Script:
    """Parse once per file version: ``mtime_ns`` and ``size`` are only cache-key parts, so an edited
    script is re-read by a long-running worker."""
    return load_script(path)


def validate_model_spec(spec: str) -> None:
    """Cheap check before starting a run, so a typo fails at the CLI instead of inside the workflow.

    Raises :class:`InvalidModelSpecError` or :class:`ScriptError`, both with one-line messages.
    """
    prefix, rest = _split(spec)
    if prefix == "scripted":
        _script(rest)


def build_chat_model(spec: str, call: CallCoordinates) -> BaseChatModel:
    """The chat model for one call (one activity attempt) described by ``call``."""
    prefix, rest = _split(spec)
    if prefix == "scripted":
        return ScriptedChatModel(
            script=_script(rest), purpose=call.purpose, call_index=call.call_index, attempt=call.attempt
        )
    try:
        # Imported lazily: the OpenAI client is an optional extra, not needed for scripted runs.
        from langchain_openai import ChatOpenAI
    except ImportError as exc:
        raise InvalidModelSpecError(
            f"model spec {spec!r} needs langchain-openai: pip install 'hartflow[openai]'"
        ) from exc
    tool_args.install()
    try:
        return _openai_model(ChatOpenAI, rest, _openai_environment())
    except Exception as exc:
        # Construction makes no request, so any failure here (e.g. no OPENAI_API_KEY) is configuration
        # that no retry will fix.
        detail = " ".join(str(exc).split())
        raise InvalidModelSpecError(f"cannot build model {spec!r}: {detail}") from exc


def _openai_environment() -> tuple[tuple[str, str], ...]:
    """The ``OPENAI_*`` variables ``ChatOpenAI`` reads when it is built (key, base URL, organization, proxy)."""
    return tuple(sorted((name, value) for name, value in os.environ.items() if name.startswith("OPENAI_")))


@functools.lru_cache(maxsize=32)
def _openai_model(
    chat_openai: type[BaseChatModel], name: str, environment: tuple[tuple[str, str], ...]
) -> BaseChatModel:
    """One ``ChatOpenAI`` per model name and ``OPENAI_*`` environment, shared by the calls, as a ``models:`` entry
    is (``ModelCatalog``): building one validates its settings and sets up its clients, 0.5-0.9 ms of CPU by
    ``python -m timeit``, and a call changes nothing in it. ``environment`` is only a cache-key part: a changed
    variable builds a new one."""
    return chat_openai(model=name, max_retries=0)
