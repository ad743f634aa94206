"""Replay every committed history (tests/histories/) against the current workflow code.

A change to workflow or middleware code that would make an in-flight run nondeterministic fails here.
Record new histories with scripts/record_histories.py when a workflow shape is released.
"""

from __future__ import annotations

import gc
import json
import threading
from pathlib import Path

import pytest
from temporalio import workflow
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from workers.testing.history import no_garbage_collection
from workers.worker import WORKFLOWS, workflow_runner

HISTORIES = sorted((Path(__file__).parent / "histories").glob("*.json"))


def test_there_are_histories_to_replay() -> None:
    assert len(HISTORIES) >= 2


@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
async def test_history_replays_deterministically(path: Path) -> None:
    with no_garbage_collection():
        await _replay(path)


async def test_no_garbage_collection_runs_on_a_replaying_workflow_thread() -> None:
    """A collection on the workflow thread, with the finalizers it runs, counts against the SDK's 2 s deadlock
    timeout; in CI one took a soak history's replay past it (``workers.testing.history.no_garbage_collection``).
    Here a collection is due at nearly every allocation, and none may start on the thread that replays."""
    on_workflow_thread: list[str] = []

    def note(phase: str, info: dict[str, int]) -> None:
        # The SDK builds a run's instance on the event loop's thread; its activations run on a thread of their own.
        if phase == "start" and workflow.in_workflow() and threading.current_thread() is not threading.main_thread():
            on_workflow_thread.append(f"generation {info['generation']}")

    thresholds = gc.get_threshold()
    gc.callbacks.append(note)
    gc.set_threshold(1)
    try:
        with no_garbage_collection():
            await _replay(HISTORIES[-1])
    finally:
        gc.set_threshold(*thresholds)
        gc.callbacks.remove(note)
    assert on_workflow_thread == []


async def _replay(path: Path) -> None:
    raw = path.read_text(encoding="utf-8")
    workflow_id = json.loads(raw)["events"][0]["workflowExecutionStartedEventAttributes"].get("workflowId") or path.stem
    replayer = Replayer(
        workflows=list(WORKFLOWS), data_converter=pydantic_data_converter, workflow_runner=workflow_runner()
    )
    await replayer.replay_workflow(WorkflowHistory.from_json(workflow_id, raw))
