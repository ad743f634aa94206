"""Which skills a user sees, and the activities that activate one from that list.

:func:`catalog` is what a user sees (Settings → Skills, ``hartflow skills list``) and what the ``skills.load``
activity (:class:`SkillActivities`) activates from: the deployment's skills folder (``activities/skills.py``) and
the user's installed skills (``activities/user_skills.py``), each enabled unless ``skills.disabled`` names it (the
deployment's word, final) or the user turned it off.
"""

from __future__ import annotations

import hashlib
import posixpath
from dataclasses import replace
from pathlib import Path

from temporalio import activity

from activities.contract import implements
from activities.skills import Skill, SkillsSettings, load_skills, read_skill
from activities.storage import ObjectStore
from activities.user_skills import installed_content, installed_skills, turned_off
from vocabulary.contracts import (
    SKILL_LOAD,
    SKILL_TOOL_POLICY,
    SkillLoadInput,
    SkillLoadResult,
    SkillToolPolicyInput,
    SkillToolPolicyResult,
)


def catalog(root: Path, config_disabled: list[str], store: ObjectStore | None, user_id: str | None) -> list[Skill]:
    """Every skill ``user_id`` sees, by name, with whether it is on for them."""
    skills = {skill.name: skill for skill in load_skills(root)}
    if store is None or user_id is None:
        return [replace(s, enabled=s.name not in config_disabled) for _, s in sorted(skills.items())]
    skills.update({skill.name: skill for skill in installed_skills(store, user_id)})
    off = turned_off(store, user_id) | set(config_disabled)
    return [replace(skill, enabled=name not in off) for name, skill in sorted(skills.items())]


class SkillActivities:
    """``load`` (what SkillActivation awaits) and ``tool_policy`` (SkillToolPolicy), both from :func:`catalog`."""

    def __init__(self, root: Path, settings: SkillsSettings, store: ObjectStore | None = None) -> None:
        self._root = root
        self._settings = settings
        self._store = store

    @implements(SKILL_LOAD)
    def load(self, input: SkillLoadInput) -> SkillLoadResult:
        """Check the skill the user activated (installed, enabled for them, available to this agent) and read it."""
        skills = catalog(self._root, self._settings.disabled, self._store, input.user_id)
        skill = next((s for s in skills if s.name == input.name), None)
        if skill is None:
            return SkillLoadResult("not_installed")
        if not skill.enabled:
            return SkillLoadResult("disabled")
        if input.available is not None and skill.name not in input.available:
            return SkillLoadResult("not_available")
        try:
            if skill.owner is not None and self._store is not None:
                content = installed_content(self._store, skill.owner, skill.name)
            else:
                content = read_skill(skill, self._root)
        except (OSError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
            activity.logger.warning("skill %s could not be read: %s", skill.name, exc)
            content = None
        if content is None:
            return SkillLoadResult("unreadable")
        return SkillLoadResult(
            "loaded",
            category=skill.category,
            container_path=skill.container_file(self._settings.container_path),
            content=content,
            sha256=hashlib.sha256(content.encode("utf-8")).hexdigest(),
        )

    @implements(SKILL_TOOL_POLICY)
    def tool_policy(self, input: SkillToolPolicyInput) -> SkillToolPolicyResult:
        """The tools the active skills allow (DeerFlow's ``SkillToolPolicyMiddleware._allowed_names_for_paths``
        before its framework tools): each path resolves to an enabled skill available to this agent, once per
        name; none resolving, or a catalog that cannot be read, fails closed."""
        try:
            skills = catalog(self._root, self._settings.disabled, self._store, input.user_id)
        except (OSError, ValueError) as exc:
            activity.logger.warning("skills could not be read for the allowed-tools policy: %s", exc)
            return SkillToolPolicyResult(failed=True)
        registry = {posixpath.normpath(s.container_file(self._settings.container_path)): s for s in skills}
        active: dict[str, Skill] = {}
        for path in input.paths:
            skill = registry.get(posixpath.normpath(path))
            if (
                skill is None
                or not skill.enabled
                or (input.available is not None and skill.name not in input.available)
            ):
                activity.logger.warning("active skill %s is unknown, disabled or not available: no tools from it", path)
                continue
            active.setdefault(skill.name, skill)
        if not active:
            return SkillToolPolicyResult(failed=True)
        declared = [skill.allowed_tools for skill in active.values() if skill.allowed_tools is not None]
        if not declared:
            return SkillToolPolicyResult(None)
        return SkillToolPolicyResult(sorted({name for tools in declared for name in tools}))
