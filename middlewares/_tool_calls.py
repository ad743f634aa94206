"""Rewriting an AIMessage's tool calls without leaving the provider's raw copy behind (DeerFlow's
``tool_call_metadata.clone_ai_message_with_tool_calls`` and the ``_append_text`` of its guards).

An AIMessage carries its tool calls twice: structured (``tool_calls``) and raw, as the provider sent them
(``additional_kwargs["tool_calls"]``, legacy ``function_call``). LangChain rebuilds ``tool_calls`` from the
raw list when a message is loaded without structured calls, so a guard that clears only ``tool_calls`` sees
them come back after the next commit and load. Hard stops (LoopDetection, SafetyFinishReason, later
SubagentLimit) therefore go through :func:`clone_with_tool_calls`.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage


def clone_with_tool_calls(message: AIMessage, tool_calls: list[Any], *, content: Any | None = None) -> AIMessage:
    """A copy of ``message`` (same id, so the ``messages`` reducer replaces it in place) that keeps only
    ``tool_calls``: raw entries whose id is not kept are dropped, ``function_call`` goes when no call is
    left, and ``finish_reason`` ``"tool_calls"`` becomes ``"stop"`` (other reasons, e.g. a provider's
    ``content_filter``, are kept)."""
    kept_ids = {call["id"] for call in tool_calls if isinstance(call.get("id"), str) and call["id"]}
    update: dict[str, Any] = {"tool_calls": tool_calls}
    if content is not None:
        update["content"] = content

    kwargs = dict(message.additional_kwargs or {})
    raw_calls = kwargs.get("tool_calls")
    if isinstance(raw_calls, list):
        synced = [raw for raw in raw_calls if isinstance(raw, dict) and raw.get("id") in kept_ids]
        if synced:
            kwargs["tool_calls"] = synced
        else:
            kwargs.pop("tool_calls", None)
    if not tool_calls:
        kwargs.pop("function_call", None)
    update["additional_kwargs"] = kwargs

    metadata = dict(message.response_metadata or {})
    if not tool_calls and metadata.get("finish_reason") == "tool_calls":
        metadata["finish_reason"] = "stop"
    update["response_metadata"] = metadata
    return message.model_copy(update=update)


def append_text(content: Any, text: str) -> str | list[Any]:
    """``content`` followed by a blank line and ``text``; list content (thinking blocks…) gets a new text block
    instead of being flattened into a string."""
    if content is None:
        return text
    if isinstance(content, list):
        return [*content, {"type": "text", "text": f"\n\n{text}"}]
    return f"{content}\n\n{text}"
