"""ToolResultSanitization: what a web tool brings back reaches the model with injection tags neutralised
(DeerFlow's ``ToolResultSanitizationMiddleware``, always on).

A page the agent fetches, or a search snippet, is as untrusted as the user's input: an attacker's page can carry
a forged ``<system-reminder>`` block or a ``--- END USER INPUT ---`` marker. This middleware applies the same
``neutralize_untrusted_tags`` as InputSanitization to the results of the remote-content tools, by name as DeerFlow
does: ``web_fetch``, ``web_search``, ``image_search`` and ``web_capture``. Local tools (bash, file reads) are left
alone so code and logs are never mangled; an MCP tool that fetches pages under another name is not covered
(DeerFlow's known limitation: a name heuristic would also mangle local output such as a ``file_search``).

Hook
* ``wrap_tool_call`` — right inside ToolOutputBudget, so the raw output is neutralised first and the budget then
  saves or truncates the neutralised text. A string result and the text blocks of a content list (bare strings and
  ``{"type": "text"}`` blocks) are neutralised; other blocks pass through; ToolMessages inside a ``Command``
  update are neutralised too. No framing: the ``--- BEGIN/END USER INPUT ---`` wrapping is the user message's.

Writes: the ToolMessage of the result (thread state), so the neutralised text is what later turns see as well.

Parts: the shared primitive ``middlewares/_untrusted.py``; the chain ``middlewares/chain.py`` puts it right after
ToolOutputBudget. Tests: ``tests/test_input_sanitization.py``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from langchain_core.messages import ToolMessage

from middlewares._untrusted import neutralize_untrusted_tags
from middlewares.base import Command, Middleware, ToolCallRequest, ToolHandler, ToolResult

REMOTE_CONTENT_TOOL_NAMES = frozenset({"web_fetch", "web_search", "image_search", "web_capture"})
"""Tools whose results an attacker can influence (DeerFlow's ``_REMOTE_CONTENT_TOOL_NAMES``)."""


class ToolResultSanitizationMiddleware(Middleware):
    async def wrap_tool_call(self, request: ToolCallRequest, handler: ToolHandler) -> ToolResult:
        result = await handler(request)
        if request.name not in REMOTE_CONTENT_TOOL_NAMES:
            return result
        return sanitize_result(result)


def sanitize_result(result: ToolResult) -> ToolResult:
    if isinstance(result, ToolMessage):
        return _sanitized(result)
    messages = result.update.get("messages")
    if isinstance(messages, ToolMessage):
        patched = _sanitized(messages)
        return result if patched is messages else _with_messages(result, patched)
    if not isinstance(messages, list | tuple) or not any(isinstance(m, ToolMessage) for m in messages):
        return result
    patched_list = [_sanitized(m) if isinstance(m, ToolMessage) else m for m in messages]
    if all(new is old for new, old in zip(patched_list, messages, strict=True)):
        return result
    return _with_messages(result, patched_list)


def _sanitized(message: ToolMessage) -> ToolMessage:
    content = _neutralized_content(message.content)
    return message if content == message.content else message.model_copy(update={"content": content})


def _neutralized_content(content: Any) -> Any:
    if isinstance(content, str):
        return neutralize_untrusted_tags(content)
    if not isinstance(content, list):
        return content
    rebuilt: list[Any] = []
    for block in content:
        if isinstance(block, str):
            rebuilt.append(neutralize_untrusted_tags(block))
        elif isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
            rebuilt.append({**block, "text": neutralize_untrusted_tags(block["text"])})
        else:
            rebuilt.append(block)
    return rebuilt


def _with_messages(command: Command, messages: Any) -> Command:
    return dataclasses.replace(command, update={**command.update, "messages": messages})
