"""``hartflow skills list|enable|disable|install|delete``: the skills the config user can activate with
``/name``, as Settings → Skills shows and changes them (``workers/api/skills_route.py``).

``list`` shows the skills folder's skills and the user's installed ones, each with whether it is on for the user;
``enable``/``disable`` turn one on or off for the user only (one the deployment turned off in ``skills.disabled``
stays off); ``install FILE`` checks a local ``.skill`` archive and stores it as the user's own
(``activities/user_skills.py``); ``delete NAME --yes`` removes one the user installed. What is refused exits 2
and changes nothing. The next run's SkillActivation sees exactly this list.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from activities.paths import InvalidIdError, validate_user_id
from activities.skill_catalog import catalog
from activities.skills import Skill, load_skills
from activities.user_skills import (
    MAX_ARCHIVE_BYTES,
    SkillArchiveError,
    SkillExistsError,
    install,
    read_archive,
    set_enabled,
    uninstall,
)
from workers.cli._common import EXIT_OK, BadInput, config_of, emit
from workers.config import HartflowConfig, open_object_store


async def cmd_skills(args: argparse.Namespace) -> int:
    config = config_of(args)
    try:
        user_id = validate_user_id(config.user_id)
    except InvalidIdError as exc:
        raise BadInput(str(exc)) from None
    if args.action != "list" and not args.target:
        raise BadInput(f"skills {args.action} needs the {'FILE' if args.action == 'install' else 'NAME'}")
    if args.action == "list":
        return _list(args, config, await asyncio.to_thread(_catalog, config, user_id))
    if args.action == "install":
        name = await asyncio.to_thread(_install, config, user_id, Path(args.target).expanduser())
        emit(args, {"success": True, "skill_name": name}, lambda: print(f"installed /{name}"))
        return EXIT_OK
    skill = next((s for s in await asyncio.to_thread(_catalog, config, user_id) if s.name == args.target), None)
    if skill is None:
        raise BadInput(f"no skill {args.target!r} (see: hartflow skills list)")
    if args.action == "delete":
        await asyncio.to_thread(_delete, args, config, user_id, skill)
    elif args.action == "enable" and skill.name in config.skills.disabled:
        raise BadInput(f"skill {skill.name!r} is turned off for this deployment (skills.disabled)")
    else:
        try:
            await asyncio.to_thread(
                set_enabled, open_object_store(config), user_id, skill.name, args.action == "enable"
            )
        except ValueError as exc:
            raise BadInput(str(exc)) from None
    emit(args, {"success": True, "skill_name": skill.name}, lambda: print(f"{args.action}d /{skill.name}"))
    return EXIT_OK


def _catalog(config: HartflowConfig, user_id: str) -> list[Skill]:
    return catalog(config.skills.root(config.home), config.skills.disabled, open_object_store(config), user_id)


def _install(config: HartflowConfig, user_id: str, file: Path) -> str:
    try:
        if file.stat().st_size > MAX_ARCHIVE_BYTES:
            raise BadInput(f"{file} is over {MAX_ARCHIVE_BYTES} bytes: not installable")
        bundle = read_archive(file.read_bytes())
        install(open_object_store(config), user_id, bundle, deployment=load_skills(config.skills.root(config.home)))
    except OSError as exc:
        raise BadInput(f"cannot read {file}: {exc}") from None
    except (SkillArchiveError, SkillExistsError) as exc:
        raise BadInput(f"{file}: {exc}") from None
    return bundle.name


def _delete(args: argparse.Namespace, config: HartflowConfig, user_id: str, skill: Skill) -> None:
    if skill.owner is None:
        raise BadInput(f"skill {skill.name!r} ships with the deployment ({skill.category}): not deletable")
    if not args.yes:
        raise BadInput(f"deleting skill {skill.name!r} removes it for good: add --yes")
    uninstall(open_object_store(config), user_id, skill.name)


def _list(args: argparse.Namespace, config: HartflowConfig, skills: list[Skill]) -> int:
    settings = config.skills
    root = settings.root(config.home)
    rows = [
        {
            "name": skill.name,
            "description": skill.description,
            "category": skill.category,
            "enabled": skill.enabled,
            "editable": skill.owner is not None,
            "path": skill.container_file(settings.container_path),
            "file": str(skill.skill_file) if skill.skill_file else None,
        }
        for skill in skills
    ]

    def human() -> None:
        if not rows:
            print(
                f"no skills in {root} (add public/<name>/SKILL.md, or: hartflow skills install FILE)", file=sys.stderr
            )
            return
        for row in rows:
            state = "" if row["enabled"] else " (disabled)"
            print(f"/{row['name']:<24} {row['category']:<7} {row['description']}{state}")

    emit(args, {"root": str(root), "skills": rows}, human)
    return EXIT_OK
