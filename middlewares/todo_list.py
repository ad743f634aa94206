"""TodoList (plan mode only): the ``write_todos`` tool, and two guards that keep the model on its plan.

Tool
* ``write_todos`` (contributed to the run's tool catalog by :meth:`TodoListMiddleware.tools`) is answered here
  in ``wrap_tool_call``, never as an activity: it is a pure state update. ``todos`` is replaced by the call's
  list (the reducer keeps ``None`` and replaces on any list) and the ToolMessage is LangChain's
  ``Updated todo list to [...]``. More than one ``write_todos`` call in one AIMessage: every one of them gets
  LangChain's parallel-call error instead and the list is left alone.

Hooks
* ``wrap_model_call``: appends the ``<todo_list_system>`` prompt to the system message (the same text every
  call, so the prompt stays cacheable) and drains a queued completion reminder into this request.
* ``before_model``: when ``todos`` is non-empty but no ``write_todos`` call is left in the messages (a summary
  replaced them) and no reminder is there yet, a hidden ``HumanMessage(name="todo_reminder")`` with the list
  is appended (**thread state**: it stays until the context is cut again).
* ``after_model``: a clean final answer (no tool intent of any kind) while some todo is not ``completed``
  sends the model back (``jump_to: "model"``) with a ``todo_completion_reminder`` queued for the next request
  (**request overlay**), at most twice per run; the rejected answer stays in the thread. After two reminders
  the answer is accepted.

Per-run memory: the reminder count and the queued reminder (carried across continue-as-new).

Parts: none outside this module but the ``todos`` reducer in ``vocabulary/state.py``; tests:
``tests/test_todo_list.py``.
"""

from __future__ import annotations

from typing import Any, Literal

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from middlewares._messages import HIDE_FROM_UI_KEY
from middlewares.base import Command, Middleware, ModelHandler, ModelRequest, ToolCallRequest, ToolHandler, ToolResult
from middlewares.context import RunContext
from vocabulary.messages import last_ai_message, message_text
from vocabulary.state import StateUpdate, ThreadState
from vocabulary.tools import ToolSpec

WRITE_TODOS = "write_todos"
REMINDER_NAME = "todo_reminder"
COMPLETION_REMINDER_NAME = "todo_completion_reminder"
MAX_COMPLETION_REMINDERS = 2
PARALLEL_CALLS_ERROR = (
    "Error: The `write_todos` tool should never be called multiple times in parallel. "
    "Please call it only once per model invocation to update the todo list."
)

SYSTEM_PROMPT = """
<todo_list_system>
You have access to the `write_todos` tool to help you manage and track complex multi-step objectives.

**CRITICAL RULES:**
- Mark todos as completed IMMEDIATELY after finishing each step - do NOT batch completions
- Keep EXACTLY ONE task as `in_progress` at any time (unless tasks can run in parallel)
- Update the todo list in REAL-TIME as you work - this gives users visibility into your progress
- DO NOT use this tool for simple tasks (< 3 steps) - just complete them directly

**When to Use:**
This tool is designed for complex objectives that require systematic tracking:
- Complex multi-step tasks requiring 3+ distinct steps
- Non-trivial tasks needing careful planning and execution
- User explicitly requests a todo list
- User provides multiple tasks (numbered or comma-separated list)
- The plan may need revisions based on intermediate results

**When NOT to Use:**
- Single, straightforward tasks
- Trivial tasks (< 3 steps)
- Purely conversational or informational requests
- Simple tool calls where the approach is obvious

**Best Practices:**
- Break down complex tasks into smaller, actionable steps
- Use clear, descriptive task names
- Remove tasks that become irrelevant
- Add new tasks discovered during implementation
- Don't be afraid to revise the todo list as you learn more

**Task Management:**
Writing todos takes time and tokens - use it when helpful for managing complex problems, not for simple requests.
</todo_list_system>
"""

