"""DeferredToolFilter: the deferred catalog (hash, search), and a real run where a deferred tool whose name the
prompt shows is called before it is promoted — blocked, never executed — then promoted by tool_search and run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from langchain_core.messages import ToolMessage
from pydantic import ValidationError
from temporalio.client import Client

from activities.thread_store import FilesystemThreadStore
from middlewares.deferred_tool_filter import (
    DeferredCatalog,
    DeferredToolFilterMiddleware,
    ToolSearchConfig,
    blocked_message,
)
from tests.support import start_run
from vocabulary.contracts import ModelCallInput, ThreadRef, ToolCallInput
from vocabulary.state import ThreadState
from vocabulary.tools import BUILTIN_TOOLS, ToolSpec
from workers.testing import answer, calls, make_config, running_worker, settle, tool_call, unique, write_script
from workers.testing.history import history_events, scheduled_activities, scheduled_inputs

TOOLS = {tool.name: tool for tool in BUILTIN_TOOLS}
DEFERRED = {"run": {"middlewares": {"tool_search": {"enabled": True, "deferred": ["grep", "glob"]}}}}


def test_the_catalog_hash_is_stable_and_follows_the_schemas() -> None:
    catalog = DeferredCatalog([TOOLS["grep"], TOOLS["glob"]])
    assert catalog.hash == DeferredCatalog([TOOLS["glob"], TOOLS["grep"]]).hash
    assert len(catalog.hash) == 16
    changed = ToolSpec("grep", "another description", TOOLS["grep"].parameters)
    assert DeferredCatalog([changed, TOOLS["glob"]]).hash != catalog.hash


@pytest.mark.parametrize(
    ("query", "found"),
    [
        ("select:grep, glob", ["grep", "glob"]),
        ("select:bash", []),
        ("+gl files", ["glob"]),
        ("regular expression", ["grep"]),
        ("GREP|glob", ["grep", "glob"]),
        ("(unbalanced", []),
        ("   ", []),
    ],
)
def test_search(query: str, found: list[str]) -> None:
    catalog = DeferredCatalog([TOOLS["grep"], TOOLS["glob"]])
    assert [tool.name for tool in catalog.search(query)] == found


def test_only_built_in_executable_tools_can_be_deferred() -> None:
    with pytest.raises(ValidationError, match="cannot defer ask_clarification, nope"):
        ToolSearchConfig(enabled=True, deferred=["grep", "nope", "ask_clarification"])


def test_promotions_count_only_under_the_current_catalog_hash() -> None:
    mw = DeferredToolFilterMiddleware(ToolSearchConfig(enabled=True, deferred=["grep"]))
    assert mw.promoted(ThreadState(promoted={"catalog_hash": mw.catalog.hash, "names": ["grep"]})) == {"grep"}
    assert mw.promoted(ThreadState(promoted={"catalog_hash": "stale", "names": ["grep"]})) == frozenset()


async def test_a_leaked_deferred_tool_is_blocked_until_tool_search_promotes_it(
    client: Client, home: Path, temporal_address: str
) -> None:
    config = make_config(home, temporal_address, **DEFERRED)
    thread = unique("deferred")
    grep = {"pattern": "needle", "path": "/mnt/user-data/workspace"}
    model = write_script(
        home,
        [
            calls(tool_call("grep", "g1", **grep)),  # the model read the name in the prompt and calls it at once
            calls(tool_call("tool_search", "s1", query="select:grep")),
            calls(tool_call("grep", "g2", **grep)),
            answer("searched"),
        ],
    )
    async with running_worker(client, config):
        handle = await start_run(client, config, "find the needle", model=model, thread_id=thread)
        view = await settle(handle)
        events = await history_events(handle)
    assert view.status == "completed" and view.final_message == "searched"

    inputs = await scheduled_inputs(client, events, "model.invoke", ModelCallInput)
    offered = [[tool["function"]["name"] for tool in request.tools] for request in inputs]
    assert all("tool_search" in names and "glob" not in names for names in offered)
    assert ["grep" in names for names in offered] == [False, False, True, True]
    assert all(
        request.system_message is not None
        # SystemMessageCoalescing puts DynamicContext's date reminder after it, as in DeerFlow.
        and request.system_message.content.rpartition("\n\n<system-reminder>")[0].endswith(
            "<available-deferred-tools>\nglob\ngrep\n</available-deferred-tools>"
        )
        for request in inputs
    )

    executed = await scheduled_inputs(client, events, "tool.execute", ToolCallInput)
    assert [call.tool_call["id"] for call in executed] == ["g2"], "the blocked call and tool_search never ran as tools"
    assert [name for name, _ in scheduled_activities(events)].count("tool.execute") == 1

    state = FilesystemThreadStore(home).load(ThreadRef(config.user_id, thread)).state
    results = {m.tool_call_id: m for m in state.messages if isinstance(m, ToolMessage)}
    assert (results["g1"].status, results["g1"].content) == ("error", blocked_message("grep"))
    assert blocked_message("grep") == (
        "Error: Tool 'grep' is deferred and has not been promoted yet. "
        "Call tool_search first to expose and promote this tool's schema, then retry."
    )
    assert [schema["name"] for schema in json.loads(results["s1"].content)] == ["grep"]
    assert results["g2"].status == "success"
    assert state.promoted == {"catalog_hash": DeferredCatalog([TOOLS["grep"], TOOLS["glob"]]).hash, "names": ["grep"]}
