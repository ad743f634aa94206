"""A chat model that answers from a JSON script: deterministic runs without a provider.

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

import asyncio
import copy
import json
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any, cast

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, InvalidToolCall, ToolCall
from langchain_core.messages.ai import UsageMetadata
from langchain_core.messages.tool import invalid_tool_call, tool_call, tool_call_chunk
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import ErrorDetails

from activities.models.tool_args import object_args_error
from vocabulary.contracts import ModelPurpose

__all__ = [
    "APIStatusError",
    "AuthenticationError",
    "InternalServerError",
    "PermissionDeniedError",
    "RateLimitError",
    "Script",
    "ScriptError",
    "ScriptExhaustedError",
    "ScriptedChatModel",
    "ScriptedProviderError",
    "load_script",
    "provider_error_class",
]


_FILE_POLL_SECONDS = 0.05
"""How often a ``wait_for_file`` entry looks for its file (a file has no portable change notification)."""


class ScriptError(ValueError):
    """A script file that is missing or malformed; the message is one line naming the file and entry."""


class ScriptExhaustedError(Exception):
    """The run made a model call (or attempt) the script has no answer for; retrying cannot help."""


class ScriptedProviderError(Exception):
    """Base of the provider-like errors a script raises.

    The attributes mirror the ``openai`` SDK's ``APIStatusError`` (plus ``headers`` and ``retry_after``,
    which the SDK keeps on ``response``) so error classification code can treat both alike.
    """

    def __init__(
        self,
        message: str,
        *,
        status_code: int | None,
        body: dict[str, Any],
        headers: dict[str, str],
        retry_after: float | None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status_code = status_code
        self.body = body
        self.headers = headers
        self.retry_after = retry_after
        self.code = code


class RateLimitError(ScriptedProviderError):
    pass


class AuthenticationError(ScriptedProviderError):
    pass


class PermissionDeniedError(ScriptedProviderError):
    pass


class InternalServerError(ScriptedProviderError):
    pass


class APIStatusError(ScriptedProviderError):
    pass


_ERROR_CLASSES: dict[str, type[ScriptedProviderError]] = {
    cls.__name__: cls
    for cls in (
        RateLimitError,
        AuthenticationError,
        PermissionDeniedError,
        InternalServerError,
        APIStatusError,
    )
}


_BUILTIN_BASES: dict[str, tuple[type[Exception], ...]] = {"IndexError": (IndexError,)}
"""Names a provider path raises as a Python builtin, which a scripted error of that name therefore is too:
langchain raises ``IndexError`` when a provider answers with an empty ``generations`` list."""


def provider_error_class(name: str) -> type[ScriptedProviderError]:
    """The error class called ``name``, created on first use so scripts can name any SDK error class.

    Classification keys on class names (``APITimeoutError``, ``APIConnectionError``...), so a script
    must be able to raise them without this module predefining every provider's hierarchy. Classes are
    cached so one name is always one class.
    """
    cls = _ERROR_CLASSES.get(name)
    if cls is None:
        bases: tuple[type, ...] = (ScriptedProviderError, *_BUILTIN_BASES.get(name, ()))
        created = type(name, bases, {"__module__": __name__})
        cls = cast("type[ScriptedProviderError]", created)
        _ERROR_CLASSES[name] = cls
    return cls


def _default_error_type(status: int | None) -> str:
    if status == 429:
        return "RateLimitError"
    if status == 401:
        return "AuthenticationError"
    if status == 403:
        return "PermissionDeniedError"
    if status is not None and status >= 500:
        return "InternalServerError"
    return "APIStatusError"


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
        name = self.type or _default_error_type(self.status)
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


def last_chunk(message: AIMessage, *, with_content: bool) -> AIMessageChunk:
    """What a streaming provider sends last: the tool calls as deltas, the metadata and the usage."""
    deltas = [
        tool_call_chunk(name=call["name"], args=json.dumps(call["args"]), id=call["id"], index=index)
        for index, call in enumerate(message.tool_calls)
    ]
    return AIMessageChunk(
        content=message.content if with_content else "",
        tool_call_chunks=deltas,
        invalid_tool_calls=message.invalid_tool_calls,
        additional_kwargs=message.additional_kwargs,
        response_metadata=message.response_metadata,
        usage_metadata=message.usage_metadata,
        id=message.id,
        chunk_position="last",
    )


def parse_raw_tool_calls(raw: list[Any]) -> tuple[list[ToolCall], list[InvalidToolCall]]:
    """A provider's raw ``additional_kwargs["tool_calls"]`` (OpenAI's ``{id, function: {name, arguments}}``) as
    tool calls and invalid tool calls. langchain's own fallback parser makes the whole message fail to build
    when ``arguments`` is valid JSON but not an object (``"ls"``, ``[1]``); here such a call is invalid, with an
    error saying why, so the run can answer it like any other bad call."""
    calls: list[ToolCall] = []
    invalid: list[InvalidToolCall] = []
    for entry in raw:
        function = entry.get("function") if isinstance(entry, dict) else None
        if not isinstance(function, dict):
            continue
        name, arguments, call_id = function.get("name"), function.get("arguments"), entry.get("id")
        error: str | None = None
        args: Any = arguments
        if isinstance(arguments, str):
            try:
                args = json.loads(arguments) if arguments.strip() else {}
            except json.JSONDecodeError as exc:
                error = f"the arguments are not valid JSON: {exc}"
        if args is None:
            args = {}  # "null" or no arguments at all: a call without parameters, as langchain reads it
        if error is None:
            error = object_args_error(args)
        if error is None:
            calls.append(tool_call(name=name or "", args=args, id=call_id))
        else:
            text = arguments if isinstance(arguments, str) else json.dumps(arguments)
            invalid.append(invalid_tool_call(name=name, args=text, id=call_id, error=error))
    return calls, invalid


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


def _group(entries: Sequence[Entry]) -> dict[ModelPurpose, tuple[CallGroup, ...]]:
    calls: dict[ModelPurpose, list[CallGroup]] = {}
    pending: dict[ModelPurpose, list[ErrorEntry]] = {}
    for entry in entries:
        errors = pending.setdefault(entry.purpose, [])
        if isinstance(entry, ErrorEntry):
            errors.append(entry)
        else:
            calls.setdefault(entry.purpose, []).append(CallGroup(errors=tuple(errors), response=entry))
            errors.clear()
    for purpose, errors in pending.items():
        if errors:
            calls.setdefault(purpose, []).append(CallGroup(errors=tuple(errors), response=None))
    return {purpose: tuple(groups) for purpose, groups in calls.items()}


def _where(loc: Sequence[int | str]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text


def _describe(err: ErrorDetails) -> str:
    """One pydantic error as ``<location>: <problem>``, worded for someone editing the JSON by hand."""
    loc = list(err["loc"])
    kind = err["type"]
    if kind == "extra_forbidden":
        return f"{_where(loc[:-1])}: unknown key {loc[-1]!r}"
    if kind == "missing":
        return f"{_where(loc[:-1])}: missing key {loc[-1]!r}"
    if kind == "value_error":
        return f"{_where(loc)}: {err.get('ctx', {}).get('error', err['msg'])}"
    problem = {
        "dict_type": "must be an object",
        "model_type": "must be an object",
        "list_type": "must be a list",
    }.get(kind, err["msg"])
    got = repr(err["input"])
    return f"{_where(loc)}: {problem} (got {got if len(got) <= 60 else got[:57] + '...'})"


def load_script(path: str | Path) -> Script:
    """Parse and validate a whole script file up front, so a bad script fails before the run starts."""
    path = Path(path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ScriptError(f"cannot read script {path}: {exc.strerror or exc}") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ScriptError(f"invalid script {path}: not valid JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise ScriptError(f"invalid script {path}: the top level must be an object with a 'responses' list")
    unknown = sorted(set(raw) - {"responses"})
    if unknown:
        raise ScriptError(f"invalid script {path}: unknown top-level key {unknown[0]!r}")
    if "responses" not in raw:
        raise ScriptError(f"invalid script {path}: missing key 'responses'")
    responses = raw["responses"]
    if not isinstance(responses, list):
        raise ScriptError(f"invalid script {path}: 'responses' must be a list")

    entries: list[Entry] = []
    for index, item in enumerate(responses):
        where = f"responses[{index}]"
        if not isinstance(item, dict):
            raise ScriptError(f"invalid script {path}: {where}: an entry must be an object")
        model: type[Entry] = ErrorEntry if "error" in item else ResponseEntry
        try:
            entries.append(model.model_validate(item))
        except ValidationError as exc:
            raise ScriptError(f"invalid script {path}: {where}{_describe(exc.errors()[0])}") from exc
    return Script(path=path, calls=_group(entries))


class ScriptedChatModel(BaseChatModel):
    """A langchain-core chat model answering one call of a run from a :class:`Script`.

    An instance is built per call with that call's coordinates, so it holds no counters: any worker
    building it for the same (purpose, call_index, attempt) gives the same answer.
    """

    script: Script
    purpose: ModelPurpose = "agent"
    call_index: int = Field(default=0, ge=0)
    attempt: int = Field(default=1, ge=1)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {
            "script": str(self.script.path),
            "purpose": self.purpose,
            "call_index": self.call_index,
            "attempt": self.attempt,
        }

    def __repr_args__(self) -> Any:
        # langchain serialises the model (repr included) for its callbacks on every call; the script's
        # responses in it would make each call cost as much as the whole script.
        return list(self._identifying_params.items())

    def _answer(self, entry: Entry) -> ChatResult:
        if isinstance(entry, ErrorEntry):
            raise entry.error.to_exception()
        message = entry.to_message(self.purpose, self.call_index)
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        entry = self.script.resolve(self.purpose, self.call_index, self.attempt)
        if entry.wait_for_file:
            while not Path(entry.wait_for_file).exists():
                time.sleep(_FILE_POLL_SECONDS)
        if entry.delay:
            time.sleep(entry.delay)
        return self._answer(entry)

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        entry = self.script.resolve(self.purpose, self.call_index, self.attempt)
        if entry.wait_for_file:
            while not Path(entry.wait_for_file).exists():
                await asyncio.sleep(_FILE_POLL_SECONDS)
        if entry.delay:
            await asyncio.sleep(entry.delay)
        return self._answer(entry)

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        """The answer as a streaming provider sends it: the text pieces ``chunk_delay`` apart, then one last chunk
        with the tool calls (as deltas), metadata and usage."""
        entry = self.script.resolve(self.purpose, self.call_index, self.attempt)
        if entry.wait_for_file:
            while not Path(entry.wait_for_file).exists():
                await asyncio.sleep(_FILE_POLL_SECONDS)
        if entry.delay:
            await asyncio.sleep(entry.delay)
        if isinstance(entry, ErrorEntry):
            raise entry.error.to_exception()
        message = entry.to_message(self.purpose, self.call_index)
        pieces = entry.pieces()
        for index, piece in enumerate(pieces):
            if index and entry.chunk_delay:
                await asyncio.sleep(entry.chunk_delay)
            yield ChatGenerationChunk(message=AIMessageChunk(content=piece, id=message.id))
        yield ChatGenerationChunk(message=last_chunk(message, with_content=not pieces))

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """Bind tools the way provider models do, so the bound schemas are visible in the call kwargs."""
        if tool_choice is not None:
            kwargs["tool_choice"] = tool_choice
        return self.bind(tools=[convert_to_openai_tool(tool) for tool in tools], **kwargs)
