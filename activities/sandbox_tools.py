"""The sandbox tools (DeerFlow's ``sandbox/tools.py``): each a plain function of a sandbox and its validated
arguments returning the exact text DeerFlow returns, so it can be tested without Temporal; limits and truncation
markers are DeerFlow's because the model was prompted with them. Failures the model can fix come back as
``Error: ...`` results; anything else raises so the activity retry policy (and then ToolErrorHandling) sees it.
The activities that run them in the thread's sandbox: ``activities/tools.py``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import ValidationError
from temporalio.exceptions import ApplicationError

from activities.sandbox.base import Sandbox, SandboxError
from vocabulary.tool_args import (
    GLOB_DEFAULT_RESULTS,
    GLOB_MAX_RESULTS,
    GREP_DEFAULT_RESULTS,
    GREP_MAX_RESULTS,
    BashArgs,
    GlobArgs,
    GrepArgs,
    LsArgs,
    ReadFileArgs,
    StrReplaceArgs,
    ToolArgs,
    WriteFileArgs,
    invalid_arguments,
)

BASH_OUTPUT_MAX_CHARS = 20_000
READ_FILE_OUTPUT_MAX_CHARS = 50_000
LS_OUTPUT_MAX_CHARS = 20_000
WRITE_FILE_MAX_BYTES = 80 * 1024
"""Bigger single writes made models hit stream chunk timeouts in DeerFlow (#3189); appends are exempt."""

_EXIT_MARKER_AT_END = re.compile(r"\nExit Code: -?\d+\s*$")

A = TypeVar("A", bound=ToolArgs)


# -- output shaping --------------------------------------------------------------------------------------


def exit_code(output: str) -> int:
    """The exit code a bash result reports: its trailing ``Exit Code: N``, or 0 when there is none."""
    marker = _EXIT_MARKER_AT_END.search(output)
    return int(marker.group(0).rsplit(":", 1)[1]) if marker else 0


def _truncate_middle(output: str, max_chars: int) -> str:
    """Keep both ends of bash output (errors show up at either end) within ``max_chars``, marker included.

    A trailing ``Exit Code: N`` is kept whole: it is the only reliable sign the command failed.
    """
    if len(output) <= max_chars:
        return output
    preserved = ""
    if (exit_marker := _EXIT_MARKER_AT_END.search(output)) is not None:
        preserved, output = exit_marker.group(0), output[: exit_marker.start()]
        max_chars -= len(preserved)
    total = len(output)
    kept = max(0, max_chars - len(f"\n... [middle truncated: {total} chars skipped] ...\n"))
    head = kept // 2
    marker = f"\n... [middle truncated: {total - kept} chars skipped] ...\n"
    return output[:head] + marker + output[total - (kept - head) :] + preserved


def _truncate_head(output: str, max_chars: int, hint: str) -> str:
    """Keep the beginning (files and listings are read top-down) within ``max_chars``, marker included."""
    if len(output) <= max_chars:
        return output
    total = len(output)

    def marker(kept: int) -> str:
        return f"\n... [truncated: showing first {kept} of {total} chars. {hint}] ..."

    kept = max(0, max_chars - len(marker(total)))
    return output[:kept] + marker(kept)


def _clamp(requested: int, default: int, upper: int) -> int:
    return default if requested <= 0 else min(requested, upper)


def _report(found: list[str], truncated: bool, *, header: str, empty: str, narrow: str) -> str:
    if not found:
        return empty
    first = header + (f" (showing first {len(found)})" if truncated else "")
    return "\n".join([first, *found, *([narrow] if truncated else [])])


# -- tools -----------------------------------------------------------------------------------------------


def bash(sandbox: Sandbox, args: BashArgs) -> str:
    return _truncate_middle(sandbox.execute_command(args.command), BASH_OUTPUT_MAX_CHARS)


def ls(sandbox: Sandbox, args: LsArgs) -> str:
    entries = sandbox.list_dir(args.path)
    if not entries:
        return "(empty)"
    return _truncate_head("\n".join(entries), LS_OUTPUT_MAX_CHARS, "Use a more specific path to see fewer results")


def read_file(sandbox: Sandbox, args: ReadFileArgs) -> str:
    start, end = args.start_line, args.end_line
    # DeerFlow answers bad ranges with a parenthesised note rather than an error.
    if start is not None and start < 1:
        return "(start_line must be >= 1)"
    if end is not None and end < 1:
        return "(end_line must be >= 1)"
    if end is not None and (start or 1) > end:
        return "(start_line > end_line — no lines in range)"
    content = sandbox.read_file(args.path, start, end)
    if not content:
        return "(start_line exceeds file length)" if start is not None and start > 1 else "(empty)"
    return _truncate_head(content, READ_FILE_OUTPUT_MAX_CHARS, "Use start_line/end_line to read a specific range")


def write_file(sandbox: Sandbox, args: WriteFileArgs) -> str:
    size = len(args.content.encode("utf-8"))
    if not args.append and size > WRITE_FILE_MAX_BYTES:
        raise SandboxError(
            f"write_file content ({size} bytes) exceeds the {WRITE_FILE_MAX_BYTES}-byte single-call limit. "
            "Split the content into smaller pieces: either (a) write the first section now, then use "
            "`str_replace` for further edits, or (b) call write_file again with append=True carrying the "
            "next section."
        )
    sandbox.write_file(args.path, args.content, args.append)
    return "OK"


def str_replace(sandbox: Sandbox, args: StrReplaceArgs) -> str:
    return sandbox.str_replace(args.path, args.old_str, args.new_str, args.replace_all)


def glob(sandbox: Sandbox, args: GlobArgs) -> str:
    limit = _clamp(args.max_results, GLOB_DEFAULT_RESULTS, GLOB_MAX_RESULTS)
    # One past the limit tells "exactly limit matches" apart from "more than limit".
    paths = sandbox.glob(args.path, args.pattern, include_dirs=args.include_dirs, max_results=limit + 1)
    shown = paths[:limit]
    return _report(
        [f"{i}. {p}" for i, p in enumerate(shown, start=1)],
        len(paths) > limit,
        header=f"Found {len(shown)} paths under {args.path}",
        empty=f"No files matched under {args.path}",
        narrow="Results truncated. Narrow the path or pattern to see fewer matches.",
    )


def grep(sandbox: Sandbox, args: GrepArgs) -> str:
    limit = _clamp(args.max_results, GREP_DEFAULT_RESULTS, GREP_MAX_RESULTS)
    matches = sandbox.grep(
        args.path,
        args.pattern,
        glob=args.glob,
        literal=args.literal,
        case_sensitive=args.case_sensitive,
        max_results=limit + 1,
    )
    shown = matches[:limit]
    return _report(
        [f"{m.path}:{m.line_number}: {m.line}" for m in shown],
        len(matches) > limit,
        header=f"Found {len(shown)} matches under {args.path}",
        empty=f"No matches found under {args.path}",
        narrow="Results truncated. Narrow the path or add a glob filter.",
    )


@dataclass(frozen=True)
class _Tool(Generic[A]):
    args: type[A]
    run: Callable[[Sandbox, A], str]

    def bind(self, raw: dict[str, Any]) -> Callable[[Sandbox], str]:
        parsed = self.args.model_validate(raw)
        return lambda sandbox: self.run(sandbox, parsed)


TOOLS: dict[str, _Tool[Any]] = {
    "bash": _Tool(BashArgs, bash),
    "ls": _Tool(LsArgs, ls),
    "read_file": _Tool(ReadFileArgs, read_file),
    "write_file": _Tool(WriteFileArgs, write_file),
    "str_replace": _Tool(StrReplaceArgs, str_replace),
    "glob": _Tool(GlobArgs, glob),
    "grep": _Tool(GrepArgs, grep),
}


def bind_tool_call(tool_call: dict[str, Any]) -> Callable[[Sandbox], str]:
    """Validate a model's tool call before any sandbox is acquired for it.

    A call the model malformed fails the same way on every attempt, hence non-retryable.
    """
    name, args = tool_call.get("name"), tool_call.get("args")
    tool = TOOLS.get(name) if isinstance(name, str) else None
    if tool is None:
        raise ApplicationError(f"Unknown tool: {name!r}", type="UnknownTool", non_retryable=True)
    if not isinstance(args, dict):
        raise ApplicationError(
            f"Arguments of tool {name!r} must be an object, got {type(args).__name__}",
            type="InvalidToolArguments",
            non_retryable=True,
        )
    try:
        return tool.bind(args)
    except ValidationError as e:
        raise ApplicationError(
            invalid_arguments(str(name), e),
            type="InvalidToolArguments",
            non_retryable=True,
        ) from None


def file_sha256(sandbox: Sandbox, path: str) -> str:
    return hashlib.sha256(sandbox.read_file(path).encode("utf-8")).hexdigest()
