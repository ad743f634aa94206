"""Configured tools in a run (``tools:`` in the config; deterministic wiring only).

* which built-in sandbox tools a run offers: with a ``tools:`` list, those it names (DeerFlow's agents get the
  sandbox tools their config lists); without one, all of them (:func:`unlisted_sandbox_tools`);
* :func:`discover` — the ``tools.describe`` activity, once at the start of a run whose settings name configured
  tools: the worker built them from its config, and its recorded answer is the run's catalog of them (replays read
  it back, a continue-as-new carries it). Runs without configured tools issue no command here;
* :func:`execute` — one call: ``tools.call`` on the run's task queue, or the team's own activity on its task queue
  (``activity_as_tool``), with the tool's own timeout, heartbeat and attempts (else the run's ``tool_call``
  settings). Like every tool call it runs inside the wrap_tool_call chain: ToolOutputBudget, the sandbox audit,
  ToolErrorHandling (and any result sanitization the chain has) see its result as they see a built-in's.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from langchain_core.messages import ToolMessage
from temporalio.common import RetryPolicy

from middlewares._activity_call import call_activity
from middlewares.base import ToolCallRequest
from middlewares.context import ActivityOptions, RunContext
from middlewares.deferred_tool_filter import TOOL_SEARCH
from middlewares.run_settings import RunSettings
from vocabulary.contracts.configured_tools import (
    TOOLS_CALL,
    TOOLS_DESCRIBE,
    ConfiguredToolCallInput,
    ConfiguredToolInfo,
    ToolsDescribeInput,
)
from vocabulary.tools import BUILTIN_TOOLS, ToolExecution, ToolSpec
from workflows.run.fields import RunFields
from workflows.run.io import RunInput

SANDBOX_TOOLS = frozenset(tool.name for tool in BUILTIN_TOOLS if tool.sandbox)

_DESCRIBE_OPTIONS = ActivityOptions(
    start_to_close=timedelta(seconds=30),
    retry=RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=3),
)


def unlisted_sandbox_tools(settings: RunSettings) -> frozenset[str]:
    if settings.tools is None:
        return frozenset()
    return SANDBOX_TOOLS - set(settings.tools)


def configured_names(settings: RunSettings) -> list[str]:
    return [name for name in settings.tools or () if name not in SANDBOX_TOOLS]


async def discover(ctx: RunContext, names: list[str], *, taken: set[str]) -> list[ConfiguredToolInfo]:
    result = await call_activity(
        ctx, TOOLS_DESCRIBE, ToolsDescribeInput(list(names)), summary="configured tools", options=_DESCRIBE_OPTIONS
    )
    for name in result.missing:
        ctx.emit("tool_unavailable", tool=name, reason="not configured on the worker")
    usable = []
    for tool in result.tools:
        if tool.name in taken:
            ctx.emit("tool_unavailable", tool=tool.name, reason="the name is taken")
            continue
        taken.add(tool.name)
        usable.append(tool)
    return usable


def options_for(execution: ToolExecution, ctx: RunContext) -> ActivityOptions:
    run = ctx.tool_calls.options
    heartbeat = execution.heartbeat_seconds
    if heartbeat is None and execution.task_queue is None:
        heartbeat_timeout = run.heartbeat  # tools.call heartbeats; a team's activity need not
    else:
        heartbeat_timeout = timedelta(seconds=heartbeat) if heartbeat is not None else None
    retry = run.retry or RetryPolicy()
    if execution.max_attempts is not None:
        retry = RetryPolicy(initial_interval=retry.initial_interval, maximum_attempts=execution.max_attempts)
    timeout = execution.timeout_seconds
    return ActivityOptions(
        start_to_close=timedelta(seconds=timeout) if timeout is not None else run.start_to_close,
        heartbeat=heartbeat_timeout,
        retry=retry,
        task_queue=execution.task_queue,
    )


async def execute(request: ToolCallRequest, *, summary: str) -> ToolMessage:
    ctx, tool = request.ctx, request.tool
    assert tool is not None and tool.execution is not None
    execution = tool.execution
    args = dict(request.args) if isinstance(request.args, dict) else {}
    options = options_for(execution, ctx)
    if execution.activity == TOOLS_CALL.name and execution.task_queue is None:
        output = await call_activity(
            ctx,
            TOOLS_CALL,
            ConfiguredToolCallInput(ctx.thread, tool.name, args, request.call_id),
            summary=summary,
            options=options,
        )
        content = output.content
    else:
        result: Any = await ctx.call(execution.activity, args, result_type=object, summary=summary, options=options)
        content = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False, default=str)
    ctx.emit("tool_result", tool=tool.name, call_id=request.call_id, status="success")
    return ToolMessage(content, tool_call_id=request.call_id, name=tool.name, id=ctx.uuid())


async def run_tools(ctx: RunContext, input: RunInput, fields: RunFields, *, taken: set[str]) -> list[ToolSpec]:
    """The run's configured tools as catalog entries: carried across continue-as-new, else described by the
    worker; recorded in ``fields``. ``taken``: the names the run's catalog has already."""
    names = configured_names(input.settings)
    if not names:
        return []
    carried = input.carried.configured_tools if input.carried is not None else None
    if carried is None:
        carried = await discover(ctx, names, taken=taken | {TOOL_SEARCH})
    fields.configured_tools = carried
    return [tool.spec() for tool in carried]
