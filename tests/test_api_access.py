"""Who may call ``hartflow serve`` and what they may send: bearer tokens (401), users kept apart (404), the body
cap (413), uploads and artifacts on both storage backends (round trip, traversal refused with nothing written),
``GET /api/models``, and ``api.auth: none`` refused on a non-loopback address (exit 2).

Driven through the official ``langgraph-sdk`` client against a real uvicorn on loopback; uploads, artifacts
and models have no SDK call, so those requests are plain HTTP (httpx, which the SDK is built on)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from langgraph_sdk import get_client
from langgraph_sdk.errors import APIStatusError, AuthenticationError, NotFoundError
from temporalio.client import Client

from activities.storage import ObjectStore
from activities.thread_files import ThreadFiles
from tests.support import storage_settings
from tests.support.tenants import TOKENS, as_user, bearer_api
from vocabulary.contracts import ThreadRef
from workers.api.auth import ApiSettings, unsafe_bind_problem
from workers.config import HartflowConfig, open_object_store
from workers.devserver import free_port
from workers.testing import make_config, serving_api

MAX_BODY = 64 * 1024


def bearer_settings(**extra: Any) -> dict[str, Any]:
    """Both users' ``api`` settings (``tests/support/tenants.py``) with this module's body cap."""
    return bearer_api(max_body_bytes=MAX_BODY, **extra)


@pytest.fixture(params=["filesystem", "s3"])
def storage_backend(request: pytest.FixtureRequest) -> dict[str, Any]:
    return storage_settings(request, request.param)


@pytest.fixture
def api_config(home: Path, temporal_address: str, storage_backend: dict[str, Any]) -> HartflowConfig:
    return make_config(home, temporal_address, storage=storage_backend, api=bearer_settings())


@pytest.fixture
async def base_url(api_config: HartflowConfig, client: Client) -> AsyncIterator[str]:
    async with serving_api(api_config, client) as url:
        yield url


def sdk(url: str, user: str | None = None, token: str | None = None) -> Any:
    return get_client(url=url, api_key=token if token is not None else TOKENS.get(user or ""))


def stored_keys(store: ObjectStore) -> set[str]:
    return {info.key for info in store.list("users/")}


async def test_every_request_needs_a_known_token(base_url: str) -> None:
    for client in (sdk(base_url, token=""), sdk(base_url, token="not-a-token")):
        with pytest.raises(AuthenticationError):
            await client.threads.search()
        with pytest.raises(AuthenticationError):
            await client.assistants.search()
    async with httpx.AsyncClient(base_url=base_url) as raw:
        refused = await raw.get("/api/models")
        assert refused.status_code == 401 and "token" in refused.json()["detail"]
        assert refused.headers["www-authenticate"] == "Bearer"
        assert (await raw.get("/ok")).status_code == 200  # readiness probes carry no token
    # Either header carries the token: the SDK's x-api-key, or a standard Authorization: Bearer.
    thread = await sdk(base_url, "alice").threads.create()
    with_bearer = get_client(url=base_url, api_key=None, headers={"Authorization": f"Bearer {TOKENS['alice']}"})
    assert (await with_bearer.threads.get(thread["thread_id"]))["thread_id"] == thread["thread_id"]


async def test_another_users_thread_is_not_found(base_url: str, api_config: HartflowConfig) -> None:
    alice, bob = sdk(base_url, "alice"), sdk(base_url, "bob")
    thread_id = (await alice.threads.create(metadata={"owner": "alice"}))["thread_id"]
    async with as_user(base_url, "alice") as as_alice:
        sent = await as_alice.post(f"/api/threads/{thread_id}/uploads", files={"files": ("a.txt", b"alice's")})
        assert sent.status_code == 200, sent.text
    before = stored_keys(open_object_store(api_config))
    with pytest.raises(NotFoundError):
        await bob.threads.get(thread_id)
    with pytest.raises(NotFoundError):
        await bob.threads.update(thread_id, metadata={"owner": "bob"})
    with pytest.raises(NotFoundError):
        await bob.threads.delete(thread_id)
    assert thread_id not in [t["thread_id"] for t in await bob.threads.search()]
    async with as_user(base_url, "bob") as as_bob:
        for response in (
            await as_bob.get(f"/api/threads/{thread_id}/uploads/list"),
            await as_bob.delete(f"/api/threads/{thread_id}/uploads/a.txt"),
            await as_bob.get(f"/api/threads/{thread_id}/artifacts/mnt/user-data/outputs/a.txt"),
        ):
            assert response.status_code == 404, response.text
        assert stored_keys(open_object_store(api_config)) == before
        # An upload to a thread id bob has not used goes to bob's own thread of that name, as for any new id:
        # the answer says nothing of alice's thread, and none of her keys change.
        sent = await as_bob.post(f"/api/threads/{thread_id}/uploads", files={"files": ("b.txt", b"bob's")})
        assert sent.status_code == 200, sent.text
    after = stored_keys(open_object_store(api_config))
    assert {key for key in after if not key.startswith("users/bob/")} == before
    assert [key for key in after - before if key.endswith("b.txt")] == [
        f"users/bob/threads/{thread_id}/user-data/uploads/b.txt"
    ]
    assert (await alice.threads.get(thread_id))["metadata"] == {"owner": "alice"}


async def test_uploads_may_precede_the_thread_and_each_user_has_his_own_thread_of_a_name(
    base_url: str, api_config: HartflowConfig
) -> None:
    """DeerFlow's frontend uploads a new chat's files, then creates the thread with that id. Thread ids are per
    user, so a second user's upload to the same new id is his own thread's, and neither sees the other's files."""
    alice, bob = sdk(base_url, "alice"), sdk(base_url, "bob")
    new_id = f"new-chat-{os.getpid()}"
    async with as_user(base_url, "alice") as as_alice, as_user(base_url, "bob") as as_bob:
        sent = await as_alice.post(f"/api/threads/{new_id}/uploads", files={"files": ("brief.txt", b"hello")})
        assert sent.status_code == 200, sent.text
        assert (await as_bob.get(f"/api/threads/{new_id}/uploads/list")).status_code == 404
        taken = await as_bob.post(f"/api/threads/{new_id}/uploads", files={"files": ("x.txt", b"bob")})
        assert taken.status_code == 200, taken.text
        created = await alice.threads.create(thread_id=new_id)  # the first run's thread, same id
        assert created["thread_id"] == new_id
        listed = (await as_alice.get(f"/api/threads/{new_id}/uploads/list")).json()
        assert [f["filename"] for f in listed["files"]] == ["brief.txt"]
        listed = (await as_bob.get(f"/api/threads/{new_id}/uploads/list")).json()
        assert [f["filename"] for f in listed["files"]] == ["x.txt"]
    with pytest.raises(NotFoundError):
        await bob.threads.get(new_id)
    assert (await bob.threads.create(thread_id=new_id))["thread_id"] == new_id  # his own, beside alice's


