"""SubagentDateContext: a subagent knows today's date, as its lead does (DeerFlow's
``SubagentDateContextMiddleware``, in every subagent chain, right before SystemMessageCoalescing).

A subagent starts from fresh state, seeded with its task prompt: it needs the lead's temporal anchor but not its
memory lookup, ID swap or midnight refresh.

Hook
* ``before_agent``: one hidden SystemMessage with DynamicContext's date reminder (``<system-reminder>`` /
  ``<current_date>``, ``hide_from_ui``, ``dynamic_context_reminder``, ``reminder_date``), appended to the
  subagent's messages. The date is the run's clock in DynamicContext's ``timezone`` (DeerFlow: the server's local
  time). SystemMessageCoalescing then moves it into the leading system message of each request.

Writes: the subagent's thread state (its own messages; nothing reaches the lead's thread).

Parts: the reminder format and settings of ``middlewares/dynamic_context.py``; the subagent chain
``middlewares/chain.py``. Tests: ``tests/test_finish_reasons.py``.
"""

from __future__ import annotations

from zoneinfo import ZoneInfo

from langchain_core.messages import SystemMessage

from middlewares._messages import DYNAMIC_CONTEXT_REMINDER_KEY, HIDE_FROM_UI_KEY
from middlewares.base import Middleware
from middlewares.context import RunContext
from middlewares.dynamic_context import DATE_FORMAT, REMINDER_DATE_KEY, DynamicContextConfig, date_reminder
from vocabulary.state import StateUpdate, ThreadState


class SubagentDateContextMiddleware(Middleware):
    def __init__(self, config: DynamicContextConfig | None = None) -> None:
        self.config = config or DynamicContextConfig()

    async def before_agent(self, state: ThreadState, ctx: RunContext) -> StateUpdate | None:
        today = ctx.now().astimezone(ZoneInfo(self.config.timezone)).strftime(DATE_FORMAT)
        kwargs = {HIDE_FROM_UI_KEY: True, DYNAMIC_CONTEXT_REMINDER_KEY: True, REMINDER_DATE_KEY: today}
        return {"messages": [SystemMessage(date_reminder(today), additional_kwargs=kwargs)]}
