"""The chaos driver: faults on a seeded schedule while the runs go on.

Kinds: ``worker_kill`` (SIGKILL a random worker's process group; it is started again), ``temporal_restart``
(SIGKILL the dev server, start it on the same SQLite file and port), ``s3_outage`` (SeaweedFS stopped for
5–30 s), ``api_kill`` (SIGKILL an API server while clients stream from it, started again 20–30 s later: its
consumers, once the SDK's own retries on it are spent, join the other) and ``worker_pause`` (SIGSTOP a worker
past the heartbeat timeout, then SIGCONT).

Recovery time of a fault: from its injection to the first run that settles (pauses or ends) after the fault
was repaired — how long the deployment made no progress because of it.
"""

from __future__ import annotations

import asyncio
import random
import signal
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Literal

from bench.soak.deployment import HEARTBEAT_SECONDS, Deployment

FaultKind = Literal["worker_kill", "temporal_restart", "s3_outage", "api_kill", "worker_pause"]
API_DOWN_SECONDS = (20.0, 30.0)
"""langgraph-sdk retries a broken stream on the same server for about 17 s (5 attempts, 1–5 s apart)."""
FAULT_KINDS: tuple[FaultKind, ...] = ("worker_kill", "temporal_restart", "s3_outage", "api_kill", "worker_pause")


@dataclass
class Fault:
    kind: FaultKind
    injected: float
    repaired: float = 0.0
    detail: str = ""
    recovered: float | None = None
    """Seconds from injection to the first run settling after the repair; ``None`` when none settled."""


@dataclass
class Chaos:
    deployment: Deployment
    seed: int
    interval: tuple[float, float] = (5.0, 12.0)
    """Seconds between one fault's repair and the next injection (drawn uniformly)."""
    streaming: Counter[str] = field(default_factory=Counter)
    """The clients' count of SSE consumers per API server URL (:attr:`Clients.streaming`)."""
    faults: list[Fault] = field(default_factory=list)
    rounds: int = 0
    """Full rounds injected: each round is every kind once."""

    async def run(self, stop: asyncio.Event, *, first_delay: float = 5.0) -> None:
        """Inject faults until ``stop`` is set, each kind in turn in a seeded order; the first after ``first_delay``.
        A fault in progress is always repaired before returning."""
        rng = random.Random(self.seed)
        delay = first_delay
        while True:
            try:
                await asyncio.wait_for(stop.wait(), delay)
                return
            except TimeoutError:
                pass
            kinds = list(FAULT_KINDS)
            rng.shuffle(kinds)
            for kind in kinds:
                await self.inject(kind, rng)
                if stop.is_set():
                    return
                try:
                    await asyncio.wait_for(stop.wait(), rng.uniform(*self.interval))
                    return
                except TimeoutError:
                    pass
            self.rounds += 1
            delay = 0.0

    async def inject(self, kind: FaultKind, rng: random.Random) -> Fault:
        d = self.deployment
        fault = Fault(kind, time.monotonic())
        if kind == "worker_kill":
            index = rng.randrange(len(d.workers))
            worker = d.workers[index]
            worker.kill()
            worker.start()
            await asyncio.to_thread(worker.wait_polling)
            fault.detail = f"worker-{index}"
        elif kind == "temporal_restart":
            d.temporal.kill()
            await asyncio.to_thread(d.restart_temporal)
        elif kind == "s3_outage":
            seconds = rng.uniform(5, 30)
            await asyncio.to_thread(d.s3.stop)
            await asyncio.sleep(seconds)  # the outage itself: its length is the schedule's, not a wait for anything
            await asyncio.to_thread(d.s3.start)
            fault.detail = f"{seconds:.0f}s"
        elif kind == "api_kill":
            index = await self._streaming_api(rng)
            seconds = rng.uniform(*API_DOWN_SECONDS)
            fault.injected = time.monotonic()  # the wait for a streaming consumer is not part of the fault
            d.apis[index].kill()
            await asyncio.sleep(seconds)  # down past the SDK's own reconnect budget: its clients go to the other
            await asyncio.to_thread(d.apis[index].start)
            fault.detail = f"api-{index} {seconds:.0f}s"
        else:
            index = rng.randrange(len(d.workers))
            seconds = HEARTBEAT_SECONDS * rng.uniform(1.5, 3)
            d.workers[index].signal(signal.SIGSTOP)
            await asyncio.sleep(seconds)  # the pause itself, past the heartbeat timeout by construction
            d.workers[index].signal(signal.SIGCONT)
            fault.detail = f"worker-{index} {seconds:.0f}s"
        fault.repaired = time.monotonic()
        self.faults.append(fault)
        return fault

    async def _streaming_api(self, rng: random.Random) -> int:
        """The API server with the most consumers streaming from it, once one has any (a random one if no
        consumer streams within a minute: the driver may be between SDK runs)."""
        urls = [api.url for api in self.deployment.apis]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            busiest = max(urls, key=lambda url: self.streaming[url])
            if self.streaming[busiest] > 0:
                return urls.index(busiest)
            await asyncio.sleep(0.1)
        return rng.randrange(len(urls))

    def measure(self, settles: list[float]) -> None:
        """Each fault's recovery time from the moments runs settled."""
        for fault in self.faults:
            after = [t for t in settles if t >= fault.repaired]
            fault.recovered = min(after) - fault.injected if after else None
