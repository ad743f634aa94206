"""What a run carries across continue-as-new: the continued run resumes from it as if it had never stopped.

A mixin of the run workflow (``workflows/run/workflow.py``): ``_continue_as_new`` packs the run into a ``CarriedRun``,
``_resume`` unpacks it in the continued run, field for field.
"""

from __future__ import annotations

from typing import NoReturn

from temporalio import workflow
from temporalio.contrib.workflow_streams import WorkflowStream

from middlewares.base import Middleware
from middlewares.context import TemporalRunContext
from vocabulary.contracts import McpToolInfo
from vocabulary.state import ThreadState
from vocabulary.transcript import TranscriptCursor
from workflows.run.io import CarriedRun, RunInput


class RunCarry:
    """Packs and unpacks the run across continue-as-new."""

    _input: RunInput
    _ctx: TemporalRunContext
    _chain: list[Middleware]
    _state: ThreadState
    _version: int
    _model_calls: int
    _transcript: TranscriptCursor
    _stream: WorkflowStream
    _mcp_tools: list[McpToolInfo] | None

    def _resume(self, carried: CarriedRun) -> None:
        self._version = carried.version
        self._model_calls = carried.model_calls
        self._ctx.turn = carried.turn
        self._ctx.call_counts = dict(carried.call_counts)
        self._ctx.stop_reason = carried.stop_reason
        self._ctx.sandbox_id = carried.sandbox_id
        for mw in self._chain:
            if mw.name in carried.memory:
                mw.import_memory(carried.memory[mw.name])
        self._state = carried.state
        self._transcript = carried.transcript or TranscriptCursor()

    def _continue_as_new(self) -> NoReturn:
        ctx = self._ctx
        carried = CarriedRun(
            state=self._state,
            version=self._version,
            turn=ctx.turn,
            model_calls=self._model_calls,
            call_counts=dict(ctx.call_counts),
            stop_reason=ctx.stop_reason,
            sandbox_id=ctx.sandbox_id,
            memory={mw.name: memory for mw in self._chain if (memory := mw.export_memory()) is not None},
            stream=self._stream.get_state(),
            transcript=self._transcript,
            mcp_tools=self._mcp_tools,
        )
        workflow.continue_as_new(
            RunInput(
                thread_id=self._input.thread_id,
                message=self._input.message,
                model=self._input.model,
                user_id=self._input.user_id,
                settings=self._input.settings,
                carried=carried,
                subagent=self._input.subagent,
            )
        )
