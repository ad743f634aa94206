"""``tool_output.externalize``: save an oversized tool output where the model's ``read_file`` finds it.

The file goes through the thread's live sandbox, so it lands inside the sandbox whether or not the sandbox
shares the host's thread folders (DeerFlow #3416: remote sandboxes cannot read host-side files). Without a
live sandbox it is written on the host, which only helps providers that mount the thread folders; for the
others the middleware falls back to truncation. The activity never acquires a sandbox just to save output.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path, PurePosixPath

from temporalio import activity

from activities.paths import ThreadPaths
from activities.sandbox.base import SandboxError, SandboxProvider
from workflows.contracts import TOOL_OUTPUT_EXTERNALIZE, ExternalizeInput, ExternalizeResult
from workflows.paths import VIRTUAL_OUTPUTS_DIR


class ToolOutputActivities:
    def __init__(self, provider: SandboxProvider, home: Path) -> None:
        self._provider = provider
        self._home = home

    @activity.defn(name=TOOL_OUTPUT_EXTERNALIZE)
    def externalize(self, input: ExternalizeInput) -> ExternalizeResult:
        try:
            sandbox = self._provider.get(input.sandbox_id) if input.sandbox_id else None
            if sandbox is not None:
                sandbox.write_file(input.path, input.content)
            elif self._provider.uses_thread_data_mounts:
                self._write_on_host(input)
            else:
                return ExternalizeResult(False, "no live sandbox to save the output into")
        except (SandboxError, ValueError, OSError) as exc:  # ValueError: bad ids or a path outside outputs
            activity.logger.warning("cannot save tool output to %s: %s", input.path, exc)
            return ExternalizeResult(False, str(exc))
        return ExternalizeResult(True)

    def _write_on_host(self, input: ExternalizeInput) -> None:
        relative = PurePosixPath(input.path).relative_to(VIRTUAL_OUTPUTS_DIR)
        if ".." in relative.parts or not relative.parts:
            raise SandboxError(f"not a file under {VIRTUAL_OUTPUTS_DIR}: {input.path}")
        target = ThreadPaths(self._home, input.thread.user_id, input.thread.thread_id).outputs.joinpath(*relative.parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        # Written aside and renamed, so a reader never sees half a file.
        staging = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
        try:
            staging.write_text(input.content, encoding="utf-8", newline="")
            os.replace(staging, target)
        finally:
            staging.unlink(missing_ok=True)
