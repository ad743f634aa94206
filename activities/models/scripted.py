"""A chat model that answers from a JSON script: deterministic runs without a provider.

The script (its format: ``activities/models/script.py``) is keyed by *call coordinates* instead of hidden state:
an instance is built per model call with that call's purpose, index and attempt, and answers with the script's
entry for them, whatever worker process or retry attempt executes it. Errors are provider-like
(``activities/models/provider_errors.py``). ``astream`` yields a response's text in its ``chunks``, then one last
chunk with the tool calls, metadata and usage.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.messages.tool import tool_call_chunk
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import Field

from activities.models.script import Entry, ErrorEntry, Script
from vocabulary.contracts import ModelPurpose

__all__ = ["ScriptedChatModel"]


_FILE_POLL_SECONDS = 0.05
"""How often a ``wait_for_file`` entry looks for its file (a file has no portable change notification)."""


def _last_chunk(message: AIMessage, *, with_content: bool) -> AIMessageChunk:
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

    async def _entry_in_time(self) -> Entry:
        """This call's entry, once its ``wait_for_file`` exists and its ``delay`` has passed."""
        entry = self.script.resolve(self.purpose, self.call_index, self.attempt)
        if entry.wait_for_file:
            while not Path(entry.wait_for_file).exists():
                await asyncio.sleep(_FILE_POLL_SECONDS)
        if entry.delay:
            await asyncio.sleep(entry.delay)
        return entry

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
        return self._answer(await self._entry_in_time())

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        """The answer as a streaming provider sends it: the text pieces ``chunk_delay`` apart, then one last chunk
        with the tool calls (as deltas), metadata and usage."""
        entry = await self._entry_in_time()
        if isinstance(entry, ErrorEntry):
            raise entry.error.to_exception()
        message = entry.to_message(self.purpose, self.call_index)
        pieces = entry.pieces()
        for index, piece in enumerate(pieces):
            if index and entry.chunk_delay:
                await asyncio.sleep(entry.chunk_delay)
            yield ChatGenerationChunk(message=AIMessageChunk(content=piece, id=message.id))
        yield ChatGenerationChunk(message=_last_chunk(message, with_content=not pieces))

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
