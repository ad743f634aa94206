"""Resume latency: a clarification reply sent → the run's next model call started.

hartflow runs that ask ``rounds`` clarification questions in a row; each time the run has paused (its
``wait_settled`` update returns), the client notes the wall-clock time and sends the ``reply`` update, as
``hartflow reply`` does. The end point is the ``ActivityTaskStarted`` time of the next ``model.invoke`` in the
run's history (server and client share the machine's clock).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from bench import hartflow_side
from bench.common import ACTIVITY_SCHEDULED, ACTIVITY_STARTED, BenchContext, percentile, round_ms, unique
from bench.workload import FINAL_ANSWER, PROMPT, clarification_responses, write_script
from vocabulary.contracts import MODEL_INVOKE
from workers.testing.history import chain_histories
from workers.worker import connect


def model_starts(histories: list[list[Any]]) -> list[datetime]:
    """Start times of every ``model.invoke`` attempt, in order."""
    model_scheduled: set[int] = set()
    starts = []
    for history in histories:
        for event in history:
            if event.event_type == ACTIVITY_SCHEDULED:
                if event.activity_task_scheduled_event_attributes.activity_type.name == MODEL_INVOKE:
                    model_scheduled.add(event.event_id)
            elif (
                event.event_type == ACTIVITY_STARTED
                and event.activity_task_started_event_attributes.scheduled_event_id in model_scheduled
            ):
                starts.append(event.event_time.ToDatetime(tzinfo=UTC))
    return sorted(starts)


async def run(ctx: BenchContext, runs: int, rounds: int) -> dict[str, Any]:
    task_queue = unique("bench-resume")
    config = hartflow_side.bench_config(ctx.workdir / unique("home"), ctx.address, task_queue, turns=rounds)
    model = write_script(ctx.workdir, clarification_responses(rounds), f"clarify-{rounds}")
    client = await connect(config)
    latencies: list[float] = []
    async with hartflow_side.in_process_worker(client, config):
        for index in range(runs + 1):
            handle = await hartflow_side.start_run(client, config, unique("resume"), model, PROMPT)
            sent: list[datetime] = []
            for _ in range(rounds):
                view = await hartflow_side.wait_settled(client, handle.id)
                if view.status != "awaiting_input":
                    raise RuntimeError(f"resume run {handle.id} is {view.status}, not awaiting input")
                sent.append(datetime.now(UTC))
                await hartflow_side.reply(client, handle.id, "the first one")
            view = await handle.result()
            if view.status != "completed" or view.final_message != FINAL_ANSWER:
                raise RuntimeError(f"resume run {handle.id} ended {view.status}")
            starts = model_starts(await chain_histories(client, handle.id, handle.result_run_id or ""))
            sample = [
                (next(start for start in starts if start >= reply_time) - reply_time).total_seconds()
                for reply_time in sent
            ]
            if index:  # the first run warms the worker up and is not counted
                latencies.extend(sample)
    return {
        "samples": len(latencies),
        "p50_ms": round_ms(percentile(latencies, 50)),
        "p99_ms": round_ms(percentile(latencies, 99)),
    }
