"""The runtime base, pinned in DeerFlow's order (``_build_runtime_middlewares`` in ``bytedance/deer-flow:
backend/packages/harness/deerflow/agents/middlewares/tool_error_handling_middleware.py``), as built and as a real
run reports it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from middlewares.chain import describe, runtime_base
from middlewares.run_settings import RunSettings
from tests.support import start_run
from workers.testing import answer, make_config, running_worker, settle, write_script

BASE = [
    "InputSanitization",
    "ToolOutputBudget",
    "ToolResultSanitization",
    "ThreadData",
    "Uploads",
    "Sandbox",
    "DanglingToolCall",
    "LLMErrorHandling",
    "Guardrail",
    "SandboxAudit",
    "ReadBeforeWrite",
    "ToolErrorHandling",
]
GUARDRAILS = {"enabled": True, "provider": {"use": "deerflow.guardrails.builtin:AllowlistProvider"}}


@pytest.mark.parametrize(
    ("include_uploads", "guardrails", "expected"),
    [
        (True, GUARDRAILS, BASE),
        (True, {}, [name for name in BASE if name != "Guardrail"]),
        (False, GUARDRAILS, [name for name in BASE if name != "Uploads"]),
    ],
)
def test_the_base_is_built_in_deerflow_order(
    include_uploads: bool, guardrails: dict[str, Any], expected: list[str]
) -> None:
    settings = RunSettings.model_validate({"middlewares": {"guardrails": guardrails}})
    assert describe(runtime_base(settings, include_uploads=include_uploads)) == expected


async def test_a_run_reports_the_base_first_in_deerflow_order(
    client: Client, home: Path, temporal_address: str
) -> None:
    config = make_config(home, temporal_address, run={"middlewares": {"guardrails": GUARDRAILS}})
    async with running_worker(client, config):
        handle = await start_run(client, config, "hi", model=write_script(home, [answer("hello")]))
        await settle(handle)
        chain = await handle.query("chain", result_type=list[str])
    assert chain[: len(BASE)] == BASE
    assert chain[-1] == "Clarification"
