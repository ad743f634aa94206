"""A run's chain as DeerFlow f1f4af9 would build it for the same settings, with hartflow's counterpart of each
entry (``hartflow status``). DeerFlow's order is ``_build_runtime_middlewares`` and ``build_middlewares``
(``bytedance/deer-flow: backend/packages/harness/deerflow/agents/middlewares/tool_error_handling_middleware.py``,
``backend/packages/harness/deerflow/agents/lead_agent/agent.py``); ``middlewares/chain.py`` builds hartflow's in that
order, so DeerFlow's is hartflow's with the entries hartflow lacks put back where DeerFlow has them.

Entries DeerFlow builds only under a setting hartflow does not have (ToolProgress, ``tool_progress.enabled``,
off by default; the authorization guardrail, ``authorization.enabled``, off by default; programmatic
``custom_middlewares``) are left out, as DeerFlow leaves them out by default.
"""

from __future__ import annotations

from typing import Any

import middlewares.chain  # noqa: F401  (imports every built-in middleware, so they are all subclasses below)
from middlewares.base import Middleware

MISSING: dict[str, tuple[str, str]] = {
    # DeerFlow name: (the hartflow entry it follows, why hartflow does not run it)
}
_DEERFLOW_NAMES = {"TodoList": "TodoMiddleware", "Summarization": "DeerFlowSummarizationMiddleware"}


def deerflow_chain(chain: list[str]) -> list[dict[str, Any]]:
    """DeerFlow's chain for a lead run whose hartflow chain is ``chain`` (outermost first): one entry per
    middleware, ``{"deerflow": name, "hartflow": name or None, "note": why not, when hartflow lacks it}``.
    A name that is not one of hartflow's own middlewares is an extension, named the same in both."""
    builtin = _builtin_names()
    entries: list[dict[str, Any]] = []
    for name in chain:
        deerflow = _DEERFLOW_NAMES.get(name, f"{name}Middleware") if name in builtin else name
        entries.append({"deerflow": deerflow, "hartflow": name, "note": None})
        entries.extend(_missing_after(name))
    return entries


def _missing_after(name: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for deerflow, (after, note) in MISSING.items():
        if after == name or (found and after == found[-1]["deerflow"].removesuffix("Middleware")):
            found.append({"deerflow": deerflow, "hartflow": None, "note": note})
    return found


def _builtin_names() -> set[str]:
    names: set[str] = set()
    pending = list(Middleware.__subclasses__())
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if cls.__module__.startswith("middlewares."):
            names.add(cls.name)
    return names
