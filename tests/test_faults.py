"""The fault suite (issue #9): each fault is injected for real — SIGKILL of a worker process or of the Temporal
server, a provider answering 503 — and each test asserts that nothing was lost or duplicated: the run
completes, no tool that completed runs again, the sandbox is released exactly once, and the committed thread
state holds every message exactly once.

Worker kills use the kubernetes sandbox provider against kmock (``tests/support/kube.py``): its pods are processes of
the test, not of the worker, so they outlive the kill as real pods do, and every release is a DELETE the
emulator records — the local provider's release is a no-op nobody could count. (S3 being unavailable is
covered with the storage backend's tests, issue 6.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import kmock
import pytest
from langchain_core.messages import AIMessage, AnyMessage, ToolMessage
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter

from activities.sandbox.kubernetes_manifests import pod_name, sandbox_id_for
from middlewares.llm_error_handling import CIRCUIT_OPEN_TEXT, UNAVAILABLE_TEXT
from tests.support import start_run
from tests.support.fault_middlewares import AFTER_AGENT_LOG, AFTER_AGENT_STARTED
from tests.support.faults import completed_attempts, wait_for_started_activity, worker_identity
from tests.support.kube import Cluster, eventually_async
from tests.test_llm_error_handling import breaker_markers, breaker_state, error, llm_config, rewrite
from vocabulary.contracts import (
    LLM_BREAKER_CHECK,
    LLM_BREAKER_REPORT,
    MODEL_INVOKE,
    SANDBOX_RELEASE,
    TOOL_EXECUTE,
    ThreadRef,
)
from workers.config import HartflowConfig
from workers.testing import answer, calls, make_config, running_worker, settle, tool_call, unique, write_script
from workers.testing.history import history_events, scheduled_activities
from workers.testing.processes import kill_hard, wait_for_file, worker_process, worker_processes
from workers.testing.temporal import private_dev_server, time_skipping_environment
from workers.worker import SWEEPER_SCHEDULE_PREFIX, thread_store
from workflows.run import RunView

FIRST = tool_call("bash", "first", command="echo first >> log")
"""Every scenario's first turn: a tool call that completes before the fault and must never run again."""


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with Cluster.running(tmp_path / "kubelet") as running:
        yield running


def _kube_config(cluster: Cluster, home: Path, address: str, **run: Any) -> HartflowConfig:
    # Short heartbeats: the dead worker's in-flight attempt is retried elsewhere within seconds.
    heartbeats = {"model_call": {"heartbeat_seconds": 2}, "tool_call": {"heartbeat_seconds": 2}}
    return make_config(home, address, sandbox=cluster.sandbox_settings(), run={**heartbeats, **run})


async def _workspace(cluster: Cluster, config: HartflowConfig, thread: str) -> Path:
    """The thread's pod's ``/mnt/user-data/workspace`` on the test's disk, once the pod runs."""
    pod = pod_name(sandbox_id_for(config.user_id, thread))
    root = await eventually_async(
        lambda: pod in cluster.kubelet.containers and cluster.kubelet.root_of(pod), timeout=60, what=f"pod {pod} to run"
    )
    return Path(root) / "workspace"


def _scheduled(events: list[Any], activity_type: str) -> int:
    return sum(1 for name, _ in scheduled_activities(events) if name == activity_type)


async def _assert_nothing_lost_or_duplicated(
    handle: WorkflowHandle[Any, RunView],
    cluster: Cluster,
    config: HartflowConfig,
    workspace: Path,
    *,
    model_calls: int,
    tool_call_ids: list[str],
) -> list[Any]:
    """The run's history and effects after a fault: returns the history for scenario-specific checks."""
    events = await history_events(handle)
    thread = handle.id.rpartition(":")[2]
    assert (workspace / "log").read_text().split().count("first") == 1, "a completed tool call ran again"
    assert _scheduled(events, MODEL_INVOKE) == model_calls, "a model call was lost or made twice"
    assert _scheduled(events, SANDBOX_RELEASE) == 1
    assert [a for _, a, _ in completed_attempts(events, SANDBOX_RELEASE)] == [1], "the release completed once, at once"
    assert len(list(cluster.emulator[kmock.action.DELETE, kmock.resource("v1/pods")])) == 1, "one pod DELETE"
    assert not cluster.names("pods"), "the sandbox pod is gone"
    messages = await _committed_messages(config, thread)
    ids = [m.id for m in messages]
    assert len(ids) == len(set(ids)), "a message was committed twice"
    assert [m.tool_call_id for m in messages if isinstance(m, ToolMessage)] == tool_call_ids
    assert sum(1 for m in messages if isinstance(m, AIMessage)) == model_calls
    return events


