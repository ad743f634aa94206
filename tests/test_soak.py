"""The soak in CI: the whole deployment (3 workers, 2 API servers, the dev server on SQLite, SeaweedFS), a
handful of scripted runs of every kind, and one full round of faults (every kind once) while they go on; every
check of ``bench.soak`` must hold. Seeded, so a failure reproduces with
``python -m bench.soak --minutes 0 --runs 8 --seed 19 --fault-rounds 1``."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.soak.__main__ import soak
from bench.soak.chaos import FAULT_KINDS
from bench.soak.report import table
from bench.soak.scenarios import KINDS


@pytest.mark.timeout(900)  # one round of faults takes about 2.5 min by its schedule, plus the deployment's boot
async def test_a_round_of_every_fault_loses_nothing(tmp_path: Path) -> None:
    result = await soak(tmp_path / "soak", minutes=0, runs=len(KINDS), seed=19, fault_rounds=1)
    print(table(result))  # shown when the test fails
    assert {s.kind for s in result.scenarios} == set(KINDS)
    assert {f.kind for f in result.faults} == set(FAULT_KINDS)
    assert {check: found for check, found in result.problems.items() if found} == {}
    assert [s.outcome["status"] for s in result.scenarios] == [s.expected_status for s in result.scenarios]
    assert result.consumers > 0 and result.histories >= len(result.scenarios)
