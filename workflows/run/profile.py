"""What differs between a lead run and a subagent, as data: the run workflow reads its class's profile, and the
subagent workflow (``workflows/run/subagent.py``) is the same workflow with :data:`SUBAGENT` instead of
:data:`LEAD`.

* the chain: DeerFlow's lead chain (with the run's MCP tools), or its subagent segment (``middlewares/chain.py``);
* the catalog: a subagent never has ``ask_clarification`` (it cannot ask the user), ``present_files`` (DeerFlow's
  subagents do not present: the lead does) nor, through its chain, ``task`` (no recursion); a lead run lacks
  ``ask_clarification`` only when it runs non-interactively;
* the thread: a lead run loads the thread's state and commits it back; a subagent's state is its own (one message
  list seeded with the task's prompt and the lead's sandbox), never loaded nor committed;
* MCP and configured tools: a lead run discovers its servers' tools and the configured tools its settings name
  (``workflows/run/configured_tools.py``); a subagent gets no MCP tools, and the lead's configured and sandbox
  tools its type allows (``run.subagents.types.*.tools``; all for ``general-purpose``, the sandbox tools for
  ``bash``, as DeerFlow's built-in subagents), handed down in its task;
* usage: a lead run reports its TokenUsage middleware's totals; a subagent (which has none) sums its messages',
  which the lead adds to the dispatching AIMessage through the task result.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from middlewares.base import Middleware
from middlewares.chain import build_lead_chain, build_subagent_chain
from middlewares.run_settings import RunSettings
from middlewares.token_usage import TokenUsageMiddleware
from vocabulary.state import ThreadState
from vocabulary.tools import ToolCatalog, ToolSpec
from workflows.run.configured_tools import unlisted_sandbox_tools
from workflows.run.delegation import usage_of

ASK_CLARIFICATION = "ask_clarification"
PRESENT_FILES = "present_files"


@dataclass(frozen=True)
class RunProfile:
    is_subagent: bool
    build_chain: Callable[[RunSettings, Sequence[ToolSpec]], list[Middleware]]
    """The chain for the run's settings and its MCP tools (outermost first)."""
    excluded_tools: Callable[[RunSettings], frozenset[str]]
    """Built-in tools the run does not offer."""
    owns_thread: bool
    """Loads the thread's state at the start and commits it back (at a pause and at the end)."""
    discovers_mcp: bool
    usage: Callable[[list[Middleware], ThreadState], dict[str, int] | None]
    """The run's token totals for its view."""

    def catalog(
        self,
        settings: RunSettings,
        chain: list[Middleware],
        mcp: Sequence[ToolSpec] = (),
        configured: Sequence[ToolSpec] = (),
    ) -> ToolCatalog:
        """The tools the model is offered: the built-ins (the sandbox tools a ``tools:`` list names), the chain's
        own, the configured tools, then the MCP tools."""
        return (
            ToolCatalog.builtin(exclude=self.excluded_tools(settings) | unlisted_sandbox_tools(settings))
            .with_tools(tool for mw in chain for tool in mw.tools())
            .with_tools(configured)
            .with_tools(mcp)
        )


def _lead_usage(chain: list[Middleware], state: ThreadState) -> dict[str, int] | None:
    return next((mw.usage() for mw in chain if isinstance(mw, TokenUsageMiddleware)), None)


LEAD = RunProfile(
    is_subagent=False,
    build_chain=lambda settings, mcp: build_lead_chain(settings, mcp_tools=mcp),
    excluded_tools=lambda settings: frozenset({ASK_CLARIFICATION}) if settings.non_interactive else frozenset(),
    owns_thread=True,
    discovers_mcp=True,
    usage=_lead_usage,
)

SUBAGENT = RunProfile(
    is_subagent=True,
    build_chain=lambda settings, mcp: build_subagent_chain(settings),
    excluded_tools=lambda settings: frozenset({ASK_CLARIFICATION, PRESENT_FILES}),
    owns_thread=False,
    discovers_mcp=False,
    usage=lambda chain, state: usage_of(state.messages),
)
