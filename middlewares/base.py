"""The middleware contract: six async hooks with LangChain v1 ``create_agent`` semantics.

Dispatch (``workflows/run/dispatcher.py``) follows DeerFlow exactly:

* ``before_agent`` / ``before_model`` run in list order; ``after_model`` / ``after_agent`` in reverse;
* ``wrap_model_call`` / ``wrap_tool_call``: the first middleware in the list is the outermost wrapper.

``before_*``/``after_*`` return a state update (merged through the reducers in ``vocabulary/state.py``) and may
include ``"jump_to": "model"`` (loop back to the model, skipping tools) or ``"jump_to": "end"``. A
``wrap_model_call`` changes the request only for this call (``request.override(...)``), or returns an
``AIMessage`` without calling ``handler`` to short-circuit the model. A ``wrap_tool_call`` returns a
``ToolMessage`` or a :class:`Command` carrying a state update (and, for the clarification pause, an interrupt).

Hooks run in workflow code: they must be deterministic and reach time, ids and side effects only through
``ctx`` (:class:`middlewares.context.RunContext`). A middleware instance lives for one run; state that must
outlive a continue-as-new goes through :meth:`Middleware.export_memory` / :meth:`Middleware.import_memory`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from langchain_core.messages import AIMessage, BaseMessage, SystemMessage, ToolMessage

from middlewares.context import RunContext
from middlewares.sandbox_lease import SandboxLease
from vocabulary.state import StateUpdate, ThreadState
from vocabulary.tools import ToolSpec

HOOKS = ("before_agent", "before_model", "wrap_model_call", "after_model", "wrap_tool_call", "after_agent")


@dataclass(frozen=True)
class ModelRequest:
    """What the next model call will see. Overrides are request-only: they never reach thread state."""

    messages: list[BaseMessage]
    system_message: SystemMessage | None
    tools: list[ToolSpec]
    state: ThreadState
    ctx: RunContext
    model: str
    breaker_gate: bool = False
    """The model activity turns the call away unless its worker knows the circuit breaker closed
    (``ModelCallInput.breaker_gate``): LLMErrorHandling left the check to the call."""

    def override(self, **changes: Any) -> ModelRequest:
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class ToolCallRequest:
    """One tool call of the last AIMessage, as it travels through the ``wrap_tool_call`` chain."""

    tool_call: dict[str, Any]
    tool: ToolSpec | None
    state: ThreadState
    ctx: RunContext
    sandbox: SandboxLease | None = None
    """The run's sandbox lease, set by the Sandbox middleware for the wrappers inside it and the tool itself."""
    review: dict[str, Any] | None = None
    """A reviewer's decision on this call (``vocabulary/approvals.py``), when the run sends an approved, edited or
    rejected call through the chain again (``middlewares/tool_approval.py``)."""

    @property
    def name(self) -> str:
        return str(self.tool_call.get("name") or "")

    @property
    def call_id(self) -> str:
        return str(self.tool_call.get("id") or "")

    @property
    def args(self) -> Any:
        return self.tool_call.get("args")

    def override(self, **changes: Any) -> ToolCallRequest:
        return dataclasses.replace(self, **changes)


@dataclass
class Command:
    """A tool result that also writes thread state (LangGraph's ``Command(update=...)``).

    ``interrupt`` carries a ``human_input_request`` payload: after every tool call of the turn has finished,
    the run commits its state and pauses until a reply arrives.
    """

    update: StateUpdate = field(default_factory=dict)
    interrupt: dict[str, Any] | None = None


ToolResult = ToolMessage | Command
ModelHandler = Callable[[ModelRequest], Awaitable[AIMessage]]
ToolHandler = Callable[[ToolCallRequest], Awaitable[ToolResult]]


class Middleware:
    """Base class: every hook is a no-op, and the dispatcher skips hooks a subclass does not override."""

    name: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not cls.__dict__.get("name"):
            cls.name = cls.__name__.removesuffix("Middleware")

    async def before_agent(self, state: ThreadState, ctx: RunContext) -> StateUpdate | None:
        return None

    async def before_model(self, state: ThreadState, ctx: RunContext) -> StateUpdate | None:
        return None

    async def wrap_model_call(self, request: ModelRequest, handler: ModelHandler) -> AIMessage:
        return await handler(request)

    async def after_model(self, state: ThreadState, ctx: RunContext) -> StateUpdate | None:
        return None

    async def wrap_tool_call(self, request: ToolCallRequest, handler: ToolHandler) -> ToolResult:
        return await handler(request)

    async def after_agent(self, state: ThreadState, ctx: RunContext) -> StateUpdate | None:
        return None

    def tools(self) -> list[ToolSpec]:
        """Tools this middleware adds to the run's catalog (LangChain's ``AgentMiddleware.tools``), usually
        ``intercepted`` ones it answers itself in ``wrap_tool_call``."""
        return []

    def export_memory(self) -> dict[str, Any] | None:
        """Per-run instance memory to carry across continue-as-new (JSON-serialisable), if any."""
        return None

    def import_memory(self, memory: dict[str, Any]) -> None:
        """Restore what :meth:`export_memory` returned, in the continued run."""

    def implements(self, hook: str) -> bool:
        return getattr(type(self), hook) is not getattr(Middleware, hook)

    def hooks(self) -> list[str]:
        return [hook for hook in HOOKS if self.implements(hook)]
