"""Settings → Skills: the requests of DeerFlow's ``frontend/src/core/skills/api.ts`` (``loadSkills``, ``enableSkill``
from ``components/workspace/settings/skill-settings-page.tsx``; ``installSkill`` from
``components/workspace/artifacts/artifact-file-list.tsx`` and ``artifact-file-detail.tsx``) and the shape of its
``type.ts`` (``Skill``), DeerFlow's ``DELETE /api/skills/custom/{name}``, bad archives, another user's skills, what
the next run's SkillActivation sees, and ``hartflow skills``. Real server, worker, Temporal and storage; the model is
scripted."""

from __future__ import annotations

import asyncio
import io
import json
import stat
import zipfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import Client

from activities.thread_files import ThreadFiles
from activities.user_skills import MAX_UNPACKED_BYTES, SkillArchiveError, read_archive
from tests.support import storage_settings, worker_and_api
from tests.support.tenants import as_user, bearer_api
from vocabulary.contracts import ThreadRef
from workers.cli import run_command
from workers.config import HartflowConfig, open_object_store
from workers.testing import answer, make_config, write_script
from workers.testing.api_server import write_config

SKILL_MD = "---\nname: {name}\ndescription: {description}\nlicense: MIT\n---\n# {name}\n\nDo it well.\n"


def skill_md(name: str, description: str = "Writes haiku") -> bytes:
    return SKILL_MD.format(name=name, description=description).encode()


def archive(members: dict[str, bytes], *, links: tuple[str, ...] = ()) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zipped:
        for name, data in members.items():
            zipped.writestr(name, data)
        for name in links:
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            zipped.writestr(info, "/etc/passwd")
    return buffer.getvalue()


@pytest.fixture
def storage(request: pytest.FixtureRequest) -> dict[str, Any]:
    """Filesystem storage; a test marked ``parametrize("storage", [...], indirect=True)`` also runs on S3."""
    return storage_settings(request, getattr(request, "param", "filesystem"))


@pytest.fixture
def api_config(home: Path, temporal_address: str, tmp_path: Path, storage: dict[str, Any]) -> HartflowConfig:
    root = home / "skills"
    for category, name in (("public", "pdf"), ("public", "locked")):
        (root / category / name).mkdir(parents=True)
        (root / category / name / "SKILL.md").write_bytes(skill_md(name, f"The {name} skill"))
    return make_config(
        home,
        temporal_address,
        storage=storage,
        model=write_script(tmp_path, [answer("fine")]),
        api=bearer_api(tmp_path),
        skills={"disabled": ["locked"]},
        run={"middlewares": {"memory": {"enabled": False}}},
    )


@pytest.fixture
async def url(api_config: HartflowConfig, client: Client) -> AsyncIterator[str]:
    async with worker_and_api(api_config, client) as base:
        yield base


async def new_thread_with(api: httpx.AsyncClient, config: HartflowConfig, user: str, files: dict[str, bytes]) -> str:
    """A thread of ``user`` whose outputs hold ``files`` (as if a run had written them)."""
    thread_id: str = (await api.post("/threads", json={})).json()["thread_id"]
    thread_files = ThreadFiles(open_object_store(config), config.home)
    for name, data in files.items():
        thread_files.write(ThreadRef(user, thread_id), f"/mnt/user-data/outputs/{name}", data)
    return thread_id