async def test_uploads_and_artifacts_round_trip(base_url: str, api_config: HartflowConfig) -> None:
    thread_id = (await sdk(base_url, "alice").threads.create())["thread_id"]
    async with as_user(base_url, "alice") as api:
        sent = await api.post(
            f"/api/threads/{thread_id}/uploads",
            files=[("files", ("notes.md", b"# Notes\n")), ("files", ("data.csv", b"a,b\n1,2\n"))],
        )
        assert sent.status_code == 200, sent.text
        body = sent.json()
        assert body["success"] is True
        assert [(f["filename"], f["size"], f["virtual_path"]) for f in body["files"]] == [
            ("notes.md", 8, "/mnt/user-data/uploads/notes.md"),
            ("data.csv", 8, "/mnt/user-data/uploads/data.csv"),
        ]
        listed = (await api.get(f"/threads/{thread_id}/uploads/list")).json()
        assert listed["count"] == 2 and {f["filename"] for f in listed["files"]} == {"notes.md", "data.csv"}
        assert all(f["modified"] for f in listed["files"])

        deleted = await api.delete(f"/api/threads/{thread_id}/uploads/data.csv")
        assert deleted.status_code == 200 and deleted.json()["success"] is True
        assert (await api.delete(f"/api/threads/{thread_id}/uploads/data.csv")).status_code == 404
        listed = (await api.get(f"/api/threads/{thread_id}/uploads/list")).json()
        assert [f["filename"] for f in listed["files"]] == ["notes.md"]

        # What a run's tool leaves in outputs (written the way the run's activities write thread files).
        files = ThreadFiles(open_object_store(api_config), api_config.home)
        thread = ThreadRef("alice", thread_id)
        files.write(thread, "/mnt/user-data/outputs/report.md", b"# Report\n")
        files.write(thread, "/mnt/user-data/outputs/charts/q1 sales.json", b'{"q1": 3}')
        files.write(thread, "/mnt/user-data/outputs/page.html", b"<script>alert(1)</script>")

        shown = await api.get(f"/api/threads/{thread_id}/artifacts/mnt/user-data/outputs/report.md")
        assert shown.status_code == 200 and shown.content == b"# Report\n"
        assert shown.headers["content-type"].startswith("text/markdown")
        assert shown.headers["content-disposition"].startswith("inline")
        nested = await api.get(f"/threads/{thread_id}/artifacts/charts/q1%20sales.json", params={"download": "true"})
        assert nested.status_code == 200 and nested.json() == {"q1": 3}
        assert nested.headers["content-type"] == "application/json"
        assert nested.headers["content-disposition"] == "attachment; filename*=UTF-8''q1%20sales.json"
        page = await api.get(f"/api/threads/{thread_id}/artifacts/page.html")
        assert page.headers["content-security-policy"] == "sandbox"  # a generated page runs no script here
        missing = await api.get(f"/api/threads/{thread_id}/artifacts/mnt/user-data/outputs/nope.txt")
        assert missing.status_code == 404 and "nope.txt" in missing.json()["detail"]
        upload = await api.get(f"/api/threads/{thread_id}/artifacts/mnt/user-data/uploads/notes.md")
        assert upload.status_code == 403  # outputs only


