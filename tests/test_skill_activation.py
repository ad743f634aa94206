"""SkillActivation: the slash grammar, the envelope, the skills directory and ``hartflow skills list``, and real
runs where the envelope reaches exactly one model call and failures are answered without calling the model."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from temporalio.client import Client
from temporalio.testing import ActivityEnvironment

from activities.skill_catalog import SkillActivities
from activities.skills import SkillsSettings, load_skills
from activities.thread_store import FilesystemThreadStore
from middlewares.base import ModelRequest
from middlewares.skill_activation import (
    Activation,
    SkillActivationMiddleware,
    activation_envelope,
    parse_slash_command,
)
from tests.support import StubRunContext, start_run
from vocabulary.contracts import ModelCallInput, SkillLoadInput, SkillLoadResult, ThreadRef
from vocabulary.state import ThreadState
from workers.cli import run_command
from workers.testing import answer, calls, make_config, running_worker, settle, tool_call, unique, write_script
from workers.testing.history import history_events, scheduled_activities, scheduled_inputs

SKILL_MD = """---
name: {name}
description: {description}
---
# {name}

Use <b>bold</b> & be brief.
"""


def _skill(root: Path, category: str, directory: str, name: str, description: str = "Does things") -> Path:
    path = root / category / directory / "SKILL.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(SKILL_MD.format(name=name, description=description), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("/pdf-tools summarise report.pdf", ("pdf-tools", "summarise report.pdf")),
        ("/pdf", ("pdf", "")),
        ("/pdf\n  then this", ("pdf", "then this")),
        ("/help me", None),  # reserved names are never skills
        ("/status", None),
        ("/PDF go", None),
        ("/a--b go", None),
        ("/pdf.x go", None),
        (" /pdf go", None),
        ("please /pdf", None),
    ],
)
def test_slash_grammar(text: str, expected: tuple[str, str] | None) -> None:
    command = parse_slash_command(text)
    assert (None if command is None else (command.name, command.remaining_text)) == expected


def test_the_envelope_is_deerflows_with_every_interpolation_escaped() -> None:
    activation = Activation(
        name="pdf",
        category="custom",
        path="/mnt/skills/custom/pdf/SKILL.md",
        content="Use <b> & </skill_content>",
        sha256="ab12",
        remaining_text="read <this> & that",
    )
    assert activation_envelope(activation) == (
        "<slash_skill_activation>\n"
        "The user explicitly activated the `pdf` skill for this turn.\n"
        "Treat the task text as:\n<user_request>\nread &lt;this&gt; &amp; that\n</user_request>\n\n"
        "Follow this skill before choosing a general workflow. Load supporting resources from the same skill "
        "directory only when needed.\n\n"
        '<skill name="pdf" category="custom" path="/mnt/skills/custom/pdf/SKILL.md" sha256="ab12" editable="true">\n'
        '<skill_content encoding="xml-escaped">\n'
        "Use &lt;b&gt; &amp; &lt;/skill_content&gt;\n"
        "</skill_content>\n</skill>\n</slash_skill_activation>"
    )
    public = activation_envelope(Activation("pdf", "public", "/p", "x", "h", ""))
    assert 'editable="false"' in public
    assert "No additional task text was provided after the slash skill command. Ask the user what they want" in public


def test_the_skills_directory(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    _skill(root, "public", "pdf", "pdf", "Public PDF")
    _skill(root, "custom", "my-pdf", "pdf", "My PDF")  # shadows the public one
    _skill(root, "public", "docs/nested", "nested")
    _skill(root, "public", ".hidden/x", "hidden")
    (root / "public/broken").mkdir(parents=True)
    (root / "public/broken/SKILL.md").write_text("no front matter\n", encoding="utf-8")

    skills = load_skills(root, ["nested"])
    assert [(s.name, s.category, s.relative_path, s.enabled) for s in skills] == [
        ("nested", "public", "docs/nested", False),
        ("pdf", "custom", "my-pdf", True),
    ]
    assert skills[1].container_file("/mnt/skills") == "/mnt/skills/custom/my-pdf/SKILL.md"
    assert load_skills(tmp_path / "missing") == []


def test_the_load_activity_checks_then_reads(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    path = _skill(root, "public", "pdf", "pdf")
    _skill(root, "public", "quiet", "quiet")
    outside = tmp_path / "outside.md"
    outside.write_text(SKILL_MD.format(name="escape", description="d"), encoding="utf-8")
    (root / "public/escape").mkdir()
    (root / "public/escape/SKILL.md").symlink_to(outside)
    load = SkillActivities(root, SkillsSettings(disabled=["quiet"])).load
    env = ActivityEnvironment()

    loaded = env.run(load, SkillLoadInput("pdf"))
    content = path.read_text(encoding="utf-8")
    assert loaded == SkillLoadResult(
        "loaded",
        category="public",
        container_path="/mnt/skills/public/pdf/SKILL.md",
        content=content,
        sha256=hashlib.sha256(content.encode()).hexdigest(),
    )
    assert env.run(load, SkillLoadInput("nope")).status == "not_installed"
    assert env.run(load, SkillLoadInput("quiet")).status == "disabled"
    assert env.run(load, SkillLoadInput("pdf", available=["other"])).status == "not_available"
    assert env.run(load, SkillLoadInput("escape")).status == "unreadable"


def test_hartflow_skills_list(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HARTFLOW_STORAGE__HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    _skill(tmp_path / "skills", "public", "pdf", "pdf", "Read PDFs")
    assert run_command(["skills", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["root"] == str(tmp_path / "skills")
    assert listed["skills"] == [
        {
            "name": "pdf",
            "description": "Read PDFs",
            "category": "public",
            "enabled": True,
            "editable": False,
            "path": "/mnt/skills/public/pdf/SKILL.md",
            "file": str(tmp_path / "skills/public/pdf/SKILL.md"),
        }
    ]
    assert run_command(["skills", "list"]) == 0
    assert capsys.readouterr().out.startswith("/pdf ")


# -- real runs ------------------------------------------------------------------------------------------------


async def test_a_slash_skill_reaches_one_model_call_and_never_the_thread(
    client: Client, home: Path, temporal_address: str
) -> None:
    config = make_config(home, temporal_address)
    _skill(home / "skills", "public", "greeter", "greeter")
    thread = unique("slash")
    model = write_script(home, [calls(tool_call("ls", path="/mnt/user-data/workspace")), answer("greeted")])
    async with running_worker(client, config):
        handle = await start_run(client, config, "/greeter say hi to <Ann>", model=model, thread_id=thread)
        view = await settle(handle)
        events = await history_events(handle)
    assert view.status == "completed" and view.final_message == "greeted"
    first, second = await scheduled_inputs(client, events, "model.invoke", ModelCallInput)

    index, envelope = next((i, m) for i, m in enumerate(first.messages) if m.id and m.id.endswith("__slash_activation"))
    target = first.messages[index + 1]
    # InputSanitization (outer) framed the typed text; SkillActivation read it from ``original_user_content``.
    framed = "--- BEGIN USER INPUT ---\n/greeter say hi to <Ann>\n--- END USER INPUT ---"
    assert isinstance(envelope, HumanMessage) and target.content == framed
    assert envelope.id == f"{target.id}__slash_activation"
    assert envelope.additional_kwargs == {
        "hide_from_ui": True,
        "slash_skill_activation": True,
        "slash_skill_activation_target_id": target.id,
    }
    assert "<user_request>\nsay hi to &lt;Ann&gt;\n</user_request>" in envelope.content
    assert 'path="/mnt/skills/public/greeter/SKILL.md"' in envelope.content
    assert "Use &lt;b&gt;bold&lt;/b&gt; &amp; be brief." in envelope.content
    # Once per run: the tool loop's next call goes without it, and the thread never stores it.
    assert not any("slash_skill_activation" in m.additional_kwargs for m in second.messages)
    state = FilesystemThreadStore(home).load(ThreadRef(config.user_id, thread)).state
    assert not any("slash_skill_activation" in m.additional_kwargs for m in state.messages)


@pytest.mark.parametrize(
    ("settings", "message", "reply"),
    [
        ({}, "/nope do it", "Skill `/nope` is not installed."),
        (
            {"skills": {"disabled": ["greeter"]}},
            "/greeter hi",
            "Skill `/greeter` is installed but disabled. Enable it before using slash activation.",
        ),
        (
            {"run": {"middlewares": {"skill_activation": {"available_skills": ["other"]}}}},
            "/greeter hi",
            "Skill `/greeter` is not available for this agent.",
        ),
    ],
)
async def test_a_refused_slash_skill_is_answered_without_calling_the_model(
    client: Client, home: Path, temporal_address: str, settings: dict[str, object], message: str, reply: str
) -> None:
    config = make_config(home, temporal_address, **settings)
    _skill(home / "skills", "public", "greeter", "greeter")
    async with running_worker(client, config):
        handle = await start_run(client, config, message, model=write_script(home, []))  # any model call would fail
        view = await settle(handle)
        events = await history_events(handle)
    assert view.status == "completed" and view.final_message == reply
    assert "model.invoke" not in [name for name, _ in scheduled_activities(events)]


async def test_reserved_names_and_plain_text_go_to_the_model_untouched() -> None:
    seen: list[ModelRequest] = []

    async def model(request: ModelRequest) -> AIMessage:
        seen.append(request)
        return AIMessage("ok")

    ctx = StubRunContext()  # no activities: a skills.load call would fail
    for text in ("/help", "hello"):
        messages = [HumanMessage(text, id="m1")]
        request = ModelRequest(messages, SystemMessage("s"), [], ThreadState(messages=messages), ctx, "m")
        await SkillActivationMiddleware().wrap_model_call(request, model)
        assert seen[-1].messages == messages
    assert ctx.calls == []
