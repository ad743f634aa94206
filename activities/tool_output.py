"""``tool_output.externalize``: save an oversized tool output where the model's ``read_file`` finds it.

The file is written to the thread's files on the configured storage (``ThreadFiles``): in place on the
filesystem backend, straight to the bucket on S3 (plus this worker's working copy). Every sandbox sees it at
its next tool call: a local sandbox works on those folders (or the working copy pulled before the call), and a
Kubernetes pod gets it with the pull before the call (``activities/sandbox/pod_files.py``) — so ``read_file``
finds it on any worker, and the saved output outlives the pod. The activity never needs a live sandbox.
"""

from __future__ import annotations

from temporalio import activity

from activities.contract import implements
from activities.sandbox.base import SandboxError
from activities.thread_files import ThreadFiles
from vocabulary.contracts import TOOL_OUTPUT_EXTERNALIZE, ExternalizeInput, ExternalizeResult
from vocabulary.paths import VIRTUAL_OUTPUTS_DIR


class ToolOutputActivities:
    def __init__(self, files: ThreadFiles) -> None:
        self._files = files

    @implements(TOOL_OUTPUT_EXTERNALIZE)
    def externalize(self, input: ExternalizeInput) -> ExternalizeResult:
        try:
            if not input.path.startswith(f"{VIRTUAL_OUTPUTS_DIR}/"):
                raise SandboxError(f"not a file under {VIRTUAL_OUTPUTS_DIR}: {input.path}")
            self._files.write(input.thread, input.path, input.content.encode("utf-8"))
        except (SandboxError, ValueError, OSError) as exc:  # ValueError: bad ids or a path outside outputs
            activity.logger.warning("cannot save tool output to %s: %s", input.path, exc)
            return ExternalizeResult(False, str(exc))
        return ExternalizeResult(True)
