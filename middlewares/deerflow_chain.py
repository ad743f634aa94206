"""A run's chain as DeerFlow f1f4af9 would build it for the same settings, with hartflow's counterpart of each
entry (``hartflow status``). DeerFlow's order is ``_build_runtime_middlewares`` and ``build_middlewares``
(``bytedance/deer-flow: backend/packages/harness/deerflow/agents/middlewares/tool_error_handling_middleware.py``,
``backend/packages/harness/deerflow/agents/lead_agent/agent.py``); ``middlewares/chain.py`` builds hartflow's in that
order with every entry DeerFlow builds for the same settings, so DeerFlow's is hartflow's, renamed.

Entries DeerFlow builds only under a setting hartflow does not have (the authorization guardrail,
``authorization.enabled``, off by default; programmatic ``custom_middlewares``) are left out, as DeerFlow leaves
them out by default. hartflow's own ToolApproval has no DeerFlow counterpart: its entry says so.
"""

from __future__ import annotations

from typing import Any

import middlewares.chain  # noqa: F401  (imports every built-in middleware, so they are all subclasses below)
from middlewares.base import Middleware

HARTFLOW_ONLY = {"ToolApproval": "hartflow's own: a person approves gated tool calls (no DeerFlow counterpart)"}
_DEERFLOW_NAMES = {"TodoList": "TodoMiddleware", "Summarization": "DeerFlowSummarizationMiddleware"}


def deerflow_chain(chain: list[str]) -> list[dict[str, Any]]:
    """DeerFlow's chain for a lead run whose hartflow chain is ``chain`` (outermost first): one entry per
    middleware, ``{"deerflow": name or None, "hartflow": name, "note": why, when DeerFlow has no such entry}``.
    A name that is not one of hartflow's own middlewares is an extension, named the same in both."""
    builtin = _builtin_names()
    entries: list[dict[str, Any]] = []
    for name in chain:
        if name in HARTFLOW_ONLY:
            entries.append({"deerflow": None, "hartflow": name, "note": HARTFLOW_ONLY[name]})
            continue
        deerflow = _DEERFLOW_NAMES.get(name, f"{name}Middleware") if name in builtin else name
        entries.append({"deerflow": deerflow, "hartflow": name, "note": None})
    return entries


def _builtin_names() -> set[str]:
    names: set[str] = set()
    pending = list(Middleware.__subclasses__())
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if cls.__module__.startswith("middlewares."):
            names.add(cls.name)
    return names
