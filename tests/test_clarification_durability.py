"""The clarification pause is durable: it survives a server crash and is answered by another process, by a
client hartflow did not write (the official ``temporal`` CLI), and it times out on the time-skipping server
after its 7 days, leaving the thread answerable by a new run."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import yaml
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from tests.support import hartflow_cli, run_process, start_run, thread_state
from vocabulary.contracts import MODEL_INVOKE, ModelCallInput
from vocabulary.workflow_ids import run_workflow_id
from workers.config import HartflowConfig
from workers.devserver_options import find_temporal_cli
from workers.testing import answer, ask_clarification, make_config, running_worker, settle, unique, write_script
from workers.testing.history import history_events, scheduled_inputs
from workers.testing.temporal import private_dev_server, time_skipping_environment
from workflows import search_attributes as sa
from workflows.run import RunView


def _messages(home: Path, thread_id: str) -> list[dict[str, Any]]:
    state = thread_state(home, thread_id)
    messages: list[dict[str, Any]] = state["messages"]
    return messages


async def _hartflow(config: HartflowConfig, config_file: Path, *args: str) -> tuple[int, str, str]:
    """The ``hartflow`` CLI in a process of its own, pointed at ``config``'s server and task queue."""
    config_file.write_text(yaml.safe_dump(config.model_dump(mode="json", exclude_none=True)))
    return await hartflow_cli(config_file, *args, timeout=120)


async def test_a_paused_run_survives_a_server_crash_and_another_process_answers(tmp_path: Path, home: Path) -> None:
    async with private_dev_server(tmp_path / "temporal.db") as server:
        config = make_config(home, server.address)
        thread = unique("crash")
        model = write_script(home, [ask_clarification(options=["red", "blue"]), answer("Painted it blue.")])
        client = await Client.connect(server.address, data_converter=pydantic_data_converter)
        async with running_worker(client, config):
            paused = await settle(await start_run(client, config, "paint it", model=model, thread_id=thread))
        assert paused.status == "awaiting_input"

        server.kill()  # SIGKILL: what a crash looks like to the database
        await asyncio.to_thread(server.start)

        client = await Client.connect(server.address, data_converter=pydantic_data_converter)
        handle = client.get_workflow_handle(run_workflow_id(config.user_id, thread), result_type=RunView)
        description = await handle.describe()
        assert description.typed_search_attributes.get(sa.STATUS) == "awaiting_input"
        async with running_worker(client, config):
            assert (await handle.query("pending_input", result_type=dict[str, Any]))["question"] == "Which colour?"
            code, out, err = await _hartflow(config, tmp_path / "cli.yaml", "reply", thread, "--option", "2", "--json")
            assert code == 0, err
            final = await handle.result()
    assert json.loads(out)["status"] == "completed"
    assert final.status == "completed" and final.final_message == "Painted it blue."
    assert final.run_id == paused.run_id, "the same run continued after the restart"
    reply = _messages(home, thread)[-2]
    assert reply["additional_kwargs"]["human_input_response"]["value"] == "blue"


async def test_the_official_temporal_cli_answers_with_a_string_and_with_an_object(
    client: Client, home: Path, temporal_address: str
) -> None:
    config = make_config(home, temporal_address)
    model = write_script(
        home,
        [
            ask_clarification(options=["red", "blue"]),
            ask_clarification("Which shade?", call_id="ask2"),
            answer("Light blue."),
        ],
    )
    async with running_worker(client, config):
        handle = await start_run(client, config, "paint it", model=model)
        for payload in ('{"option_id": "option-2", "request_id": "clarification:ask1"}', '"light"'):
            view = await settle(handle)
            assert view.status == "awaiting_input"
            code, _, err = await run_process(
                find_temporal_cli(),
                "workflow",
                "signal",
                "--address",
                temporal_address,
                "--workflow-id",
                handle.id,
                "--name",
                "clarification_reply",
                "--input",
                payload,
                timeout=120,
            )
            assert code == 0, err
        final = await handle.result()
    assert final.status == "completed" and final.final_message == "Light blue."
    responses = [
        m["additional_kwargs"]["human_input_response"]
        for m in _messages(home, final.thread_id)
        if "human_input_response" in m.get("additional_kwargs", {})
    ]
    assert [(r["request_id"], r["response_kind"], r["value"]) for r in responses] == [
        ("clarification:ask1", "option", "blue"),
        ("clarification:ask2", "text", "light"),
    ]


async def test_an_unanswered_question_times_out_after_7_days_and_a_new_run_can_answer(home: Path) -> None:
    async with time_skipping_environment() as env:
        client = env.client
        config = make_config(home, "time-skipping:unused")
        thread = unique("timeout")
        asked = write_script(home, [ask_clarification(options=["red", "blue"]), answer("never reached")])
        answered = write_script(home, [answer("Blue it is.")])
        async with running_worker(client, config):
            first = await start_run(client, config, "paint it", model=asked, thread_id=thread)
            timed_out = await first.result()  # the server skips the 7 days while the client waits
            timers = [
                e.timer_started_event_attributes.start_to_fire_timeout.ToTimedelta()
                for e in await history_events(first)
                if e.event_type == EventType.EVENT_TYPE_TIMER_STARTED
            ]
            second = await start_run(client, config, "blue", model=answered, thread_id=thread)
            final = await second.result()
            inputs = await scheduled_inputs(client, await history_events(second), MODEL_INVOKE, ModelCallInput)
    [request] = [i for i in inputs if i.purpose == "agent"]
    assert timed_out.status == "completed" and timed_out.stop_reason == "clarification_timeout"
    assert timedelta(days=7) in timers, "the default clarification timeout is 7 days"
    assert final.status == "completed" and final.final_message == "Blue it is."
    # The new run sees the unanswered question and then the user's answer, as in DeerFlow.
    ids = [m.id for m in request.messages]
    after = request.messages[ids.index("clarification:ask1") + 1 :]
    assert any(m.type == "human" and "blue" in str(m.content) for m in after)
