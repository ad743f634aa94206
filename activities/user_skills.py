"""A user's own skills and their choice of which skills are on, kept in the configured object store.

Layout (per user, beside their threads)::

    users/{user}/skills/custom/{name}.skill    a skill the user installed: the checked archive, repacked
    users/{user}/skills/disabled/{name}        present: the user turned that skill off

A ``.skill`` archive is DeerFlow's: a zip holding ``SKILL.md`` (YAML front matter with ``name`` and
``description``) and its supporting files, at the top or in one folder. :func:`read_archive` checks it before
anything is stored: at most :data:`MAX_ARCHIVE_BYTES` packed, :data:`MAX_UNPACKED_BYTES` unpacked (counted while
reading, not trusted from the headers) and :data:`MAX_MEMBERS` members; no absolute, ``..``, backslash or colon
paths, no links, no executables (ELF/PE/Mach-O), no second SKILL.md; a hyphen-case name of at most 64
characters that is not one of the slash commands the composer keeps (DeerFlow's
``backend/packages/harness/deerflow/skills/installer.py`` and ``validation.py`` hold the same rules). An install
is one create-only write, so two installs of one name cannot both succeed; a delete removes that one object.

What a user sees of these, merged with the deployment's skills folder, and the activities that load from it are
in ``activities/skill_catalog.py``.
"""

from __future__ import annotations

import io
import re
import stat
import zipfile
from dataclasses import dataclass
from pathlib import PurePosixPath

from activities.skills import SKILL_FILE, Skill, skill_metadata
from activities.storage import ObjectExistsError, ObjectStore
from vocabulary.paths import validate_user_id

MAX_ARCHIVE_BYTES = 8 * 1024 * 1024
MAX_UNPACKED_BYTES = 32 * 1024 * 1024
MAX_MEMBERS = 512
NAME = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
RESERVED_NAMES = frozenset({"bootstrap", "goal", "help", "memory", "models", "new", "status"})
"""The composer's own slash commands (``middlewares/skill_activation.py``): a skill so named could never run."""
_EXECUTABLE_MAGIC = (b"\x7fELF", b"MZ", b"\xfe\xed\xfa", b"\xce\xfa\xed\xfe", b"\xcf\xfa\xed\xfe", b"\xca\xfe\xba\xbe")
_IGNORED = ("__MACOSX", ".DS_Store")


class SkillArchiveError(ValueError):
    """The archive is not an installable skill; the message says why."""


class SkillArchiveTooLarge(SkillArchiveError):
    pass


class SkillExistsError(Exception):
    """A skill of that name is already installed (or shipped)."""


@dataclass(frozen=True)
class SkillBundle:
    name: str
    description: str
    files: dict[str, bytes]
    """Relative path → content; ``SKILL.md`` among them."""


def check_name(name: str) -> str:
    if len(name) > 64 or not NAME.match(name):
        raise SkillArchiveError(f"skill name {name!r} must be hyphen-case (a-z, 0-9, single hyphens), ≤ 64 characters")
    if name in RESERVED_NAMES:
        raise SkillArchiveError(f"skill name {name!r} is a composer command (/{name}), not a skill")
    return name


def _member_path(info: zipfile.ZipInfo) -> PurePosixPath | None:
    """The member's relative path; ``None`` for entries to skip (folders, macOS metadata); refuses unsafe ones."""
    name = info.filename
    if name.startswith("/") or "\\" in name or ":" in name or "\x00" in name:
        raise SkillArchiveError(f"unsafe path in archive: {name!r}")
    path = PurePosixPath(name)
    if any(part in ("..", ".") for part in path.parts):
        raise SkillArchiveError(f"unsafe path in archive: {name!r}")
    if stat.S_ISLNK(info.external_attr >> 16):
        raise SkillArchiveError(f"links are not allowed in a skill archive: {name!r}")
    if info.is_dir() or any(part in _IGNORED for part in path.parts):
        return None
    return path


def _read_members(archive: zipfile.ZipFile) -> dict[PurePosixPath, bytes]:
    infos = archive.infolist()
    if len(infos) > MAX_MEMBERS:
        raise SkillArchiveTooLarge(f"the archive has {len(infos)} entries (at most {MAX_MEMBERS})")
    members: dict[PurePosixPath, bytes] = {}
    total = 0
    for info in infos:
        path = _member_path(info)
        if path is None:
            continue
        chunks = []
        with archive.open(info) as source:
            while chunk := source.read(65536):
                total += len(chunk)
                if total > MAX_UNPACKED_BYTES:
                    raise SkillArchiveTooLarge(f"the archive unpacks to more than {MAX_UNPACKED_BYTES} bytes")
                chunks.append(chunk)
        data = b"".join(chunks)
        if data.startswith(_EXECUTABLE_MAGIC):
            raise SkillArchiveError(f"executables are not allowed in a skill archive: {info.filename!r}")
        if path in members:
            raise SkillArchiveError(f"the archive holds {info.filename!r} twice")
        members[path] = data
    return members


