"""DynamicContext: the current date and the user's memory reach the model as hidden messages, so the system
prompt stays byte-identical across turns and provider prefix caches keep hitting.

Hook
* ``before_agent``: the date is ``%Y-%m-%d, %A`` of the run's clock in the configured timezone. The last
  injected date is read from the newest tagged reminder (``reminder_date``; legacy reminders: the
  ``<current_date>`` of a reminder *SystemMessage* only, never of the memory message, so memory text cannot
  spoof it).
  - none yet: the date and the memory (loaded by the ``memory.load`` activity) are injected on the latest
    eligible user message;
  - same date: nothing;
  - another date (midnight crossed): a date-only reminder on the latest eligible user message.
  Injection is DeerFlow's ID swap on that message (id ``X``): a hidden ``SystemMessage(id=X)`` with the date
  replaces it in place, a hidden ``HumanMessage(id=X__memory)`` with ``<memory>…</memory>`` (kept at user
  authority: memory is user-influenceable) and the user's message as ``X__user`` are appended. Eligible:
  a HumanMessage that is no reminder, not ``name="summary"`` and whose id does not end with ``__user``
  (swapping a swapped message again would grow ``__user__user…``). The memory load has a timeout
  (DeerFlow's 5 s); when it times out or fails nothing is injected this run, and the next run tries again.

Writes: thread state (the swapped messages); reads the memory store through an activity.

Parts: the contract ``vocabulary/contracts/memory.py`` (``MEMORY_LOAD``) and its activity
``activities/memory_store.py``, whose memory the memory workflow (``workflows/memory.py``) writes; the static system
prompt this keeps byte-identical, ``workflows/run/prompt.py``. Helpers: ``middlewares/_messages.py``. Tests:
``tests/test_dynamic_context.py``, ``tests/test_best_effort.py``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from pydantic import BaseModel, ConfigDict, Field, field_validator
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

from middlewares._activity_call import call_activity
from middlewares._logging import hook_logger
from middlewares._messages import (
    DYNAMIC_CONTEXT_REMINDER_KEY,
    HIDE_FROM_UI_KEY,
    SUMMARY_MESSAGE_NAME,
    is_dynamic_context_reminder,
)
from middlewares.base import Middleware
from middlewares.context import ActivityOptions, RunContext, best_effort
from vocabulary.contracts import MEMORY_LOAD, MemoryLoadInput
from vocabulary.messages import message_text
from vocabulary.state import StateUpdate, ThreadState

logger = hook_logger(__name__)

REMINDER_DATE_KEY = "reminder_date"
INJECTED_USER_SUFFIX = "__user"
MEMORY_SUFFIX = "__memory"
DATE_FORMAT = "%Y-%m-%d, %A"
_LEGACY_DATE = re.compile(r"<current_date>([^<]+)</current_date>")


class DynamicContextConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    timezone: str = Field(default="UTC", description="IANA zone of the injected date (DeerFlow: server local time)")
    memory_injection_enabled: bool = Field(default=True, description="DeerFlow's memory.injection_enabled")
    max_injection_tokens: int = Field(default=2000, ge=1, description="DeerFlow's memory.max_injection_tokens")
    memory_timeout_seconds: float = Field(default=5.0, gt=0, description="give up on memory (and inject nothing)")

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown timezone {value!r}; use an IANA name such as 'Europe/Berlin'") from None
        return value


def date_reminder(date: str) -> str:
    return f"<system-reminder>\n<current_date>{date}</current_date>\n</system-reminder>"


def last_injected_date(messages: Sequence[BaseMessage]) -> str | None:
    for message in reversed(messages):
        if not is_dynamic_context_reminder(message):
            continue
        date = message.additional_kwargs.get(REMINDER_DATE_KEY)
        if isinstance(date, str) and date:
            return date
        if isinstance(message, SystemMessage) and (legacy := _LEGACY_DATE.search(message_text(message))):
            return legacy.group(1)
    return None


def is_injection_target(message: BaseMessage) -> bool:
    return (
        isinstance(message, HumanMessage)
        and not is_dynamic_context_reminder(message)
        and message.name != SUMMARY_MESSAGE_NAME
        and not str(message.id or "").endswith(INJECTED_USER_SUFFIX)
    )


def id_swap(target: HumanMessage, date: str, memory: str | None) -> list[BaseMessage]:
    """The reminder takes the target's id (replaced in place); memory and the user's message are appended."""
    marker = {HIDE_FROM_UI_KEY: True, DYNAMIC_CONTEXT_REMINDER_KEY: True}
    swapped: list[BaseMessage] = [
        SystemMessage(date_reminder(date), id=target.id, additional_kwargs={**marker, REMINDER_DATE_KEY: date})
    ]
    if memory:
        swapped.append(HumanMessage(memory, id=f"{target.id}{MEMORY_SUFFIX}", additional_kwargs=dict(marker)))
    swapped.append(
        HumanMessage(
            target.content,
            id=f"{target.id}{INJECTED_USER_SUFFIX}",
            name=target.name,
            additional_kwargs=target.additional_kwargs,
        )
    )
    return swapped


class DynamicContextMiddleware(Middleware):
    def __init__(self, config: DynamicContextConfig | None = None) -> None:
        self.config = config or DynamicContextConfig()

    async def before_agent(self, state: ThreadState, ctx: RunContext) -> StateUpdate | None:
        messages = list(state.messages)
        target = next((m for m in reversed(messages) if is_injection_target(m)), None)
        if not isinstance(target, HumanMessage):
            return None
        today = ctx.now().astimezone(ZoneInfo(self.config.timezone)).strftime(DATE_FORMAT)
        last = last_injected_date(messages)
        if last == today:
            return None
        if last is not None:
            logger.info("DynamicContext: date changed %s → %s; date reminder on message %s", last, today, target.id)
            return {"messages": id_swap(target, today, None)}
        memory: str | None = None
        if self.config.memory_injection_enabled:
            loaded = await best_effort(self._load_memory(ctx))
            if isinstance(loaded, ActivityError):
                logger.warning(
                    "DynamicContext: memory not loaded (%s); nothing injected this run", loaded.cause or loaded
                )
                return None
            memory = loaded
        logger.info("DynamicContext: date%s injected on message %s", " and memory" if memory else "", target.id)
        return {"messages": id_swap(target, today, memory)}

    async def _load_memory(self, ctx: RunContext) -> str | None:
        loaded = await call_activity(
            ctx,
            MEMORY_LOAD,
            MemoryLoadInput(ctx.user_id, self.config.max_injection_tokens),
            summary="DynamicContext.before_agent · load memory",
            options=ActivityOptions(
                start_to_close=timedelta(seconds=self.config.memory_timeout_seconds),
                # One attempt: a slow store must not hold the run; the next run tries again.
                retry=RetryPolicy(maximum_attempts=1),
                local=True,
            ),
        )
        content = loaded.content.strip()
        return f"<memory>\n{content}\n</memory>" if content else None
