"""The built-in tools' arguments (pure data): what a model may send, and the JSON schema it is shown.

One declaration serves both ends: ``activities/sandbox_tools.py`` validates a call's arguments with these models, and
``vocabulary/tools.py`` advertises :func:`parameters` of each. The advertised text is a protocol (prompts,
scripted models and transcripts depend on it), pinned by ``tests/test_tool_schemas.py``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.json_schema import SkipJsonSchema

GLOB_DEFAULT_RESULTS, GLOB_MAX_RESULTS = 200, 1000
GREP_DEFAULT_RESULTS, GREP_MAX_RESULTS = 100, 500
"""DeerFlow's result limits: what a call gets unless it asks, and the most its ``max_results`` may ask for."""

DESCRIPTION_ARG: dict[str, Any] = {
    "type": "string",
    "description": "Explain why you are running this tool in short words. ALWAYS PROVIDE THIS PARAMETER FIRST.",
}
"""DeerFlow's first argument of every sandbox tool; advertised, never read (the models ignore extras)."""


class ToolArgs(BaseModel):
    # Models add ``description`` (and sometimes more); DeerFlow's tools ignore extras too.
    model_config = ConfigDict(extra="ignore")


class BashArgs(ToolArgs):
    command: str = Field(description="The bash command to execute.")


class LsArgs(ToolArgs):
    path: str = Field(description="Absolute path of the directory.")


class ReadFileArgs(ToolArgs):
    path: str = Field(description="Absolute path of the file.")
    start_line: int | None = Field(None, description="First line to read.")
    end_line: int | None = Field(None, description="Last line to read.")


class WriteFileArgs(ToolArgs):
    path: str = Field(description="Absolute path of the file.")
    content: str = Field(description="The text to write.")
    append: bool = Field(False, description="Append instead of overwriting.")


class StrReplaceArgs(ToolArgs):
    path: str = Field(description="Absolute path of the file.")
    old_str: str = Field(description="The text to replace.")
    new_str: str = Field(description="The replacement text.")
    replace_all: bool = Field(False, description="Replace every occurrence.")


# ``include_dirs`` and ``max_results`` (glob) and ``max_results`` (grep) are accepted, as DeerFlow's tools take
# them, but not advertised: hartflow's schemas have never listed them and the advertised text is pinned, so
# showing them to models is a deliberate protocol change (drop ``SkipJsonSchema`` and update the pinned text).


class GlobArgs(ToolArgs):
    pattern: str = Field(description="Glob pattern, relative to path.")
    path: str = Field(description="Absolute directory to search.")
    include_dirs: SkipJsonSchema[bool] = False
    max_results: SkipJsonSchema[int] = GLOB_DEFAULT_RESULTS


class GrepArgs(ToolArgs):
    pattern: str = Field(description="Regular expression (or literal text).")
    path: str = Field(description="Absolute directory or file to search.")
    glob: str | None = Field(None, description="Only search files matching this glob.")
    literal: bool = Field(False, description="Treat pattern as literal text.")
    case_sensitive: bool = Field(False, description="Match case (default false).")
    max_results: SkipJsonSchema[int] = GREP_DEFAULT_RESULTS


class ClarificationArgs(ToolArgs):
    """``ask_clarification`` as advertised. Nothing validates a call with it: the clarification middleware reads
    the raw arguments leniently (models send ``options`` as a JSON string, or dicts), as DeerFlow does."""

    question: str = Field(description="The question to ask.")
    clarification_type: Literal[
        "missing_info", "ambiguous_requirement", "approach_choice", "risk_confirmation", "suggestion"
    ]
    context: str | None = Field(None, description="Why the question is needed.")
    options: list[str] | None = Field(None, description="Choices to offer.")
    fields: list[dict[str, Any]] | None = Field(None, description="Form fields to fill.")


class PresentFilesArgs(ToolArgs):
    """``present_files`` as DeerFlow declares it (``deerflow/tools/builtins/present_file_tool.py``)."""

    filepaths: list[str] = Field(
        description="List of absolute file paths to present to the user. **Only** files in "
        "`/mnt/user-data/outputs` can be presented."
    )


# -- the advertised schema -------------------------------------------------------------------------------

_CARRIED = ("type", "enum", "items", "description")
"""The keys an advertised property keeps, in this order (the order is part of the text)."""
_DROPPED = frozenset({"title", "default"})
"""What pydantic adds that the advertised schemas never said: the model reads defaults from descriptions."""


def parameters(args: type[ToolArgs], *, description_arg: bool = True) -> dict[str, Any]:
    """The JSON schema a model is shown for ``args``: DeerFlow's ``description`` argument first (sandbox tools),
    then each advertised field with its type and description, and the fields without a default required."""
    schema = args.model_json_schema()
    properties = {name: _property(name, spec) for name, spec in schema["properties"].items()}
    if description_arg:
        properties = {"description": DESCRIPTION_ARG, **properties}
    return {"type": "object", "properties": properties, "required": schema.get("required", [])}


def _property(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    spec = dict(spec)
    if "anyOf" in spec:  # ``X | None``: the field is optional, which ``required`` already says
        [present] = [option for option in spec.pop("anyOf") if option != {"type": "null"}]
        spec = {**present, **spec}
    if spec.get("additionalProperties") is True:  # JSON Schema's default: ``dict[str, Any]`` says nothing more
        del spec["additionalProperties"]
    unknown = set(spec) - set(_CARRIED) - _DROPPED
    if unknown:
        raise ValueError(f"{name}: the advertised schema does not carry {sorted(unknown)}")
    carried = {key: spec[key] for key in _CARRIED if key in spec}
    if "items" in carried:
        carried["items"] = _property(f"{name}[]", carried["items"])
    return carried


def invalid_arguments(tool: str, error: ValidationError) -> str:
    """What a tool call with arguments of the wrong shape is told (``InvalidToolArguments``): each problem with
    the argument it is about, the same for built-in tools and ``present_files``."""
    problems = "; ".join(f"{'.'.join(map(str, err['loc']))}: {err['msg']}" for err in error.errors())
    return f"Invalid arguments for tool {tool!r}: {problems}"
