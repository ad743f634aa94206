"""The run engine: one agent run on one thread as a durable workflow (``HartflowRun``), and the subagent runs it
delegates to (``HartflowSubagent``).

Start reading at ``workflows/run/workflow.py``: the run's lifecycle and its whole public surface (updates,
signals, queries). This package re-exports what clients use (the workflow names, its input, its view), so
``from workflows.run import RunView`` stays their import path; modules inside the package import each other by
their own names, never through this one.
"""

from workflows.run.input_check import message_problem
from workflows.run.io import CarriedRun, ReplyInput, RunInput, RunStatus, RunView
from workflows.run.state_stream import PROGRESS_TOPIC
from workflows.run.subagent import SubagentWorkflow
from workflows.run.workflow import (
    STOP_CLARIFICATION_TIMEOUT,
    STOP_RECURSION_LIMIT,
    WORKFLOW_NAME,
    RunWorkflow,
)

__all__ = [
    "PROGRESS_TOPIC",
    "STOP_CLARIFICATION_TIMEOUT",
    "STOP_RECURSION_LIMIT",
    "WORKFLOW_NAME",
    "CarriedRun",
    "ReplyInput",
    "RunInput",
    "RunStatus",
    "RunView",
    "RunWorkflow",
    "SubagentWorkflow",
    "message_problem",
]
