"""DeerFlow's follow-up suggestions: ``GET /api/suggestions/config`` and ``POST /api/threads/{id}/suggestions``,
asked of the deployment's model on a worker (``workers/api/oneshot.py``).

The app (``bytedance/deer-flow: frontend/src/core/suggestions/api.ts`` reads ``{enabled, max_suggestions}``;
``frontend/src/components/workspace/input-box.tsx`` posts ``{messages: [{role, content}] (its last six), n,
model_name?}`` after each answer and reads ``{suggestions}``, treating any error as none). The prompt and the
parsing of the answer (a JSON array of strings) are DeerFlow's (``backend/app/gateway/routers/suggestions.py``).
The thread must be the caller's (404 otherwise, as every thread route). ``model_name`` is checked as a run's is
(``workers/api/run_request.py``, ``model_spec``). Unlike DeerFlow, a model that fails is a 502 with its reason, not an
empty list: the app shows nothing either way, and a client can tell.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from workers.api.deps import Context, Thread
from workers.api.limits import ApiBody
from workers.api.oneshot import ask_model, clean_answer
from workers.api.run_request import model_spec
from workers.config import HartflowConfig

router = APIRouter()

MAX_MESSAGES = 50
"""Messages one request may carry (the app sends at most six)."""


class SuggestionMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: str = Field(max_length=64)
    content: str = Field(max_length=100_000)


class SuggestionsRequest(ApiBody):
    messages: list[SuggestionMessage] = Field(max_length=MAX_MESSAGES)
    n: int = Field(3, ge=1, le=5)
    model_name: str | None = Field(None, max_length=1000)


def suggestions_enabled(config: HartflowConfig) -> bool:
    """On when the setting says so and there is a model to ask."""
    return config.api.suggestions.enabled and bool(config.model or config.models)


@router.get("/suggestions/config")
async def suggestions_config(context: Context) -> dict[str, Any]:
    settings = context.config.api.suggestions
    return {"enabled": suggestions_enabled(context.config), "max_suggestions": settings.max_suggestions}


@router.post("/threads/{thread_id}/suggestions")
async def suggest(body: SuggestionsRequest, thread: Thread, context: Context) -> dict[str, list[str]]:
    await context.ledger.require_thread(thread)
    conversation = _conversation(body.messages)
    if not suggestions_enabled(context.config) or not conversation:
        return {"suggestions": []}
    n = min(body.n, context.config.api.suggestions.max_suggestions)
    answer = await ask_model(
        context,
        thread.user_id,
        model=model_spec(context, body.model_name).spec,
        purpose="suggestions",
        system=_system_instruction(n),
        prompt=f"Conversation Context:\n{conversation}\n\nGenerate {n} follow-up questions",
    )
    found = _json_strings(answer)
    return {"suggestions": [s.replace("\n", " ").strip() for s in found][:n]}


def _system_instruction(n: int) -> str:
    return (
        "You are generating follow-up questions to help the user continue the conversation.\n"
        f"Based on the conversation below, produce EXACTLY {n} short questions the user might ask next.\n"
        "Requirements:\n"
        "- Questions must be relevant to the preceding conversation.\n"
        "- Questions must be written in the same language as the user.\n"
        "- Keep each question concise (ideally <= 20 words / <= 40 Chinese characters).\n"
        "- Do NOT include numbering, markdown, or any extra text.\n"
        "- Output MUST be a JSON array of strings only.\n"
    )


def _conversation(messages: list[SuggestionMessage]) -> str:
    lines = []
    for message in messages:
        role = message.role.strip().lower()
        speaker = {"user": "User", "human": "User", "assistant": "Assistant", "ai": "Assistant"}.get(role, message.role)
        lines.append(f"{speaker}: {message.content.strip()}")
    return "\n".join(lines).strip()


def _json_strings(answer: str) -> list[str]:
    """The non-empty strings of the first ``[`` … last ``]`` of the answer, when that is a JSON array; else none."""
    text = clean_answer(answer, cut_at_unclosed_think=True)
    start, end = text.find("["), text.rfind("]")
    if start == -1 or end <= start:
        return []
    try:
        data = json.loads(text[start : end + 1])
    except ValueError:
        return []
    if not isinstance(data, list):
        return []
    return [item.strip() for item in data if isinstance(item, str) and item.strip()]
