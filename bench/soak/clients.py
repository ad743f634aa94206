"""The soak's clients, each riding out the faults the way a careful user would, and never guessing.

A client call that fails (the Temporal server, S3 or an API server is down) is not retried blindly: the client
first reads what the deployment really did (does the run exist, is it still waiting) and repeats only what did
not happen. So a duplicate in a thread's state is the system's, never the driver's. ``hartflow`` commands run as
the processes a user runs; their stderr joins the logs the checks read.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx
from langgraph_sdk import get_client
from temporalio.api.enums.v1 import PendingActivityState
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from bench.soak.deployment import Deployment, clean_env
from vocabulary.contracts import TOOL_EXECUTE
from vocabulary.workflow_ids import run_workflow_id
from workers.cli._common import EXIT_BAD_INPUT, EXIT_OK
from workers.client.reader import RunReader
from workers.config import open_object_store
from workflows.run import RunView

MODES = ["values", "messages-tuple", "updates", "custom"]
POLL_SECONDS = 0.25
ENDED = ("completed", "cancelled", "error")
SETTLED = ("awaiting_input", *ENDED)
CLI_TIMEOUT = 900.0


class Missing(Exception):
    """The thread has no run (its start never reached the server)."""


@dataclass
class Clients:
    deployment: Deployment
    client: Client
    rng: random.Random
    cli_logs: list[str] = field(default_factory=list)
    streaming: Counter[str] = field(default_factory=Counter)
    """SSE consumers reading from each API server (by URL) right now: the chaos kills one that has some."""
    problems: list[str] = field(default_factory=list)
    """What a client saw go wrong that is the system's fault (a command that hung, a stream that duplicated)."""

    def __post_init__(self) -> None:
        config = self.deployment.config
        self.reader = RunReader(self.client, open_object_store(config), config.user_id)

    async def cli(self, *arguments: str) -> int:
        """``hartflow ARGUMENTS``; its exit code (its stderr is kept for the log checks)."""
        process = await asyncio.create_subprocess_exec(
            *self.deployment.cli(*arguments), env=clean_env(), stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        try:
            _, stderr = await asyncio.wait_for(process.communicate(), CLI_TIMEOUT)
        except TimeoutError:
            process.kill()
            _, stderr = await process.communicate()
            self.problems.append(f"hartflow {' '.join(arguments[:2])} hung for {CLI_TIMEOUT:g}s")
        self.cli_logs.append(f"$ hartflow {' '.join(arguments)}\n{stderr.decode(errors='replace')}")
        assert process.returncode is not None
        return process.returncode

    async def view(self, thread_id: str) -> RunView:
        """The thread's run as ``hartflow status`` reads it, once the deployment can answer; :class:`Missing`
        when the thread has no run."""
        while True:
            try:
                return await self.reader.view(thread_id, run_workflow_id(self.deployment.config.user_id, thread_id))
            except RPCError as exc:
                if exc.status == RPCStatusCode.NOT_FOUND:
                    raise Missing(thread_id) from None
            except Exception:  # Temporal or S3 is down: ask again once it is back
                pass
            await asyncio.sleep(POLL_SECONDS)

    async def settled(self, thread_id: str, *, not_status: str | None = None) -> RunView:
        """Once the run has settled (and left ``not_status``, a state the caller just answered)."""
        while True:
            view = await self.view(thread_id)
            if view.status in SETTLED and view.status != not_status:
                return view
            await asyncio.sleep(POLL_SECONDS)

    async def cli_start(self, thread_id: str, prompt: str, model: str) -> None:
        """``hartflow run`` until the run exists (a start that failed before reaching the server is repeated)."""
        while True:
            await self.cli("run", prompt, "--thread", thread_id, "--model", model, "--json")
            try:
                await self.view(thread_id)
                return
            except Missing:
                await asyncio.sleep(POLL_SECONDS)

    async def cli_reply(self, thread_id: str, text: str, *, signal: bool) -> None:
        """``hartflow reply`` (``--signal``: the ``clarification_reply`` signal) until the run took the answer."""
        while (await self.view(thread_id)).status == "awaiting_input":
            await self.cli("reply", thread_id, text, *(["--signal"] if signal else []))
            if signal:  # a signal is taken asynchronously: wait for the run to act on it before sending another
                deadline = time.monotonic() + 60
                while (await self.view(thread_id)).status == "awaiting_input" and time.monotonic() < deadline:
                    await asyncio.sleep(POLL_SECONDS)

    async def cancel_in_tool(self, thread_id: str) -> None:
        """Once the run's tool call is executing, ``hartflow cancel`` until the run is cancelled."""
        handle = self.client.get_workflow_handle(run_workflow_id(self.deployment.config.user_id, thread_id))
        while True:
            try:
                pending = (await handle.describe()).raw_description.pending_activities
                started = PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
                if any(p.activity_type.name == TOOL_EXECUTE and p.state == started for p in pending):
                    break
            except Exception:  # the server is down: look again once it is back
                pass
            await asyncio.sleep(POLL_SECONDS)
        while (await self.view(thread_id)).status not in ENDED:
            code = await self.cli("cancel", thread_id)
            if code == EXIT_BAD_INPUT:
                # "No active run" is right when the run closed after the look above: a cancel that reached the
                # server just before it went down (exit 1) ends the run while the next cancel's process starts.
                if (await self.view(thread_id)).status in ENDED:
                    return
                self.problems.append(f"{thread_id}: hartflow cancel refused the running run (exit 2)")
                return
            if code == EXIT_OK:
                await self.settled(thread_id, not_status="awaiting_input")
            # Exit 1: Temporal or storage was away (one line, the command did nothing), or the run ended in
            # another way meanwhile: look again and, as a user would, cancel again. Waiting for the run to settle
            # after a cancel that never reached it let a hanging tool decide how the run ended.

    async def sdk_stream(self, thread_id: str, **run: Any) -> dict[str, Any]:
        """A run streamed through ``langgraph-sdk`` from a random API server; when the stream breaks, joined again
        on the other server from the last event id seen. Returns the run id, every event id the consumer saw
        (in order) and how often it reconnected."""
        urls = [api.url for api in self.deployment.apis]
        url = self.rng.choice(urls)
        known = await self._retrying(lambda sdk: self._run_ids(sdk, thread_id), url)
        run_id: str | None = None
        seen: list[str] = []
        refused = 0
        resumes: list[str] = []  # every request rejoining the stream: the SDK's own reconnects and the driver's

        async def count_resume(request: httpx.Request) -> None:
            if request.method == "GET" and request.url.path.endswith("/stream"):
                resumes.append(request.headers.get("last-event-id", ""))

        while True:
            sdk = get_client(url=url)
            sdk.http.client.event_hooks["request"].append(count_resume)
            try:
                if run_id is None:
                    new = [r for r in await self._run_ids(sdk, thread_id) if r not in known]
                    run_id = new[0] if new else None
                if run_id is None:
                    parts = sdk.runs.stream(thread_id, "hartflow", stream_mode=MODES, **run)
                else:
                    last = seen[-1] if seen else "-1"
                    parts = sdk.runs.join_stream(thread_id, run_id, stream_mode=MODES, last_event_id=last)
                self.streaming[url] += 1
                try:
                    async for part in parts:
                        if part.event == "metadata":
                            run_id = part.data["run_id"]
                        elif part.event not in _UNNUMBERED and part.id is not None and not answer_frame(part):
                            seen.append(part.id)
                finally:
                    self.streaming[url] -= 1
                return {"run_id": run_id, "ids": seen, "reconnects": len(resumes), "thread_id": thread_id}
            except Exception as exc:  # this server went away mid-stream: the other serves the run
                status = getattr(getattr(exc, "response", None), "status_code", None)
                if status is not None and 400 <= status < 500:
                    refused += 1
                    if refused > 3:
                        self.problems.append(f"{thread_id}: the API refused {run} with {status}: {exc}")
                        return {"run_id": run_id, "ids": seen, "reconnects": len(resumes), "thread_id": thread_id}
                url = urls[(urls.index(url) + 1) % len(urls)]
                await asyncio.sleep(POLL_SECONDS)

    @staticmethod
    async def _run_ids(sdk: Any, thread_id: str) -> list[str]:
        try:
            return [r["run_id"] for r in await sdk.runs.list(thread_id, limit=100)]
        except Exception as exc:  # a thread not created yet has no runs
            if getattr(getattr(exc, "response", None), "status_code", None) == 404:
                return []
            raise

    async def _retrying(self, call: Any, url: str) -> Any:
        urls = [api.url for api in self.deployment.apis]
        while True:
            try:
                return await call(get_client(url=url))
            except Exception:  # this server is down: ask the other one
                url = urls[(urls.index(url) + 1) % len(urls)]
                await asyncio.sleep(POLL_SECONDS)

    async def create_thread(self, thread_id: str) -> None:
        url = self.rng.choice([api.url for api in self.deployment.apis])
        await self._retrying(lambda sdk: sdk.threads.create(thread_id=thread_id, if_exists="do_nothing"), url)

    async def full_stream(self, thread_id: str, run_id: str) -> list[str]:
        """Every event id of a finished run, as ``join_stream`` from ``-1`` replays it."""

        async def join(sdk: Any) -> list[str]:
            parts = sdk.runs.join_stream(thread_id, run_id, stream_mode=MODES, last_event_id="-1")
            return [
                p.id async for p in parts if p.event not in _UNNUMBERED and p.id is not None and not answer_frame(p)
            ]

        return await self._retrying(join, self.deployment.apis[0].url)  # type: ignore[no-any-return]


_UNNUMBERED = frozenset({"metadata", "end", "error"})
"""Frames the server sends without an id: the SDK gives them the last id it saw (the SSE rule), which is not theirs.
An ``error`` frame ends the consumer as it ends the SDK's stream; frames it missed are then reported missing."""


def answer_frame(part: Any) -> bool:
    """A model answer's ``messages`` frame: live it comes as token chunks (ids ``{anchor}-{n}.{attempt}.{index}``), from
    a closed run's archive as one whole message (``{offset}-{n}``), so the two are compared without them (the live
    tokens' own durability is ``tests/test_live_tokens.py``'s)."""
    return bool(part.event == "messages" and part.data[0].get("type") in ("ai", "AIMessageChunk", "remove"))
