"""The tool catalog the model sees: names, descriptions and argument schemas (pure data).

Implementations live in ``activities/sandbox_tools.py``; the workflow only needs the schemas to build a model
request and the flags that change control flow (``return_direct``, ``sandbox``). The built-in tools' schemas
are generated from their argument models (``vocabulary/tool_args.py``), which the activities validate with.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from vocabulary.tool_args import (
    BashArgs,
    ClarificationArgs,
    GlobArgs,
    GrepArgs,
    LsArgs,
    PresentFilesArgs,
    ReadFileArgs,
    StrReplaceArgs,
    WriteFileArgs,
    parameters,
)

MCP_IMAGES_KEY = "hartflow_mcp_images"
"""``additional_kwargs`` of an MCP tool's ToolMessage whose result carried images: their paths, recorded in
``viewed_images`` as ``view_image`` records them, so ViewImage shows them to a vision model."""


@dataclass(frozen=True)
class ToolExecution:
    """How a configured tool (``tools:`` in the config) runs: as the activity ``activity`` (``tools.call`` on the
    run's own task queue, or a team's activity on ``task_queue``) with its own timeout, heartbeat and attempts
    (unset: the run's ``tool_call`` settings)."""

    activity: str
    task_queue: str | None = None
    timeout_seconds: float | None = None
    heartbeat_seconds: float | None = None
    max_attempts: int | None = None


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    parameters: dict[str, Any]
    sandbox: bool = False
    """Runs inside the thread's sandbox (acquired lazily on first use)."""
    return_direct: bool = False
    """When every call of a turn is return_direct, the run leaves the loop after the tools (DeerFlow's exit).
    ``ask_clarification`` is not: hartflow pauses inside the run and calls the model again after the reply."""
    intercepted: bool = False
    """Never executed as an activity: a middleware answers it (``ask_clarification``)."""
    deferred: bool = False
    server: str | None = None
    """The MCP server this tool comes from (``workflows/run/mcp_tools.py``); ``None`` for built-in tools."""
    remote_name: str | None = None
    """An MCP tool's name on its server (the run's name carries the server prefix)."""
    execution: ToolExecution | None = None
    """Set for a configured tool (``workflows/run/configured_tools.py``): the activity that runs it."""

    def schema(self) -> dict[str, Any]:
        """OpenAI function-calling format, which ``bind_tools`` accepts for every provider."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


BUILTIN_TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        "bash",
        "Execute a bash command in the sandbox. The working directory is /mnt/user-data/workspace; "
        "write deliverables to /mnt/user-data/outputs.",
        parameters(BashArgs),
        sandbox=True,
    ),
    ToolSpec(
        "ls",
        "List the contents of a directory in the sandbox (two levels deep).",
        parameters(LsArgs),
        sandbox=True,
    ),
    ToolSpec(
        "read_file",
        "Read a text file in the sandbox, optionally a range of lines (1-based, inclusive).",
        parameters(ReadFileArgs),
        sandbox=True,
    ),
    ToolSpec(
        "write_file",
        "Write text to a file in the sandbox, creating parent directories. Overwrites unless append is true.",
        parameters(WriteFileArgs),
        sandbox=True,
    ),
    ToolSpec(
        "str_replace",
        "Replace a substring in a file in the sandbox. old_str must occur exactly once unless replace_all is true.",
        parameters(StrReplaceArgs),
        sandbox=True,
    ),
    ToolSpec(
        "glob",
        "Find files under a directory in the sandbox whose paths match a glob pattern (e.g. **/*.py).",
        parameters(GlobArgs),
        sandbox=True,
    ),
    ToolSpec(
        "grep",
        "Search file contents under a directory in the sandbox with a regular expression.",
        parameters(GrepArgs),
        sandbox=True,
    ),
    ToolSpec(
        "ask_clarification",
        "Ask the user a clarifying question when requirements are missing or ambiguous, when there are "
        "several valid approaches, or before a risky action. The run pauses until the user answers.",
        parameters(ClarificationArgs, description_arg=False),
        intercepted=True,
    ),
    ToolSpec(
        "present_files",
        # DeerFlow's docstring as LangChain's ``parse_docstring`` joins its paragraphs (the text its models see).
        "Make files visible to the user for viewing and rendering in the client interface. When to use the "
        "present_files tool: - Making any file available for the user to view, download, or interact with\n"
        "- Presenting multiple related files at once\n"
        "- After creating files that should be presented to the user When NOT to use the present_files tool:\n"
        "- When you only need to read file contents for your own processing\n"
        "- For temporary or intermediate files not meant for user viewing Notes:\n"
        "- You should call this tool after creating files and moving them to the `/mnt/user-data/outputs` "
        "directory.\n"
        "- This tool can be safely called in parallel with other tools. State updates are handled by a reducer to "
        "prevent conflicts.",
        parameters(PresentFilesArgs, description_arg=False),
    ),
)


@dataclass
class ToolCatalog:
    tools: dict[str, ToolSpec] = field(default_factory=dict)

    @classmethod
    def builtin(cls, *, exclude: frozenset[str] = frozenset()) -> ToolCatalog:
        return cls({t.name: t for t in BUILTIN_TOOLS if t.name not in exclude})

    def with_tools(self, extra: Iterable[ToolSpec]) -> ToolCatalog:
        """This catalog plus tools the middleware chain contributes (``Middleware.tools``), after the built-ins."""
        tools = dict(self.tools)
        for tool in extra:
            if tool.name in tools:
                raise ValueError(f"tool {tool.name!r} is contributed twice")
            tools[tool.name] = tool
        return ToolCatalog(tools)

    def get(self, name: str) -> ToolSpec | None:
        return self.tools.get(name)

    def names(self) -> list[str]:
        return list(self.tools)
