"""Custom guardrail providers for the tests, written the way DeerFlow users write theirs: their own decision
types, a constructor taking the configured keywords (and ``framework``), ``evaluate`` and ``aevaluate``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Reason:
    code: str
    message: str = ""


@dataclass
class Decision:
    allow: bool
    reasons: list[Reason] = field(default_factory=list)
    policy_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


class DenyWords:
    """Denies calls whose arguments mention a configured word; says which framework built it."""

    def __init__(self, *, words: list[str], framework: str = "none") -> None:
        self.words = words
        self.framework = framework

    def evaluate(self, request: Any) -> Decision:
        text = " ".join(str(value) for value in request.tool_input.values())
        hits = [word for word in self.words if word in text]
        if not hits:
            return Decision(allow=True, policy_id="deny-words")
        message = f"mentions {hits[0]!r} (agent {request.agent_id}, built for {self.framework})"
        return Decision(allow=False, reasons=[Reason("policy.word_denied", message)], policy_id="deny-words")

    async def aevaluate(self, request: Any) -> Decision:
        return self.evaluate(request)


class NotADecision:
    """A broken provider: answers with something that is not a decision."""

    def evaluate(self, request: Any) -> str:
        return "yes"
