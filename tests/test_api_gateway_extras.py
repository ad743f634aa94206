"""DeerFlow's small Gateway routes on a real uvicorn, worker and Temporal, sent as DeerFlow's web app sends them
(``bytedance/deer-flow`` f1f4af9): input polish and follow-up suggestions (answered by the worker's model through
the one-shot workflow), the feature flags, and the channels and integrations hartflow does not serve."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import Client, WorkflowExecutionStatus

from tests.support import model_specs, worker_and_api
from tests.support.fake_openai import FakeOpenAI, error_reply
from tests.support.tenants import as_user, bearer_api
from vocabulary.contracts import ModelCallInput
from workers.api.input_polish import SYSTEM_INSTRUCTION, user_content
from workers.config import HartflowConfig
from workers.testing import answer, make_config, running_worker, serving_api, unique, write_script
from workers.testing.history import history_events, scheduled_inputs
from workers.worker import connect
from workflows.oneshot import ONESHOT_WORKFLOW

POLISHED = "Write a one-page report on solar power: costs, adoption and outlook."
QUESTIONS = '```json\n["How much does it cost?", "Who\\nbuilds it?", "", 5, "Is it growing?", "What next?"]\n```'
KEY_VARIABLE = "FAKE_PROVIDER_API_KEY"
SECRET = "sk-fake-provider-secret-77aa01"


def purpose(name: str, entry: dict[str, Any]) -> dict[str, Any]:
    return {**entry, "for": name}


@pytest.fixture
def api_config(home: Path, temporal_address: str, tmp_path: Path) -> HartflowConfig:
    """The default model answers a polish (its reasoning in ``<think>``) and suggestions (fenced JSON with junk
    entries); a request may name another script of ``tmp_path`` (``api.allow_model_specs``)."""
    write_script(tmp_path, [purpose("suggestions", answer('["From the other model?"]'))], name="other.json")
    model = write_script(
        tmp_path,
        [
            answer("an agent turn"),
            purpose("input_polish", answer(f"<think>make it concrete</think>\n{POLISHED}\n")),
            purpose("suggestions", answer(f"<think>three</think>{QUESTIONS}")),
        ],
    )
    return make_config(home, temporal_address, model=model, api=model_specs(tmp_path))


@pytest.fixture
async def url(api_config: HartflowConfig, client: Client) -> AsyncIterator[str]:
    async with worker_and_api(api_config, client) as base:
        yield base


async def oneshots(client: Client, config: HartflowConfig, at_least: int) -> list[str]:
    """The ids of the one-shot workflows on the config's task queue, once visibility lists ``at_least``."""
    query = f'WorkflowType = "{ONESHOT_WORKFLOW}" AND TaskQueue = "{config.temporal.task_queue}"'
    for _ in range(200):
        found = [execution.id async for execution in client.list_workflows(query)]
        if len(found) >= at_least:
            return found
        await asyncio.sleep(0.05)
    raise AssertionError(f"visibility listed fewer than {at_least} one-shot workflows: {found}")


async def model_request(client: Client, workflow_id: str) -> ModelCallInput:
    events = await history_events(client.get_workflow_handle(workflow_id))
    [request] = await scheduled_inputs(client, events, "model.invoke", ModelCallInput)
    assert isinstance(request, ModelCallInput)
    return request


async def test_input_polish_is_the_workers_model_with_deerflows_prompt_and_bad_drafts_start_nothing(
    url: str, client: Client, api_config: HartflowConfig
) -> None:
    """``frontend/src/core/input-polish/api.ts`` (``polishInputDraft``) posts ``{text, locale, thread_id}`` and reads
    ``{rewritten_text, changed}``; an error's ``detail`` is its toast."""
    async with httpx.AsyncClient(base_url=url, timeout=60) as api:
        for body, status, detail in (
            ({}, 422, "text: Field required"),
            ({"text": 5}, 422, "text: Input should be a valid string"),
            ({"text": "hi", "locale": "x" * 65}, 422, "locale: String should have at most 64 characters"),
            ({"text": "  \n "}, 400, "Input text is required"),
            ({"text": "x" * 4001}, 400, "Input text exceeds 4000 characters"),
        ):
            refused = await api.post("/api/input-polish", json=body)
            assert (refused.status_code, refused.json()) == (status, {"detail": detail}), body
        surrogate = await api.post(
            "/api/input-polish", content=b'{"text": "\\ud800"}', headers={"Content-Type": "application/json"}
        )
        assert surrogate.status_code == 422

        draft = "  write report solar  "
        polished = await api.post("/api/input-polish", json={"text": draft, "locale": "en-US", "thread_id": "t1"})
        assert polished.status_code == 200, polished.text
        assert polished.json() == {"rewritten_text": POLISHED, "changed": True}
        same = await api.post("/api/input-polish", json={"text": POLISHED})
        assert same.json() == {"rewritten_text": POLISHED, "changed": False}

    found = await oneshots(client, api_config, 2)
    assert len(found) == 2, f"a refused draft started a workflow: {found}"
    assert all(i.startswith("hartflow:default:input_polish.") for i in found), found
    requests = [await model_request(client, i) for i in found]
    first = next(r for r in requests if "write report solar" in str(r.messages[0].content))
    assert first.system_message is not None and first.system_message.content == SYSTEM_INSTRUCTION
    assert first.messages[0].content == user_content("write report solar", "en-US")
    assert (first.purpose, first.model) == ("input_polish", api_config.model)
    assert "Locale hint: same language as the draft" in str(
        next(r for r in requests if r is not first).messages[0].content
    )


