"""DeerFlow's ``present_files`` tool (``bytedance/deer-flow:
backend/packages/harness/deerflow/tools/builtins/present_file_tool.py``), answered inside the run: checking the
paths needs no I/O, and its result is a state update (``artifacts``, merged by the reducer in
``vocabulary/state.py``), which only the run can write.

Only files under ``/mnt/user-data/outputs`` can be presented, named by their virtual path (hartflow shows the model
no host path). A path is normalised to ``/mnt/user-data/outputs/{relative}`` and refused with DeerFlow's words: a
``..`` that climbs out of ``/mnt/user-data`` is ``Error: Access denied: path traversal detected``, anything else
outside outputs ``Error: Only files in /mnt/user-data/outputs can be presented: {path}``; one bad path refuses
the whole call, and nothing is recorded. The artifacts route (``workers/api/files.py``) serves what is presented.
"""

from __future__ import annotations

import posixpath

from langchain_core.messages import ToolMessage
from pydantic import ValidationError
from temporalio.exceptions import ApplicationError

from middlewares.base import Command, ToolCallRequest
from vocabulary.paths import VIRTUAL_OUTPUTS_DIR, VIRTUAL_PATH_PREFIX
from vocabulary.tool_args import PresentFilesArgs, invalid_arguments

PRESENT_FILES_TOOL_NAME = "present_files"
PRESENTED = "Successfully presented files"


class NotPresentableError(ValueError):
    """A path the tool refuses, worded as DeerFlow's tool words it."""


def presented_path(filepath: str) -> str:
    """``filepath`` as the virtual path of a file under outputs; :class:`NotPresentableError` otherwise."""
    outside = NotPresentableError(f"Only files in {VIRTUAL_OUTPUTS_DIR} can be presented: {filepath}")
    stripped, prefix = filepath.lstrip("/"), VIRTUAL_PATH_PREFIX.lstrip("/")
    if "\0" in filepath or (stripped != prefix and not stripped.startswith(prefix + "/")):
        raise outside
    relative = posixpath.normpath(stripped[len(prefix) :].lstrip("/") or ".")
    if relative == ".." or relative.startswith("../"):
        raise NotPresentableError("Access denied: path traversal detected")
    outputs = VIRTUAL_OUTPUTS_DIR[len(VIRTUAL_PATH_PREFIX) + 1 :]
    if not relative.startswith(outputs + "/"):
        raise outside
    return f"{VIRTUAL_PATH_PREFIX}/{relative}"


def present_files(request: ToolCallRequest, message_id: str) -> Command | ToolMessage:
    """The call's result: ``artifacts`` plus DeerFlow's confirmation, or DeerFlow's ``Error: ...`` (a refusal is
    an ordinary result, as in DeerFlow). Arguments of the wrong shape fail like a built-in tool's
    (``InvalidToolArguments``, which ToolErrorHandling turns into an error result)."""
    try:
        args = PresentFilesArgs.model_validate(request.args or {})
    except ValidationError as exc:
        raise ApplicationError(
            invalid_arguments(PRESENT_FILES_TOOL_NAME, exc),
            type="InvalidToolArguments",
            non_retryable=True,
        ) from None

    def reply(text: str) -> ToolMessage:
        return ToolMessage(text, tool_call_id=request.call_id, name=PRESENT_FILES_TOOL_NAME, id=message_id)

    try:
        paths = [presented_path(filepath) for filepath in args.filepaths]
    except NotPresentableError as exc:
        return reply(f"Error: {exc}")
    return Command(update={"artifacts": paths, "messages": [reply(PRESENTED)]})
