"""ReadBeforeWrite: a file that exists is modified only after the model has read its current version (DeerFlow's
``ReadBeforeWriteMiddleware``, issue #3857; ``read_before_write.enabled``, on by default).

Models that append to a report without reading it back write the same section again and again. The gate's state
lives in the thread's messages, as DeerFlow keeps it: a successful ``read_file`` carries a read mark (the sha256 of
the whole file, also after a ranged read) in ``additional_kwargs["deerflow_read_mark"]``; a summary that drops the
read drops the mark with it, and a write never refreshes one, so every modification needs a read of the version
the previous write left.

Hook
* ``wrap_tool_call`` — between SandboxAudit and ToolErrorHandling, outside ToolProgress (a blocked write returns
  at once without taking a progress slot) and ToolApproval (a write the gate blocks never bothers a reviewer):
  - ``write_file`` (overwrite or append) and ``str_replace``: the current file is hashed (the ``sandbox.file_hash``
    activity); when it exists and the newest mark for the same normalised path has another hash (or there is
    none) the tool does not run and the result is DeerFlow's ``Error: {tool} blocked — {path} already exists and
    you have not read its current version. …`` (``status="error"``, stamped with ``deerflow_tool_meta``). A file
    that cannot be read (missing, binary, a sandbox error) lets the tool run: it creates the file or reports its
    own error (fail-open, as DeerFlow).
  - ``read_file``: after a successful read the file is hashed again and the mark stamped on the ToolMessage.
  - check and tool (read and mark) are serialised per normalised path within the run, so two writes of one turn,
    which run in parallel, cannot both pass on one stale mark. DeerFlow's lock is per process and thread; a
    subagent is a workflow of its own here, so its calls are serialised within it only.
  Runs recorded before this middleware replay without it (the ``hartflow-read-before-write`` patch).

Writes: the tool result (thread state): the block message, or the read mark.

Parts: the hash activity ``activities/tools.py`` (``ToolActivities.file_hash``, contract in
``vocabulary/contracts/sandbox.py``); the meta stamp ``middlewares/_tool_meta.py``. Tests:
``tests/test_read_before_write.py``.
"""

from __future__ import annotations

import asyncio
import posixpath
from typing import Any

from langchain_core.messages import ToolMessage
from pydantic import BaseModel, ConfigDict

from middlewares import patches
from middlewares._activity_call import call_activity
from middlewares._logging import hook_logger
from middlewares._tool_meta import normalize_tool_message
from middlewares.base import Command, Middleware, ToolCallRequest, ToolHandler, ToolResult
from middlewares.context import best_effort
from middlewares.sandbox_lease import SandboxLease
from vocabulary.contracts import SANDBOX_FILE_HASH, FileHashInput
from vocabulary.state import ThreadState

logger = hook_logger(__name__)

READ_MARK_KEY = "deerflow_read_mark"
READ_TOOLS = frozenset({"read_file"})
GATED_WRITE_TOOLS = frozenset({"write_file", "str_replace"})
BLOCK_MESSAGE = (
    "Error: {tool_name} blocked — {path} already exists and you have not read its current version. "
    "Any write invalidates earlier reads, so re-read before every modification. "
    "Call read_file on it (a ranged read of the relevant section is enough, e.g. the last ~30 lines "
    "before an append), check what is already there, then retry."
)


class ReadBeforeWriteConfig(BaseModel):
    """DeerFlow's ``read_before_write`` section."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True


class ReadBeforeWriteMiddleware(Middleware):
    def __init__(self) -> None:
        self._locks: dict[str, asyncio.Lock] = {}

    async def wrap_tool_call(self, request: ToolCallRequest, handler: ToolHandler) -> ToolResult:
        name = request.name
        path = requested_path(request.args) if name in GATED_WRITE_TOOLS | READ_TOOLS else None
        if path is None or not request.ctx.patched(patches.READ_BEFORE_WRITE):
            return await handler(request)
        async with self._locks.setdefault(posixpath.normpath(path), asyncio.Lock()):
            if name in READ_TOOLS:
                return await self._marked(request, path, await handler(request))
            current = await self._current_hash(request, path)
            if current is None or latest_mark_hash(request.state, path) == current:
                return await handler(request)
            blocked = ToolMessage(
                BLOCK_MESSAGE.format(tool_name=name, path=path),
                tool_call_id=request.call_id,
                name=name,
                status="error",
                id=request.ctx.uuid(),
            )
            # Stamped here: a blocked write never reaches ToolErrorHandling, and ToolProgress reads the stamp.
            return normalize_tool_message(blocked)

    async def _marked(self, request: ToolCallRequest, path: str, result: ToolResult) -> ToolResult:
        """``result`` with the read mark on its ToolMessage, when the read succeeded and the file can be hashed."""
        message = _tool_message(result)
        if message is None or message.status == "error":
            return result
        current = await self._current_hash(request, path)
        if current is None:
            return result
        mark = {"path": posixpath.normpath(path), "hash": current}
        marked = message.model_copy(update={"additional_kwargs": {**message.additional_kwargs, READ_MARK_KEY: mark}})
        if isinstance(result, ToolMessage):
            return marked
        messages = [marked if m is message else m for m in result.update["messages"]]
        return Command(update={**result.update, "messages": messages}, interrupt=result.interrupt)

    async def _current_hash(self, request: ToolCallRequest, path: str) -> str | None:
        ctx = request.ctx
        lease = request.sandbox or SandboxLease()
        sandbox_id = lease.for_call(request.state)
        lease.starting(sandbox_id)
        outcome = await best_effort(
            call_activity(
                ctx,
                SANDBOX_FILE_HASH,
                FileHashInput(ctx.thread, path, sandbox_id=sandbox_id, run_key=ctx.workflow_id),
                summary=f"ReadBeforeWrite.wrap_tool_call · hash {path}",
                options=ctx.tool_calls.options,
            )
        )
        if isinstance(outcome, BaseException):
            logger.warning("read-before-write could not inspect %r; allowing the %s (fail-open)", path, request.name)
            return None
        lease.reported(outcome.sandbox_id, needs_release=outcome.sandbox_needs_release)
        return outcome.sha256


def requested_path(args: Any) -> str | None:
    path = args.get("path") if isinstance(args, dict) else None
    return path if isinstance(path, str) and path else None


def latest_mark_hash(state: ThreadState, path: str) -> str | None:
    """The hash of the newest read mark for ``path`` (normalised) in the thread, if any."""
    wanted = posixpath.normpath(path)
    for message in reversed(state.messages):
        if not isinstance(message, ToolMessage):
            continue
        mark = (message.additional_kwargs or {}).get(READ_MARK_KEY)
        if isinstance(mark, dict) and mark.get("path") == wanted:
            found = mark.get("hash")
            return found if isinstance(found, str) else None
    return None


def _tool_message(result: ToolResult) -> ToolMessage | None:
    if isinstance(result, ToolMessage):
        return result
    messages = result.update.get("messages")
    candidates = [m for m in messages if isinstance(m, ToolMessage)] if isinstance(messages, list) else []
    return candidates[-1] if candidates else None
