"""Settings → Skills: the skills the caller can activate with ``/name``, in the shapes DeerFlow's frontend reads
(``frontend/src/core/skills/api.ts``, ``type.ts``; DeerFlow's handlers: ``backend/app/gateway/routers/skills.py``).

- ``GET /skills`` → ``{skills: [{name, description, license, category, enabled, editable}]}``; ``GET
  /skills/{name}`` → one of them. ``category`` is ``public`` or ``custom`` (the skills folder's two, and the
  caller's installed skills, which are ``custom`` and the only ``editable`` ones).
- ``PUT /skills/{name}`` ``{enabled}`` → the skill: turns it on or off for the caller only. A skill the
  deployment turned off (``skills.disabled``) cannot be turned on (409).
- ``POST /skills/install`` ``{thread_id, path}`` → ``{success, skill_name, message}``: installs the ``.skill``
  archive at ``path`` (``mnt/user-data/outputs/x.skill``) of the caller's thread, checked first
  (``activities/user_skills.py``: 400 for a bad archive, 413 too large, 409 a name already there).
- ``DELETE /skills/custom/{name}`` → ``{success: true}``: removes a skill the caller installed; the skills
  folder's skills are not deletable here (403).

Everything is the caller's own: their installed skills and their on/off choices live under their
``users/{user}/skills/``, and the next run's SkillActivation reads exactly that (``skills.load``).
"""

from __future__ import annotations

import asyncio
from pathlib import PurePosixPath
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException
from fastapi import Path as PathParam
from pydantic import BaseModel, ConfigDict, Field, StrictBool

from activities.skill_catalog import catalog
from activities.skills import Skill, load_skills
from activities.thread_files import PathEscapeError, ThreadFiles, user_data_relative
from activities.user_skills import (
    MAX_ARCHIVE_BYTES,
    SkillArchiveError,
    SkillArchiveTooLarge,
    SkillExistsError,
    install,
    read_archive,
    set_enabled,
    uninstall,
)
from workers.api.deps import ApiContext, Context, User, thread_ref
from workers.api.files import require_callers

router = APIRouter()
SkillName = Annotated[str, PathParam(min_length=1, max_length=200)]


class SkillToggle(BaseModel):
    model_config = ConfigDict(extra="forbid")

    enabled: StrictBool


class SkillInstall(BaseModel):
    model_config = ConfigDict(extra="forbid")

    thread_id: str = Field(min_length=1, max_length=200)
    path: str = Field(min_length=1, max_length=1024, description="virtual path of the .skill file in the thread")


def skill_view(skill: Skill) -> dict[str, Any]:
    return {
        "name": skill.name,
        "description": skill.description,
        "license": skill.license,
        "category": skill.category,
        "enabled": skill.enabled,
        "editable": skill.owner is not None,
    }


def _catalog(context: ApiContext, user: str) -> list[Skill]:
    settings = context.config.skills
    return catalog(settings.root(context.config.home), settings.disabled, context.objects, user)


async def _skill(context: ApiContext, user: str, name: str) -> Skill:
    skill = next((s for s in await asyncio.to_thread(_catalog, context, user) if s.name == name), None)
    if skill is None:
        raise HTTPException(404, f"Skill '{name}' not found")
    return skill


@router.get("/skills")
async def list_skills(context: Context, user: User) -> dict[str, Any]:
    return {"skills": [skill_view(skill) for skill in await asyncio.to_thread(_catalog, context, user)]}


@router.get("/skills/{skill_name}")
async def get_skill(skill_name: SkillName, context: Context, user: User) -> dict[str, Any]:
    return skill_view(await _skill(context, user, skill_name))


@router.put("/skills/{skill_name}")
async def toggle_skill(skill_name: SkillName, body: SkillToggle, context: Context, user: User) -> dict[str, Any]:
    skill = await _skill(context, user, skill_name)
    if body.enabled and skill_name in context.config.skills.disabled:
        raise HTTPException(409, f"Skill '{skill_name}' is turned off for this deployment (skills.disabled)")
    try:
        await asyncio.to_thread(set_enabled, context.objects, user, skill_name, body.enabled)
    except ValueError as exc:
        raise HTTPException(400, str(exc)) from None
    return skill_view(await _skill(context, user, skill.name))


def _archive_bytes(context: ApiContext, user: str, body: SkillInstall) -> bytes:
    thread = thread_ref(user, body.thread_id)
    virtual = body.path if body.path.startswith("/") else f"/{body.path}"
    if PurePosixPath(virtual).suffix != ".skill":
        raise HTTPException(400, f"{body.path!r} is not a .skill file")
    try:
        user_data_relative(virtual)
    except PathEscapeError as exc:
        raise HTTPException(400, f"invalid path {body.path!r}: {exc}") from None
    require_callers(context, thread)
    files = ThreadFiles(context.objects, context.config.home)
    info = files.info(thread, virtual)
    if info is None or info.is_dir:
        raise HTTPException(404, f"{body.path} not found in thread {thread.thread_id}")
    if info.size > MAX_ARCHIVE_BYTES:
        raise HTTPException(413, f"the archive is {info.size} bytes (at most {MAX_ARCHIVE_BYTES})")
    data = files.read(thread, virtual)
    if data is None:
        raise HTTPException(404, f"{body.path} not found in thread {thread.thread_id}")
    return data


def _install(context: ApiContext, user: str, body: SkillInstall) -> str:
    try:
        bundle = read_archive(_archive_bytes(context, user, body))
        install(context.objects, user, bundle, deployment=load_skills(context.config.skills.root(context.config.home)))
    except SkillArchiveTooLarge as exc:
        raise HTTPException(413, str(exc)) from None
    except SkillArchiveError as exc:
        raise HTTPException(400, str(exc)) from None
    except SkillExistsError as exc:
        raise HTTPException(409, str(exc)) from None
    except PathEscapeError as exc:
        raise HTTPException(400, f"invalid path {body.path!r}: {exc}") from None
    return bundle.name


@router.post("/skills/install")
async def install_skill(body: SkillInstall, context: Context, user: User) -> dict[str, Any]:
    name = await asyncio.to_thread(_install, context, user, body)
    return {"success": True, "skill_name": name, "message": f"Skill '{name}' installed successfully"}


@router.delete("/skills/custom/{skill_name}")
async def delete_skill(skill_name: SkillName, context: Context, user: User) -> dict[str, Any]:
    skill = await _skill(context, user, skill_name)
    if skill.owner is None:
        raise HTTPException(403, f"Skill '{skill_name}' ships with the deployment ({skill.category}): not deletable")
    if not await asyncio.to_thread(uninstall, context.objects, user, skill_name):
        raise HTTPException(404, f"Skill '{skill_name}' not found")
    return {"success": True}
