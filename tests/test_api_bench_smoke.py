"""``python -m bench.api_bench --smoke``: both Agent Servers (``hartflow serve`` and ``langgraph dev``) serve the
benchmark's runs end to end through ``langgraph-sdk`` and every figure is a number (no thresholds: CI machines
are noisy); ``--update-readme`` rewrites only the marked block."""

from __future__ import annotations

import json
import numbers
import subprocess
import sys
from pathlib import Path

import pytest

from bench.api_bench import README_BEGIN, README_END, update_readme

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.timeout(600)
def test_smoke_run_measures_both_servers(tmp_path: Path) -> None:
    out = tmp_path / "api.json"
    process = subprocess.run(
        [sys.executable, "-m", "bench.api_bench", "--smoke", "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=580,
    )
    assert process.returncode == 0, process.stderr[-3000:]
    results = json.loads(out.read_text())
    assert set(results["systems"]) == {"hartflow serve", "langgraph dev"}
    for measured in results["systems"].values():
        for figure in ("first_event", "event_latency", "join_finished"):
            assert measured[figure]["n"] > 0
            assert isinstance(measured[figure]["p50_ms"], numbers.Real)
            assert isinstance(measured[figure]["p99_ms"], numbers.Real)
        assert measured["concurrent"]["runs"] == 5 and measured["concurrent"]["runs_per_minute"] > 0
    assert "| hartflow serve |" in process.stdout and "| langgraph dev |" in process.stdout


def test_update_readme_rewrites_only_the_marked_block(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(f"before\n{README_BEGIN}\nold table\n{README_END}\nafter\n", encoding="utf-8")
    update_readme(readme, "| new |")
    assert readme.read_text(encoding="utf-8") == f"before\n{README_BEGIN}\n| new |\n{README_END}\nafter\n"
