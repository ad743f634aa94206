"""DanglingToolCall: the model request always carries a well-formed tool-call transcript.

Strict providers reject a request in which an assistant tool call has no result, a result has no call, or a
result is separated from its call. Such histories are real: a run cancelled mid-tool commits the AIMessage
without its results, summarisation can drop a call but keep its result, providers omit ids or names.

Hook
* ``wrap_model_call`` — request overlay only (``request.override(messages=…)``); thread state is never
  changed. Works on ``request.messages`` (not in ``before_model``) so repairs land right after the AIMessage
  they belong to instead of being appended at the end by the ``messages`` reducer:

  1. malformed (missing/blank) tool-call ids get ``deerflow_synthetic_tool_call_{msg_index}_{source}_{position}``
     (``source`` ∈ ``call``/``invalid``/``raw``); an id-less result is re-pointed at such an id only when the
     attribution is forced (one compatible call of its turn, or position when every malformed call of the
     turn has a result);
  2. tool-call ids are collected from ``tool_calls``, ``invalid_tool_calls`` and, only when both are empty
     (the view the OpenAI serializer falls back to), raw ``additional_kwargs["tool_calls"]``;
  3. the transcript is rebuilt: each AIMessage is followed by its results in call order (a queue per id, so
     ids reused across turns pair up), results without a call are dropped, and each unanswered call gets a
     synthetic ``ToolMessage(status="error")``;
  4. AIMessages are sanitised for serialisation: blank names become ``unknown_tool``, invalid-call args and raw
     ``function.arguments`` become a JSON-object string (else ``"{}"``).

  A valid transcript passes through untouched: the handler gets the very same request.

Writes: the request overlay only. The algorithm is pure and lives beside it: ``middlewares/_tool_call_ids.py`` (step 1)
and ``middlewares/_transcript_repair.py`` (steps 2-4).

Parts: the repair ``middlewares/_transcript_repair.py`` and ``middlewares/_tool_call_ids.py``; the tool turn answers
invalid calls with its ``invalid_call_result`` (``workflows/run/tools.py``). Tests:
``tests/test_dangling_tool_call.py``, ``tests/test_tool_call_ids.py``.
"""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.messages import AIMessage, BaseMessage

from middlewares._transcript_repair import invalid_call_result, patch_messages
from middlewares.base import Middleware, ModelHandler, ModelRequest
from vocabulary.messages import extends

__all__ = ["DanglingToolCallMiddleware", "invalid_call_result", "patch_messages"]


class DanglingToolCallMiddleware(Middleware):
    def __init__(self) -> None:
        # Per-run memory (never exported): the last request that needed no repair. A request that extends it
        # only needs its new messages checked, which keeps a turn's cost independent of the thread's length.
        self._well_formed: list[BaseMessage] = []

    async def wrap_model_call(self, request: ModelRequest, handler: ModelHandler) -> AIMessage:
        patched = self.repair(request.messages)
        if patched is not None:
            request = request.override(messages=patched)
        return await handler(request)

    def repair(self, messages: Sequence[BaseMessage]) -> list[BaseMessage] | None:
        """:func:`patch_messages`, checking only what was appended to the last well-formed request.

        Sound because a well-formed prefix answers each of its calls with its own first matching result, so
        appending a suffix that is well-formed on its own (valid ids, each call answered right after it, no
        orphan) cannot change any pairing; anything else takes the full pass."""
        known = self._well_formed
        extends_known = bool(known) and extends(messages, known)
        suffix_only = extends_known and patch_messages(messages[len(known) :]) is None
        patched = None if suffix_only else patch_messages(messages)
        if patched is None:
            self._well_formed = list(messages)
        return patched
