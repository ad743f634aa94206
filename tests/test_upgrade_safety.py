"""Upgrade safety: the replay test (tests/test_replay.py) can fail, and the README's procedure makes it pass.

Every committed history (every tag in tests/histories/) is replayed against two upgrades of the run workflow
that add one activity after the thread state is loaded (tests/support/upgraded_run.py): guarded by
``workflow.patched``, each history replays; unguarded, each one is reported nondeterministic — exactly what
would break runs that are in flight (paused for days on a clarification, say) when the new code is deployed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer
from temporalio.workflow import NondeterminismError

from tests.support.upgraded_run import PatchedRunWorkflow, UnpatchedRunWorkflow
from workers.worker import workflow_runner
from workflows.run import WORKFLOW_NAME

HISTORIES = sorted((Path(__file__).parent / "histories").glob("*.json"))
RUN_HISTORIES = [
    path
    for path in HISTORIES
    if json.loads(path.read_text(encoding="utf-8"))["events"][0]["workflowExecutionStartedEventAttributes"][
        "workflowType"
    ]["name"]
    == WORKFLOW_NAME
]


def _history(path: Path) -> WorkflowHistory:
    raw = path.read_text(encoding="utf-8")
    # The recorded id, when the history has it: a subagent's child workflow id derives from its parent's.
    started = json.loads(raw)["events"][0]["workflowExecutionStartedEventAttributes"]
    return WorkflowHistory.from_json(started.get("workflowId") or path.stem, raw)


def _replayer(workflow: type) -> Replayer:
    return Replayer(workflows=[workflow], data_converter=pydantic_data_converter, workflow_runner=workflow_runner())


def test_there_are_run_histories_of_every_tag() -> None:
    assert len(RUN_HISTORIES) >= 2
    assert {path.name.split("-", 1)[0] for path in HISTORIES} <= {path.name.split("-", 1)[0] for path in RUN_HISTORIES}


@pytest.mark.parametrize("path", RUN_HISTORIES, ids=[p.stem for p in RUN_HISTORIES])
async def test_a_patched_change_replays_old_histories(path: Path) -> None:
    result = await _replayer(PatchedRunWorkflow).replay_workflow(_history(path), raise_on_replay_failure=False)
    assert result.replay_failure is None


@pytest.mark.parametrize("path", RUN_HISTORIES, ids=[p.stem for p in RUN_HISTORIES])
async def test_the_same_change_without_the_patch_is_nondeterministic(path: Path) -> None:
    result = await _replayer(UnpatchedRunWorkflow).replay_workflow(_history(path), raise_on_replay_failure=False)
    assert isinstance(result.replay_failure, NondeterminismError)
    # The new command lands where the old run recorded something else (here: a patch marker of its own).
    assert "[TMPRL1100] Nondeterminism error" in str(result.replay_failure)