async def _committed_messages(config: HartflowConfig, thread: str) -> list[AnyMessage]:
    snapshot = await asyncio.to_thread(thread_store(config).load, ThreadRef(config.user_id, thread))
    return list(snapshot.state.messages)


async def _delete_sweeper_schedule(client: Client, config: HartflowConfig) -> None:
    """A worker process with the kubernetes provider creates its task queue's sweeper schedule at start."""
    await client.get_schedule_handle(f"{SWEEPER_SCHEDULE_PREFIX}{config.temporal.task_queue}").delete()


# -- a worker killed (SIGKILL) at each point of a run ---------------------------------------------------------
#
# The run starts on a worker process alone. At the fault point nothing else of the run can be scheduled, so the
# test starts the survivor — a fresh worker in the test process, with an empty cache: it knows the run only
# from history — and then SIGKILLs the process. (In the test process because booting a second worker process
# costs 10-15 s of imports on a loaded 2-core machine; the two-worker test below uses two processes.)

SURVIVOR = "survivor"
"""The identity of the worker that finishes the run, as history records it."""


def _last_workflow_task_worker(events: list[Any]) -> str:
    """The worker that ran the run's last workflow task (and so holds it in its cache)."""
    completed = [e for e in events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED]
    return str(completed[-1].workflow_task_completed_event_attributes.identity)


async def test_worker_killed_during_a_model_call(
    client: Client, home: Path, temporal_address: str, cluster: Cluster
) -> None:
    config = _kube_config(cluster, home, temporal_address)
    thread = unique("thread")
    gate = home / "model-gate"
    model = write_script(home, [calls(FIRST), {**answer("survived"), "wait_for_file": str(gate)}])
    with worker_process(config, home.parent / "doomed.yaml") as doomed:
        handle = await start_run(client, config, "work", model=model, thread_id=thread)
        workspace = await _workspace(cluster, config, thread)
        await wait_for_file(workspace / "log")  # the first turn's tool ran; the next model call is the one to kill
        pending = await wait_for_started_activity(handle, MODEL_INVOKE)
        assert pending.last_worker_identity == worker_identity(doomed)
        async with running_worker(client, config, identity=SURVIVOR):
            kill_hard(doomed)
            gate.touch()
            final = await asyncio.wait_for(handle.result(), timeout=120)
    await _delete_sweeper_schedule(client, config)

    assert (final.status, final.final_message) == ("completed", "survived")
    events = await _assert_nothing_lost_or_duplicated(
        handle, cluster, config, workspace, model_calls=2, tool_call_ids=["first"]
    )
    retried = completed_attempts(events, MODEL_INVOKE)[-1][1:]
    assert retried == (2, SURVIVOR), "the killed call was retried once, elsewhere"


async def test_worker_killed_during_a_tool_call(
    client: Client, home: Path, temporal_address: str, cluster: Cluster
) -> None:
    config = _kube_config(cluster, home, temporal_address)
    thread = unique("thread")
    # The first attempt marks the pod's disk and hangs (until the pod goes); the retried one finds the mark.
    slow = (
        "echo slow-start >> log; "
        "if [ -f slow-started ]; then echo slow-end >> log; else touch slow-started; sleep 600; fi"
    )
    model = write_script(home, [calls(FIRST), calls(tool_call("bash", "slow", command=slow)), answer("survived")])
    with worker_process(config, home.parent / "doomed.yaml") as doomed:
        handle = await start_run(client, config, "work", model=model, thread_id=thread)
        workspace = await _workspace(cluster, config, thread)
        await wait_for_file(workspace / "slow-started")
        pending = await wait_for_started_activity(handle, TOOL_EXECUTE)
        assert pending.last_worker_identity == worker_identity(doomed)
        async with running_worker(client, config, identity=SURVIVOR):
            kill_hard(doomed)
            final = await asyncio.wait_for(handle.result(), timeout=120)
    await _delete_sweeper_schedule(client, config)

    assert (final.status, final.final_message) == ("completed", "survived")
    events = await _assert_nothing_lost_or_duplicated(
        handle, cluster, config, workspace, model_calls=3, tool_call_ids=["first", "slow"]
    )
    log = (workspace / "log").read_text().split()
    assert (log.count("slow-start"), log.count("slow-end")) == (2, 1), "the in-flight call ran again, once"
    assert [a for _, a, _ in completed_attempts(events, TOOL_EXECUTE)] == [1, 2]
    assert completed_attempts(events, TOOL_EXECUTE)[-1][2] == SURVIVOR


