"""``tool_output.externalize``: save an oversized tool output where the model's ``read_file`` finds it.

With a provider whose sandbox works on the thread's folders (local), the file is written to the thread's files
on the configured storage (``ThreadFiles``): in place on the filesystem backend, straight to the bucket on S3
(plus this worker's working copy), so ``read_file`` on any worker finds it. Other providers (Kubernetes) get it
through the thread's live sandbox, because the pod cannot read host-side files (DeerFlow #3416); without a live
sandbox the middleware falls back to truncation. The activity never acquires a sandbox just to save output.
"""

from __future__ import annotations

from temporalio import activity

from activities.sandbox.base import SandboxError, SandboxProvider
from activities.thread_files import ThreadFiles
from vocabulary.contracts import TOOL_OUTPUT_EXTERNALIZE, ExternalizeInput, ExternalizeResult
from vocabulary.paths import VIRTUAL_OUTPUTS_DIR


class ToolOutputActivities:
    def __init__(self, provider: SandboxProvider, files: ThreadFiles) -> None:
        self._provider = provider
        self._files = files

    @activity.defn(name=TOOL_OUTPUT_EXTERNALIZE)
    def externalize(self, input: ExternalizeInput) -> ExternalizeResult:
        try:
            if self._provider.uses_thread_data_mounts:
                if not input.path.startswith(f"{VIRTUAL_OUTPUTS_DIR}/"):
                    raise SandboxError(f"not a file under {VIRTUAL_OUTPUTS_DIR}: {input.path}")
                self._files.write(input.thread, input.path, input.content.encode("utf-8"))
            elif (sandbox := self._provider.get(input.sandbox_id) if input.sandbox_id else None) is not None:
                sandbox.write_file(input.path, input.content)
            else:
                return ExternalizeResult(False, "no live sandbox to save the output into")
        except (SandboxError, ValueError, OSError) as exc:  # ValueError: bad ids or a path outside outputs
            activity.logger.warning("cannot save tool output to %s: %s", input.path, exc)
            return ExternalizeResult(False, str(exc))
        return ExternalizeResult(True)
