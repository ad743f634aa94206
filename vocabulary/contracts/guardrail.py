"""A custom guardrail provider's verdict on one tool call (``activities/guardrails.py``), in DeerFlow's shapes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vocabulary.activity_ref import ActivityRef


@dataclass
class GuardrailRequest:
    """One tool call as a guardrail provider sees it (DeerFlow's ``GuardrailRequest``, same fields)."""

    tool_name: str
    tool_input: dict[str, Any]
    agent_id: str | None = None
    """The configured ``guardrails.passport``."""
    thread_id: str | None = None
    is_subagent: bool = False
    timestamp: str = ""
    """UTC ISO-8601, from the run's clock."""
    user_id: str | None = None
    user_role: str | None = None
    oauth_provider: str | None = None
    oauth_id: str | None = None
    run_id: str | None = None
    tool_call_id: str | None = None
    channel_user_id: str | None = None
    is_internal: bool = False
    authz_attributes: dict[str, Any] = field(default_factory=dict)


@dataclass
class GuardrailReason:
    code: str
    message: str = ""


@dataclass
class GuardrailDecision:
    allow: bool
    reasons: list[GuardrailReason] = field(default_factory=list)
    policy_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class GuardrailEvaluateInput:
    """Evaluate ``request`` with the custom provider class ``use`` (``module:Class``) built from ``config``."""

    use: str
    config: dict[str, Any]
    request: GuardrailRequest


GUARDRAIL_EVALUATE = ActivityRef("guardrail.evaluate", GuardrailEvaluateInput, GuardrailDecision)