TOOL_DESCRIPTION = """Use this tool to create and manage a structured task list for complex work sessions.

**IMPORTANT: Only use this tool for complex tasks (3+ steps). For simple requests, just do the work directly.**

## When to Use

Use this tool in these scenarios:
1. **Complex multi-step tasks**: When a task requires 3 or more distinct steps or actions
2. **Non-trivial tasks**: Tasks requiring careful planning or multiple operations
3. **User explicitly requests todo list**: When the user directly asks you to track tasks
4. **Multiple tasks**: When users provide a list of things to be done
5. **Dynamic planning**: When the plan may need updates based on intermediate results

## When NOT to Use

Skip this tool when:
1. The task is straightforward and takes less than 3 steps
2. The task is trivial and tracking provides no benefit
3. The task is purely conversational or informational
4. It's clear what needs to be done and you can just do it

## How to Use

1. **Starting a task**: Mark it as `in_progress` BEFORE beginning work
2. **Completing a task**: Mark it as `completed` IMMEDIATELY after finishing
3. **Updating the list**: Add new tasks, remove irrelevant ones, or update descriptions as needed
4. **Multiple updates**: You can make several updates at once (e.g., complete one task and start the next)

## Task States

- `pending`: Task not yet started
- `in_progress`: Currently working on (can have multiple if tasks run in parallel)
- `completed`: Task finished successfully

## Task Completion Requirements

**CRITICAL: Only mark a task as completed when you have FULLY accomplished it.**

Never mark a task as completed if:
- There are unresolved issues or errors
- Work is partial or incomplete
- You encountered blockers preventing completion
- You couldn't find necessary resources or dependencies
- Quality standards haven't been met

If blocked, keep the task as `in_progress` and create a new task describing what needs to be resolved.

## Best Practices

- Create specific, actionable items
- Break complex tasks into smaller, manageable steps
- Use clear, descriptive task names
- Update task status in real-time as you work
- Mark tasks complete IMMEDIATELY after finishing (don't batch completions)
- Remove tasks that are no longer relevant
- **IMPORTANT**: When you write the todo list, mark your first task(s) as `in_progress` immediately
- **IMPORTANT**: Unless all tasks are completed, always have at least one task `in_progress` to show progress

Being proactive with task management demonstrates thoroughness and ensures all requirements are completed successfully.

**Remember**: If you only need a few tool calls to complete a task and it's clear what to do, it's better to just do the task directly and NOT use this tool at all.
"""  # noqa: E501 -- DeerFlow's text, kept line for line

WRITE_TODOS_TOOL = ToolSpec(
    WRITE_TODOS,
    TOOL_DESCRIPTION,
    {
        "type": "object",
        "properties": {
            "todos": {
                "type": "array",
                "description": "The full, updated todo list.",
                "items": {
                    "type": "object",
                    "properties": {
                        "content": {"type": "string", "description": "The task."},
                        "status": {"type": "string", "enum": ["pending", "in_progress", "completed"]},
                    },
                    "required": ["content", "status"],
                },
            }
        },
        "required": ["todos"],
    },
    intercepted=True,
)


class Todo(BaseModel):
    model_config = ConfigDict(extra="ignore")

    content: str
    status: Literal["pending", "in_progress", "completed"]


_TODOS = TypeAdapter(list[Todo])


def format_todos(todos: list[dict[str, Any]]) -> str:
    return "\n".join(f"- [{todo.get('status', 'pending')}] {todo.get('content', '')}" for todo in todos)


def context_loss_reminder(todos: list[dict[str, Any]]) -> HumanMessage:
    return HumanMessage(
        "<system_reminder>\n"
        "Your todo list from earlier is no longer visible in the current context window, but it is still active. "
        f"Here is the current state:\n\n{format_todos(todos)}\n\n"
        "Continue tracking and updating this todo list as you work. "
        "Call `write_todos` whenever the status of any item changes.\n"
        "</system_reminder>",
        name=REMINDER_NAME,
        additional_kwargs={HIDE_FROM_UI_KEY: True},
    )


