"""The soak's verdicts, each a list of problems (empty: the check holds).

- ``finished``: every run ended as its driver meant (completed, or cancelled when it was cancelled); no workflow
  is still running and no thread is ``busy`` through the API.
- ``state``: each thread's committed state (read through ``langgraph-sdk``'s ``get_state``) equals what its
  script implies (:func:`bench.soak.scenarios.state_problems`).
- ``replay``: every workflow history in the namespace replays against the current code.
- ``sandbox``: every run that used a sandbox (acquired it, or ran a tool in it) released it, and no sandbox
  process is left on the machine.
- ``streams``: every SSE consumer saw each event of its run exactly once, across its reconnects, in the order
  ``join_stream`` from ``-1`` replays the run.
- ``logs``: no ``TMPRL1100``/``TMPRL1101``, traceback or unraisable exception in any process's log.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

from langgraph_sdk import get_client
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.worker import Replayer

from activities.sandbox.local import LocalSandboxProvider
from bench.soak.clients import Clients
from bench.soak.scenarios import Scenario, state_problems
from vocabulary.contracts import SANDBOX_ACQUIRE, SANDBOX_RELEASE, TOOL_EXECUTE
from vocabulary.workflow_ids import run_workflow_id
from workers.payloads import data_converter_for
from workers.testing.history import no_garbage_collection, scheduled_activities
from workers.worker import WORKFLOWS, workflow_runner

TRACEBACK = "Traceback (most recent call last)"
LOG_SIGNATURES = ("TMPRL1100", "TMPRL1101", TRACEBACK, "Exception ignored in")
ATTEMPT_FAILED = "Completing activity as failed"
CHAINED = ("The above exception was the direct cause", "During handling of the above exception")
EXPECTED_ATTEMPT_FAILURES = (
    "activities.storage.StorageError: ",
    "asyncio.exceptions.CancelledError: Activity cancelled",
)


async def finished(clients: Clients, scenarios: list[Scenario]) -> list[str]:
    problems = [f"{s.thread_id}: the driver failed: {s.outcome['driver_error']}" for s in scenarios
                if "driver_error" in s.outcome]  # fmt: skip
    for s in scenarios:
        status = s.outcome.get("status")
        if status != s.expected_status:
            problems.append(f"{s.thread_id} ({s.kind}): ended {status}, expected {s.expected_status}")
        workflow_id = run_workflow_id(clients.deployment.config.user_id, s.thread_id)
        description = await clients.client.get_workflow_handle(workflow_id).describe()
        if description.status == WorkflowExecutionStatus.RUNNING:
            problems.append(f"{s.thread_id} ({s.kind}): its workflow is still running")
        thread = await get_client(url=clients.deployment.apis[0].url).threads.get(s.thread_id)
        if thread["status"] != "idle":
            problems.append(f"{s.thread_id} ({s.kind}): the API shows the thread {thread['status']}")
    return problems


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content or [] if isinstance(b, dict))


async def state(clients: Clients, scenarios: list[Scenario]) -> list[str]:
    sdk = get_client(url=clients.deployment.apis[1].url)
    problems = []
    for s in scenarios:
        values = (await sdk.threads.get_state(s.thread_id))["values"]
        messages = [{**m, "text": _text(m), "additional_kwargs": m.get("additional_kwargs") or {}}
                    for m in values.get("messages") or []]  # fmt: skip
        problems += [f"{s.thread_id} ({s.kind}): {p}" for p in state_problems(s, messages)]
    return problems


async def _histories(client: Client) -> list[Any]:
    names = {getattr(w, "__temporal_workflow_definition").name for w in WORKFLOWS}
    histories = []
    async for execution in client.list_workflows():
        if execution.workflow_type in names:
            handle = client.get_workflow_handle(execution.id, run_id=execution.run_id)
            histories.append(await handle.fetch_history())
    return histories


async def replay_and_sandboxes(clients: Clients) -> tuple[list[str], list[str], int]:
    """(replay problems, sandbox problems, histories replayed)."""
    histories = await _histories(clients.client)
    replayer = Replayer(
        workflows=list(WORKFLOWS), data_converter=data_converter_for(clients.deployment.config),
        workflow_runner=workflow_runner(),
    )  # fmt: skip
    replay, sandbox = [], []
    releases = clients.deployment.config.sandbox.provider != "local" or LocalSandboxProvider.needs_release
    with no_garbage_collection():  # one collection before them all: a big heap takes a while
        for history in histories:
            result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
            if result.replay_failure is not None:
                replay.append(f"{history.workflow_id}: {result.replay_failure}")
            names = [name for name, _ in scheduled_activities(list(history.events))]
            # A sandbox is acquired eagerly (sandbox.acquire) or by the first tool call; after_agent releases it where
            # its provider holds something (the local one holds nothing: its leftovers are processes, checked below).
            uses = [index for index, name in enumerate(names) if name in (SANDBOX_ACQUIRE, TOOL_EXECUTE)]
            if releases and uses and SANDBOX_RELEASE not in names[uses[0] :]:
                sandbox.append(f"{history.workflow_id}: used a sandbox and never released it")
            closed = history.events[-1].event_type != EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED
            if not closed:
                sandbox.append(f"{history.workflow_id}: its history has not closed")
    sandbox += leftover_processes(clients.deployment.directory)
    return replay, sandbox, len(histories)


def leftover_processes(directory: Path) -> list[str]:
    """Processes working inside the deployment's directory: sandbox commands, which the soak's own processes
    (started from elsewhere) never are."""
    left = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cwd = Path(os.readlink(f"/proc/{pid}/cwd"))
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if cwd.is_relative_to(directory):
            left.append(f"sandbox process {pid} is still running in {cwd}: {command.strip()}")
    return left


async def streams(clients: Clients, scenarios: list[Scenario]) -> tuple[list[str], int, int]:
    """(problems, consumers checked, reconnects)."""
    problems, consumers, reconnects = [], 0, 0
    for s in scenarios:
        for stream in s.outcome.get("streams", []):
            consumers += 1
            reconnects += stream["reconnects"]
            if stream["run_id"] is None:
                problems.append(f"{s.thread_id}: a consumer never learned its run id")
                continue
            whole = await clients.full_stream(s.thread_id, stream["run_id"])
            if stream["ids"] != whole:
                seen = stream["ids"]
                duplicated = sorted({i for i in seen if seen.count(i) > 1})
                missing = [i for i in whole if i not in seen]
                problems.append(f"{s.thread_id} run {stream['run_id']}: the consumer saw {len(seen)} events "
                                f"of {len(whole)} (duplicated {duplicated}, missing {missing})")  # fmt: skip
    return problems, consumers, reconnects


def _tracebacks(text: str) -> list[tuple[str, list[str], int]]:
    """Every logged traceback: (the line before it, the exception line of each traceback in its chain, offset)."""
    found: list[tuple[str, list[str], int]] = []
    lines = text.splitlines(keepends=True)
    offset = 0
    for index, line in enumerate(lines):
        if line.startswith(TRACEBACK):
            end = index + 1
            while end < len(lines) and (lines[end].startswith(" ") or not lines[end].strip()):
                end += 1
            exception = lines[end].strip() if end < len(lines) else ""
            before = next((b.strip() for b in reversed(lines[:index]) if b.strip()), "")
            if found and before.startswith(CHAINED):
                found[-1][1].append(exception)
            else:
                found.append((before, [exception], offset))
        offset += len(line)
    return found


def logs(named: dict[str, str]) -> tuple[list[str], Counter[str]]:
    """(problems, attempt failures the SDK logged as expected). An activity attempt that failed because storage
    was down (retried) or because its run was cancelled is logged by the SDK as a warning with its traceback
    (``Completing activity as failed``): that is the fault being reported, counted by exception; any other
    traceback, and any ``TMPRL1100``/``TMPRL1101`` or unraisable exception, is a problem."""
    problems, expected = [], Counter[str]()
    for name, text in named.items():
        for signature in LOG_SIGNATURES:
            if signature != TRACEBACK and signature in text:
                problems.append(
                    f"{name}: {signature} ({text.count(signature)}x), first:\n{_around(text, text.index(signature))}"
                )
        for before, chain, at in _tracebacks(text):
            causes = [e for e in chain if e.startswith(EXPECTED_ATTEMPT_FAILURES)]
            if before.startswith(ATTEMPT_FAILED) and causes:
                expected[causes[0].split(":", 1)[0]] += 1
            else:
                problems.append(f"{name}: a traceback ending {chain[-1]!r}:\n{_around(text, at)}")
    return problems, expected


def _around(text: str, at: int) -> str:
    return text[max(0, at - 600) : at + 2000]