async def test_worker_killed_during_a_clarification_wait(
    client: Client, home: Path, temporal_address: str, cluster: Cluster
) -> None:
    config = _kube_config(cluster, home, temporal_address)
    thread = unique("thread")
    ask = tool_call("ask_clarification", "ask", question="Which colour?", clarification_type="approach_choice")
    model = write_script(home, [calls(FIRST), calls(ask), answer("Painted it blue.")])
    with worker_process(config, home.parent / "doomed.yaml") as doomed:
        handle = await start_run(client, config, "paint it", model=model, thread_id=thread)
        paused = await settle(handle)
        workspace = await _workspace(cluster, config, thread)
        assert _last_workflow_task_worker(await history_events(handle)) == worker_identity(doomed)
        async with running_worker(client, config, identity=SURVIVOR):
            kill_hard(doomed)
            await handle.signal("clarification_reply", "blue")
            final = await asyncio.wait_for(handle.result(), timeout=120)
    await _delete_sweeper_schedule(client, config)

    assert paused.status == "awaiting_input"
    assert (final.status, final.final_message) == ("completed", "Painted it blue.")
    assert final.run_id == paused.run_id, "the same run continued"
    events = await _assert_nothing_lost_or_duplicated(
        handle, cluster, config, workspace, model_calls=3, tool_call_ids=["first", "ask"]
    )
    assert _last_workflow_task_worker(events) == SURVIVOR
    replies = [m for m in await _committed_messages(config, thread) if "human_input_response" in m.additional_kwargs]
    assert [r.additional_kwargs["human_input_response"]["value"] for r in replies] == ["blue"]


async def test_worker_killed_during_after_agent(
    client: Client, home: Path, temporal_address: str, cluster: Cluster
) -> None:
    extensions = ["tests.support.fault_middlewares:HangingAfterAgent"]
    config = _kube_config(cluster, home, temporal_address, extensions=extensions)
    thread = unique("thread")
    model = write_script(home, [calls(FIRST), answer("survived")])
    with worker_process(config, home.parent / "doomed.yaml") as doomed:
        handle = await start_run(client, config, "work", model=model, thread_id=thread)
        workspace = await _workspace(cluster, config, thread)
        await wait_for_file(workspace / AFTER_AGENT_STARTED)
        pending = await wait_for_started_activity(handle, TOOL_EXECUTE)
        assert pending.last_worker_identity == worker_identity(doomed)
        async with running_worker(client, config, identity=SURVIVOR):
            kill_hard(doomed)
            final = await asyncio.wait_for(handle.result(), timeout=120)
    await _delete_sweeper_schedule(client, config)

    assert (final.status, final.final_message) == ("completed", "survived")
    events = await _assert_nothing_lost_or_duplicated(
        handle, cluster, config, workspace, model_calls=2, tool_call_ids=["first"]
    )
    assert (workspace / AFTER_AGENT_LOG).read_text().split() == ["done"]
    *_, after_agent = completed_attempts(events, TOOL_EXECUTE)
    assert after_agent == ("HangingAfterAgent.after_agent · bash", 2, SURVIVOR)
    summaries = [summary for _, summary in scheduled_activities(events)]
    assert summaries.index("Sandbox.after_agent · release") > summaries.index(after_agent[0]), "release came last"


# -- the Temporal server killed ----------------------------------------------------------------------------------


async def test_temporal_server_killed_and_restarted_during_a_tool_call(tmp_path: Path, home: Path) -> None:
    async with private_dev_server(tmp_path / "temporal.db") as server:
        # Heartbeats far apart: the attempt in flight must survive the outage, not time out during it.
        config = make_config(home, server.address, run={"tool_call": {"heartbeat_seconds": 60}})
        workspace = home / "users/default/threads/t-server/user-data/workspace"
        slow = "touch slow-started; while [ ! -f gate ]; do sleep 0.05; done; echo slow-end >> log"
        model = write_script(home, [calls(FIRST), calls(tool_call("bash", "slow", command=slow)), answer("survived")])
        client = await Client.connect(server.address, data_converter=pydantic_data_converter)
        with worker_process(config, home.parent / "worker.yaml") as worker:
            handle = await start_run(client, config, "work", model=model, thread_id="t-server")
            await wait_for_file(workspace / "slow-started")
            server.kill()  # SIGKILL: what a crash looks like to the SQLite file
            await asyncio.to_thread(server.start)
            (workspace / "gate").touch()
            client = await Client.connect(server.address, data_converter=pydantic_data_converter)
            handle = client.get_workflow_handle(handle.id, result_type=RunView)
            final = await asyncio.wait_for(handle.result(), timeout=120)
            assert worker.poll() is None, "the same worker process reconnected and finished the run"
        events = await history_events(handle)

    assert (final.status, final.final_message) == ("completed", "survived")
    log = (workspace / "log").read_text().split()
    assert (log.count("first"), log.count("slow-end")) == (1, 1), "a tool call was lost or ran twice"
    assert [a for _, a, _ in completed_attempts(events, TOOL_EXECUTE)] == [1, 1], "no attempt was lost to the outage"
    assert _scheduled(events, MODEL_INVOKE) == 3


