"""History economy: events and bytes of Temporal history per turn, and external-storage bytes per turn.

Read from the real histories (every run of a workflow, continue-as-new included; bytes = the sum of each
event's serialized size). For hartflow also: the bytes its claim-check references stand for, and everything the
run added to its (filesystem) storage. The hartflow column goes through :func:`hartflow_history`, which
counts with the same helpers as ``bench/history_size.py`` (``workers/testing/history.py``); that script adds the
marginal cost of one turn at turn N (``python -m bench.history_size``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.common import BenchContext, history_totals
from workers.testing.history import chain_histories, external_size, payloads_in

SYSTEMS = ("floor", "hartflow", "deepagents")


async def hartflow_history(client: Any, workflow_id: str, first_run_id: str) -> dict[str, int]:
    """Events, bytes and runs of a hartflow run's whole history, plus the bytes its claim-check references stand
    for in external storage (counted with ``workers/testing/history.py``, as ``bench/history_size.py`` does)."""
    runs = await chain_histories(client, workflow_id, first_run_id)
    totals = history_totals(runs)
    totals["external_bytes"] = sum(
        external_size(payload) for events in runs for event in events for payload in payloads_in(event)
    )
    return totals


def tree_bytes(root: Path) -> int:
    """Bytes of every file under ``root``: with the filesystem backend, what hartflow keeps in storage (thread
    state, message blobs, claim-checked payloads, the thread's files)."""
    return sum(path.stat().st_size for path in root.rglob("*") if path.is_file())


def per_turn(history: dict[str, Any], turns: int) -> dict[str, Any]:
    """Per-turn figures of one run; a run that failed is divided by the turns it made, and says why it failed."""
    made = history.get("turns", turns) if history.get("failure") else turns
    row: dict[str, Any] = {
        "events_per_turn": round(history["events"] / max(made, 1), 1),
        "bytes_per_turn": round(history["bytes"] / max(made, 1)),
        "runs": history["runs"],
    }
    if history.get("failure"):
        row["failed"] = f"after {made} turns: {history['failure']}"
    if "external_bytes" in history:
        row["external_bytes_per_turn"] = round(history["external_bytes"] / turns)
    if "storage_bytes" in history:
        row["storage_bytes_per_turn"] = round(history["storage_bytes"] / turns)
    return row


async def run(ctx: BenchContext, sizes: list[int], measured: dict[tuple[str, int], dict[str, Any]]) -> dict[str, Any]:
    """One run per system and size, unless the per-turn benchmark of this invocation already measured it."""
    from bench.systems import open_session

    rows: list[dict[str, Any]] = []
    for system in SYSTEMS:
        missing = [n for n in sizes if (system, n) not in measured]
        if missing:
            async with open_session(system, ctx, missing) as session:
                for n in missing:
                    result = await session.run(n)
                    assert result.history is not None
                    measured[(system, n)] = {**result.history, "failure": result.failure}
        rows.extend({"system": system, "n": n, **per_turn(measured[(system, n)], n)} for n in sizes)
    return {"sizes": sizes, "rows": rows}
