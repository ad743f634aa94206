"""Every client starts a run the same way (``workers/client/runs.py``): a run the CLI starts, one the Agent Server
starts and one the test helper starts carry the same search attributes, summary and details; only the API's
keeps a memo (the API run that started it, ``workers/api/records.py``). No worker serves the task queue: what is
pinned is the start itself, before any workflow task runs."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client

from tests.support import start_run
from vocabulary.workflow_ids import run_workflow_id
from workers.api.records import RUN_MEMO
from workers.cli import run_command
from workers.testing import answer, make_config, unique, write_script
from workers.testing.inprocess_api import serving_api
from workers.worker import connect
from workflows import search_attributes as sa


async def test_the_cli_the_api_and_the_helper_start_a_run_alike(
    client: Client, home: Path, temporal_address: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = write_script(home.parent, [answer("unused")])
    config = make_config(home, temporal_address, model=model)
    for name in [name for name in os.environ if name.startswith("HARTFLOW_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("TEMPORAL_ADDRESS", temporal_address)
    monkeypatch.setenv("HARTFLOW_STORAGE__HOME", str(home))
    monkeypatch.setenv("HARTFLOW_TEMPORAL__TASK_QUEUE", config.temporal.task_queue)
    monkeypatch.chdir(home.parent)
    threads = {"cli": unique("t-cli"), "api": unique("t-api"), "helper": unique("t-helper")}

    code = await asyncio.to_thread(
        run_command, ["run", "paint it", "--thread", threads["cli"], "--model", model, "--detach", "--json"]
    )
    assert code == 0
    async with serving_api(config, await connect(config)) as base, httpx.AsyncClient(base_url=base) as http:
        body = {"input": {"messages": [{"role": "user", "content": "paint it"}]}, "if_not_exists": "create"}
        response = await http.post(f"/threads/{threads['api']}/runs", json=body)
        assert response.status_code == 200, response.text
    await start_run(client, config, "paint it", model=model, thread_id=threads["helper"])

    handles = {who: client.get_workflow_handle(run_workflow_id(config.user_id, t)) for who, t in threads.items()}
    try:
        for who, handle in handles.items():
            description = await handle.describe()
            attributes = description.typed_search_attributes
            assert {pair.key.name for pair in attributes} == {
                sa.THREAD_ID.name,
                sa.USER_ID.name,
                sa.STATUS.name,
                sa.MODEL.name,
                sa.TURNS.name,
            }, who
            assert attributes.get(sa.THREAD_ID) == threads[who]
            assert attributes.get(sa.USER_ID) == config.user_id
            assert (attributes.get(sa.STATUS), attributes.get(sa.MODEL), attributes.get(sa.TURNS)) == (
                "running",
                model,
                0,
            ), who
            assert await description.static_summary() == f"paint it · thread {threads[who]}"
            assert await description.static_details() == (
                f"**Thread:** {threads[who]}\n\n**User:** {config.user_id}\n\n**Model:** {model}"
            )
            assert set(await description.memo()) == ({RUN_MEMO} if who == "api" else set()), who
    finally:
        for handle in handles.values():
            await handle.terminate("the start is pinned; the run is not needed")
