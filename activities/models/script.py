"""The JSON script a scripted model answers from (``activities/models/scripted.py``; read by
``activities/models/script_file.py``).

The script is keyed by *call coordinates* instead of hidden state: the Nth ``agent`` model call of a run
(``call_index`` N, counted by the workflow) takes the Nth ``agent`` group of the script, whatever worker
process or retry attempt executes it. That is what keeps scripted runs deterministic under Temporal
retries, worker restarts and replay. Script format::

    {"responses": [
      {"content": "…", "tool_calls": [{"name": "bash", "args": {"command": "echo hi"}, "id": "call_1"}],
       "response_metadata": {"finish_reason": "tool_calls"},
       "usage_metadata": {"input_tokens": 12, "output_tokens": 5, "total_tokens": 17},
       "delay": 0.0, "for": "agent"},
      {"error": {"status": 503, "message": "server overloaded", "type": "InternalServerError",
                 "retry_after": 0.5}, "times": 2}
    ]}

Per purpose (``for``: ``agent`` by default, ``title``, ``summarization``, ``memory``, ``input_polish``,
``suggestions``) the entries form *call groups*: zero or more error entries followed by one response entry. Call
k uses group k; attempt a (1-based) raises the error entry whose cumulative ``times`` covers a, later attempts get
the response. A call with no group, or an attempt past a trailing error group that has no response, raises
:class:`ScriptExhaustedError`.

Response entries take ``content`` (string or content blocks) and/or ``tool_calls`` (``id`` optional:
it defaults to ``call_{purpose}_{call_index}_{j}``), plus optional ``invalid_tool_calls``,
``additional_kwargs``, ``response_metadata``, ``usage_metadata`` (``total_tokens`` defaults to the sum)
and ``id``. Raw provider calls in ``additional_kwargs.tool_calls`` (``{id, function: {name, arguments}}``)
are parsed when the entry has neither ``tool_calls`` nor ``invalid_tool_calls``: arguments that are not a
JSON object make that call an invalid tool call. Error entries take ``error`` =
``{status, message, type, retry_after, code}`` (``status`` or ``type`` required) and ``times`` (default 1).
A response entry may also take ``chunks`` (the text in the pieces a streaming provider would send; ``content``
defaults to their concatenation and must equal it when given) and ``chunk_delay`` (seconds between two
pieces): ``astream`` yields each piece, then one last chunk with the tool calls, metadata and usage.
Both take ``delay`` (seconds slept before answering or failing), ``wait_for_file`` (a path: the call blocks
until that file exists, then answers or fails — how a test holds a model call in flight for exactly as long
as it needs, without guessing a delay) and ``for``.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage
from langchain_core.messages.ai import UsageMetadata
from langchain_core.messages.tool import invalid_tool_call, tool_call
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from activities.models.provider_errors import ScriptedProviderError, default_error_type, provider_error_class
from activities.models.tool_args import parse_raw_tool_calls
from vocabulary.contracts import ModelPurpose

__all__ = [
    "CallGroup",
    "Entry",
    "ErrorEntry",
    "ResponseEntry",
    "Script",
    "ScriptExhaustedError",
]


class ScriptExhaustedError(Exception):
    """The run made a model call (or attempt) the script has no answer for; retrying cannot help."""


class _Strict(BaseModel):
    # strict: a script saying "times": "2" or "times": true is a mistake worth reporting, not coercing.
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class ToolCallSpec(_Strict):
    name: str = Field(min_length=1)
    args: dict[str, Any] = Field(default_factory=dict)
    id: str | None = None


class InvalidToolCallSpec(_Strict):
    name: str | None = None
    args: str | None = None
    id: str | None = None
    error: str | None = None


class UsageSpec(_Strict):
    input_tokens: int = Field(ge=0)
    output_tokens: int = Field(ge=0)
    total_tokens: int | None = Field(default=None, ge=0)


class ErrorSpec(_Strict):
    status: int | None = Field(default=None, ge=100, le=599)
    message: str
    type: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    retry_after: float | None = Field(default=None, ge=0)
    code: str | None = None

    @model_validator(mode="after")
    def _named(self) -> ErrorSpec:
        if self.status is None and self.type is None:
            raise ValueError("error needs 'status' or 'type'")
        return self

    def to_exception(self) -> ScriptedProviderError:
        name = self.type or default_error_type(self.status)
        headers = {} if self.retry_after is None else {"retry-after": f"{self.retry_after:g}"}
        return provider_error_class(name)(
            self.message,
            status_code=self.status,
            body={"error": {"message": self.message, "code": self.code}},
            headers=headers,
            retry_after=self.retry_after,
            code=self.code,
        )


class ErrorEntry(_Strict):
    error: ErrorSpec
    times: int = Field(default=1, ge=1)
    delay: float = Field(default=0.0, ge=0)
    wait_for_file: str | None = Field(default=None, min_length=1)
    purpose: ModelPurpose = Field(default="agent", alias="for")


class ResponseEntry(_Strict):
    content: str | list[str | dict[str, Any]] = ""
    tool_calls: list[ToolCallSpec] = Field(default_factory=list)
    invalid_tool_calls: list[InvalidToolCallSpec] = Field(default_factory=list)
    additional_kwargs: dict[str, Any] = Field(default_factory=dict)
    response_metadata: dict[str, Any] = Field(default_factory=dict)
    usage_metadata: UsageSpec | None = None
    id: str | None = None
    chunks: list[str] | None = None
    chunk_delay: float = Field(default=0.0, ge=0)
    delay: float = Field(default=0.0, ge=0)
    wait_for_file: str | None = Field(default=None, min_length=1)
    purpose: ModelPurpose = Field(default="agent", alias="for")

    @model_validator(mode="before")
    @classmethod
    def _content_from_chunks(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("chunks"), list) and "content" not in data:
            pieces = data["chunks"]
            if all(isinstance(piece, str) for piece in pieces):
                return {**data, "content": "".join(pieces)}
        return data

    @field_validator("content", mode="before")
    @classmethod
    def _content_shape(cls, value: object) -> object:
        # Checked up front: pydantic's own union errors would name internal union branches.
        blocks_ok = isinstance(value, list) and all(isinstance(b, str | dict) for b in value)
        if not (isinstance(value, str) or blocks_ok):
            raise ValueError("must be a string or a list of content blocks")
        return value

    @model_validator(mode="after")
    def _answers(self) -> ResponseEntry:
        if not self.model_fields_set & {"content", "tool_calls"}:
            raise ValueError("entry needs 'content', 'tool_calls' or 'error'")
        if self.chunks is not None and self.content != "".join(self.chunks):
            raise ValueError("'content' must be the concatenation of 'chunks'")
        return self

    def pieces(self) -> list[str]:
        """The text as a streaming provider sends it (content blocks go in one piece, with the last chunk)."""
        if self.chunks is not None:
            return list(self.chunks)
        return [self.content] if isinstance(self.content, str) and self.content else []

    def to_message(self, purpose: ModelPurpose, call_index: int) -> AIMessage:
        """A fresh AIMessage; everything is deep-copied because the parsed script is cached and shared."""
        usage: UsageMetadata | None = None
        if self.usage_metadata is not None:
            spec = self.usage_metadata
            total = spec.total_tokens
            usage = UsageMetadata(
                input_tokens=spec.input_tokens,
                output_tokens=spec.output_tokens,
                total_tokens=spec.input_tokens + spec.output_tokens if total is None else total,
            )
        calls = [
            tool_call(name=tc.name, args=copy.deepcopy(tc.args), id=tc.id or f"call_{purpose}_{call_index}_{j}")
            for j, tc in enumerate(self.tool_calls)
        ]
        invalid = [
            invalid_tool_call(name=tc.name, args=tc.args, id=tc.id, error=tc.error) for tc in self.invalid_tool_calls
        ]
        raw = self.additional_kwargs.get("tool_calls")
        if not calls and not invalid and isinstance(raw, list):
            calls, invalid = parse_raw_tool_calls(raw)
        return AIMessage(
            content=copy.deepcopy(self.content),
            tool_calls=calls,
            invalid_tool_calls=invalid,
            additional_kwargs=copy.deepcopy(self.additional_kwargs),
            response_metadata=copy.deepcopy(self.response_metadata),
            usage_metadata=usage,
            id=self.id,
        )


Entry = ErrorEntry | ResponseEntry


class CallGroup(_Strict):
    """The errors one call raises on its first attempts, then its answer (``None``: exhausted)."""

    errors: tuple[ErrorEntry, ...]
    response: ResponseEntry | None


class Script(_Strict):
    path: Path
    calls: dict[ModelPurpose, tuple[CallGroup, ...]]
    """Call groups per purpose, in script order."""

    def resolve(self, purpose: ModelPurpose, call_index: int, attempt: int) -> Entry:
        """The entry answering attempt ``attempt`` (1-based) of ``purpose`` call ``call_index`` (0-based)."""
        groups = self.calls.get(purpose, ())
        if call_index >= len(groups):
            raise ScriptExhaustedError(
                f"script {self.path} is exhausted: {purpose} call #{call_index} has no entry "
                f"(the script has {len(groups)} {purpose} call(s))"
            )
        group = groups[call_index]
        covered = 0
        for error in group.errors:
            covered += error.times
            if attempt <= covered:
                return error
        if group.response is None:
            raise ScriptExhaustedError(
                f"script {self.path} is exhausted: {purpose} call #{call_index} attempt {attempt} "
                f"comes after its last error entry and there is no response after it"
            )
        return group.response
