"""Message predicates DeerFlow's middlewares share (``bytedance/deer-flow:
backend/packages/harness/deerflow/agents/middlewares/message_utils.py`` and friends).

They are markers, not types: which HumanMessage is the user speaking, which one the framework injected. Several
middlewares must agree on the answer, so the rules live here once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage

from vocabulary.messages import message_text

DYNAMIC_CONTEXT_REMINDER_KEY = "dynamic_context_reminder"
"""Set by DynamicContext on its date SystemMessage and its ``__memory`` HumanMessage."""
HIDE_FROM_UI_KEY = "hide_from_ui"
SUMMARY_MESSAGE_NAME = "summary"
"""``name`` of summary messages; never the user speaking, never an injection target."""
ORIGINAL_USER_CONTENT_KEY = "original_user_content"
"""What the user typed, kept by the middlewares that frame a message (Uploads, InputSanitization)."""


def is_dynamic_context_reminder(message: BaseMessage) -> bool:
    return message.additional_kwargs.get(DYNAMIC_CONTEXT_REMINDER_KEY) is True


def is_real_user_message(message: BaseMessage) -> bool:
    """DeerFlow's ``is_real_user_message``: a HumanMessage the user typed — not a summary, not hidden.

    Hidden messages include Human Input replies, so the "latest real user message" is the last typed one.
    """
    return (
        isinstance(message, HumanMessage)
        and message.name != SUMMARY_MESSAGE_NAME
        and not message.additional_kwargs.get(HIDE_FROM_UI_KEY)
    )


def original_user_text(message: BaseMessage) -> str:
    """The user's own text: ``original_user_content`` when a middleware framed the message, else its text."""
    original = message.additional_kwargs.get(ORIGINAL_USER_CONTENT_KEY)
    return original if isinstance(original, str) else message_text(message)


def is_genuine_user_message(message: BaseMessage) -> bool:
    """Like :func:`is_real_user_message`, but a hidden Human Input reply counts: it is the user's answer."""
    if not isinstance(message, HumanMessage) or message.name == SUMMARY_MESSAGE_NAME:
        return False
    if not message.additional_kwargs.get(HIDE_FROM_UI_KEY):
        return True
    return is_human_input_response(message.additional_kwargs)


def is_human_input_response(additional_kwargs: Mapping[str, Any]) -> bool:
    """A well-formed ``human_input_response`` (v1): the structural check of DeerFlow's
    ``read_human_input_response``, which ``vocabulary/human_input.py`` produces."""
    raw = additional_kwargs.get("human_input_response")
    if not isinstance(raw, Mapping) or raw.get("version") != 1 or raw.get("kind") != "human_input_response":
        return False
    if not all(_filled(raw.get(key)) for key in ("source", "request_id", "value")):
        return False
    if raw.get("response_kind") == "text":
        return True
    return raw.get("response_kind") == "option" and _filled(raw.get("option_id"))


def _filled(value: object) -> bool:
    return isinstance(value, str) and bool(value.strip())
