"""``POST /api/input-polish``: DeerFlow's pre-send rewrite of the composer's draft, by the deployment's model on a
worker (``workers/api/oneshot.py``). Nothing is written but the one-shot workflow's own history.

The app (``bytedance/deer-flow: frontend/src/core/input-polish/api.ts``, ``polishInputDraft``) sends
``{text, locale?, thread_id?}`` and reads ``{rewritten_text, changed}``; on an error it shows ``detail``. The
prompt and the answers are DeerFlow's (``backend/app/gateway/routers/input_polish.py``): off
(``api.input_polish.enabled: false``) → 404; an empty draft or one over ``api.input_polish.max_chars`` (counted
after trimming, as the model sees it) → 400. ``thread_id`` is only for DeerFlow's tracing and is not read here.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException
from pydantic import Field

from workers.api.deps import Context, User
from workers.api.limits import ApiBody
from workers.api.oneshot import ask_model, clean_answer
from workers.api.run_request import model_spec

router = APIRouter()

SYSTEM_INSTRUCTION = (
    "You are DeerFlow's pre-send prompt optimizer.\n"
    "Rewrite the user's rough draft into a clearer instruction for an AI agent before it is sent.\n"
    "Do not answer the task.\n"
    "Preserve the user's language, intent, entities, file paths, URLs, code blocks, and any leading slash command "
    "prefix exactly.\n"
    "Improve the draft by making the goal, scope, constraints, and desired output explicit when they are implied by "
    "the draft.\n"
    "For vague quality words such as 'better', 'good-looking', or 'polished', translate them into concrete but "
    "generic quality criteria.\n"
    "Do not invent facts, business context, tools, file names, dates, metrics, or user preferences that are not "
    "implied.\n"
    "Prefer one concise paragraph or a short bullet list. Keep it under 180 words unless the original draft is "
    "longer.\n"
    "Output only the rewritten draft, with no markdown wrapper, explanation, or alternatives."
)


class InputPolishRequest(ApiBody):
    text: str
    locale: str | None = Field(None, max_length=64)


def user_content(text: str, locale: str | None) -> str:
    hint = locale.strip() if locale else "same language as the draft"
    return f"Locale hint: {hint}\n\nRewrite this draft while preserving its intent:\n<draft>\n{text}\n</draft>"


@router.post("/input-polish")
async def polish_input(body: InputPolishRequest, user: User, context: Context) -> dict[str, Any]:
    settings = context.config.api.input_polish
    if not settings.enabled:
        raise HTTPException(404, "Input polishing is disabled")
    text = body.text.strip()
    if not text:
        raise HTTPException(400, "Input text is required")
    if len(text) > settings.max_chars:
        raise HTTPException(400, f"Input text exceeds {settings.max_chars} characters")
    answer = await ask_model(
        context,
        user,
        model=model_spec(context, None).spec,
        purpose="input_polish",
        system=SYSTEM_INSTRUCTION,
        prompt=user_content(text, body.locale),
    )
    rewritten = clean_answer(answer, cut_at_unclosed_think=False)
    if not rewritten:
        raise HTTPException(502, "the model failed: its answer held no rewritten text")
    return {"rewritten_text": rewritten, "changed": rewritten != text}
