"""Issue 4's context and planning middlewares sit at their DeerFlow positions, each present exactly when its
condition holds — in the built chain and in what ``hartflow status --json`` reports for a live run."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError

from middlewares.chain import build_lead_chain, describe
from middlewares.run_settings import RunSettings
from tests.support import start_run
from workers.cli import run_command
from workers.testing import calls, make_config, running_worker, settle, tool_call, write_script

MINE = ["DynamicContext", "SkillActivation", "TodoList", "TokenUsage", "DeferredToolFilter"]
ALL_ON: dict[str, Any] = {
    "plan_mode": True,
    "middlewares": {"token_usage": {"enabled": True}, "tool_search": {"enabled": True, "deferred": ["grep"]}},
}
ALL_OFF: dict[str, Any] = {
    "plan_mode": False,
    "middlewares": {"token_usage": {"enabled": False}, "tool_search": {"enabled": True, "deferred": []}},
}


def _mine(chain: list[str]) -> list[str]:
    return [name for name in chain if name in MINE]


@pytest.mark.parametrize(
    ("settings", "present"),
    [
        (ALL_ON, MINE),
        (ALL_OFF, ["DynamicContext", "SkillActivation"]),
        ({}, ["DynamicContext", "SkillActivation", "TokenUsage"]),  # DeerFlow's defaults
        (
            {"middlewares": {"tool_search": {"enabled": False, "deferred": ["grep"]}}},
            ["DynamicContext", "SkillActivation", "TokenUsage"],
        ),
    ],
)
def test_conditions_and_order(settings: dict[str, Any], present: list[str]) -> None:
    chain = describe(build_lead_chain(RunSettings.model_validate(settings)))
    assert _mine(chain) == present
    # The lead tail starts right after the runtime base, and Clarification stays last.
    assert chain[chain.index("ToolErrorHandling") + 1] == "DynamicContext"
    assert chain[-1] == "Clarification"


async def test_hartflow_status_shows_the_chain_of_a_live_run(
    client: Client,
    home: Path,
    temporal_address: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ask = calls(tool_call("ask_clarification", "q1", question="Which one?", clarification_type="approach_choice"))
    chains = {}
    for label, run in (("on", ALL_ON), ("off", ALL_OFF)):
        config = make_config(home, temporal_address, run=run)
        monkeypatch.setenv("TEMPORAL_ADDRESS", temporal_address)
        monkeypatch.setenv("HARTFLOW_STORAGE__HOME", str(home))
        monkeypatch.setenv("HARTFLOW_TEMPORAL__TASK_QUEUE", config.temporal.task_queue)
        async with running_worker(client, config):
            handle = await start_run(client, config, "pick", model=write_script(home, [ask]))
            assert (await settle(handle)).status == "awaiting_input"
            code = await asyncio.to_thread(run_command, ["status", handle.id.rpartition(":")[2], "--json"])
            status = json.loads(capsys.readouterr().out)
            await handle.cancel()
            with pytest.raises(WorkflowFailureError):
                await handle.result()
        assert code == 0 and status["status"] == "awaiting_input"
        assert status["chain"] == describe(build_lead_chain(config.run))
        # DeerFlow's chain for the same settings: hartflow's, with the entries it lacks where DeerFlow has them.
        deerflow = status["deerflow_chain"]
        assert [e["hartflow"] for e in deerflow if e["hartflow"]] == status["chain"]
        names = [e["deerflow"] for e in deerflow]
        assert names[names.index("SandboxAuditMiddleware") + 1] == "ReadBeforeWriteMiddleware"
        at = names.index("SkillActivationMiddleware")
        assert names[at + 1 : at + 3] == ["SkillToolPolicyMiddleware", "DurableContextMiddleware"]
        assert all(e["deerflow"] and e["note"] is None for e in deerflow), "hartflow runs every entry DeerFlow builds"
        assert names[0] == "InputSanitizationMiddleware" and names[-1] == "ClarificationMiddleware"
        chains[label] = status["chain"]
    assert _mine(chains["on"]) == MINE
    assert _mine(chains["off"]) == ["DynamicContext", "SkillActivation"]
