"""The commands about what runs work with: ``threads`` (list, delete), ``upload`` and ``tools``."""

from __future__ import annotations

import argparse
import asyncio
import sys
from dataclasses import asdict
from pathlib import Path

from activities.paths import InvalidIdError, validate_user_id
from activities.thread_lifecycle import list_threads
from activities.uploads import UploadError, store_uploads
from vocabulary.contracts import ThreadRef, UploadedFile
from vocabulary.paths import VIRTUAL_UPLOADS_DIR
from workers.cli._common import EXIT_FAILED, EXIT_OK, BadInput, config_of, emit, thread_of
from workers.cli.inspection import run_row
from workers.client import threads
from workers.config import HartflowConfig, open_object_store
from workers.stack import Stack


async def cmd_threads(args: argparse.Namespace) -> int:
    config = config_of(args)
    try:
        user_id = validate_user_id(config.user_id)
    except InvalidIdError as exc:
        raise BadInput(str(exc)) from None
    objects = open_object_store(config)
    if args.action == "delete":
        return await _delete_thread(args, config)
    if args.thread:
        raise BadInput("threads list takes no THREAD")
    summaries = await asyncio.to_thread(list_threads, objects, user_id)
    async with Stack(config, need_worker=False, ui=False, quiet=True) as stack:
        runs = [await threads.find(stack.client, ThreadRef(user_id, s.thread_id)) for s in summaries]
    rows = [
        {**asdict(summary), "run_status": run_row(run.description)["status"] if run is not None else None}
        for summary, run in zip(summaries, runs, strict=True)
    ]

    def human() -> None:
        if not rows:
            print(f"no threads in {objects.describe()}", file=sys.stderr)
            return
        print(f"{'THREAD':<28} {'VERSION':>7} {'MESSAGES':>8}  {'UPDATED':<20} {'RUN':<15} TITLE")
        for row in rows:
            updated = row["updated"][:19].replace("T", " ") if row["updated"] else "-"
            print(
                f"{row['thread_id']:<28} {row['version']:>7} {row['messages']:>8}  {updated:<20} "
                f"{row['run_status'] or '-':<15} {row['title'] or ''}"
            )

    emit(args, {"storage": objects.describe(), "threads": rows}, human)
    return EXIT_OK


async def _delete_thread(args: argparse.Namespace, config: HartflowConfig) -> int:
    if not args.thread:
        raise BadInput("threads delete needs the THREAD to delete")
    thread = thread_of(config, args.thread)
    if not args.yes:
        raise BadInput(f"deleting thread {thread.thread_id} removes its state and files for good: add --yes")
    objects = open_object_store(config)
    async with Stack(config, need_worker=False, ui=False, quiet=True) as stack:
        run = await threads.find(stack.client, thread)
        if run is not None and run.running:
            raise BadInput(
                f"thread {thread.thread_id} is busy: run {run.description.run_id} is "
                f"{run_row(run.description)['status']} (workflow {run.workflow_id}); "
                f"cancel it first: hartflow cancel {thread.thread_id}"
            )
        try:
            deleted = await threads.delete(stack.client, objects, thread, config.home)
        except threads.ThreadBusyError as exc:
            raise BadInput(str(exc)) from None
    if not deleted.removed and deleted.local_dir is None:
        raise BadInput(f"unknown thread {thread.thread_id}: nothing is stored for it in {objects.describe()}")
    payload = {**asdict(deleted), "removed": deleted.removed, "storage": objects.describe()}

    def human() -> None:
        for prefix, count in deleted.prefixes.items():
            if count:
                print(f"removed {count} object(s) under {prefix}")
        if deleted.local_dir:
            print(f"removed {deleted.local_dir}")
        print(f"deleted thread {thread.thread_id} from {objects.describe()}", file=sys.stderr)

    emit(args, payload, human)
    return EXIT_OK


def cmd_upload(args: argparse.Namespace) -> int:
    config = config_of(args)
    thread = thread_of(config, args.thread)
    files = store_thread_uploads(config, thread, args.files)
    listed = [{"filename": f.filename, "size": f.size, "path": f"{VIRTUAL_UPLOADS_DIR}/{f.filename}"} for f in files]

    def human() -> None:
        for entry in listed:
            print(f"{entry['filename']} ({entry['size']} bytes) → {entry['path']}")
        print(f"uploaded {len(listed)} file(s) to thread {thread.thread_id}", file=sys.stderr)

    emit(args, {"thread_id": thread.thread_id, "files": listed}, human)
    return EXIT_OK


def store_thread_uploads(config: HartflowConfig, thread: ThreadRef, paths: list[str] | None) -> list[UploadedFile]:
    """Copy files into the thread's uploads folder (checked first: a bad name or path writes nothing)."""
    if not paths:
        return []
    try:
        return store_uploads(open_object_store(config), thread, [Path(p).expanduser() for p in paths])
    except UploadError as exc:
        raise BadInput(str(exc)) from None


async def cmd_tools(args: argparse.Namespace) -> int:
    from workers.tools_list import list_tools, print_listing

    listing = await list_tools(config_of(args))
    emit(args, listing.payload(), lambda: print_listing(listing))
    for problem in listing.errors:
        print(f"hartflow: {problem['error']}", file=sys.stderr)
    return EXIT_FAILED if listing.errors else EXIT_OK
