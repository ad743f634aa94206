"""A skill the user activated, checked and read, and the tools the active skills allow
(``activities/skill_catalog.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from vocabulary.activity_ref import ActivityRef


@dataclass
class SkillLoadInput:
    name: str
    available: list[str] | None = None
    """The skills this agent may activate; ``None``: every enabled skill."""
    user_id: str | None = None
    """Whose skills: their installed ones and their on/off choices count (``None``: the skills folder only)."""


SkillLoadStatus = Literal["loaded", "not_installed", "disabled", "not_available", "unreadable"]


@dataclass
class SkillLoadResult:
    status: SkillLoadStatus
    category: str = ""
    """``public`` or ``custom``."""
    container_path: str = ""
    """Where the SKILL.md appears inside a sandbox, e.g. ``/mnt/skills/public/pdf/SKILL.md``."""
    content: str = ""
    sha256: str = ""
    """Hex digest of the UTF-8 content."""


SKILL_LOAD = ActivityRef("skills.load", SkillLoadInput, SkillLoadResult)


@dataclass
class SkillToolPolicyInput:
    paths: list[str]
    """The active skills' SKILL.md paths as sandboxes see them (a slash activation's, or ``skill_context``'s)."""
    available: list[str] | None = None
    user_id: str | None = None


@dataclass
class SkillToolPolicyResult:
    allowed: list[str] | None = None
    """The union of the active skills' ``allowed-tools``; ``None`` when none of them declares the field."""
    failed: bool = False
    """No active path could be authorised (unknown, disabled, not available, or the skills could not be read):
    the policy fails closed."""


SKILL_TOOL_POLICY = ActivityRef("skills.tool_policy", SkillToolPolicyInput, SkillToolPolicyResult)
