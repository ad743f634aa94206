"""The systems under test, each behind one interface: a session that runs N-turn runs one after another.

``async with open_session(name, ctx, plan) as session`` starts what the system needs (a worker on the bench's
dev server, a client, a checkpointer file) and yields a :class:`Session`; ``plan`` lists the turns of every run
the session will make, in order (Deep Agents' scripted model provider hands out its responses in that order).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from temporalio.client import WorkflowFailureError

from bench import hartflow_side
from bench.common import ACTIVITY_SCHEDULED, BenchContext, history_totals, unique
from bench.workload import FINAL_ANSWER, PROMPT, ai_messages, responses, write_script

SYSTEMS = ("floor", "hartflow", "hartflow-streamed", "deepagents", "langchain-memory", "langchain-sqlite")
"""``hartflow-streamed`` is hartflow with live tokens on (``run.model_call.stream_tokens``, hartflow's default):
every model call also publishes its answer while it is generated. ``hartflow`` has them off, as no peer streams."""
TEMPORAL_SYSTEMS = ("floor", "hartflow", "deepagents")


@dataclass
class RunResult:
    seconds: float
    history: dict[str, int] | None = None
    """Events/bytes of the run's whole history (Temporal systems only)."""
    failure: str | None = None
    """Why the run did not finish (e.g. the server terminated it); ``history`` then covers the turns it made."""


class Session(Protocol):
    async def run(self, turns: int) -> RunResult: ...


def _workspace(ctx: BenchContext) -> Path:
    path = ctx.workdir / "workspace"
    path.mkdir(parents=True, exist_ok=True)
    return path


@dataclass
class HartflowSession:
    ctx: BenchContext
    client: Any
    config: Any
    scripts: dict[int, str] = field(default_factory=dict)

    async def run(self, turns: int) -> RunResult:
        from bench.history import hartflow_history, tree_bytes

        if turns not in self.scripts:
            self.scripts[turns] = write_script(self.config.home, responses(turns), f"turns-{turns}")
        thread = unique("bench")
        stored_before = tree_bytes(self.config.home)
        began = time.perf_counter()
        handle = await hartflow_side.start_run(self.client, self.config, thread, self.scripts[turns], PROMPT)
        view = await handle.result()
        elapsed = time.perf_counter() - began
        if view.status != "completed" or view.final_message != FINAL_ANSWER:
            raise RuntimeError(f"hartflow run {thread} ended {view.status} ({view.stop_reason}): {view.final_message}")
        history = await hartflow_history(self.client, handle.id, handle.result_run_id or "")
        history["storage_bytes"] = tree_bytes(self.config.home) - stored_before
        return RunResult(elapsed, history)


@dataclass
class FloorSession:
    client: Any
    task_queue: str

    async def run(self, turns: int) -> RunResult:
        from bench.floor import FloorInput, FloorWorkflow

        workflow_id = unique("floor")
        began = time.perf_counter()
        handle = await self.client.start_workflow(
            FloorWorkflow.run, FloorInput(turns, workflow_id), id=workflow_id, task_queue=self.task_queue
        )
        answer = await handle.result()
        elapsed = time.perf_counter() - began
        if answer != FINAL_ANSWER:
            raise RuntimeError(f"floor run {workflow_id} answered {answer!r}")
        return RunResult(elapsed, history_totals([[e async for e in handle.fetch_history_events()]]))


@dataclass
class DeepAgentsSession:
    client: Any
    task_queue: str

    async def run(self, turns: int) -> RunResult:
        from bench.deepagents_peer import TOOL, DeepAgentInput, DeepAgentWorkflow

        workflow_id = unique("deepagents")
        began = time.perf_counter()
        handle = await self.client.start_workflow(
            DeepAgentWorkflow.run, DeepAgentInput(turns, workflow_id), id=workflow_id, task_queue=self.task_queue
        )
        failure: str | None = None
        try:
            answer = await handle.result()
        except WorkflowFailureError as exc:
            # Its history carries the whole conversation on every model call, so a long run hits the server's
            # history size limit and is terminated: a result, recorded with the turns it got through.
            failure = f"{exc.cause or exc}"
        else:
            if answer != FINAL_ANSWER:
                raise RuntimeError(f"Deep Agents run {workflow_id} answered {answer!r}")
        elapsed = time.perf_counter() - began
        events = [e async for e in handle.fetch_history_events()]
        history = history_totals([events])
        history["turns"] = sum(
            1
            for event in events
            if event.event_type == ACTIVITY_SCHEDULED
            and event.activity_task_scheduled_event_attributes.activity_type.name == TOOL
        )
        return RunResult(elapsed, history, failure)


@dataclass
class LangchainSession:
    ctx: BenchContext
    checkpointer: str
    middlewares: int

    async def run(self, turns: int) -> RunResult:
        from bench.langchain_peer import timed_run

        seconds = await timed_run(
            turns,
            unique("lc"),
            middlewares=self.middlewares,
            checkpointer=self.checkpointer,  # type: ignore[arg-type]
            workspace=_workspace(self.ctx),
            db=self.ctx.workdir / "langgraph-checkpoints.sqlite",
        )
        return RunResult(seconds)


def hartflow_chain_length() -> int:
    """How many middlewares hartflow's default lead chain has: the LangChain peer gets as many no-ops."""
    from middlewares.chain import build_lead_chain, describe
    from middlewares.run_settings import RunSettings

    return len(describe(build_lead_chain(RunSettings())))


@contextlib.asynccontextmanager
async def open_session(name: str, ctx: BenchContext, plan: Sequence[int]) -> AsyncIterator[Session]:
    task_queue = unique(f"bench-{name}")
    if name in ("hartflow", "hartflow-streamed"):
        from workers.worker import connect

        home = ctx.workdir / unique("home")
        streamed = name == "hartflow-streamed"
        config = hartflow_side.bench_config(home, ctx.address, task_queue, turns=max(plan), stream_tokens=streamed)
        client = await connect(config)
        async with hartflow_side.in_process_worker(client, config):
            yield HartflowSession(ctx, client, config)
    elif name == "floor":
        from bench.floor import floor_worker
        from workers.worker import connect

        config = hartflow_side.bench_config(ctx.workdir / "floor-home", ctx.address, task_queue, turns=max(plan))
        client = await connect(config)
        async with floor_worker(client, task_queue, str(_workspace(ctx))):
            yield FloorSession(client, task_queue)
    elif name == "deepagents":
        from bench.deepagents_peer import TOOL, deepagents_client, deepagents_worker

        scripted = [message for turns in plan for message in ai_messages(turns, "r", TOOL)]
        client = await deepagents_client(ctx.address, scripted)
        async with deepagents_worker(client, task_queue, str(_workspace(ctx))):
            yield DeepAgentsSession(client, task_queue)
    elif name in ("langchain-memory", "langchain-sqlite"):
        yield LangchainSession(ctx, name.removeprefix("langchain-"), hartflow_chain_length())
    else:
        raise ValueError(f"unknown system {name!r}; one of {', '.join(SYSTEMS)}")
