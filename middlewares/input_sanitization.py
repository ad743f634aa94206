"""InputSanitization: the user's latest message reaches the model with injection tags neutralised and framed as
user input (DeerFlow's ``InputSanitizationMiddleware``, always on, the outermost middleware of every chain).

A user can type ``<system>…</system>`` or a forged ``<system-reminder>`` block, which a model would take for the
framework's own authority blocks. DeerFlow de-identifies instead of rejecting: the blocked tags of
``middlewares/_untrusted.py`` are HTML-escaped (``<system>`` → ``&lt;system&gt;``; ordinary tags such as ``<div>``
stay) and the text is wrapped in ``--- BEGIN USER INPUT ---`` / ``--- END USER INPUT ---``, markers the user typed
being replaced by ``[BEGIN USER INPUT]`` / ``[END USER INPUT]``.

Hook
* ``wrap_model_call`` — request overlay only; thread state, and so the thread the UI shows, keeps what the user
  typed. It acts on the last *genuine* user message (a HumanMessage that is not a summary and not hidden, unless it
  is a Human Input reply). When the message carries ``original_user_content`` (Uploads put a ``<current_uploads>``
  block in front of it), only that suffix is framed, so the framework's block survives; an empty
  ``original_user_content`` (an upload with no text) leaves the message alone. Content-block lists are framed as
  one merged text block in place of the text blocks, images kept where they were. The overlay also records
  ``original_user_content`` when the message had none, so the middlewares inside (SkillActivation's slash
  commands) still read what the user typed. Being first in the chain, every inner middleware and every LLM retry
  sees the framed message. A failure to sanitise passes the request on unchanged, as DeerFlow's fails open.

Writes: the request overlay only. Per-run memory: the framed copy of the last message framed, and the messages
scanned for the last genuine user message with where it was, so a turn scans only what the conversation appended.

Parts: the shared primitive ``middlewares/_untrusted.py`` (blocked tags, ``frame_untrusted_text``); the message
predicates ``middlewares/_messages.py``; the chain ``middlewares/chain.py`` puts it first. Tests:
``tests/test_input_sanitization.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from middlewares._logging import hook_logger
from middlewares._messages import ORIGINAL_USER_CONTENT_KEY, is_genuine_user_message
from middlewares._untrusted import frame_untrusted_text, neutralize_untrusted_tags
from middlewares.base import Middleware, ModelHandler, ModelRequest
from vocabulary.messages import AppendedMessages

logger = hook_logger(__name__)


class InputSanitizationMiddleware(Middleware):
    def __init__(self) -> None:
        self._framed: tuple[BaseMessage, HumanMessage | None] | None = None
        """The last message framed and its framed copy: a run's next turns get the same object, so the
        middlewares inside that remember what they checked by identity (DanglingToolCall) keep their work."""
        self._scanned = AppendedMessages()
        self._last_user: int | None = None
        """The index of the last genuine user message among the messages scanned."""

    async def wrap_model_call(self, request: ModelRequest, handler: ModelHandler) -> AIMessage:
        try:
            messages = frame_message_at(request.messages, self._last_user_index(request.messages), self._frame)
        except Exception:  # DeerFlow fails open: an unsanitised request beats a stuck run
            logger.warning("Input guardrail processing failed; passing original request to model", exc_info=True)
            messages = None
        if messages is not None:
            request = request.override(messages=messages)
        return await handler(request)

    def _last_user_index(self, messages: list[BaseMessage]) -> int | None:
        """:func:`last_genuine_user_index`, scanning only what was appended while the conversation only grows (the
        same message objects with more after them, :class:`vocabulary.messages.AppendedMessages`)."""
        start = self._scanned.start(messages)
        found = last_genuine_user_index(messages, start=start)
        if found is not None or start == 0:
            self._last_user = found
        return self._last_user

    def _frame(self, message: BaseMessage) -> HumanMessage | None:
        """:func:`_framed`, once per message object (workflow code never changes a message in place)."""
        if self._framed is None or self._framed[0] is not message:
            self._framed = (message, _framed(message))
        return self._framed[1]


def last_genuine_user_index(messages: list[BaseMessage], *, start: int = 0) -> int | None:
    """The index of the last genuine user message at or after ``start``, or ``None``."""
    for index in range(len(messages) - 1, start - 1, -1):
        if is_genuine_user_message(messages[index]):
            return index
    return None


def frame_message_at(
    messages: list[BaseMessage], index: int | None, frame: Callable[[BaseMessage], HumanMessage | None] | None = None
) -> list[BaseMessage] | None:
    """``messages`` with the one at ``index`` framed, or ``None`` when there is none or nothing changes."""
    if index is None:
        return None
    framed = (frame or _framed)(messages[index])
    if framed is None:
        return None
    return [*messages[:index], framed, *messages[index + 1 :]]


def _framed(message: BaseMessage) -> HumanMessage | None:
    content: Any = message.content
    text, text_blocks = _text_of(content)
    if not text and not isinstance(content, str):
        return None  # an image-only message: nothing to frame
    kwargs = dict(message.additional_kwargs)
    original = kwargs.get(ORIGINAL_USER_CONTENT_KEY)
    if isinstance(original, str) and original:
        framed_user = frame_untrusted_text(original)
        at = text.rfind(original)
        if framed_user == original:
            processed = text
        elif at >= 0:
            processed = text[:at] + framed_user  # the framework's block in front stays as it is
        elif isinstance(content, list) and len(content) >= 2:
            # Uploads puts its block first in a list; the rest is the user's, neutralised block by block.
            return _human(message, [content[0], *(_neutralized_block(b) for b in content[1:])], kwargs)
        else:
            processed = frame_untrusted_text(text)  # cannot tell the blocks apart: frame everything
    elif isinstance(original, str):
        processed = text  # an upload without text: only the framework's block, left alone
    else:
        processed = frame_untrusted_text(text)
    if processed == text:
        return None
    if not isinstance(original, str):
        kwargs[ORIGINAL_USER_CONTENT_KEY] = _plain_text(content)
    new_content = _rebuilt(content, processed, text_blocks) if text_blocks is not None else processed
    return _human(message, new_content, kwargs)


def _text_of(content: Any) -> tuple[str, list[Any] | None]:
    """The text to sanitise (text blocks joined by newlines, as DeerFlow joins them) and, for a list, the blocks
    it came from."""
    if isinstance(content, str):
        return content, None
    if not isinstance(content, list):
        return "", None
    blocks = [b for b in content if _text_value(b)]
    return "\n".join(_text_value(b) for b in blocks), blocks


def _text_value(block: Any) -> str:
    if isinstance(block, str):
        return block
    if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
        return str(block["text"])
    return ""


def _plain_text(content: Any) -> str:
    """DeerFlow's ``message_content_to_text``: what the user typed, without framing."""
    return content if isinstance(content, str) else "\n".join(_text_value(b) for b in content if _text_value(b))


def _rebuilt(content: list[Any], processed: str, text_blocks: list[Any]) -> list[Any]:
    """One merged text block where the first text block was; non-text blocks between text blocks follow it."""
    ids = {id(b) for b in text_blocks}
    positions = [i for i, b in enumerate(content) if id(b) in ids]
    if not positions:
        return content
    first, last = positions[0], positions[-1]
    between = [b for b in content[first + 1 : last + 1] if id(b) not in ids]
    return [*content[:first], {"type": "text", "text": processed}, *between, *content[last + 1 :]]


def _neutralized_block(block: Any) -> Any:
    if isinstance(block, str):
        return neutralize_untrusted_tags(block)
    text = _text_value(block)
    return {**block, "text": neutralize_untrusted_tags(text)} if text else block


def _human(message: BaseMessage, content: Any, kwargs: dict[str, Any]) -> HumanMessage:
    return HumanMessage(content=content, id=message.id, name=message.name, additional_kwargs=kwargs)