# -- the model provider down -------------------------------------------------------------------------------------


async def test_model_provider_down_longer_than_the_retry_budget(home: Path) -> None:
    """Down → DeerFlow's fallback per run → the breaker opens across runs (fail fast, no model call) → the
    cooldown passes (skipped on the time-skipping server) → one half-open probe succeeds → closed again."""
    async with time_skipping_environment() as env:
        client = env.client
        # Two exhausted calls open the breaker for an hour: nothing but the test moves the clock that far.
        config = llm_config(home, "time-skipping:unused", attempts=2, threshold=2, recovery=3600)
        model = write_script(home, [error(503, "upstream unavailable", times=2)])

        async def run() -> tuple[RunView, list[Any]]:
            # settle(), not result(): awaiting a result would let the server skip time on its own.
            handle = await start_run(client, config, "hello", model=model)
            view = await settle(handle)
            return view, await history_events(handle)

        async with running_worker(client, config):
            down = [await run() for _ in range(2)]
            opened = await breaker_state(client, model)
            fast, fast_events = await run()
            await env.sleep(timedelta(seconds=3600))
            rewrite(model, [answer("back")])
            probe, probe_events = await run()
            healed = await breaker_state(client, model)
            after, after_events = await run()

    for view, events in down:
        assert (view.status, view.final_message) == ("error", UNAVAILABLE_TEXT)
        assert [a for _, a, _ in completed_attempts(events, MODEL_INVOKE)] == []  # exhausted: no attempt completed
        assert _scheduled(events, MODEL_INVOKE) == 1
        assert breaker_markers(events) == [LLM_BREAKER_CHECK, LLM_BREAKER_REPORT]
    assert (opened.phase, opened.failures) == ("open", 2)
    assert (fast.status, fast.final_message) == ("error", CIRCUIT_OPEN_TEXT)
    assert _scheduled(fast_events, MODEL_INVOKE) == 0, "an open breaker fails fast without calling the model"
    assert (probe.status, probe.final_message) == ("completed", "back")
    assert breaker_markers(probe_events) == [LLM_BREAKER_CHECK, LLM_BREAKER_REPORT], "the probe reported success"
    assert (healed.phase, healed.failures, healed.probe_holder) == ("closed", 0, None)
    assert (after.status, after.final_message) == ("completed", "back")
    assert breaker_markers(after_events) == [LLM_BREAKER_CHECK], "closed again: one check, nothing to report"


# -- two workers, one killed -------------------------------------------------------------------------------------


async def test_two_workers_on_one_task_queue_one_killed(client: Client, home: Path, temporal_address: str) -> None:
    config = make_config(home, temporal_address, run={"model_call": {"heartbeat_seconds": 2}})
    gate = home / "gate"
    threads = [unique("thread") for _ in range(4)]
    handles: list[WorkflowHandle[Any, RunView]] = []
    holders: list[str] = []  # the worker each run's held model call is in flight on

    async def start(thread: str) -> None:
        # Each run: a tool call that completes, then a model call held in flight until the gate opens.
        model = write_script(home, [calls(FIRST), {**answer(f"done {thread}"), "wait_for_file": str(gate)}])
        handle = await start_run(client, config, "work", model=model, thread_id=thread)
        await wait_for_file(home / "users/default/threads" / thread / "user-data/workspace/log")
        holders.append((await wait_for_started_activity(handle, MODEL_INVOKE)).last_worker_identity)
        handles.append(handle)

    with worker_processes(config, [home.parent / "worker-1.yaml", home.parent / "worker-2.yaml"]) as processes:
        workers = {worker_identity(process): process for process in processes}
        await asyncio.gather(*(start(thread) for thread in threads))
        doomed = holders[0]
        kill_hard(workers.pop(doomed))
        [survivor] = workers
        gate.touch()
        finals = await asyncio.wait_for(asyncio.gather(*(h.result() for h in handles)), timeout=120)
    histories = [await history_events(h) for h in handles]

    runs = [h.id.rpartition(":")[2] for h in handles]
    assert [(f.status, f.final_message) for f in finals] == [("completed", f"done {t}") for t in runs]
    for thread, holder, events in zip(runs, holders, histories, strict=True):
        log = (home / "users/default/threads" / thread / "user-data/workspace/log").read_text().split()
        assert log == ["first"], "a completed tool call ran again"
        assert _scheduled(events, MODEL_INVOKE) == 2 and _scheduled(events, TOOL_EXECUTE) == 1
        *_, (_, attempt, identity) = completed_attempts(events, MODEL_INVOKE)
        assert identity == survivor, "the surviving worker finished every run"
        assert attempt == (2 if holder == doomed else 1), "only the killed worker's calls were retried, once"