def completion_reminder(incomplete: list[dict[str, Any]]) -> HumanMessage:
    return HumanMessage(
        "<system_reminder>\n"
        "You have incomplete todo items that must be finished before giving your final response:\n\n"
        f"{format_todos(incomplete)}\n\n"
        "Please continue working on these tasks. Call `write_todos` to mark items as completed as you finish them, "
        "and only respond when all items are done.\n"
        "</system_reminder>",
        name=COMPLETION_REMINDER_NAME,
        additional_kwargs={HIDE_FROM_UI_KEY: True},
    )


def has_tool_intent(message: AIMessage) -> bool:
    """Whether the model asked for tools in any form a provider may leave behind (structured, invalid, raw)."""
    kwargs = message.additional_kwargs or {}
    return bool(
        message.tool_calls
        or message.invalid_tool_calls
        or kwargs.get("tool_calls")
        or kwargs.get("function_call")
        or (message.response_metadata or {}).get("finish_reason") in {"tool_calls", "function_call"}
    )


def _write_todos_calls(message: AIMessage | None) -> int:
    return sum(1 for call in message.tool_calls if call.get("name") == WRITE_TODOS) if message else 0


class TodoListMiddleware(Middleware):
    def __init__(self) -> None:
        self._reminders_sent = 0
        self._queued: list[dict[str, Any]] | None = None
        """The incomplete todos the next request must remind the model of."""

    def tools(self) -> list[ToolSpec]:
        return [WRITE_TODOS_TOOL]

    async def before_model(self, state: ThreadState, ctx: RunContext) -> StateUpdate | None:
        if not state.todos:
            return None
        for message in state.messages:
            if isinstance(message, AIMessage) and _write_todos_calls(message):
                return None  # the list is still visible
            if isinstance(message, HumanMessage) and message.name == REMINDER_NAME:
                return None
        return {"messages": [context_loss_reminder(state.todos)]}

    async def wrap_model_call(self, request: ModelRequest, handler: ModelHandler) -> AIMessage:
        system = request.system_message
        prompt = f"{message_text(system)}\n\n{SYSTEM_PROMPT}" if system is not None else SYSTEM_PROMPT
        request = request.override(system_message=SystemMessage(prompt))
        if self._queued is not None:
            request = request.override(messages=[*request.messages, completion_reminder(self._queued)])
            self._queued = None
        return await handler(request)

    async def after_model(self, state: ThreadState, ctx: RunContext) -> StateUpdate | None:
        last = last_ai_message(state.messages)
        if last is None or has_tool_intent(last):
            return None
        incomplete = [todo for todo in state.todos or [] if todo.get("status") != "completed"]
        if not incomplete or self._reminders_sent >= MAX_COMPLETION_REMINDERS:
            return None
        self._reminders_sent += 1
        self._queued = incomplete
        ctx.emit("todo_completion_reminder", count=self._reminders_sent, incomplete=len(incomplete))
        return {"jump_to": "model"}

    async def wrap_tool_call(self, request: ToolCallRequest, handler: ToolHandler) -> ToolResult:
        if request.name != WRITE_TODOS:
            return await handler(request)
        ctx = request.ctx

        def reply(content: str, status: Literal["success", "error"] = "success") -> ToolMessage:
            return ToolMessage(content, tool_call_id=request.call_id, name=WRITE_TODOS, status=status, id=ctx.uuid())

        if _write_todos_calls(last_ai_message(request.state.messages)) > 1:
            return reply(PARALLEL_CALLS_ERROR, "error")
        try:
            todos = [todo.model_dump() for todo in _TODOS.validate_python((request.args or {}).get("todos"))]
        except ValidationError as exc:
            return reply(
                f"Error invoking tool '{WRITE_TODOS}' with kwargs {request.args} with error:\n{exc}\n"
                " Please fix the error and try again.",
                "error",
            )
        return Command(update={"todos": todos, "messages": [reply(f"Updated todo list to {todos}")]})

    def export_memory(self) -> dict[str, Any] | None:
        return {"reminders_sent": self._reminders_sent, "queued": self._queued}

    def import_memory(self, memory: dict[str, Any]) -> None:
        self._reminders_sent = memory["reminders_sent"]
        self._queued = memory["queued"]
