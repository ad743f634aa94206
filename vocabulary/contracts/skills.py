"""A skill the user activated, checked and read (``activities/user_skills.py``)."""

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
