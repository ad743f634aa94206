"""A run that names a checkpoint (``checkpoint`` / ``checkpoint_id`` on ``runs.create``, ``stream``, ``wait``):
which version it starts from and which message it runs (``workers/api/checkpoints.py`` names the checkpoints).

* The newest version ``v{N}``: an ordinary run (Agent Chat UI names the head of the branch it shows on every run).
* An older version ``v{K}`` with a message: a fork there (*edit*): the run loads ``v{K}``'s state and commits on
  top of the newest, its version's parent is ``v{K}``; the versions after ``v{K}`` stay, readable by their ids.
  A message with the id of the one another version's run started from ``v{K}`` with (DeerFlow's regenerate sends
  the same human message again) reruns that input: the two answers are siblings under one input checkpoint.
* ``v{N}-input`` with no input (*regenerate*): ``v{N}``'s human message again, from ``v{N}``'s parent.

Anything else is refused before anything is written: an id that is no kept checkpoint of the thread 404, an older
version with nothing to run or an input checkpoint with another message 422.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fastapi import HTTPException

from middlewares.view_image import ATTACHED_IMAGES_KEY
from vocabulary.contracts import ThreadRef
from workers.api import checkpoints
from workers.api.ledger import Ledger


@dataclass(frozen=True)
class Fork:
    base: int
    """The version the run loads (0: the empty state)."""
    rerun_of: int | None = None
    """The version whose input the run reruns (its human message, from the same base)."""
    message: dict[str, Any] | None = None
    """The human message to run, when the request sends none (regenerate)."""


async def resolve(ledger: Ledger, thread: ThreadRef, checkpoint_id: str | None, message: Any) -> Fork | None:
    """Where a run that names ``checkpoint_id`` starts (``None``: from the newest version, as any run)."""
    if checkpoint_id is None:
        return None
    ref = checkpoints.parse(checkpoint_id)
    found = None if ref is None else await checkpoints.load(ledger, thread, ref)
    if ref is None or found is None:
        raise HTTPException(404, f"checkpoint {checkpoint_id!r} of thread {thread.thread_id} is not kept")
    _, newest, _ = await ledger.committed(thread)
    if ref.input:
        assert found.parent is not None  # an input checkpoint always grows from a version
        if message is not None:
            raise HTTPException(
                422,
                f"checkpoint {ref.id} already holds its run's message: to send another, fork from its parent "
                f"{found.parent.id}; to run it again, send no input",
            )
        record = await ledger.version(thread, ref.version) or {"state": {}}
        line = checkpoints.lineage(record)
        human = checkpoints.human_input(checkpoints.input_messages(record["state"], str(line.get("message_id"))))
        if human is None:
            raise HTTPException(409, f"checkpoint {ref.id} holds no human message to run again")
        return Fork(found.parent.version, rerun_of=ref.version, message=human)
    if ref.version == newest:
        return None
    if message is None:
        raise HTTPException(
            422,
            f"nothing to run from {ref.id}: send a message to fork there, or no input from a turn's input "
            "checkpoint (v{N}-input) to run that turn again",
        )
    message_id = message.get("id") if isinstance(message, dict) else None
    rerun = await _same_input(ledger, thread, ref.version, message_id) if isinstance(message_id, str) else None
    return Fork(ref.version, rerun_of=rerun)


async def _same_input(ledger: Ledger, thread: ThreadRef, base: int, message_id: str) -> int | None:
    """The version whose run started from ``base`` with the message ``message_id``, if one did."""
    for version in sorted(await ledger.versions(thread)):
        record = await ledger.version(thread, version) if version > base else None
        line = checkpoints.lineage(record) if record is not None else {}
        if line.get("parent") == base and line.get("message_id") == message_id:
            return int(line.get("input_of") or version)
    return None


def message_text(message: dict[str, Any]) -> str:
    """What the user wrote in a committed human message (before Uploads prepended its file list)."""
    original = (message.get("additional_kwargs") or {}).get("original_user_content")
    if isinstance(original, str):
        return original
    content = message.get("content")
    if isinstance(content, list):
        return "".join(str(b.get("text", "")) for b in content if isinstance(b, dict) and b.get("type") == "text")
    return str(content or "")


def message_files(message: dict[str, Any]) -> tuple[str, ...]:
    """The upload names a committed human message came with (names, or DeerFlow's ``{filename}`` objects)."""
    files = (message.get("additional_kwargs") or {}).get("files") or []
    names = [item if isinstance(item, str) else (item or {}).get("filename") for item in files]
    return tuple(name for name in names if isinstance(name, str))


def message_file_entries(message: dict[str, Any]) -> tuple[dict[str, Any], ...]:
    """The upload entries (DeerFlow's ``{filename, size, path, status}``) a committed human message came with."""
    files = (message.get("additional_kwargs") or {}).get("files") or []
    return tuple(item for item in files if isinstance(item, dict) and isinstance(item.get("filename"), str))


def message_images(message: dict[str, Any]) -> tuple[str, ...]:
    """The upload names of the images a committed human message showed the model (``workers/api/images.py``)."""
    paths = (message.get("additional_kwargs") or {}).get(ATTACHED_IMAGES_KEY) or []
    return tuple(path.rsplit("/", 1)[-1] for path in paths if isinstance(path, str))


def message_id(message: dict[str, Any]) -> str | None:
    """The id the user's message was sent with (DynamicContext's ID swap adds ``__user``)."""
    found = message.get("id")
    return found.removesuffix("__user") if isinstance(found, str) else None