async def test_suggestions_follow_the_apps_request_and_refuse_what_is_not_the_callers(
    url: str, client: Client, api_config: HartflowConfig
) -> None:
    """``frontend/src/core/suggestions/api.ts`` reads ``{enabled, max_suggestions}``;
    ``frontend/src/components/workspace/input-box.tsx`` posts ``{messages: [{role, content}], n, model_name}`` to
    ``/api/threads/{id}/suggestions`` and reads ``{suggestions}``."""
    conversation = [
        {"role": "user", "content": "Tell me about solar power"},
        {"role": "assistant", "content": " Solar power turns sunlight into electricity. "},
    ]
    async with httpx.AsyncClient(base_url=url, timeout=60) as api:
        assert (await api.get("/api/suggestions/config")).json() == {"enabled": True, "max_suggestions": 3}
        thread_id = (await api.post("/api/threads", json={})).json()["thread_id"]
        route = f"/api/threads/{thread_id}/suggestions"
        for path, body, status in (
            (f"/api/threads/{unique('nobodys')}/suggestions", {"messages": conversation}, 404),
            ("/api/threads/bad.id/suggestions", {"messages": conversation}, 422),
            (route, {"messages": "hi"}, 422),
            (route, {"messages": conversation, "n": 0}, 422),
            (route, {"messages": conversation, "n": 9}, 422),
            (route, {"messages": [{"role": "user"}]}, 422),
            (route, {"messages": conversation, "model_name": "scripted:/etc/hostname"}, 422),
        ):
            refused = await api.post(path, json=body)
            assert refused.status_code == status, (path, body, refused.text)
        assert (await api.post(route, json={"messages": []})).json() == {"suggestions": []}

        # The app's model_name is a name GET /api/models listed: the default model answers.
        asked = await api.post(route, json={"messages": conversation, "n": 5, "model_name": "scripted"})
        assert asked.status_code == 200, asked.text
        assert asked.json() == {"suggestions": ["How much does it cost?", "Who builds it?", "Is it growing?"]}
        other = await api.post(route, json={"messages": conversation[:1], "n": 1, "model_name": "scripted:other.json"})
        assert other.json() == {"suggestions": ["From the other model?"]}

    found = await oneshots(client, api_config, 2)
    assert len(found) == 2, f"a refused request started a workflow: {found}"
    assert all(i.startswith("hartflow:default:suggestions.") for i in found), found
    requests = [await model_request(client, i) for i in found]
    first = next(r for r in requests if r.model == api_config.model)
    assert first.purpose == "suggestions" and first.system_message is not None
    assert "produce EXACTLY 3 short questions" in str(first.system_message.content)
    assert first.messages[0].content == (
        "Conversation Context:\nUser: Tell me about solar power\n"
        "Assistant: Solar power turns sunlight into electricity.\n\nGenerate 3 follow-up questions"
    )