def _strip_top_folder(members: dict[PurePosixPath, bytes]) -> dict[str, bytes]:
    """Paths relative to the skill: SKILL.md at the top, or everything inside one folder that holds it."""
    tops = {path.parts[0] for path in members}
    if PurePosixPath(SKILL_FILE) not in members and len(tops) == 1:
        return {
            PurePosixPath(*path.parts[1:]).as_posix(): data for path, data in members.items() if len(path.parts) > 1
        }
    return {path.as_posix(): data for path, data in members.items()}


def read_archive(data: bytes) -> SkillBundle:
    """The skill in a ``.skill`` archive, checked (:class:`SkillArchiveError` says what is wrong)."""
    if len(data) > MAX_ARCHIVE_BYTES:
        raise SkillArchiveTooLarge(f"the archive is {len(data)} bytes (at most {MAX_ARCHIVE_BYTES})")
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            files = _strip_top_folder(_read_members(archive))
    except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, EOFError) as exc:
        raise SkillArchiveError(f"not a zip archive: {exc}") from None
    if SKILL_FILE not in files:
        raise SkillArchiveError(f"the archive has no {SKILL_FILE} at its top or in its one folder")
    nested = [path for path in files if path != SKILL_FILE and PurePosixPath(path).name == SKILL_FILE]
    if nested:
        raise SkillArchiveError(f"a skill archive holds one {SKILL_FILE}, not also {nested[0]}")
    try:
        metadata = skill_metadata(files[SKILL_FILE].decode("utf-8"))
    except UnicodeDecodeError:
        raise SkillArchiveError(f"{SKILL_FILE} must be UTF-8 text") from None
    if metadata is None:
        raise SkillArchiveError(f"{SKILL_FILE} needs YAML front matter with a name and a description")
    description = metadata.description
    if len(description) > 1024 or "<" in description or ">" in description:
        raise SkillArchiveError("the description must be at most 1024 characters, without < or >")
    return SkillBundle(check_name(metadata.name), description, files)


def pack(bundle: SkillBundle) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(bundle.files):
            archive.writestr(path, bundle.files[path])
    return buffer.getvalue()


# -- the store ------------------------------------------------------------------------------------------------


def _prefix(user_id: str) -> str:
    return f"users/{validate_user_id(user_id)}/skills/"


def installed_key(user_id: str, name: str) -> str:
    return f"{_prefix(user_id)}custom/{name}.skill"


def disabled_key(user_id: str, name: str) -> str:
    return f"{_prefix(user_id)}disabled/{name}"


def install(store: ObjectStore, user_id: str, bundle: SkillBundle, deployment: list[Skill]) -> None:
    """Store the user's new skill; :class:`SkillExistsError` when the user already sees one of that name."""
    if any(skill.name == bundle.name for skill in deployment):
        raise SkillExistsError(f"Skill '{bundle.name}' already exists")
    try:
        store.put(installed_key(user_id, bundle.name), pack(bundle), if_absent=True)
    except ObjectExistsError:
        raise SkillExistsError(f"Skill '{bundle.name}' already exists") from None


def uninstall(store: ObjectStore, user_id: str, name: str) -> bool:
    """Remove the user's installed skill (and their on/off choice for it); ``False`` when they have none."""
    key = installed_key(user_id, name)
    if not store.exists(key):
        return False
    store.delete(key)
    store.delete(disabled_key(user_id, name))
    return True


def set_enabled(store: ObjectStore, user_id: str, name: str, enabled: bool) -> None:
    """Turn the skill on or off for the user (:class:`ValueError` for a name ``/name`` could never activate)."""
    if not NAME.match(name):
        raise ValueError(f"skill {name!r} has no hyphen-case name: /{name} cannot activate it")
    if enabled:
        store.delete(disabled_key(user_id, name))
    else:
        store.put(disabled_key(user_id, name), b"")


def installed_content(store: ObjectStore, user_id: str, name: str) -> str | None:
    """The SKILL.md of the user's installed skill, ``None`` when it is gone."""
    data = store.get(installed_key(user_id, name))
    if data is None:
        return None
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            return archive.read(SKILL_FILE).decode("utf-8")
    except (zipfile.BadZipFile, KeyError, UnicodeDecodeError):
        return None  # not what install stored: no skill


def installed_skills(store: ObjectStore, user_id: str) -> list[Skill]:
    """The skills the user installed whose SKILL.md still names them; unreadable ones are left out."""
    skills = []
    for info in store.list(f"{_prefix(user_id)}custom/"):
        name = PurePosixPath(info.key).name.removesuffix(".skill")
        content = installed_content(store, user_id, name)
        metadata = skill_metadata(content) if content is not None else None
        if metadata is None or metadata.name != name:
            continue
        skills.append(
            Skill(
                name=name,
                description=metadata.description,
                category="custom",
                relative_path=name,
                skill_file=None,
                enabled=True,
                license=metadata.license,
                allowed_tools=metadata.allowed_tools,
                owner=user_id,
            )
        )
    return skills


def turned_off(store: ObjectStore, user_id: str) -> set[str]:
    """The names of the skills the user turned off."""
    return {PurePosixPath(info.key).name for info in store.list(f"{_prefix(user_id)}disabled/")}
