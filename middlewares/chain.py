"""The chain builder: DeerFlow's two segments, assembled from the run's settings.

* the shared runtime base (``_build_runtime_middlewares``: the segment lead agents and subagents share), then
* the lead-only tail (``build_middlewares``), ending with Clarification, which must stay last.

Conditional middlewares (the seed's ``?``) are included exactly when their condition holds; the chain of a
run is logged at run start and exposed by the run's ``chain`` query.
"""

from __future__ import annotations

from middlewares.base import Middleware
from middlewares.clarification import ClarificationMiddleware
from workflows.settings import RunSettings


def runtime_base(settings: RunSettings, *, include_uploads: bool) -> list[Middleware]:
    """The segment every agent shares (reference §1.1)."""
    return []


def lead_tail(settings: RunSettings) -> list[Middleware]:
    """The lead agent's segment (reference §1.2). Clarification is always last."""
    return [ClarificationMiddleware(non_interactive=settings.non_interactive)]


def build_lead_chain(settings: RunSettings) -> list[Middleware]:
    return [*runtime_base(settings, include_uploads=True), *lead_tail(settings)]


def describe(chain: list[Middleware]) -> list[str]:
    return [mw.name for mw in chain]
