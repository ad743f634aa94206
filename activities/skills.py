"""The skills directory and what a SKILL.md says (``activities/user_skills.py`` adds each user's own skills,
``activities/skill_catalog.py`` holds the ``skills.load`` activity SkillActivation awaits).

Layout (DeerFlow's, rooted at ``skills.path``, default ``{home}/skills``)::

    {root}/public/<name>/SKILL.md      shipped skills, read-only
    {root}/custom/<name>/SKILL.md      the deployment's own skills (a custom skill shadows a public one of that name)

A SKILL.md starts with YAML front matter naming the skill (``name`` and ``description`` are required; ``license``
and ``allowed-tools`` are optional); a file without valid front matter is not a skill. Skill directories may
nest (``public/docs/pdf/SKILL.md``). Inside a sandbox the tree appears under ``skills.container_path``
(``/mnt/skills``), which is the path the model is told. A skill is enabled unless ``skills.disabled`` names it
(or the user turned it off: ``activities/user_skills.py``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

SKILL_FILE = "SKILL.md"
CATEGORIES: tuple[Literal["public", "custom"], ...] = ("public", "custom")
_FRONT_MATTER = re.compile(r"^---\s*\n(.*?)\n---\s*\n", re.DOTALL)


class SkillsSettings(BaseModel):
    """The ``skills:`` section of ``hartflow.yaml``."""

    model_config = ConfigDict(extra="forbid")

    path: Path | None = Field(default=None, description="the skills directory; default: {home}/skills")
    container_path: str = Field(default="/mnt/skills", description="where sandboxes see the skills directory")
    disabled: list[str] = Field(default_factory=list, description="installed skills that may not be activated")

    def root(self, home: Path) -> Path:
        return self.path.expanduser().resolve() if self.path else home / "skills"


@dataclass(frozen=True)
class Skill:
    name: str
    description: str
    category: Literal["public", "custom"]
    relative_path: str
    """The skill's directory relative to its category folder (``pdf``, ``docs/pdf``)."""
    skill_file: Path | None
    """The SKILL.md in the skills folder; ``None`` for a skill a user installed (``activities/user_skills.py``)."""
    enabled: bool
    license: str | None = None
    allowed_tools: tuple[str, ...] | None = None
    owner: str | None = None
    """The user who installed it (only they see it, and may delete it); ``None``: the deployment's."""

    def container_file(self, container_path: str) -> str:
        return f"{container_path.rstrip('/')}/{self.category}/{self.relative_path}/{SKILL_FILE}"


@dataclass(frozen=True)
class SkillMetadata:
    name: str
    description: str
    license: str | None = None
    allowed_tools: tuple[str, ...] | None = None


def skill_metadata(text: str) -> SkillMetadata | None:
    """A SKILL.md's front matter, or ``None`` when it is missing or invalid (as DeerFlow)."""
    match = _FRONT_MATTER.match(text)
    try:
        metadata = yaml.safe_load(match.group(1)) if match else None
    except yaml.YAMLError:
        return None
    if not isinstance(metadata, dict):
        return None
    name, description = metadata.get("name"), metadata.get("description")
    if not isinstance(name, str) or not name.strip() or not isinstance(description, str) or not description.strip():
        return None
    tools = metadata.get("allowed-tools")
    if tools is not None and not (isinstance(tools, list) and all(isinstance(t, str) and t.strip() for t in tools)):
        return None
    license_text = str(metadata["license"]).strip() if metadata.get("license") is not None else ""
    return SkillMetadata(
        name=name.strip(),
        description=description.strip(),
        license=license_text or None,
        allowed_tools=tuple(t.strip() for t in tools) if tools is not None else None,
    )


def parse_skill_file(skill_file: Path, category: Literal["public", "custom"], relative_path: str) -> Skill | None:
    """The skill a SKILL.md describes, or ``None`` when its front matter is missing or invalid (as DeerFlow)."""
    try:
        metadata = skill_metadata(skill_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        return None
    if metadata is None:
        return None
    return Skill(
        name=metadata.name,
        description=metadata.description,
        category=category,
        relative_path=relative_path,
        skill_file=skill_file,
        enabled=True,
        license=metadata.license,
        allowed_tools=metadata.allowed_tools,
    )


def load_skills(root: Path, disabled: list[str] | frozenset[str] = frozenset()) -> list[Skill]:
    """Every installed skill, sorted by name; a custom skill replaces a public one with the same name."""
    by_name: dict[str, Skill] = {}
    for category in CATEGORIES:
        base = root / category
        if not base.is_dir():
            continue
        for skill_file in sorted(base.rglob(SKILL_FILE)):
            relative = skill_file.parent.relative_to(base)
            if any(part.startswith(".") for part in relative.parts) or not relative.parts:
                continue
            skill = parse_skill_file(skill_file, category, relative.as_posix())
            if skill is not None:
                by_name[skill.name] = skill
    return [replace(skill, enabled=name not in disabled) for name, skill in sorted(by_name.items())]


def read_skill(skill: Skill, root: Path) -> str:
    """The SKILL.md text; refuses a file that resolves outside the skills directory (a symlink out of it)."""
    assert skill.skill_file is not None, "a user's installed skill is read from the store"
    resolved = skill.skill_file.resolve()
    resolved.relative_to(root.resolve())  # ValueError when it escapes
    return resolved.read_text(encoding="utf-8")
