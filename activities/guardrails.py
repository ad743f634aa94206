"""The ``guardrail.evaluate`` activity: custom guardrail providers run in the worker, never in the workflow.

A provider follows DeerFlow's protocol: a class named ``module:Class``, built with the configured keyword
arguments (plus ``framework="deerflow"`` when its constructor accepts that, as DeerFlow injects it), that
answers ``evaluate(request)`` and optionally ``aevaluate(request)`` with a decision carrying ``allow``,
``reasons`` (``code``, ``message``), ``policy_id`` and ``metadata``. Providers may keep clients and caches,
so each worker builds one instance per (class, config) and reuses it.

A provider that cannot be imported, built, or answers with something that is not a decision fails
non-retryably (retrying cannot fix configuration); whatever else it raises is retried by the activity's
policy. Either way the middleware then applies its fail-closed / fail-open rule.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from typing import Any

from temporalio.exceptions import ApplicationError

from activities.contract import implements
from vocabulary.class_path import ClassPathError, load_class_path
from vocabulary.contracts import GUARDRAIL_EVALUATE, GuardrailDecision, GuardrailEvaluateInput, GuardrailReason

ERROR_TYPE = "GuardrailProviderError"


class GuardrailActivities:
    def __init__(self) -> None:
        self._providers: dict[str, Any] = {}

    @implements(GUARDRAIL_EVALUATE)
    async def evaluate(self, input: GuardrailEvaluateInput) -> GuardrailDecision:
        provider = self._provider(input.use, input.config)
        aevaluate = getattr(provider, "aevaluate", None)
        if inspect.iscoroutinefunction(aevaluate):
            answer = await aevaluate(input.request)
        else:
            answer = await asyncio.to_thread(provider.evaluate, input.request)
        return as_decision(answer, input.use)

    def _provider(self, use: str, config: dict[str, Any]) -> Any:
        key = f"{use} {json.dumps(config, sort_keys=True, default=str)}"
        if key not in self._providers:
            self._providers[key] = build_provider(use, config)
        return self._providers[key]


def build_provider(use: str, config: dict[str, Any]) -> Any:
    try:
        cls = load_class_path(use)
    except ClassPathError as exc:
        raise ApplicationError(
            f"cannot load guardrail provider {use!r}: {exc}", type=ERROR_TYPE, non_retryable=True
        ) from exc
    kwargs = dict(config)
    if "framework" not in kwargs and _accepts_framework(cls):
        kwargs["framework"] = "deerflow"
    try:
        return cls(**kwargs)
    except Exception as exc:
        raise ApplicationError(
            f"cannot build guardrail provider {use!r}: {type(exc).__name__}: {exc}", type=ERROR_TYPE, non_retryable=True
        ) from exc


def _accepts_framework(cls: type) -> bool:
    try:
        parameters = inspect.signature(cls).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "framework" or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


def as_decision(answer: Any, use: str) -> GuardrailDecision:
    """A provider's decision as the contract's dataclass (providers may return their own decision type)."""
    if isinstance(answer, GuardrailDecision):
        return answer
    allow = getattr(answer, "allow", None)
    if not isinstance(allow, bool):
        raise ApplicationError(
            f"guardrail provider {use!r} returned {type(answer).__name__}, not a decision with a boolean 'allow'",
            type=ERROR_TYPE,
            non_retryable=True,
        )
    reasons = [
        GuardrailReason(str(getattr(reason, "code", "") or ""), str(getattr(reason, "message", "") or ""))
        for reason in getattr(answer, "reasons", None) or []
    ]
    policy_id = getattr(answer, "policy_id", None)
    metadata = getattr(answer, "metadata", None)
    return GuardrailDecision(
        allow=allow,
        reasons=reasons,
        policy_id=str(policy_id) if policy_id is not None else None,
        metadata=dict(metadata) if isinstance(metadata, dict) else {},
    )