async def test_traversal_and_bad_names_write_nothing(base_url: str, api_config: HartflowConfig) -> None:
    store = open_object_store(api_config)
    thread_id = (await sdk(base_url, "alice").threads.create())["thread_id"]
    before = stored_keys(store)
    async with as_user(base_url, "alice") as api:
        for bad in ("../escape.txt", "..", "sub/inner.txt", "back\\slash.txt", ".upload-1.part", ""):
            refused = await api.post(
                f"/api/threads/{thread_id}/uploads",
                files=[("files", ("fine.txt", b"ok")), ("files", (bad, b"x"))],
            )
            assert refused.status_code == 422, (bad, refused.text)
            assert "detail" in refused.json()
        twice = await api.post(
            f"/api/threads/{thread_id}/uploads", files=[("files", ("a.txt", b"1")), ("files", ("a.txt", b"2"))]
        )
        assert twice.status_code == 422
        assert (await api.post("/api/threads/bad.id/uploads", files={"files": ("a.txt", b"1")})).status_code == 422
        assert (await api.delete(f"/api/threads/{thread_id}/uploads/%2e%2e")).status_code == 422
        for path in (
            "%2e%2e/%2e%2e/state/v0000000001.json",
            "mnt/user-data/outputs/../../../../../../etc/passwd".replace("..", "%2e%2e"),
            "mnt/user-data/outputs/a%00b",
            "mnt/user-data/outputs/",
        ):
            refused = await api.get(f"/api/threads/{thread_id}/artifacts/{path}")
            assert refused.status_code == 400, (path, refused.text)
        assert (await api.get(f"/api/threads/{thread_id}/artifacts/mnt/user-data/workspace/a")).status_code == 403
    assert stored_keys(store) == before


async def test_symlink_out_of_the_thread_is_refused(client: Client, home: Path, temporal_address: str) -> None:
    config = make_config(home, temporal_address, api=bearer_settings())
    secret = home.parent / "secret.txt"
    secret.write_text("not yours")
    async with serving_api(config, client) as url:
        thread_id = (await sdk(url, "alice").threads.create())["thread_id"]
        outputs = home / "users" / "alice" / "threads" / thread_id / "user-data" / "outputs"
        outputs.mkdir(parents=True)
        (outputs / "link.txt").symlink_to(secret)  # what a sandbox command could leave behind
        async with as_user(url, "alice") as api:
            refused = await api.get(f"/api/threads/{thread_id}/artifacts/link.txt")
            assert refused.status_code == 400 and "not yours" not in refused.text


