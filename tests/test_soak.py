"""The soak in CI: the whole deployment (3 workers, 2 API servers, the dev server on SQLite, SeaweedFS), a
handful of scripted runs of every kind, and one full round of faults (every kind once) while they go on; every
check of ``bench.soak`` must hold. Seeded, so a failure reproduces with
``python -m bench.soak --minutes 0 --runs 8 --seed 19 --fault-rounds 1``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench.soak.__main__ import soak
from bench.soak.chaos import FAULT_KINDS
from bench.soak.report import SoakResult, table
from bench.soak.scenarios import KINDS


def _api_streams_cut_by_a_temporal_restart(result: SoakResult) -> list[str]:
    """KNOWN DEFECT, open (README, Soak): an API stream following a live run while the Temporal server restarts
    ends with the SDK's ``RPCError: transport error`` traceback in the server's log (the consumer reconnects and
    misses nothing: the ``streams`` check still holds). Tolerated only when the chaos restarted Temporal."""
    if not any(f.kind == "temporal_restart" for f in result.faults):
        return []
    signature = "a traceback ending 'temporalio.service.RPCError: transport error'"
    return [p for p in result.problems["logs"] if p.startswith("api-") and signature in p.split("\n", 1)[0]]


@pytest.mark.skipif(
    not os.environ.get("HARTFLOW_SOAK"),
    reason="opt-in (HARTFLOW_SOAK=1) until it has shown itself reliable in the full suite: a chaos round SIGKILLs "
    "five processes on a 2-core machine that the suite's other modules share",
)
@pytest.mark.timeout(900)  # one round of faults takes about 2.5 min by its schedule, plus the deployment's boot
async def test_a_round_of_every_fault_loses_nothing(tmp_path: Path) -> None:
    result = await soak(tmp_path / "soak", minutes=0, runs=len(KINDS), seed=19, fault_rounds=1)
    print(table(result))  # shown when the test fails
    assert {s.kind for s in result.scenarios} == set(KINDS)
    assert {f.kind for f in result.faults} == set(FAULT_KINDS)
    known = _api_streams_cut_by_a_temporal_restart(result)
    problems = {check: [p for p in found if p not in known] for check, found in result.problems.items()}
    assert {check: found for check, found in problems.items() if found} == {}
    assert [s.outcome["status"] for s in result.scenarios] == [s.expected_status for s in result.scenarios]
    assert result.consumers > 0 and result.histories >= len(result.scenarios)
