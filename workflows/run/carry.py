"""What a run carries across continue-as-new: the continued run resumes from it as if it had never stopped.

:func:`out_of_turns` says when the loop stops (the recursion limit) or goes on in a continued run;
:func:`continue_as_new` packs the run into a ``CarriedRun`` and ends this execution; :func:`resume` unpacks it in
the continued run, field for field, into its fields, context and chain.
"""

from __future__ import annotations

from typing import NoReturn

from temporalio import workflow
from temporalio.contrib.workflow_streams import WorkflowStreamState

from middlewares.base import Middleware
from middlewares.context import RunContext, RunProgress
from middlewares.sandbox import sandbox_lease
from vocabulary.transcript import TranscriptCursor
from workflows.run.fields import RunFields
from workflows.run.io import CarriedRun, RunInput

STOP_RECURSION_LIMIT = "recursion_limit"


def out_of_turns(ctx: RunContext, fields: RunFields, recursion_limit: int) -> bool:
    """The run stops here (the recursion limit), or goes on in a continued run (history grew large)."""
    if fields.model_calls >= recursion_limit:
        ctx.stop(STOP_RECURSION_LIMIT)
        return True
    if fields.model_calls and workflow.info().is_continue_as_new_suggested():
        fields.continue_as_new_requested = True
        return True
    return False


def progress(carried: CarriedRun | None) -> RunProgress:
    """The progress the run starts with: the carried turn, stop reason and call counts, or none yet."""
    if carried is None:
        return RunProgress()
    return RunProgress(carried.turn, carried.stop_reason, dict(carried.call_counts))


def resume(carried: CarriedRun, fields: RunFields, chain: list[Middleware]) -> None:
    """Unpack the rest of ``carried`` into the fields and the chain (its progress went into the fields when the
    run was built)."""
    fields.version = carried.version
    fields.lineage = carried.lineage
    fields.model_calls = carried.model_calls
    lease = sandbox_lease(chain)
    if lease is not None:
        lease.sandbox_id = carried.sandbox_id
        lease.needs_release = carried.sandbox_needs_release
    for mw in chain:
        if mw.name in carried.memory:
            mw.import_memory(carried.memory[mw.name])
    fields.state = carried.state
    fields.transcript = carried.transcript or TranscriptCursor()


def continue_as_new(
    input: RunInput, fields: RunFields, chain: list[Middleware], stream: WorkflowStreamState
) -> NoReturn:
    """Continue as a new run of the same input, carrying this one's fields, counters, middleware memory and
    progress ``stream``."""
    carried = CarriedRun(
        state=fields.state,
        version=fields.version,
        turn=fields.progress.turn,
        model_calls=fields.model_calls,
        call_counts=dict(fields.progress.call_counts),
        stop_reason=fields.progress.stop_reason,
        sandbox_id=lease.sandbox_id if (lease := sandbox_lease(chain)) is not None else None,
        memory={mw.name: memory for mw in chain if (memory := mw.export_memory()) is not None},
        stream=stream,
        transcript=fields.transcript,
        mcp_tools=fields.mcp_tools,
        configured_tools=fields.configured_tools,
        lineage=fields.lineage,
        sandbox_needs_release=lease.needs_release if lease is not None else True,
    )
    workflow.continue_as_new(
        RunInput(
            thread_id=input.thread_id,
            message=input.message,
            model=input.model,
            user_id=input.user_id,
            settings=input.settings,
            carried=carried,
            subagent=input.subagent,
            webhook=input.webhook,
        )
    )
