"""``python -m bench --smoke``: every benchmark family runs end to end and reports numbers (no thresholds: CI
machines are noisy), and ``--update-readme`` rewrites only the README's marked block."""

from __future__ import annotations

import json
import numbers
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench import merge_cost
from bench.common import FAMILIES
from bench.cpu_profile import summarise, workflow_functions
from bench.history import per_turn as history_per_turn
from bench.per_turn import projected_run_seconds
from bench.report import README_BEGIN, README_END, update_readme

REPO = Path(__file__).resolve().parents[1]


def _numbers(row: dict[str, Any], *keys: str) -> bool:
    return all(isinstance(row.get(key), numbers.Real) for key in keys)


@pytest.mark.timeout(600)
def test_smoke_run_reports_every_benchmark_with_numbers(tmp_path: Path) -> None:
    out = tmp_path / "smoke.json"
    process = subprocess.run(
        [sys.executable, "-m", "bench", "--smoke", "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=580,
    )
    assert process.returncode == 0, process.stderr[-3000:]
    results = json.loads(out.read_text())

    per_turn = results["per_turn"]
    assert per_turn["langchain_noop_middlewares"] > 0
    measured = {row["system"] for row in per_turn["rows"] if _numbers(row, "ms_per_turn", "ratio_to_floor")}
    assert measured == {"floor", "hartflow", "hartflow-streamed", "deepagents", "langchain-memory", "langchain-sqlite"}

    history = {row["system"]: row for row in results["history"]["rows"]}
    assert set(history) == {"floor", "hartflow", "deepagents"}
    assert all(_numbers(row, "events_per_turn", "bytes_per_turn") for row in history.values())
    assert _numbers(history["hartflow"], "external_bytes_per_turn", "storage_bytes_per_turn")

    [throughput] = results["throughput"]["rows"]
    assert _numbers(throughput, "runs_per_minute", "turn_p50_ms", "turn_p99_ms", "worker_peak_rss_mib")
    assert results["resume"]["samples"] > 0 and _numbers(results["resume"], "p50_ms", "p99_ms")
    assert all(_numbers(row, "heartbeat_timeout_s", "recovery_s") for row in results["recovery"]["rows"])
    assert results["machine"]["cores"] and results["commands"] == [f".venv/bin/python -m bench --smoke --out {out}"]

    # Every family says how much CPU the host took meanwhile (Linux: /proc/stat), since that moves its numbers.
    # (None where a family took less than a clock tick of CPU.)
    assert all("cpu_steal_percent" in results[family] for family in FAMILIES)
    assert 0 <= results["per_turn"]["cpu_steal_percent"] <= 100
    assert "CPU time the host took from this machine (steal) while measuring: per_turn" in process.stdout

    # The printed table is the one the README gets.
    assert (
        "| N | floor | hartflow | hartflow-streamed | deepagents | langchain-memory | langchain-sqlite |"
        in process.stdout
    )


def test_update_readme_rewrites_only_the_marked_block(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(f"# title\n\nbefore\n{README_BEGIN}\nold table\n{README_END}\nafter\n")
    update_readme(readme, "| new | table |")
    assert readme.read_text() == f"# title\n\nbefore\n{README_BEGIN}\n| new | table |\n{README_END}\nafter\n"

    unmarked = tmp_path / "other.md"
    unmarked.write_text("no block here\n")
    with pytest.raises(SystemExit, match="bench:begin"):
        update_readme(unmarked, "| new | table |")
    assert unmarked.read_text() == "no block here\n"


def test_projection_extrapolates_growing_per_turn_cost_and_holds_flat_cost() -> None:
    assert projected_run_seconds([], 500) is None
    assert projected_run_seconds([(100, 0.02)], 500) == pytest.approx(10.0)  # one size: flat
    # 0.1 s/turn at N=10, 0.2 s/turn at N=100: +0.1 s per 90 turns, so 0.2 + 400/900 s/turn at N=500.
    assert projected_run_seconds([(10, 0.1), (100, 0.2)], 500) == pytest.approx((0.2 + 0.1 * 400 / 90) * 500)
    assert projected_run_seconds([(10, 0.2), (100, 0.1)], 500) == pytest.approx(0.1 * 500)  # shrinking: held


def test_a_run_the_server_terminated_is_reported_per_turn_made_with_its_reason() -> None:
    history = {"events": 6000, "bytes": 52_000_000, "runs": 1, "turns": 400, "failure": "history size exceeds limit"}
    row = history_per_turn(history, 500)
    assert row["events_per_turn"] == 15.0 and row["bytes_per_turn"] == 130_000
    assert row["failed"] == "after 400 turns: history size exceeds limit"
    assert "failed" not in history_per_turn({**history, "failure": None}, 500)


def test_cpu_profile_puts_each_sample_in_the_first_category_its_stack_matches() -> None:
    activation = "_RunningWorkflow.activate (temporalio/worker/_workflow.py:1);_WorkflowInstanceImpl.activate (x.py:2)"
    lines = [
        f"{activation};_run_once (y.py:3);RunWorkflow._loop (workflows/run/workflow.py:4) 7",
        f"{activation};get_serialization_context (z.py:5) 3",
        f"{activation};_run_once (y.py:3) 4",
        "_ActivityWorker._run (temporalio/worker/_activity.py:6);ToolActivities.execute (activities/tools.py:7) 2",
        "<module> (bench/breakdown.py:1);_find_and_load (<frozen importlib._bootstrap>:2) 5",
        "BaseEventLoop._run_once (asyncio/base_events.py:1) 1",
    ]
    samples = summarise(lines)
    assert samples == {
        "workflow: its own code (hartflow: workflows/, middlewares/, vocabulary/)": 7,
        "workflow: SDK serialization-context lookups": 3,
        "workflow: SDK activation (the workflow instance's event loop)": 4,
        "tool.execute": 2,
        "startup: imports, building the worker": 5,
        "other: event loop, bridge polls": 1,
    }


def test_cpu_profile_puts_the_floors_samples_in_the_rows_of_hartflows_matching_work() -> None:
    """``--floor``: the floor's workflow and its two activities land in the rows hartflow's own fill."""
    activation = "_WorkflowInstanceImpl.activate (temporalio/worker/_workflow_instance.py:1)"
    activity = "_ActivityWorker._run (temporalio/worker/_activity.py:6)"
    samples = summarise(
        [
            f"{activation};FloorWorkflow.run (bench/floor.py:60) 3",
            f"{activity};FloorActivities.model (bench/floor.py:47) 2",
            f"{activity};FloorActivities.tool (bench/floor.py:51) 1",
        ]
    )
    assert samples == {
        "workflow: its own code (hartflow: workflows/, middlewares/, vocabulary/)": 3,
        "model.invoke: the model call (scripted, langchain)": 2,
        "tool.execute": 1,
    }


def test_cpu_profile_charges_workflow_code_to_its_innermost_hartflow_function() -> None:
    activation = "_WorkflowInstanceImpl.activate (temporalio/worker/_workflow_instance.py:1)"
    loop = "RunWorkflow._loop (workflows/run/workflow.py:4)"
    lines = [
        f"{activation};{loop};add_messages (vocabulary/messages.py:90);BaseModel.__init__ (pydantic/main.py:2) 5",
        f"{activation};{loop};add_messages (vocabulary/messages.py:107) 2",
        f"{activation};{loop} 1",
        f"{activation};_run_once (y.py:3) 4",  # SDK only: not hartflow's code
    ]
    assert workflow_functions(lines) == {
        "add_messages (vocabulary/messages.py)": 7,
        "RunWorkflow._loop (workflows/run/workflow.py)": 1,
    }


def _bench_module(*args: str) -> list[str]:
    """The output lines of ``python -m ARGS`` run from the repository; it must succeed."""
    process = subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True, timeout=280)
    assert process.returncode == 0, process.stderr[-3000:]
    return process.stdout.splitlines()


@pytest.mark.timeout(300)
def test_breakdown_shows_hartflow_and_the_floor_side_by_side() -> None:
    lines = _bench_module("bench.breakdown", "--turns", "2")
    assert "| where | hartflow ms/turn | count/turn | floor ms/turn | count/turn |" in lines
    rows = {line.split(" | ")[0].removeprefix("| "): line for line in lines if line.startswith("| ")}
    # The floor's activities share the rows of hartflow's model and tool activities; its own steps are blank.
    assert all(cell != "–" for cell in rows["model.invoke: run"].split(" | ")[1:])
    assert rows["run.close: run"].split(" | ")[3] == "–"
    assert any(line.startswith("hartflow: ") for line in lines) and any(line.startswith("floor: ") for line in lines)


@pytest.mark.timeout(300)
def test_gc_pauses_times_the_collections_of_a_frozen_worker_process() -> None:
    lines = _bench_module("bench.gc_pauses", "--turns", "2", "--freeze")
    assert lines[0].startswith("Garbage collections over 4 turns") and int(lines[0].split(", ")[1].split()[0]) > 0
    assert "| generation | collections | ms in all | longest, ms | ms a turn |" in lines
    assert any(line.startswith("| all | ") for line in lines)


def test_merge_cost_times_a_merge_per_size(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["merge_cost", "--sizes", "4,10", "--number", "3"])
    merge_cost.main()
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == ["N = 4", "N = 10"]
    assert all(float(line.split()[3]) > 0 for line in lines)
    assert len(merge_cost.conversation(10)) == 10
