"""Sandbox: the thread's sandbox id lives in thread state, and every run releases it at the end.

Hooks
* ``before_agent`` — eager mode only (``lazy_init: false``): acquires through the ``sandbox.acquire`` activity
  and writes ``{"sandbox": {"sandbox_id": id}}`` (thread state). Lazy mode (the default) does nothing here.
* ``wrap_tool_call`` — hands the run's :class:`SandboxLease` (``middlewares/sandbox_lease.py``, this middleware's)
  down the request. Lazy acquisition happens inside the ``tool.execute`` activity, which reports the id it
  used; the run's tool executor records it in the lease (DeerFlow's ``runtime.context["sandbox_id"]``). When thread
  state had no sandbox id before the call and the run knows one after it, the result becomes a state write
  (thread state): a ToolMessage turns into ``Command(update={"sandbox": …, "messages": [msg]})``, a Command
  gets ``"sandbox"`` merged into its update with everything else kept. Parallel calls that each acquired
  write the same id, which the ``sandbox`` reducer accepts; different ids make it raise.
* ``after_agent`` — releases the state's sandbox id, else the lease's, through the ``sandbox.release`` activity
  (side effect); not when this run's tools reported that the sandbox's provider holds nothing a release would free
  (the local provider: ``ToolCallOutput.sandbox_needs_release``). The run calls after_agent in its ``finally`` path,
  so failed and cancelled runs release too. A run cancelled during its first sandbox call (or whose first sandbox
  call failed) never learnt the id, which the tool activity reports only when it returns, though the activity may
  have created the sandbox (``SandboxLease.unreported``): that run releases by thread (``sandbox_id=None``; the
  provider names the thread's sandbox). Releasing is idempotent at both ends: the provider ignores unknown or
  released ids, and this instance releases at most once per run. A subagent's instance (``release=False``) never
  releases: the subagent shares the lead run's sandbox.

Parts: the lease ``middlewares/sandbox_lease.py``; the contract ``vocabulary/contracts/sandbox.py``
(``SANDBOX_ACQUIRE``, ``SANDBOX_RELEASE``) and its activities in ``activities/tools.py`` over the providers in
``activities/sandbox/base.py`` (``local.py``, ``kubernetes.py``, ``remote.py`` beside it); the run's use of the
lease in ``workflows/run/tools.py``, ``workflows/run/delegate.py`` and ``workflows/run/carry.py``; what escapes the
release is swept by ``workflows/sandbox_sweeper.py`` (``activities/sandbox_sweeper.py``); the pod's server
``workers/sandbox_server.py``. Tests: ``tests/test_sandbox_middleware.py``, ``tests/test_local_sandbox.py``,
``tests/test_kubernetes_sandbox.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from langchain_core.messages import ToolMessage
from pydantic import BaseModel, ConfigDict
from temporalio.common import RetryPolicy

from middlewares import patches
from middlewares._activity_call import call_activity
from middlewares.base import Command, Middleware, ToolCallRequest, ToolHandler, ToolResult
from middlewares.context import ActivityOptions, RunContext
from middlewares.sandbox_lease import SandboxLease
from vocabulary.contracts import (
    SANDBOX_ACQUIRE,
    SANDBOX_RELEASE,
    SandboxAcquireInput,
    SandboxReleaseInput,
)
from vocabulary.state import StateUpdate, ThreadState

_SANDBOX_ACTIVITY_OPTIONS = ActivityOptions(
    start_to_close=timedelta(minutes=5),
    retry=RetryPolicy(
        initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30), maximum_attempts=10
    ),
)
"""Acquire may start a pod. Both calls are idempotent, so they retry through a short provider outage,
but not forever: a run must still end, and the sandbox sweeper removes what a failed release leaves behind."""


class SandboxConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    lazy_init: bool = True
    """Acquire on the first sandbox tool call (DeerFlow's default) instead of at the start of every run."""


class SandboxMiddleware(Middleware):
    def __init__(self, config: SandboxConfig | None = None, *, release: bool = True) -> None:
        self.config = config or SandboxConfig()
        self.release = release
        """False in subagents: they work in the lead run's sandbox, which the lead releases when it ends."""
        self.lease = SandboxLease()
        """What this run knows of its sandbox; the engine restores it across continue-as-new."""
        self._released = False

    async def before_agent(self, state: ThreadState, ctx: RunContext) -> StateUpdate | None:
        if self.config.lazy_init or state_sandbox_id(state) is not None:
            return None
        acquired = await call_activity(
            ctx,
            SANDBOX_ACQUIRE,
            SandboxAcquireInput(ctx.thread),
            summary="Sandbox.before_agent · acquire",
            options=_SANDBOX_ACTIVITY_OPTIONS,
        )
        self.lease.sandbox_id = acquired.sandbox_id
        return {"sandbox": {"sandbox_id": acquired.sandbox_id}}

    async def wrap_tool_call(self, request: ToolCallRequest, handler: ToolHandler) -> ToolResult:
        had_id = state_sandbox_id(request.state) is not None
        result = await handler(request.override(sandbox=self.lease))
        sandbox_id = self.lease.sandbox_id
        if had_id or sandbox_id is None:
            return result
        return persist_sandbox_id(result, sandbox_id)

    async def after_agent(self, state: ThreadState, ctx: RunContext) -> StateUpdate | None:
        if not self.release or self._released:
            return None
        sandbox_id = state_sandbox_id(state) or self.lease.sandbox_id
        if sandbox_id is not None and sandbox_id == self.lease.sandbox_id and not self.lease.needs_release:
            return None  # its provider holds nothing for it (the local one): there is nothing to free
        if sandbox_id is not None:
            summary = "Sandbox.after_agent · release"
        elif self.lease.unreported and ctx.patched(patches.SANDBOX_RELEASE_BY_THREAD):
            summary = "Sandbox.after_agent · release (by thread)"
        else:
            return None
        await call_activity(
            ctx,
            SANDBOX_RELEASE,
            SandboxReleaseInput(ctx.thread, sandbox_id),
            summary=summary,
            options=_SANDBOX_ACTIVITY_OPTIONS,
        )
        self._released = True
        return None


def sandbox_lease(chain: Sequence[Middleware]) -> SandboxLease | None:
    """The lease of the chain's Sandbox middleware (``None`` without one): the engine carries its id across
    continue-as-new."""
    return next((mw.lease for mw in chain if isinstance(mw, SandboxMiddleware)), None)


def state_sandbox_id(state: ThreadState) -> str | None:
    sandbox: dict[str, Any] = state.sandbox or {}
    sandbox_id = sandbox.get("sandbox_id")
    return sandbox_id if isinstance(sandbox_id, str) and sandbox_id else None


def persist_sandbox_id(result: ToolResult, sandbox_id: str) -> Command:
    """The tool result, turned into (or extended as) a state write of the sandbox id."""
    sandbox = {"sandbox_id": sandbox_id}
    if isinstance(result, ToolMessage):
        return Command(update={"sandbox": sandbox, "messages": [result]})
    return Command(update={**result.update, "sandbox": sandbox}, interrupt=result.interrupt)
