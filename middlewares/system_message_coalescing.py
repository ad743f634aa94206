"""SystemMessageCoalescing: the model request carries one leading system message (DeerFlow's
``SystemMessageCoalescingMiddleware``, always on in the lead chain and last in a subagent's).

Strict OpenAI-compatible backends (vLLM, SGLang, Qwen) and Anthropic reject a system message that is not the first
("System message must be at the beginning"). DynamicContext's ID swap puts its date reminder in the history as a
SystemMessage, and a new day adds another; the static prompt travels apart, as ``request.system_message``.

Hook
* ``wrap_model_call`` — request overlay only: when ``request.messages`` holds SystemMessages, they and
  ``request.system_message`` become one ``system_message`` (contents joined by a blank line, the id of the first,
  ``additional_kwargs`` merged), keeping only the **last** DynamicContext reminder so the model never sees two
  contradictory dates; the other messages keep their order. With no SystemMessage in the messages the request
  passes through untouched (the prefix cache keeps hitting). Thread state keeps its SystemMessages, so everything
  that scans history by marker (DynamicContext's date detection, Summarization) still finds them.

Writes: the request overlay only.

Parts: the marker predicate ``middlewares/_messages.py``; the model call sends the merged system message by
hash like any other (``workflows/run/model_call.py``). Tests: ``tests/test_finish_reasons.py``.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, SystemMessage

from middlewares._messages import is_dynamic_context_reminder
from middlewares.base import Middleware, ModelHandler, ModelRequest


class SystemMessageCoalescingMiddleware(Middleware):
    async def wrap_model_call(self, request: ModelRequest, handler: ModelHandler) -> AIMessage:
        return await handler(coalesce(request))


def coalesce(request: ModelRequest) -> ModelRequest:
    # Most requests hold no SystemMessage: ask the few classes present before scanning the messages one by one.
    if not any(issubclass(kind, SystemMessage) for kind in set(map(type, request.messages))):
        return request
    in_messages = [m for m in request.messages if isinstance(m, SystemMessage)]
    parts: list[SystemMessage] = [request.system_message] if request.system_message is not None else []
    parts.extend(in_messages)
    reminders = [i for i, part in enumerate(parts) if is_dynamic_context_reminder(part)]
    stale = set(reminders[:-1])
    parts = [part for i, part in enumerate(parts) if i not in stale]
    merged_kwargs: dict[str, Any] = {}
    for part in parts:
        merged_kwargs.update(part.additional_kwargs or {})
    merged = SystemMessage(
        content="\n\n".join(_flat(part.content) for part in parts), id=parts[0].id, additional_kwargs=merged_kwargs
    )
    rest = [m for m in request.messages if not isinstance(m, SystemMessage)]
    return request.override(system_message=merged, messages=rest)


def _flat(content: Any) -> str:
    """DeerFlow's ``_flatten_content``: strings as they are, text items by their ``text``, others by ``str``."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(_item_text(item) for item in content)
    return str(content)


def _item_text(item: Any) -> str:
    if isinstance(item, str):
        return item
    return str(item["text"]) if isinstance(item, dict) and "text" in item else str(item)