async def test_oversized_bodies_are_refused(base_url: str, api_config: HartflowConfig) -> None:
    store = open_object_store(api_config)
    alice = sdk(base_url, "alice")
    thread_id = (await alice.threads.create())["thread_id"]
    before = stored_keys(store)
    with pytest.raises(APIStatusError) as declared:
        await alice.threads.update(thread_id, metadata={"blob": "x" * MAX_BODY})
    assert declared.value.response.status_code == 413
    async with as_user(base_url, "alice") as api:
        too_big = await api.post(f"/api/threads/{thread_id}/uploads", files={"files": ("big.bin", b"0" * MAX_BODY)})
        assert too_big.status_code == 413 and "max_body_bytes" in too_big.json()["detail"]

        async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: counted as it arrives
            for _ in range(4):
                yield b"{" + b" " * (MAX_BODY // 2) + b"}"

        chunked = await api.patch(
            f"/api/threads/{thread_id}", content=chunks(), headers={"Content-Type": "application/json"}
        )
        assert chunked.status_code == 413, chunked.text
    assert stored_keys(store) == before
    assert (await alice.threads.get(thread_id))["metadata"] == {}


async def test_models_in_deerflows_shape(base_url: str, api_config: HartflowConfig) -> None:
    async with as_user(base_url, "alice") as api:
        listed = (await api.get("/api/models")).json()
    # The TokenUsage middleware's switch (DeerFlow's token_usage.enabled): on unless the config turns it off.
    assert listed["token_usage"] == {"enabled": api_config.run.middlewares.token_usage.enabled}
    if api_config.model is None:
        assert listed["models"] == []


async def test_models_lists_the_configured_model(client: Client, home: Path, temporal_address: str) -> None:
    config = make_config(home, temporal_address, model="openai:gpt-4o-mini")
    async with serving_api(config, client) as url, httpx.AsyncClient(base_url=url) as api:
        for route in ("/api/models", "/models"):
            (model,) = (await api.get(route)).json()["models"]
            assert model["name"] == model["model"] == "gpt-4o-mini"
            assert set(model) >= {"display_name", "supports_thinking", "supports_vision", "supports_reasoning_effort"}


def test_auth_none_only_on_loopback() -> None:
    open_settings = ApiSettings()
    for host in ("127.0.0.1", "127.0.0.53", "::1", "[::1]", "localhost"):
        assert unsafe_bind_problem(open_settings, host) is None, host
    for host in ("0.0.0.0", "::", "192.168.1.10", "example.com"):
        assert "api.auth" in (unsafe_bind_problem(open_settings, host) or ""), host
    assert unsafe_bind_problem(ApiSettings.model_validate(bearer_settings()), "0.0.0.0") is None


def test_serve_refuses_auth_none_on_a_public_address(tmp_path: Path) -> None:
    config_file = tmp_path / "hartflow.yaml"
    config_file.write_text(yaml.safe_dump({"storage": {"home": str(tmp_path / "home")}, "api": {"auth": "none"}}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HARTFLOW_", "TEMPORAL_"))}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "workers.cli",
            "serve",
            "--config",
            str(config_file),
            "--host",
            "0.0.0.0",
            "--port",
            str(free_port()),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    assert result.returncode == 2, result.stderr
    assert "api.auth is 'none'" in result.stderr and "0.0.0.0" in result.stderr
    assert not (tmp_path / "home").exists()  # refused before anything started


def test_bearer_needs_tokens_and_unique_digests() -> None:
    with pytest.raises(ValueError, match="at least one"):
        ApiSettings.model_validate({"auth": "bearer"})
    one = bearer_settings()["tokens"][0]
    with pytest.raises(ValueError, match="twice"):
        ApiSettings.model_validate({"auth": "bearer", "tokens": [one, {**one, "user_id": "mallory"}]})
