"""The driver: keeps a mix of scripted runs in flight for as long as the soak says.

Each run goes start → (pause → answer) → end through the client its scenario names; a cancellation run is
cancelled while its tool call executes. The moments runs settle are recorded: recovery after a fault is
measured against them (:mod:`bench.soak.chaos`).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench.soak.clients import Clients
from bench.soak.scenarios import Scenario, make_scenario

CONCURRENCY = 6


@dataclass
class Driver:
    clients: Clients
    directory: Path
    seed: int
    settles: list[float] = field(default_factory=list)
    scenarios: list[Scenario] = field(default_factory=list)

    async def run(self, more: Callable[[int], bool]) -> list[Scenario]:
        """Start runs (at most ``CONCURRENCY`` in flight) while ``more(started)`` says so, then wait for every
        started run to end."""
        rng = random.Random(self.seed)
        self.directory.mkdir(parents=True, exist_ok=True)
        slots = asyncio.Semaphore(CONCURRENCY)
        tasks: list[asyncio.Task[None]] = []
        while True:
            await slots.acquire()
            if not more(len(self.scenarios)):
                slots.release()
                break
            scenario = make_scenario(len(self.scenarios), rng, self.directory, self.seed)
            self.scenarios.append(scenario)
            tasks.append(asyncio.create_task(self._drive(scenario, slots)))
        await asyncio.gather(*tasks)
        return self.scenarios

    async def _drive(self, scenario: Scenario, slots: asyncio.Semaphore) -> None:
        started = time.monotonic()
        try:
            await self._steps(scenario)
        except Exception as exc:  # a run the driver could not drive is a finding, reported
            scenario.outcome["driver_error"] = f"{type(exc).__name__}: {exc}"
        finally:
            scenario.outcome["seconds"] = time.monotonic() - started
            slots.release()

    async def _steps(self, scenario: Scenario) -> None:
        clients, thread = self.clients, scenario.thread_id
        streams = scenario.outcome.setdefault("streams", [])
        if scenario.start == "sdk":
            await clients.create_thread(thread)
            message = {"messages": [{"role": "user", "content": scenario.prompt}]}
            stream_task = asyncio.create_task(
                clients.sdk_stream(thread, input=message, context={"model_name": scenario.model})
            )
            if scenario.kind == "cancel":
                await clients.cancel_in_tool(thread)
            streams.append(await stream_task)
        else:
            start = asyncio.create_task(clients.cli_start(thread, scenario.prompt, scenario.model))
            if scenario.kind == "cancel":
                await clients.cancel_in_tool(thread)
            await start
        view = await clients.settled(thread)
        self.settles.append(time.monotonic())
        if view.status == "awaiting_input" and scenario.reply is not None:
            if scenario.kind == "clarify_sdk":
                streams.append(await clients.sdk_stream(thread, command={"resume": scenario.reply}))
            else:
                await clients.cli_reply(thread, scenario.reply, signal=scenario.kind == "clarify_signal")
            view = await clients.settled(thread, not_status="awaiting_input")
            self.settles.append(time.monotonic())
        scenario.outcome["status"] = view.status
