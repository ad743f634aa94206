"""DurableContext: what must outlive compaction reaches every model call as data, not instructions (DeerFlow's
``DurableContextMiddleware``, always on, lead and subagents).

A summary replaces old messages, and with them the record of which subagents were already sent and which skill
files were read. DeerFlow keeps those in checkpointed channels (``delegations``, ``skill_context``, beside
``summary_text``) and projects them into each request, fenced as untrusted data.

Hooks
* ``before_model`` — capture (**thread state**): the ledger of this run's ``task`` calls and their results
  (``delegations``: ``in_progress``, then the status the result carries; only this run's messages, after the user
  message ThreadData stamped with the run id) and the skill files read (``skill_context``: each successful read of a
  ``SKILL.md`` under ``skills_container_path`` that ToolErrorHandling stamped, paired with its read call). Only
  entries that differ from the state are returned.
* ``after_model`` — the ledger again, so the answer's new ``task`` calls are recorded as ``in_progress`` before
  they run. ``after_model`` runs in reverse, so SubagentLimit (later in the chain) has already dropped the calls
  over its limit and counted the prior ones.
* ``wrap_model_call`` — **request overlay**, after the leading SystemMessages: DeerFlow's
  ``SystemMessage("## Durable context authority contract\\n…")`` and a hidden
  ``HumanMessage(additional_kwargs={"hide_from_ui": True, "durable_context_data": True})`` holding
  ``<durable_context_data>`` with ``## Conversation summary so far`` (escaped, at most 6000 characters),
  ``## Work already delegated`` (newest first, 6000 characters) and ``## Active skills (loaded earlier - re-read
  the file before applying its instructions)``. Nothing when all three are empty; never written to the thread.

Writes: thread state (``delegations``, ``skill_context``), the request overlay. Per-run memory: the messages the
ledger and the skill capture have read (``DelegationLedger``, ``SkillReads``), not exported: a continued run reads
them again once.

Parts: the rendering ``middlewares/_durable_context_data.py``; the skill stamps and their capture
``middlewares/_skill_context.py`` (stamped by ``middlewares/tool_error_handling.py``); the ledger capture
``vocabulary/delegation_ledger.py`` and the subagent status contract ``vocabulary/delegation.py``; the reducers
``vocabulary/state.py``. SkillToolPolicy (``middlewares/skill_tool_policy.py``) reads ``skill_context``;
Summarization (``middlewares/summarization.py``) writes ``summary_text``. Tests: ``tests/test_durable_context.py``,
``tests/test_incremental_scans.py``.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

from middlewares._durable_context_data import (
    AUTHORITY_CONTRACT,
    DURABLE_CONTEXT_DATA_KEY,
    render_durable_context_data,
)
from middlewares._messages import HIDE_FROM_UI_KEY
from middlewares._skill_context import SkillReads
from middlewares.base import Middleware, ModelHandler, ModelRequest
from middlewares.context import RunContext
from vocabulary.delegation_ledger import DelegationLedger
from vocabulary.state import StateUpdate, ThreadState


class DurableContextMiddleware(Middleware):
    def __init__(
        self, *, skills_root: str = "/mnt/skills", skill_read_tool_names: Collection[str] = ("read_file",)
    ) -> None:
        # Per-run memory (never exported): what the ledger and the skill reads read, so a turn reads only the new
        # messages.
        self._skill_reads = SkillReads(skills_root=skills_root, read_tool_names=skill_read_tool_names)
        self._ledger: DelegationLedger | None = None

    async def before_model(self, state: ThreadState, ctx: RunContext) -> StateUpdate | None:
        update = self._delegations(state, ctx)
        skills = self._skill_reads.capture(state.messages)
        known = {entry.get("path"): entry for entry in state.skill_context}
        if any(known.get(entry["path"]) != entry for entry in skills):
            update["skill_context"] = skills
        return update or None

    async def after_model(self, state: ThreadState, ctx: RunContext) -> StateUpdate | None:
        return self._delegations(state, ctx) or None

    async def wrap_model_call(self, request: ModelRequest, handler: ModelHandler) -> AIMessage:
        state = request.state
        data = render_durable_context_data(state.summary_text, state.delegations, state.skill_context)
        if not data:
            return await handler(request)
        messages = list(request.messages)
        at = next((i for i, m in enumerate(messages) if not isinstance(m, SystemMessage)), len(messages))
        injected = [
            SystemMessage(AUTHORITY_CONTRACT),
            HumanMessage(data, additional_kwargs={HIDE_FROM_UI_KEY: True, DURABLE_CONTEXT_DATA_KEY: True}),
        ]
        return await handler(request.override(messages=[*messages[:at], *injected, *messages[at:]]))

    def _delegations(self, state: ThreadState, ctx: RunContext) -> dict[str, Any]:
        if self._ledger is None:
            self._ledger = DelegationLedger(ctx.run_id)
        ledger = self._ledger.capture(state.messages, state.delegations, now=ctx.now().isoformat())
        return {"delegations": ledger} if ledger else {}