def by_name(listed: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {skill["name"]: skill for skill in listed["skills"]}


@pytest.mark.parametrize("storage", ["filesystem", "s3"], indirect=True)
async def test_the_skills_page_lists_toggles_installs_and_deletes(url: str, api_config: HartflowConfig) -> None:
    async with as_user(url, "alice") as api:
        listed = (await api.get("/api/skills")).json()  # loadSkills: json.skills as Skill[]
        assert by_name(listed)["pdf"] == {
            "name": "pdf",
            "description": "The pdf skill",
            "license": "MIT",
            "category": "public",
            "enabled": True,
            "editable": False,
        }
        assert by_name(listed)["locked"]["enabled"] is False

        toggled = await api.put("/api/skills/pdf", json={"enabled": False})  # enableSkill
        assert toggled.status_code == 200 and toggled.json()["enabled"] is False
        assert by_name((await api.get("/api/skills")).json())["pdf"]["enabled"] is False
        assert (await api.put("/api/skills/pdf", json={"enabled": True})).json()["enabled"] is True

        thread_id = await new_thread_with(
            api,
            api_config,
            "alice",
            {"haiku.skill": archive({"haiku/SKILL.md": skill_md("haiku"), "haiku/ref/forms.md": b"5-7-5"})},
        )
        installed = await api.post(  # installSkill: {thread_id, path} as the artifact list sends it
            "/api/skills/install", json={"thread_id": thread_id, "path": "mnt/user-data/outputs/haiku.skill"}
        )
        assert installed.status_code == 200, installed.text
        assert installed.json() == {
            "success": True,
            "skill_name": "haiku",
            "message": "Skill 'haiku' installed successfully",
        }
        assert by_name((await api.get("/api/skills")).json())["haiku"] == {
            "name": "haiku",
            "description": "Writes haiku",
            "license": "MIT",
            "category": "custom",
            "enabled": True,
            "editable": True,
        }
        again = await api.post(
            "/api/skills/install", json={"thread_id": thread_id, "path": "/mnt/user-data/outputs/haiku.skill"}
        )
        assert again.status_code == 409

        assert (await api.delete("/api/skills/custom/pdf")).status_code == 403
        assert (await api.delete("/api/skills/custom/haiku")).json() == {"success": True}
        assert "haiku" not in by_name((await api.get("/api/skills")).json())
        assert (await api.delete("/api/skills/custom/haiku")).status_code == 404


BAD_ARCHIVES = {
    "traversal.skill": (archive({"../evil/SKILL.md": skill_md("evil")}), 400),
    "absolute.skill": (archive({"/etc/SKILL.md": skill_md("evil")}), 400),
    "link.skill": (archive({"SKILL.md": skill_md("linky")}, links=("data",)), 400),
    "no-skill-md.skill": (archive({"README.md": b"hi"}), 400),
    "no-front-matter.skill": (archive({"SKILL.md": b"# just text"}), 400),
    "bad-name.skill": (archive({"SKILL.md": skill_md("Bad_Name")}), 400),
    "reserved.skill": (archive({"SKILL.md": skill_md("memory")}), 400),
    "nested.skill": (archive({"SKILL.md": skill_md("outer"), "inner/SKILL.md": skill_md("inner")}), 400),
    "binary.skill": (archive({"SKILL.md": skill_md("elf"), "tool": b"\x7fELF\x02\x01"}), 400),
    "bomb.skill": (archive({"SKILL.md": skill_md("bomb"), "zeros": bytes(MAX_UNPACKED_BYTES + 1)}), 413),
    "not-a-zip.skill": (b"PK not really", 400),
    "report.md": (b"# not an archive", 400),
}


async def test_bad_archives_and_bodies_are_refused_and_write_nothing(url: str, api_config: HartflowConfig) -> None:
    store = open_object_store(api_config)
    async with as_user(url, "alice") as api:
        thread_id = await new_thread_with(api, api_config, "alice", {n: data for n, (data, _) in BAD_ARCHIVES.items()})
        for name, (_, status) in BAD_ARCHIVES.items():
            body = {"thread_id": thread_id, "path": f"mnt/user-data/outputs/{name}"}
            refused = await api.post("/api/skills/install", json=body)
            assert refused.status_code == status, (name, refused.text)
            assert isinstance(refused.json()["detail"], str)  # installSkill shows it as the toast's message
        for body, status in (
            ({"thread_id": thread_id}, 422),
            ({"thread_id": thread_id, "path": "x.skill", "extra": 1}, 422),
            ({"thread_id": "../x", "path": "mnt/user-data/outputs/a.skill"}, 422),
            ({"thread_id": thread_id, "path": "mnt/user-data/../../etc/a.skill"}, 400),
            ({"thread_id": thread_id, "path": "mnt/user-data/outputs/missing.skill"}, 404),
            ({"thread_id": "thread-nobody-has", "path": "mnt/user-data/outputs/a.skill"}, 404),
        ):
            assert (await api.post("/api/skills/install", json=body)).status_code == status, body
        for body in ({}, {"enabled": "yes"}, {"enabled": True, "x": 1}):
            assert (await api.put("/api/skills/pdf", json=body)).status_code == 422, body
        assert (await api.put("/api/skills/nope", json={"enabled": False})).status_code == 404
        assert (await api.put("/api/skills/locked", json={"enabled": True})).status_code == 409
    assert list(store.list("users/alice/skills/")) == []


async def test_each_user_has_their_own_skills_and_the_next_run_sees_them(
    url: str, api_config: HartflowConfig, tmp_path: Path
) -> None:
    """Alice installs /haiku and turns /pdf off; bob sees neither change. Runs: SkillActivation loads what the
    page shows (DeerFlow's answers for a disabled or missing skill; the model is not called for them)."""
    activated = write_script(tmp_path, [answer("a haiku")])

    async def slash(api: httpx.AsyncClient, text: str) -> str:
        thread_id = (await api.post("/threads", json={})).json()["thread_id"]
        body = {"input": {"messages": [{"role": "user", "content": text}]}, "context": {"model_name": activated}}
        done = await api.post(f"/threads/{thread_id}/runs/wait", json=body)
        assert done.status_code == 200, done.text
        return str(done.json()["messages"][-1]["content"])

    async with as_user(url, "alice") as alice, as_user(url, "bob") as bob:
        thread_id = await new_thread_with(
            alice, api_config, "alice", {"h.skill": archive({"SKILL.md": skill_md("haiku")})}
        )
        body = {"thread_id": thread_id, "path": "mnt/user-data/outputs/h.skill"}
        assert (await alice.post("/api/skills/install", json=body)).status_code == 200
        assert (await bob.post("/api/skills/install", json=body)).status_code == 404, "alice's thread is not his"
        assert (await alice.put("/api/skills/pdf", json={"enabled": False})).status_code == 200

        bobs = by_name((await bob.get("/api/skills")).json())
        assert "haiku" not in bobs and bobs["pdf"]["enabled"] is True
        assert (await bob.put("/api/skills/haiku", json={"enabled": False})).status_code == 404
        assert (await bob.delete("/api/skills/custom/haiku")).status_code == 404
        assert list(open_object_store(api_config).list("users/bob/")) == []

        assert (
            await slash(alice, "/pdf read it")
            == "Skill `/pdf` is installed but disabled. Enable it before using slash activation."
        )
        assert await slash(bob, "/haiku about rain") == "Skill `/haiku` is not installed."
        assert (await alice.put("/api/skills/haiku", json={"enabled": False})).status_code == 200
        assert (
            await slash(alice, "/haiku about rain")
            == "Skill `/haiku` is installed but disabled. Enable it before using slash activation."
        )
        assert (await alice.put("/api/skills/haiku", json={"enabled": True})).status_code == 200
        assert await slash(alice, "/haiku about rain") == "a haiku"


def test_an_archive_with_its_skill_in_one_folder_is_read_from_there() -> None:
    bundle = read_archive(archive({"haiku/SKILL.md": skill_md("haiku"), "haiku/a/b.txt": b"x", "__MACOSX/._x": b""}))
    assert (bundle.name, sorted(bundle.files)) == ("haiku", ["SKILL.md", "a/b.txt"])
    with pytest.raises(SkillArchiveError, match="description"):
        read_archive(archive({"SKILL.md": skill_md("x", "uses <script>")}))


async def test_hartflow_skills_commands(
    url: str, api_config: HartflowConfig, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config_file = write_config(api_config.model_copy(update={"user_id": "alice"}), tmp_path, "alice.yaml")
    store = open_object_store(api_config)

    async def hartflow(*argv: str) -> tuple[int, str]:
        capsys.readouterr()
        code = await asyncio.to_thread(run_command, [*argv, "--config", str(config_file)])
        return code, capsys.readouterr().out

    good, bad = tmp_path / "haiku.skill", tmp_path / "evil.skill"
    good.write_bytes(archive({"SKILL.md": skill_md("haiku")}))
    bad.write_bytes(archive({"../SKILL.md": skill_md("evil")}))
    assert await hartflow("skills", "install", str(good), "--json") == (0, '{"success": true, "skill_name": "haiku"}\n')
    assert (await hartflow("skills", "disable", "haiku"))[0] == 0
    code, out = await hartflow("skills", "list", "--json")
    rows = {row["name"]: row for row in json.loads(out)["skills"]}
    assert code == 0 and rows["haiku"]["enabled"] is False and rows["haiku"]["editable"] is True
    assert (await hartflow("skills", "enable", "haiku"))[0] == 0

    before = [info.key for info in store.list("users/alice/")]
    for refused in (
        ("skills", "install", str(bad)),
        ("skills", "install", str(good)),
        ("skills", "install", str(tmp_path / "missing.skill")),
        ("skills", "enable", "locked"),
        ("skills", "enable", "nope"),
        ("skills", "delete", "pdf", "--yes"),
        ("skills", "delete", "haiku"),
        ("skills", "install"),
    ):
        assert (await hartflow(*refused))[0] == 2, refused
    assert [info.key for info in store.list("users/alice/")] == before
    assert (await hartflow("skills", "delete", "haiku", "--yes"))[0] == 0
    assert list(store.list("users/alice/skills/")) == []
