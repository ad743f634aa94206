"""``hartflow memory show|edit|delete|clear|export|import``: the config user's long-term memory, as Settings → Memory
shows and changes it (``workers/api/memory_route.py``).

``show`` and ``export`` read the stored document; every change goes to the user's memory workflow as an edit
(``workers/client/memory.py``), so it needs Temporal and a worker (the embedded stack starts both) and is never
lost to an extraction running at the same time. A refused change (unknown fact, duplicate content, an invalid
import) exits 2 and changes nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from activities.memory_store import MemoryStoreError, load_memory
from activities.paths import InvalidIdError, validate_user_id
from vocabulary.contracts.memory import MemoryEdit
from workers.cli._common import EXIT_FAILED, EXIT_OK, BadInput, config_of, emit
from workers.client.memory import (
    MemoryEditRefused,
    MemoryEditUnanswered,
    MemoryModel,
    edit_memory,
    memory_view,
)
from workers.config import HartflowConfig, open_object_store
from workers.stack import Stack
from workflows.memory_edit import DUPLICATE, INVALID, NOT_FOUND

_REFUSED = frozenset({NOT_FOUND, DUPLICATE, INVALID})


async def cmd_memory(args: argparse.Namespace) -> int:
    config = config_of(args)
    try:
        user_id = validate_user_id(config.user_id)
    except InvalidIdError as exc:
        raise BadInput(str(exc)) from None
    if args.action in ("show", "export"):
        document = await asyncio.to_thread(_read, config, user_id)
        if args.action == "export":
            return _export(args, document)
        emit(args, document, lambda: _print(document))
        return EXIT_OK
    edit = _edit_of(args)
    try:
        async with Stack(config, quiet=args.json) as stack:
            saved = memory_view(await edit_memory(stack.client, config.temporal.task_queue, user_id, edit))
    except MemoryEditRefused as exc:
        if exc.kind in _REFUSED:
            raise BadInput(str(exc)) from None
        raise
    except MemoryEditUnanswered as exc:
        print(f"hartflow: error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    emit(args, saved, lambda: print(f"memory {args.action}: done ({len(saved['facts'])} fact(s))"))
    return EXIT_OK


def _read(config: HartflowConfig, user_id: str) -> dict[str, Any]:
    try:
        return memory_view(load_memory(open_object_store(config), user_id))
    except MemoryStoreError as exc:
        raise BadInput(str(exc)) from None


def _edit_of(args: argparse.Namespace) -> MemoryEdit:
    """The change the arguments ask for, checked before anything is sent."""
    if args.action == "clear":
        if not args.yes:
            raise BadInput("clearing removes every fact and summary of your memory for good: add --yes")
        return MemoryEdit("clear")
    if args.action == "import":
        return MemoryEdit("import", document=_import_file(args.target))
    if not args.target:
        raise BadInput(f"memory {args.action} needs the FACT_ID (see: hartflow memory show)")
    if args.action == "delete":
        return MemoryEdit("delete_fact", fact_id=args.target)
    if args.content is None and args.category is None and args.confidence is None:
        raise BadInput("memory edit needs --content, --category or --confidence")
    if args.content is not None and not args.content.strip():
        raise BadInput("--content cannot be empty")
    if args.confidence is not None and not 0.0 <= args.confidence <= 1.0:
        raise BadInput("--confidence must be between 0 and 1")
    return MemoryEdit(
        "update_fact", fact_id=args.target, content=args.content, category=args.category, confidence=args.confidence
    )


def _import_file(target: str | None) -> dict[str, Any]:
    if not target:
        raise BadInput("memory import needs the FILE to import (- for stdin), as memory export wrote it")
    try:
        text = sys.stdin.read() if target == "-" else Path(target).expanduser().read_text(encoding="utf-8")
        return MemoryModel.model_validate_json(text).model_dump(mode="json")
    except OSError as exc:
        raise BadInput(f"cannot read {target}: {exc}") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise BadInput(f"{target} is not a memory document: {where}: {first['msg']}") from None


def _export(args: argparse.Namespace, document: dict[str, Any]) -> int:
    text = json.dumps(document, ensure_ascii=False, indent=2)
    if not args.output:
        print(text)
        return EXIT_OK
    Path(args.output).expanduser().write_text(text + "\n", encoding="utf-8")
    emit(args, {"exported": str(args.output), "facts": len(document["facts"])}, lambda: print(args.output))
    return EXIT_OK


def _print(document: dict[str, Any]) -> None:
    for group in ("user", "history"):
        for name, section in document[group].items():
            if section["summary"]:
                print(f"{name}: {section['summary']}")
    for fact in document["facts"]:
        print(f"{fact['id']}  [{fact['category']} {fact['confidence']:.2f}] {fact['content']}")
    if not document["facts"]:
        print("no facts", file=sys.stderr)
