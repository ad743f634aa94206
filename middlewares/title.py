"""Title: name the thread after its first complete exchange, once (DeerFlow's ``TitleMiddleware``).

Hooks
* ``after_model`` — when ``title`` is unset, the thread has exactly one user message (DynamicContext reminders
  do not count) and at least one AIMessage: with ``title.model`` set, a model activity (``model.invoke``,
  purpose ``title``) writes the title from the prompt template (first 500 characters of each side,
  ``<think>`` blocks stripped, quotes stripped, cut to ``max_chars``); without one, or when that call fails or
  says nothing, the local fallback: the user's text cut to ``min(max_chars, 50)`` characters with ``...``,
  or ``New Conversation``. Result in **thread state** (``title``); an existing title is never replaced.
* ``after_agent`` — a first-turn run that ended before any answer (failed, cancelled) still gets the local
  fallback title, as DeerFlow's worker does for interrupted runs. **Thread state**.

Parts: the model call through ``middlewares/_model_call.py`` (``vocabulary/contracts/model.py`` ``MODEL_INVOKE``,
``activities/model.py``); the title as thread listings show it, ``activities/thread_lifecycle.py`` and ``hartflow
threads`` (``workers/cli/threads.py``). Tests: ``tests/test_title.py``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from pydantic import BaseModel, ConfigDict, Field
from temporalio.exceptions import ActivityError

from middlewares._logging import hook_logger
from middlewares._messages import ORIGINAL_USER_CONTENT_KEY, is_dynamic_context_reminder
from middlewares._model_call import call_model
from middlewares.base import Middleware
from middlewares.context import RunContext, best_effort
from vocabulary.state import StateUpdate, ThreadState

logger = hook_logger(__name__)

DEFAULT_PROMPT_TEMPLATE = (
    "Generate a concise title (max {max_words} words) for this conversation.\n"
    "User: {user_msg}\n"
    "Assistant: {assistant_msg}\n\n"
    "Return ONLY the title, no quotes, no explanation."
)
FALLBACK_TITLE = "New Conversation"
PROMPT_EXCERPT_CHARS = 500
FALLBACK_MAX_CHARS = 50
_THINK = re.compile(r"<think>[\s\S]*?</think>", re.IGNORECASE)


class TitleConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    max_words: int = Field(default=6, ge=1, le=20)
    max_chars: int = Field(default=60, ge=10, le=200)
    model: str | None = Field(default=None, description="model spec for titles; unset = the local fallback only")
    prompt_template: str = DEFAULT_PROMPT_TEMPLATE


def normalize_content(content: object) -> str:
    """The text of message content in any shape (string, content blocks, nested ``content``)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(part for part in map(normalize_content, content) if part)
    if isinstance(content, dict):
        if isinstance(content.get("text"), str):
            return str(content["text"])
        if content.get("content") is not None:
            return normalize_content(content["content"])
    return ""


def strip_think(text: str) -> str:
    """Reasoning models put ``<think>`` monologue first; it is never a title."""
    return _THINK.sub("", text).strip()


def _user_messages(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    return [m for m in messages if isinstance(m, HumanMessage) and not is_dynamic_context_reminder(m)]


def should_title(state: ThreadState, config: TitleConfig, *, allow_partial_exchange: bool = False) -> bool:
    if not config.enabled or state.title:
        return False
    messages = state.messages
    if not allow_partial_exchange and len(messages) < 2:
        return False
    answered = any(isinstance(m, AIMessage) for m in messages)
    return len(_user_messages(messages)) == 1 and (answered or allow_partial_exchange)


def user_text(state: ThreadState) -> str:
    """What the user typed in the first message (without the framing Uploads adds)."""
    first = _user_messages(state.messages)[0]
    original = first.additional_kwargs.get(ORIGINAL_USER_CONTENT_KEY)
    return original if isinstance(original, str) else normalize_content(first.content)


def fallback_title(user_msg: str, config: TitleConfig) -> str:
    if not user_msg.strip():
        return FALLBACK_TITLE
    limit = min(config.max_chars, FALLBACK_MAX_CHARS)
    if len(user_msg) > limit:
        # Room for the ellipsis, so the title never exceeds max_chars.
        return user_msg[: min(limit, config.max_chars - 3)].rstrip() + "..."
    return user_msg


def title_prompt(state: ThreadState, config: TitleConfig) -> str:
    assistant = next((m for m in state.messages if isinstance(m, AIMessage)), None)
    assistant_text = strip_think(normalize_content(assistant.content)) if assistant is not None else ""
    return config.prompt_template.format(
        max_words=config.max_words,
        user_msg=user_text(state)[:PROMPT_EXCERPT_CHARS],
        assistant_msg=assistant_text[:PROMPT_EXCERPT_CHARS],
    )


def parse_title(content: object, config: TitleConfig) -> str:
    title = strip_think(normalize_content(content)).strip().strip('"').strip("'")
    return title[: config.max_chars]


class TitleMiddleware(Middleware):
    def __init__(self, config: TitleConfig | None = None) -> None:
        self.config = config or TitleConfig()

    async def after_model(self, state: ThreadState, ctx: RunContext) -> StateUpdate | None:
        if not should_title(state, self.config):
            return None
        user_msg = user_text(state)
        title = None
        # An attachment-only first message has nothing to title: no model call for it.
        if self.config.model is not None and user_msg.strip():
            title = await self._generate(title_prompt(state, self.config), self.config.model, ctx)
        return {"title": title or fallback_title(user_msg, self.config)}

    async def after_agent(self, state: ThreadState, ctx: RunContext) -> StateUpdate | None:
        if not should_title(state, self.config, allow_partial_exchange=True):
            return None
        return {"title": fallback_title(user_text(state), self.config)}

    async def _generate(self, prompt: str, model: str, ctx: RunContext) -> str | None:
        reply = await best_effort(
            call_model(ctx, model, prompt, purpose="title", summary="Title.after_model · generate title")
        )
        if isinstance(reply, ActivityError):
            logger.warning("title generation with %s failed, using the fallback: %s", model, reply.cause or reply)
            return None
        return parse_title(reply.content, self.config) or None
