"""Replay every committed history (tests/histories/) against the current workflow code.

A change to workflow or middleware code that would make an in-flight run nondeterministic fails here.
Record new histories with scripts/record_histories.py when a workflow shape is released.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from workers.worker import WORKFLOWS, workflow_runner

HISTORIES = sorted((Path(__file__).parent / "histories").glob("*.json"))


def test_there_are_histories_to_replay() -> None:
    assert len(HISTORIES) >= 2


@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
async def test_history_replays_deterministically(path: Path) -> None:
    raw = path.read_text(encoding="utf-8")
    workflow_id = json.loads(raw)["events"][0]["workflowExecutionStartedEventAttributes"].get("workflowId") or path.stem
    replayer = Replayer(
        workflows=list(WORKFLOWS), data_converter=pydantic_data_converter, workflow_runner=workflow_runner()
    )
    await replayer.replay_workflow(WorkflowHistory.from_json(workflow_id, raw))
