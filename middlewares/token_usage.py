"""TokenUsage: what each model call cost, and what the step was for.

Hook
* ``after_model``: logs ``LLM token usage: input=… output=… total=…`` for the new AIMessage and stamps it (same
  id, replaced in place) with ``additional_kwargs["token_usage_attribution"]`` = ``{version: 1, kind,
  shared_attribution, tool_call_ids, actions}``, DeerFlow's UI step attribution: ``write_todos`` becomes the
  todo diff (``todo_start|todo_complete|todo_update|todo_remove``), ``task`` a ``subagent`` action,
  ``web_search``/``image_search`` a ``search``, ``present_files`` and ``ask_clarification`` their own kinds,
  anything else ``tool``; the step is a ``todo_update``, ``subagent_dispatch``, ``tool_batch``,
  ``final_answer`` or ``thinking``. A subagent's usage reported on its ToolMessage
  (``subagent_token_usage``) is added to the AIMessage that dispatched it, once (the ToolMessage is marked
  ``subagent_token_usage_attributed``).

Writes: thread state (the stamped messages); per-run memory: the run's token totals, which the run's status
shows (``RunView.usage``) and which travel across continue-as-new.

Parts: the run's totals read by ``workflows/run/profile.py`` into ``RunView.usage`` (``workflows/run/view.py``); a
subagent's usage reported on its task ToolMessage by ``workflows/run/delegate.py`` (keys in
``vocabulary/delegation.py``); ``token_usage.enabled`` in the API's model list (``workers/models.py``,
``workers/api/models_route.py``); the thread's totals from the stamped messages (``workers/api/token_usage.py``).
Tests: ``tests/test_token_usage.py``, ``tests/test_api_events.py``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from pydantic import BaseModel, ConfigDict

from middlewares._logging import hook_logger
from middlewares.base import Middleware
from middlewares.context import RunContext
from vocabulary.state import StateUpdate, ThreadState

logger = hook_logger(__name__)

ATTRIBUTION_KEY = "token_usage_attribution"
SUBAGENT_USAGE_KEY = "subagent_token_usage"
SUBAGENT_ATTRIBUTED_KEY = "subagent_token_usage_attributed"
USAGE_FIELDS = ("input_tokens", "output_tokens", "total_tokens")
_TODO_KINDS = frozenset({"todo_start", "todo_complete", "todo_update", "todo_remove"})


class TokenUsageConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    enabled: bool = True


def _text_arg(value: Any) -> str | None:
    return value.strip() or None if isinstance(value, str) else None


def normalize_todos(value: Any) -> list[dict[str, str]]:
    todos = []
    for item in value if isinstance(value, list) else []:
        if not isinstance(item, dict):
            continue
        todo = {}
        if (content := _text_arg(item.get("content"))) is not None:
            todo["content"] = content
        if item.get("status") in {"pending", "in_progress", "completed"}:
            todo["status"] = item["status"]
        todos.append(todo)
    return todos


def _todo_kind(previous: dict[str, str] | None, current: dict[str, str]) -> str:
    status = current.get("status")
    if previous is not None and previous.get("content") != current.get("content"):
        return "todo_update"
    return {"completed": "todo_complete", "in_progress": "todo_start"}.get(status or "", "todo_update")


def todo_actions(previous: list[dict[str, str]], current: list[dict[str, str]]) -> list[dict[str, Any]]:
    """The todo diff: matched by content first, by position for new content; unmatched earlier todos were removed."""
    by_content: dict[str, list[int]] = defaultdict(list)
    for index, todo in enumerate(previous):
        if todo.get("content"):
            by_content[todo["content"]].append(index)
    matched: set[int] = set()
    actions: list[dict[str, Any]] = []
    for index, todo in enumerate(current):
        content = todo.get("content")
        if not content:
            continue
        match: dict[str, str] | None = None
        if content in by_content:
            candidates = [i for i in by_content[content] if i not in matched]
            by_content[content] = candidates[1:]
            if candidates:
                matched.add(candidates[0])
                match = previous[candidates[0]]
        elif index < len(previous) and index not in matched:
            matched.add(index)
            match = previous[index]
        if match is not None and match.get("content") == content and match.get("status") == todo.get("status"):
            continue
        actions.append({"kind": _todo_kind(match, todo), "content": content})
    actions += [
        {"kind": "todo_remove", "content": todo["content"]}
        for index, todo in enumerate(previous)
        if index not in matched and todo.get("content")
    ]
    return actions


def tool_call_actions(call: dict[str, Any], todos: list[dict[str, str]]) -> list[dict[str, Any]]:
    name = _text_arg(call.get("name")) or "unknown"
    args: dict[str, Any] = call["args"] if isinstance(call.get("args"), dict) else {}
    call_id = _text_arg(call.get("id"))
    if name == "write_todos":
        actions = todo_actions(todos, normalize_todos(args.get("todos")))
        if not actions:
            return [{"kind": "tool", "tool_name": name, "tool_call_id": call_id}]
        return [{**action, "tool_call_id": call_id} for action in actions]
    if name == "task":
        return [
            {
                "kind": "subagent",
                "description": _text_arg(args.get("description")),
                "subagent_type": _text_arg(args.get("subagent_type")),
                "tool_call_id": call_id,
            }
        ]
    if name in {"web_search", "image_search"}:
        return [{"kind": "search", "tool_name": name, "query": _text_arg(args.get("query")), "tool_call_id": call_id}]
    if name == "present_files":
        return [{"kind": "present_files", "tool_call_id": call_id}]
    if name == "ask_clarification":
        return [{"kind": "clarification", "tool_call_id": call_id}]
    description = _text_arg(args.get("description"))
    return [{"kind": "tool", "tool_name": name, "description": description, "tool_call_id": call_id}]


def attribution(message: AIMessage, todos: list[dict[str, Any]]) -> dict[str, Any]:
    actions: list[dict[str, Any]] = []
    current = normalize_todos(todos)
    for call in message.tool_calls:
        actions += tool_call_actions(dict(call), current)
        if call.get("name") == "write_todos":
            current = normalize_todos((call.get("args") or {}).get("todos"))
    if len(actions) == 1 and actions[0]["kind"] in _TODO_KINDS:
        kind = "todo_update"
    elif len(actions) == 1 and actions[0]["kind"] == "subagent":
        kind = "subagent_dispatch"
    elif actions:
        kind = "tool_batch"
    else:
        kind = "final_answer" if message.content else "thinking"
    return {
        "version": 1,
        "kind": kind,
        "shared_attribution": len(actions) > 1,
        "tool_call_ids": [call_id for call in message.tool_calls if (call_id := _text_arg(call.get("id")))],
        "actions": actions,
    }


def _added(usage: dict[str, Any] | None, extra: dict[str, Any]) -> dict[str, Any]:
    base = dict(usage or {})
    return {**base, **{key: int(base.get(key, 0)) + int(extra.get(key, 0)) for key in USAGE_FIELDS}}


class TokenUsageMiddleware(Middleware):
    def __init__(self, config: TokenUsageConfig | None = None) -> None:
        self.config = config or TokenUsageConfig()
        self._totals = dict.fromkeys(USAGE_FIELDS, 0)
        self._counted: str | None = None
        """Id of the last AIMessage added to the totals (after_model sees each model response once; this
        keeps a repeated look at the same message from counting it twice)."""

    def usage(self) -> dict[str, int]:
        """This run's token totals (model calls, plus subagent usage attributed to them)."""
        return dict(self._totals)

    async def after_model(self, state: ThreadState, ctx: RunContext) -> StateUpdate | None:
        messages = list(state.messages)
        updates = self._attribute_subagent_usage(messages)
        last = messages[-1] if messages else None
        if isinstance(last, AIMessage):
            self._count(last)
            stamp = attribution(last, state.todos or [])
            if last.additional_kwargs.get(ATTRIBUTION_KEY) != stamp:
                updates[len(messages) - 1] = last.model_copy(
                    update={"additional_kwargs": {**last.additional_kwargs, ATTRIBUTION_KEY: stamp}}
                )
        return {"messages": [updates[index] for index in sorted(updates)]} if updates else None

    def _count(self, message: AIMessage) -> None:
        usage = message.usage_metadata
        if not usage or message.id == self._counted:
            return
        self._counted = message.id
        details = " ".join(
            f"{key}={value}" for key in ("input_token_details", "output_token_details") if (value := usage.get(key))
        )
        logger.info(
            "LLM token usage: input=%s output=%s total=%s%s",
            usage.get("input_tokens", "?"),
            usage.get("output_tokens", "?"),
            usage.get("total_tokens", "?"),
            f" {details}" if details else "",
        )
        self._totals = _added(self._totals, dict(usage))

    def _attribute_subagent_usage(self, messages: Sequence[BaseMessage]) -> dict[int, BaseMessage]:
        """Adds subagent usage from the ToolMessages right before the new AIMessage to the AIMessages that
        dispatched them, and marks those ToolMessages so a later look does not add it again."""
        updates: dict[int, BaseMessage] = {}
        index = len(messages) - 2
        while index >= 0 and isinstance(tool := messages[index], ToolMessage) and tool.tool_call_id:
            usage = tool.additional_kwargs.get(SUBAGENT_USAGE_KEY)
            if isinstance(usage, dict) and not tool.additional_kwargs.get(SUBAGENT_ATTRIBUTED_KEY):
                for dispatch in range(index - 1, -1, -1):
                    candidate = updates.get(dispatch, messages[dispatch])
                    if isinstance(candidate, AIMessage) and any(
                        call.get("id") == tool.tool_call_id for call in candidate.tool_calls
                    ):
                        merged = _added(dict(candidate.usage_metadata or {}), usage)
                        updates[dispatch] = candidate.model_copy(update={"usage_metadata": merged})
                        updates[index] = tool.model_copy(
                            update={"additional_kwargs": {**tool.additional_kwargs, SUBAGENT_ATTRIBUTED_KEY: True}}
                        )
                        self._totals = _added(self._totals, usage)
                        break
            index -= 1
        return updates

    def export_memory(self) -> dict[str, Any] | None:
        return {"totals": self._totals, "counted": self._counted}

    def import_memory(self, memory: dict[str, Any]) -> None:
        self._totals = dict(memory["totals"])
        self._counted = memory["counted"]
