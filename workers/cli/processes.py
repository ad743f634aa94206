"""The commands that run processes: ``worker``, ``dev``, ``serve``, ``demo``, and ``sandboxes`` (the pods of the
Kubernetes sandbox provider)."""

from __future__ import annotations

import argparse
import asyncio
import gc
import signal
import sys
import uuid
from dataclasses import asdict
from datetime import UTC, datetime

from temporalio.client import Client
from temporalio.worker import Worker

from activities.sandbox.kubernetes import KubernetesSandboxProvider
from activities.sandbox_sweeper import run_state
from workers.cli._common import EXIT_OK, BadInput, config_of, emit
from workers.config import HartflowConfig
from workers.models import check_worker_models
from workers.search_attribute_setup import ensure_search_attributes
from workers.stack import Stack
from workers.worker import build_worker, ensure_sweeper_schedule
from workers.worker_stop import evict_cached_runs
from workflows.sandbox_sweeper import SandboxSweeperWorkflow, SweepInput, run_workflow_id


async def cmd_worker(args: argparse.Namespace) -> int:
    config = config_of(args)
    check_worker_models(config)  # before connecting: an invalid models list is the first thing to hear about
    async with Stack(config, need_worker=False, ui=False, quiet=True, serve_metrics=True) as stack:
        await ensure_search_attributes(stack.client, config.temporal.namespace)
        await ensure_sweeper_schedule(stack.client, config)
        worker = build_worker(stack.client, config)
        where = stack.server.address if stack.server else config.temporal.address or "the local dev server"
        print(
            f"worker polling task queue '{config.temporal.task_queue}' on {where} (Ctrl-C to stop)",
            file=sys.stderr,
        )
        await _run_until_signalled(worker)
    return EXIT_OK


async def cmd_dev(args: argparse.Namespace) -> int:
    config = config_of(args, **({"telemetry": {"traces": "console"}} if args.trace else {}))
    if config.temporal.address:
        raise BadInput("hartflow dev starts its own server; unset TEMPORAL_ADDRESS / temporal.address")
    async with Stack(config, need_worker=False, serve_metrics=True) as stack:
        if not stack.embedded:
            raise BadInput(f"something already listens on 127.0.0.1:{config.temporal.embedded_port}")
        worker = build_worker(stack.client, config)
        print(f"Temporal dev server on {stack.server.address if stack.server else '?'}", file=sys.stderr)
        print(f"Web UI: {stack.ui_base}", flush=True)
        print("Ctrl-C to stop.", file=sys.stderr, flush=True)
        await _run_until_signalled(worker)
    return EXIT_OK


async def _run_until_signalled(worker: Worker) -> None:
    """Run ``worker`` until SIGINT or SIGTERM, then stop it leaving no cached run behind."""
    freeze_startup_heap()
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    task = asyncio.create_task(worker.run())
    stopper = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
        if not task.done():
            await worker.shutdown()
        stopper.cancel()
        await task
    finally:
        await evict_cached_runs(worker)


async def cmd_serve(args: argparse.Namespace) -> int:
    """Everything that can be refused is checked before the stack starts: the bind address against api.auth, the
    JWT key file and auth hook, and the port itself (bound here, handed to uvicorn)."""
    from workers.api.auth import Authenticator, unsafe_bind_problem
    from workers.api.jwt_auth import AuthConfigError
    from workers.api.server import ListenError, listen, serve

    config = config_of(args)
    problem = unsafe_bind_problem(config.api, args.host)
    if problem is not None:
        raise BadInput(problem)
    if not 0 <= args.port <= 65535:
        raise BadInput(f"--port {args.port} is not a TCP port")
    try:
        Authenticator(config.api, config.user_id)
        sock = listen(args.host, args.port)
    except (AuthConfigError, ListenError) as exc:
        raise BadInput(str(exc)) from None
    try:
        async with Stack(config, quiet=True, ui=False) as stack:
            freeze_startup_heap()
            await serve(config, stack.client, sock, args.host)
    finally:
        sock.close()
    return EXIT_OK


def freeze_startup_heap() -> None:
    """Keep what the process built before serving (its imports, its worker, its models) out of every later
    garbage collection. A full collection walks every tracked object while holding the GIL, so the event loop
    and the workflow threads wait on it, and a workflow thread that allocates runs it: the SDK counts that pause
    against its 2 s deadlock timeout. Frozen, those objects are still freed by reference counting; a cycle among
    them is never collected, which for a process's startup state is what it would be anyway. ``python -m
    bench.gc_pauses --turns 100`` and the same with ``--freeze`` measure the difference."""
    gc.collect()
    gc.freeze()


def cmd_demo(args: argparse.Namespace) -> int:
    from workers.demo import run_demo

    return run_demo(args)


async def cmd_sandboxes(args: argparse.Namespace) -> int:
    config = config_of(args)
    if config.sandbox.provider != "kubernetes":
        raise BadInput("sandbox.provider is 'local': its sandboxes are thread folders, there are no pods to manage")
    settings = config.sandbox.kubernetes
    async with Stack(config, need_worker=args.action == "sweep", ui=False, quiet=args.json) as stack:
        if args.action == "list":
            return await _list_sandboxes(args, config, stack.client)
        result = await stack.client.execute_workflow(
            SandboxSweeperWorkflow.run,
            SweepInput(max_age_seconds=args.max_age or settings.max_age_seconds, dry_run=args.dry_run),
            id=f"hartflow-sandbox-sweep-{uuid.uuid4().hex[:12]}",
            task_queue=config.temporal.task_queue,
        )
    verb = "would delete" if result.dry_run else "deleted"

    def human() -> None:
        for swept in result.deleted:
            print(f"{verb} {swept.pod} (thread {swept.thread_id}): {swept.reason}")
        print(f"examined {result.examined} sandbox pod(s), {verb} {len(result.deleted)}", file=sys.stderr)

    emit(args, asdict(result), human)
    return EXIT_OK


async def _list_sandboxes(args: argparse.Namespace, config: HartflowConfig, client: Client) -> int:
    provider = KubernetesSandboxProvider(config.sandbox.kubernetes, bash_timeout=config.sandbox.bash_timeout_seconds)
    records = await asyncio.to_thread(provider.inventory)
    owners = {record.pod: run_workflow_id(record) for record in records}
    states = {owner: await run_state(client, owner) for owner in set(owners.values()) if owner}
    now = datetime.now(UTC)
    rows = [
        {
            **asdict(record),
            "run_workflow_id": owners[record.pod],
            "run_state": states.get(owners[record.pod], "unknown"),
            "age_seconds": (now - record.created_at).total_seconds() if record.created_at else None,
        }
        for record in records
    ]

    def human() -> None:
        if not rows:
            print(f"no sandbox pods in namespace {config.sandbox.kubernetes.namespace}", file=sys.stderr)
            return
        print(f"{'POD':<26} {'THREAD':<24} {'RUN':<8} {'READY':<6} AGE")
        for row in rows:
            age = _age(row["age_seconds"])
            print(f"{row['pod']:<26} {row['thread_id']:<24} {row['run_state']:<8} {row['ready']!s:<6} {age}")

    emit(args, {"namespace": config.sandbox.kubernetes.namespace, "sandboxes": rows}, human)
    return EXIT_OK


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"
