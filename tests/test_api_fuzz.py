"""Every route of ``hartflow serve`` fuzzed from the server's own OpenAPI document (schemathesis): generated
requests, valid and invalid, must never get a 5xx, never drop the connection, and never make the server log
an error (issue 24: a traceback for any input is a bug).

The server is the real one: uvicorn on loopback with ``api.auth: bearer`` (every request carries a token, so
authentication runs and the routes behind it are reached), a worker, the session's Temporal dev server and
filesystem storage. It runs on its own event loop in a thread, since schemathesis sends its requests
synchronously. Half of the requests that name a thread name a real one, so they get past the 404 to the route's
own checks. Bounded by a fixed number of examples per operation and mode, derandomized, so a run is the same
every time (one to six minutes of CPU in all on 2 cores, by how much the host lets the machine have)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import queue
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from fastapi.routing import APIRoute
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from tests.support.tenants import TOKENS
from tests.test_api_access import bearer_settings
from workers.api.app import OPENAPI_PATH, routers
from workers.config import HartflowConfig
from workers.testing import answer, make_config, running_worker, serving_api, unique, write_script
from workers.worker import connect

EXAMPLES_PER_OPERATION = 12
"""Per operation and generation mode (valid, then invalid requests): ~23 operations × 2 × 12 requests."""
SHARDS = 8
"""Tests the operations are dealt to. At 4, one took ~100 s alone on a 2-core machine whose host took CPU from it,
and over the suite's 300 s per-test timeout beside the suite's other tests (a timeout while hypothesis built its
strategies, not a hang): the work is the same, split finer."""
AUTH = {"Authorization": f"Bearer {TOKENS['alice']}"}
ONESHOTS = ("input_polish", "suggestions")
"""The purposes of the small model-backed routes: the script answers them too (else they are the model's 502)."""


class _Errors(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(f"{record.name}: {record.getMessage()}")


@contextlib.contextmanager
def server_in_thread(config: HartflowConfig) -> Iterator[str]:
    """The app and a worker on an event loop of their own; yields the base URL."""
    started: queue.Queue[tuple[str, asyncio.AbstractEventLoop, asyncio.Event] | BaseException] = queue.Queue()

    async def serve() -> None:
        stop = asyncio.Event()
        try:
            worker_client = await Client.connect(config.temporal.address, data_converter=pydantic_data_converter)
            async with running_worker(worker_client, config), serving_api(config, await connect(config)) as url:
                started.put((url, asyncio.get_running_loop(), stop))
                await stop.wait()
        except BaseException as exc:
            started.put(exc)
            raise

    thread = threading.Thread(target=asyncio.run, args=(serve(),), name="fuzzed-server")
    thread.start()
    ready = started.get(timeout=120)
    if isinstance(ready, BaseException):
        thread.join()
        raise ready
    url, loop, stop = ready
    try:
        yield url
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(timeout=120)


@pytest.fixture
def fuzz_config(home: Path, temporal_address: str, tmp_path: Path) -> HartflowConfig:
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    # A user of this test's own: a user's memory workflow stays on the task queue of the worker that started it,
    # so a name shared with another test (its worker gone) would leave the memory routes' edits unanswered.
    fuzzer = {"user_id": unique("fuzzer"), "token_sha256": hashlib.sha256(TOKENS["alice"].encode()).hexdigest()}
    return make_config(
        home, temporal_address,
        model=write_script(scripts, [answer("fuzzed"), *({**answer("fuzzed"), "for": p} for p in ONESHOTS)]),
        api={**bearer_settings(allow_model_specs=True, model_scripts_dir=str(scripts)), "tokens": [fuzzer]},
    )  # fmt: skip


@pytest.fixture
def server_errors() -> Iterator[_Errors]:
    handler = _Errors()
    loggers = [logging.getLogger(name) for name in ("uvicorn.error", "uvicorn", "hartflow.api", "fastapi")]
    for logger in loggers:
        logger.addHandler(handler)
    try:
        yield handler
    finally:
        for logger in loggers:
            logger.removeHandler(handler)


def test_the_openapi_document_has_every_route_with_its_body(fuzz_config: HartflowConfig) -> None:
    with server_in_thread(fuzz_config) as url:
        assert httpx.get(f"{url}{OPENAPI_PATH}").status_code == 401  # it asks for a token like every route
        document = httpx.get(f"{url}{OPENAPI_PATH}", headers=AUTH).json()
    served = {
        (method.lower(), route.path_format)
        for router in routers()
        for route in router.routes
        if isinstance(route, APIRoute)
        for method in route.methods
    }
    documented = {(method, path) for path, item in document["paths"].items() for method in item}
    assert documented == served
    for router in routers():
        for route in router.routes:
            if isinstance(route, APIRoute) and route.body_field is not None:
                for method in route.methods:
                    assert "requestBody" in document["paths"][route.path_format][method.lower()], route.path


@pytest.mark.parametrize("shard", range(SHARDS))
def test_no_generated_request_gets_a_server_error(
    shard: int, fuzz_config: HartflowConfig, server_errors: _Errors
) -> None:
    """Every operation, fuzzed in one of :data:`SHARDS` tests (each its own server), so the work of one test stays
    well inside the suite's per-test timeout as routes are added."""
    with server_in_thread(fuzz_config) as url:
        thread_id = httpx.post(f"{url}/threads", json={}, headers=AUTH).json()["thread_id"]
        schema = schemathesis.openapi.from_url(f"{url}{OPENAPI_PATH}", headers=AUTH, timeout=30)
        every = sorted((result.ok() for result in schema.get_all_operations()), key=lambda found: found.label)
        assert len(every) >= 20
        operations = every[shard::SHARDS]
        sent: dict[str, int] = {}
        for operation in operations:
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                _fuzz(operation, mode, url, thread_id, sent)
        assert set(sent) == {operation.label for operation in operations}, "every operation was sent requests"
        # An operation without parameters or body (GET /ok, GET /memory) has one request to make, not twelve.
        takes_input = [o for o in operations if len(o.path_parameters) or len(o.query) or len(o.body)]
        assert sum(sent.values()) >= len(takes_input) * EXAMPLES_PER_OPERATION
    assert server_errors.messages == []


def _fuzz(operation: Any, mode: GenerationMode, url: str, thread_id: str, sent: dict[str, int]) -> None:
    @settings(
        max_examples=EXAMPLES_PER_OPERATION,
        deadline=None,
        database=None,
        derandomize=True,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy(generation_mode=mode), real_thread=st.booleans())
    def send(case: Any, real_thread: bool) -> None:
        if real_thread and "thread_id" in (case.path_parameters or {}):
            case.path_parameters["thread_id"] = thread_id
        response = case.call(base_url=url, headers=AUTH, timeout=120)
        sent[operation.label] = sent.get(operation.label, 0) + 1
        assert response.status_code < 500, f"{operation.label} → {response.status_code}: {response.text[:500]}"

    try:
        send()
    except Unsatisfiable:
        if mode is not GenerationMode.NEGATIVE:
            raise  # else: nothing of the operation can be made invalid (GET /ok has no parameter)
