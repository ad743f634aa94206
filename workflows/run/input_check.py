"""The checks a new run's input passes before anything is written (the CLI and the API run the same ones first)."""

from __future__ import annotations

from vocabulary.paths import InvalidIdError, validate_thread_id, validate_user_id
from workflows.run.io import RunInput


def message_problem(message: str, limit: int) -> str | None:
    """Why a run refuses this user message (empty, or longer than ``run.max_message_chars``), or ``None``."""
    if not message.strip():
        return "the message is empty"
    if len(message) > limit:
        return f"the message is {len(message)} characters; the limit is {limit} (run.max_message_chars)"
    return None


def input_problem(input: RunInput) -> str | None:
    """What makes a new run's input unusable, or ``None``. The CLI refuses these before starting anything;
    this is the same check for any other client, which gets a ``BadInput`` failure before anything is written."""
    try:
        validate_thread_id(input.thread_id)
        validate_user_id(input.user_id)
    except InvalidIdError as exc:
        return str(exc)
    return message_problem(input.message, input.settings.max_message_chars)
