"""The activities that run the sandbox tools (``activities/sandbox_tools.py``) in the thread's sandbox: a tool
call, the read_file hash ReadBeforeWrite compares, and the sandbox's acquire and release. The sandbox is acquired
lazily on first use, as DeerFlow's tools do, and the thread's files are synchronised around every call.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.contract import implements
from activities.heartbeat import heartbeating
from activities.sandbox.base import (
    CURRENT_CANCEL_SCOPE,
    CURRENT_TOOL_ATTEMPT,
    CancelScope,
    Sandbox,
    SandboxError,
    SandboxProvider,
    ToolAttempt,
)
from activities.sandbox.pod_files import PodWorkingCopy
from activities.sandbox.remote import RemoteSandbox
from activities.sandbox_tools import bind_tool_call, exit_code, file_sha256
from activities.storage import wait_out_outage
from activities.thread_file_sync import WorkingCopy
from activities.thread_files import ThreadFiles
from activities.tracing import record_tool_output, tool_span
from vocabulary.contracts import (
    SANDBOX_ACQUIRE,
    SANDBOX_FILE_HASH,
    SANDBOX_RELEASE,
    TOOL_EXECUTE,
    FileHashInput,
    FileHashResult,
    SandboxAcquireInput,
    SandboxAcquireResult,
    SandboxReleaseInput,
    ThreadRef,
    ToolCallInput,
    ToolCallOutput,
)

T = TypeVar("T")


# -- activities ------------------------------------------------------------------------------------------


def _attempt() -> ToolAttempt | None:
    """This activity attempt, for a sandbox that must not run a retry's command beside an earlier attempt's."""
    if not activity.in_activity():
        return None
    info = activity.info()
    return ToolAttempt(f"{info.workflow_run_id}/{info.activity_id}", info.attempt)


class ToolActivities:
    """Runs tools in the thread's sandbox, acquiring it lazily on first use as DeerFlow's tools do."""

    def __init__(
        self, provider: SandboxProvider, *, files: ThreadFiles | None = None, heartbeat_interval: float = 5.0
    ) -> None:
        self._provider = provider
        self._heartbeat_interval = heartbeat_interval
        self._files = files

    def _working_copy(self, sandbox: Sandbox) -> tuple[ThreadFiles, WorkingCopy | None] | None:
        """How the thread's files in storage reach ``sandbox``, synchronised around every call: a sandbox on
        this worker's folders works on its working copy (S3; on the filesystem backend the folders are the
        store), a pod on its own ``/mnt/user-data``, synced through its server."""
        files = self._files
        if files is None:
            return None
        if isinstance(sandbox, RemoteSandbox):
            return files, PodWorkingCopy(sandbox)
        if files.uses_working_copy and self._provider.uses_thread_data_mounts:
            return files, None
        return None

    @implements(TOOL_EXECUTE)
    async def execute(self, input: ToolCallInput) -> ToolCallOutput:
        name = str(input.tool_call.get("name"))
        with tool_span(name, sandbox_id=input.sandbox_id) as span:
            call = bind_tool_call(input.tool_call)
            attempt = CURRENT_TOOL_ATTEMPT.set(_attempt())  # this task's context, which to_thread copies
            try:
                output = await self._in_thread(lambda: self._execute(input, call))
            finally:
                CURRENT_TOOL_ATTEMPT.reset(attempt)
            record_tool_output(span, output, exit_code(output.content) if name == "bash" else None)
            return output

    @implements(SANDBOX_FILE_HASH)
    async def file_hash(self, input: FileHashInput) -> FileHashResult:
        """The sha256 of ``input.path``'s whole current text, read as ``read_file`` reads it (ReadBeforeWrite's
        version check and read mark); ``None`` when it cannot be read. Only the hash enters the history."""
        call = ToolCallInput(input.thread, {"name": "read_file"}, sandbox_id=input.sandbox_id, run_key=input.run_key)
        output = await self._in_thread(lambda: self._execute(call, lambda sandbox: file_sha256(sandbox, input.path)))
        return FileHashResult(
            output.content if output.status == "success" else None,
            sandbox_id=output.sandbox_id,
            sandbox_needs_release=output.sandbox_needs_release,
        )

    @implements(SANDBOX_ACQUIRE)
    async def acquire(self, input: SandboxAcquireInput) -> SandboxAcquireResult:
        """Eager acquisition (SandboxMiddleware with ``lazy_init: false``); a retry gets the same sandbox."""
        try:
            sandbox_id = await self._in_thread(
                lambda: self._provider.acquire(input.thread.user_id, input.thread.thread_id)
            )
        except SandboxError as e:
            raise ApplicationError(str(e), type="SandboxError", non_retryable=True) from None
        return SandboxAcquireResult(sandbox_id)

    @implements(SANDBOX_RELEASE)
    async def release(self, input: SandboxReleaseInput) -> None:
        thread = input.thread
        sandbox_id = input.sandbox_id or self._provider.sandbox_id_for(thread.user_id, thread.thread_id)
        await self._in_thread(lambda: self._provider.release(sandbox_id))

    def _execute(self, input: ToolCallInput, call: Callable[[Sandbox], str]) -> ToolCallOutput:
        sandbox_id = input.sandbox_id
        try:
            # A stored id may name a sandbox that was destroyed since; acquiring again is DeerFlow's recovery.
            sandbox = self._provider.get(sandbox_id) if sandbox_id else None
            if sandbox is None:
                thread = input.thread
                sandbox_id = self._provider.acquire(thread.user_id, thread.thread_id, run_key=input.run_key)
                sandbox = self._provider.get(sandbox_id)
                if sandbox is None:
                    raise RuntimeError(f"sandbox {sandbox_id!r} vanished right after it was acquired")
            content = self._synchronised(input.thread, sandbox, call)
            return ToolCallOutput(content, sandbox_id=sandbox_id, sandbox_needs_release=self._provider.needs_release)
        except SandboxError as e:
            releases = self._provider.needs_release
            return ToolCallOutput(f"Error: {e}", status="error", sandbox_id=sandbox_id, sandbox_needs_release=releases)

    def _synchronised(self, thread: ThreadRef, sandbox: Sandbox, call: Callable[[Sandbox], str]) -> str:
        """Run ``call`` on an up-to-date working copy and store what it changed, also when it failed."""
        if (sync := self._working_copy(sandbox)) is None:
            return call(sandbox)
        files, copy = sync
        files.pull(thread, copy)
        try:
            return call(sandbox)
        finally:
            # Once the tool has run, failing the activity would run it again: wait storage out instead.
            wait_out_outage(lambda: files.push(thread, copy), what="storing the tool's file changes")

    async def _in_thread(self, work: Callable[[], T]) -> T:
        """Run blocking sandbox work off the event loop, heartbeating so a dead worker is noticed quickly
        while a long command still counts as alive. Cancelled (the run was cancelled, or the activity timed
        out), it stops what the work started: the thread itself cannot be cancelled."""
        scope = CancelScope()
        token = CURRENT_CANCEL_SCOPE.set(scope)  # this task's context, which to_thread copies into the thread
        try:
            return await heartbeating(asyncio.to_thread(work), self._heartbeat_interval)
        except asyncio.CancelledError:
            scope.cancel()
            raise
        finally:
            CURRENT_CANCEL_SCOPE.reset(token)