async def test_no_worker_is_a_504_naming_the_queue_and_a_model_error_a_502_without_the_key(
    client: Client, home: Path, temporal_address: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The app's polish toast shows ``detail`` (``frontend/src/core/input-polish/api.ts``)."""
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv(KEY_VARIABLE, SECRET)
    refusal = f"Authentication Fails, Your api key: {SECRET} is invalid"
    with FakeOpenAI([error_reply(401, refusal, code="invalid_api_key")]) as provider:
        entry = {"name": "fake", "use": "langchain_openai:ChatOpenAI", "model": "fake-gpt-4o"}
        entry |= {"api_key": f"${KEY_VARIABLE}", "base_url": provider.base_url}
        config = make_config(home, temporal_address, models=[entry], model="fake", api={"oneshot_timeout_seconds": 2})
        connected = await connect(config)
        async with serving_api(config, connected) as base, httpx.AsyncClient(base_url=base, timeout=60) as api:
            waited = await api.post("/api/input-polish", json={"text": "make it better"})
            assert waited.status_code == 504
            assert waited.json()["detail"] == (
                "the model did not answer within 2s (api.oneshot_timeout_seconds): is a worker serving task queue "
                f"{config.temporal.task_queue!r}?"
            )
            [timed_out] = await oneshots(client, config, 1)
            described = await client.get_workflow_handle(timed_out).describe()
            assert described.status == WorkflowExecutionStatus.TIMED_OUT

            async with running_worker(client, config):
                failed = await api.post("/api/input-polish", json={"text": "make it better"})
        [request] = provider.completions()

    assert failed.status_code == 502
    assert failed.json()["detail"].startswith("the model failed: ") and "your api key: ***" in failed.text.lower()
    assert SECRET not in failed.text and SECRET not in caplog.text
    assert request.headers["authorization"] == f"Bearer {SECRET}", "the worker's key reached the provider"
    assert request.body["messages"][0] == {"role": "system", "content": SYSTEM_INSTRUCTION}


async def test_suggestions_are_per_user(home: Path, temporal_address: str, client: Client, tmp_path: Path) -> None:
    """With ``api.auth: bearer`` bob's suggestions on alice's thread are the 404 of a thread nobody has, and each
    user's one-shot workflow is under their own id (``input-box.tsx``'s request)."""
    model = write_script(tmp_path, [purpose("suggestions", answer('["Why?"]')), purpose("input_polish", answer("X"))])
    config = make_config(home, temporal_address, model=model, api=bearer_api())
    body = {"messages": [{"role": "user", "content": "hi"}], "n": 3}
    async with worker_and_api(config, client) as base, as_user(base, "alice") as alice, as_user(base, "bob") as bob:
        thread_id, nobody = (await alice.post("/api/threads", json={})).json()["thread_id"], unique("nobodys")
        hers = await bob.post(f"/api/threads/{thread_id}/suggestions", json=body)
        nobodys = await bob.post(f"/api/threads/{nobody}/suggestions", json=body)
        assert hers.status_code == nobodys.status_code == 404
        assert hers.json()["detail"].replace(thread_id, "T") == nobodys.json()["detail"].replace(nobody, "T")
        mine = await alice.post(f"/api/threads/{thread_id}/suggestions", json=body)
        assert mine.json() == {"suggestions": ["Why?"]}
        assert (await bob.post("/api/input-polish", json={"text": "y"})).json()["rewritten_text"] == "X"
    found = await oneshots(client, config, 2)
    assert sorted(i.rsplit(".", 1)[0] for i in found) == ["hartflow:alice:suggestions", "hartflow:bob:input_polish"]


async def test_features_channels_and_integrations_answer_the_apps_page_loads(
    api_config: HartflowConfig, client: Client
) -> None:
    """``frontend/src/core/features/api.ts``, ``frontend/src/core/channels/api.ts`` (shapes in ``types.ts``) and
    ``frontend/src/core/integrations/lark/api.ts`` (``LarkIntegrationStatus`` in ``types.ts``): what the sidebar
    and the Channels and Integrations settings pages load is answered; what would configure one is a 400 naming why."""
    async with serving_api(api_config, client) as base, httpx.AsyncClient(base_url=base, timeout=60) as api:
        for prefix in ("", "/api"):
            features = await api.get(f"{prefix}/features")
            assert features.json() == {
                "agents_api": {"enabled": True},  # /api/agents is served (workers/api/agents_route.py)
                "browser_control": {"enabled": False},
                "mcp_tasks": {"enabled": False},
            }
            assert (await api.get(f"{prefix}/channels/providers")).json() == {"enabled": False, "providers": []}
            assert (await api.get(f"{prefix}/channels/connections")).json() == {"connections": []}
            status = (await api.get(f"{prefix}/integrations/lark/status")).json()
            assert set(status) == LARK_STATUS_FIELDS
            assert (status["installed"], status["cli"]["available"], status["auth"]["status"]) == (
                False,
                False,
                "unavailable",
            )
            assert "not served by hartflow" in status["cli"]["error"]
            for method, path in CONFIGURING:
                refused = await api.request(method, f"{prefix}{path}", json={"values": {"bot_token": "t"}})
                assert refused.status_code == 400, (method, path)
                assert "not served by hartflow" in refused.json()["detail"]


LARK_STATUS_FIELDS = {
    "installed",
    "version",
    "manifest_version",
    "latest_available_version",
    "runtime_version_mismatch",
    "app_configured",
    "app_id",
    "app_brand",
    "skills_expected",
    "skills_installed",
    "installed_skills",
    "enabled_skills",
    "install_path",
    "cli",
    "auth",
    "sandbox_runtime_mode",
    "sandbox_runtime_ready",
    "sandbox_runtime_detail",
}
CONFIGURING = [
    ("POST", "/channels/telegram/connect"),
    ("POST", "/channels/slack/runtime-config"),
    ("DELETE", "/channels/slack/runtime-config"),
    ("DELETE", "/channels/connections/c1"),
    ("POST", "/integrations/lark/install"),
    ("POST", "/integrations/lark/config/start"),
    ("POST", "/integrations/lark/config/complete"),
    ("POST", "/integrations/lark/config/credentials"),
    ("POST", "/integrations/lark/auth/start"),
    ("POST", "/integrations/lark/auth/complete"),
]
