"""The Agent Server app: every router mounted at ``/`` and again under ``/api`` (DeerFlow's proxy layout).

The app keeps nothing between requests: a thread is its committed state and API record in storage, a run is a
segment of the thread's workflow in Temporal (``workers/api/runs.py``), so any number of replicas serve the
same threads. Errors are JSON ``{"detail": ...}`` with the status codes ``langgraph-sdk`` maps (404, 409, 422).
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse
from temporalio.client import Client, WorkflowUpdateRPCTimeoutOrCancelledError
from temporalio.service import RPCError

from activities.storage import StorageError
from workers.api import (
    agents_route,
    assistants_route,
    auth,
    crons,
    discovery,
    files,
    mcp_route,
    memory_route,
    message_page,
    models_route,
    replays,
    run_events,
    runs,
    scheduled_tasks,
    skills_route,
    thread_edits,
    threads,
    token_usage,
    workspace_changes,
)
from workers.api.deps import ApiContext
from workers.api.gateway_extras import small_routers
from workers.api.outages import unreachable
from workers.config import HartflowConfig

PREFIXES = ("", "/api")
OPENAPI_PATH = "/openapi.json"
"""The server's OpenAPI document, every route with its body models (as the LangGraph server serves its own):
what a client generator reads, and what the fuzz test (``tests/test_api_fuzz.py``) generates requests from.
It asks for the same token as every other route."""
_log = logging.getLogger("hartflow.api")


def routers() -> list[APIRouter]:
    """Every router the app serves (each at both prefixes)."""
    return [
        discovery.router,
        threads.router,
        runs.router,
        files.router,
        models_route.router,
        thread_edits.router,
        replays.router,
        run_events.router,
        token_usage.router,
        workspace_changes.router,
        message_page.router,
        mcp_route.router,
        agents_route.router,
        assistants_route.router,
        crons.router,
        scheduled_tasks.router,
        *small_routers(),
        memory_route.router,
        skills_route.router,
    ]


def create_app(config: HartflowConfig, client: Client) -> FastAPI:
    app = FastAPI(
        title="hartflow Agent Server",
        version=discovery.server_version(),
        docs_url=None,
        redoc_url=None,
        openapi_url=OPENAPI_PATH,
    )
    app.state.hartflow = ApiContext(config, client)
    for prefix in PREFIXES:
        for router in routers():
            # Documented once, at "/": the "/api" copies are the same operations (and would repeat their ids).
            app.include_router(router, prefix=prefix, include_in_schema=prefix == "")
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(StorageError, _storage_error)
    app.add_exception_handler(RPCError, _temporal_error)
    app.add_exception_handler(WorkflowUpdateRPCTimeoutOrCancelledError, _temporal_error)
    auth.install_api_guard(app, config)
    return app


async def _validation_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    return JSONResponse({"detail": _one_line(exc.errors())}, status_code=422)


async def _http_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)


async def _storage_error(_: Request, exc: Exception) -> JSONResponse:
    """Storage is down or refusing (an outage, throttling): 503, which clients retry, and one log line — the
    request did not fail through any fault of the caller's or of the server's code."""
    assert isinstance(exc, StorageError)
    _log.warning("storage unavailable: %s", exc)
    return JSONResponse({"detail": f"storage unavailable: {exc}"}, status_code=503, headers={"Retry-After": "1"})


async def _temporal_error(_: Request, exc: Exception) -> JSONResponse:
    """Temporal unreachable (a restart, an outage): 503 and one log line, like storage. Any other RPC error is a
    bug here, not the caller's: it is raised again for the server's 500 and its traceback."""
    if not unreachable(exc):
        raise exc
    _log.warning("Temporal unavailable: %s", exc)
    return JSONResponse({"detail": f"Temporal unavailable: {exc}"}, status_code=503, headers={"Retry-After": "1"})


def _one_line(errors: Any) -> str:
    problems = []
    for error in errors:
        where = ".".join(str(part) for part in error.get("loc", ()) if part != "body")
        message = str(error.get("msg")).removeprefix("Value error, ")
        problems.append(f"{where}: {message}" if where else message)
    return "; ".join(problems) or "invalid request"
