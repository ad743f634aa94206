"""Tool approvals over the Agent Server API: a thread paused on a tool approval is ``interrupted`` with LangChain's
``{action_requests, review_configs}`` as the interrupt's value (``workers/api/served.py``), and a run request with
``command: {resume: {decisions: [...]}}`` answers it through the run's validated ``review`` update, as the API's
user (the audit's reviewer): refused decisions → 422 and nothing written, a stale or answered request → 409.
DeerFlow's app answers the Human Input Card it is served for the request (``workers/api/served.py``) with a
message whose ``additional_kwargs.human_input_response`` is the option (approve / reject: every call) or a typed
reason (reject every call with it).

A run adds its own gated tools with ``context.tool_approval`` (or ``config.configurable.tool_approval``):
``{rules: [...]}`` as in ``middlewares.tool_approval``, after the configured ones, which it cannot remove.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import HTTPException
from pydantic import TypeAdapter, ValidationError

from middlewares.run_settings import RunSettings
from middlewares.tool_approval import ApprovalRule, with_rules
from vocabulary.approvals import ReviewInput, card_review, parse_review
from vocabulary.human_input import InvalidReplyError

_RULES = TypeAdapter(list[ApprovalRule])


def review_for(
    command: dict[str, Any] | None,
    pending: dict[str, Any],
    reviewer: str,
    max_chars: int,
    message: dict[str, Any] | None = None,
) -> ReviewInput:
    """The review a request gives the pending approval ``pending``: ``command.resume`` with ``decisions``, or
    DeerFlow's Human Input Card answer (``message``'s ``additional_kwargs.human_input_response``)."""
    response = ((message or {}).get("additional_kwargs") or {}).get("human_input_response")
    if command is None and isinstance(response, dict):
        return _card_review(pending, response, reviewer, max_chars)
    resume = (command or {}).get("resume")
    if not isinstance(resume, dict) or "decisions" not in resume:
        raise HTTPException(
            422,
            "the thread waits for a tool approval: answer with command.resume = "
            '{"decisions": [{"type": "approve" | "edit" | "reject", ...}, ...]}',
        )
    if len(json.dumps(resume, default=str)) > max_chars:
        raise HTTPException(422, f"the decisions are over {max_chars} characters (run.max_message_chars)")
    try:
        review = parse_review({"decisions": resume["decisions"], "call_ids": resume.get("call_ids") or []})
    except InvalidReplyError as exc:
        raise HTTPException(422, f"command.resume: {exc}") from None
    review.request_id = str(pending.get("request_id"))
    review.reviewer = reviewer
    return review


def _card_review(pending: dict[str, Any], response: dict[str, Any], reviewer: str, max_chars: int) -> ReviewInput:
    if len(json.dumps(response, default=str)) > max_chars:
        raise HTTPException(422, f"the answer is over {max_chars} characters (run.max_message_chars)")
    try:
        review = card_review(pending, response)
    except InvalidReplyError as exc:
        raise HTTPException(422, f"human_input_response: {exc}") from None
    review.request_id = review.request_id or str(pending.get("request_id"))
    review.reviewer = reviewer
    return review


def with_run_rules(settings: RunSettings, option: Any) -> RunSettings:
    """``settings`` with the run's own approval rules (``context.tool_approval.rules``) after the configured ones."""
    if option is None:
        return settings
    rules = option.get("rules") if isinstance(option, dict) and set(option) <= {"rules"} else None
    try:
        extra = _RULES.validate_python(rules)
    except ValidationError as exc:
        problem = exc.errors()[0]
        where = ".".join(map(str, problem["loc"]))
        raise HTTPException(422, f"tool_approval.rules{'.' + where if where else ''}: {problem['msg']}") from None
    middlewares = settings.middlewares
    approval = with_rules(middlewares.tool_approval, extra)
    return settings.model_copy(update={"middlewares": middlewares.model_copy(update={"tool_approval": approval})})
