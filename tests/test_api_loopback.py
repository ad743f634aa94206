"""``api.auth: none`` serves only this machine: a loopback client naming a loopback ``Host``, and no cross-site
writes. A DNS-rebinding page (its own host name resolving to 127.0.0.1) read every thread, and a cross-site
multipart upload from any web page was stored; loopback origins (DeerFlow's web app, LangChain's Agent Chat UI on
another local port) keep working. With ``bearer`` none of these checks apply: the token decides.

Driven against a real uvicorn on loopback (``serving_api``); a client that is not loopback is a request a local
proxy forwards for one (``X-Forwarded-For``, which uvicorn applies for a proxy on 127.0.0.1)."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from langgraph_sdk import get_client
from temporalio.client import Client

from activities.storage import ObjectStore
from workers.api.loopback import host_of_authority, is_loopback
from workers.config import HartflowConfig, open_object_store
from workers.testing import make_config, serving_api

EVIL = "https://evil.example"
TOKEN = "alice-token-0123456789"


@pytest.fixture
def open_config(home: Path, temporal_address: str) -> HartflowConfig:
    return make_config(home, temporal_address, api={"auth": "none"})


@pytest.fixture
async def open_url(open_config: HartflowConfig, client: Client) -> AsyncIterator[str]:
    async with serving_api(open_config, client) as url:
        yield url


def stored(store: ObjectStore) -> set[str]:
    return {info.key for info in store.list("users/")}


async def test_a_rebinding_host_reads_nothing(open_url: str) -> None:
    thread_id = (await get_client(url=open_url).threads.create(metadata={"secret": "s3cr3t"}))["thread_id"]
    port = open_url.rsplit(":", 1)[1]
    async with httpx.AsyncClient(base_url=open_url) as api:
        assert (await api.get(f"/threads/{thread_id}")).status_code == 200  # the browser at 127.0.0.1: fine
        for host in (f"evil.example:{port}", "evil.example", f"127.0.0.1.evil.example:{port}", "", "[::1"):
            for response in (
                await api.get(f"/threads/{thread_id}", headers={"Host": host}),
                await api.post("/api/threads/search", json={}, headers={"Host": host}),
            ):
                assert response.status_code == 403, (host, response.text)
                assert "Host" in response.json()["detail"] and "s3cr3t" not in response.text
        for host in (f"localhost:{port}", f"LOCALHOST:{port}", "127.0.0.1", f"127.5.6.7:{port}", f"[::1]:{port}"):
            response = await api.get(f"/threads/{thread_id}", headers={"Host": host})
            assert response.status_code == 200, (host, response.text)


async def test_a_client_that_is_not_loopback_is_refused(open_url: str) -> None:
    async with httpx.AsyncClient(base_url=open_url) as api:
        forwarded = await api.post("/threads/search", json={}, headers={"X-Forwarded-For": "203.0.113.9"})
        assert forwarded.status_code == 403 and "client address" in forwarded.json()["detail"]
        local = await api.post("/threads/search", json={}, headers={"X-Forwarded-For": "127.0.0.1"})
        assert local.status_code == 200


async def test_a_cross_site_upload_is_not_stored(open_url: str, open_config: HartflowConfig) -> None:
    store = open_object_store(open_config)
    thread_id = (await get_client(url=open_url).threads.create())["thread_id"]
    upload = f"/api/threads/{thread_id}/uploads"
    before = stored(store)
    async with httpx.AsyncClient(base_url=open_url) as api:
        for headers in (
            {"Origin": EVIL},
            {"Origin": "null"},  # a sandboxed frame, a file:// page
            {"Origin": "http://localhost.evil.example:2026"},
            {"Origin": "http://localhost:bad"},
            {"Sec-Fetch-Site": "cross-site"},  # no Origin (a browser always sends one on a cross-site POST)
        ):
            refused = await api.post(upload, files={"files": ("x.txt", b"planted")}, headers=headers)
            assert refused.status_code == 403, (headers, refused.text)
            assert "cross-site" in refused.json()["detail"]
        changed = await api.patch(f"/threads/{thread_id}", json={"metadata": {"a": 1}}, headers={"Origin": EVIL})
        deleted = await api.delete(f"/threads/{thread_id}", headers={"Origin": EVIL})
        assert (changed.status_code, deleted.status_code) == (403, 403)
        assert stored(store) == before
        # Reads are not writes: without CORS the page cannot read the answer, and the Host check stops rebinding.
        assert (await api.get(f"/threads/{thread_id}", headers={"Origin": EVIL})).status_code == 200
        # Local web apps on another port, the API's own origin, and clients that send no Origin keep working.
        for index, headers in enumerate(
            (
                {"Origin": "http://localhost:3000", "Sec-Fetch-Site": "same-site"},  # DeerFlow, Agent Chat UI
                {"Origin": "http://127.0.0.1:2026", "Sec-Fetch-Site": "cross-site"},  # 127.0.0.1 -> localhost
                {"Origin": "http://[::1]:5173"},
                {"Sec-Fetch-Site": "same-origin"},
                {},
            )
        ):
            sent = await api.post(upload, files={"files": (f"ok{index}.txt", b"fine")}, headers=headers)
            assert sent.status_code == 200, (headers, sent.text)
        listed = {f["filename"] for f in (await api.get(upload + "/list")).json()["files"]}
    assert listed == {f"ok{index}.txt" for index in range(5)}


async def test_with_a_token_the_host_and_origin_are_not_checked(
    client: Client, home: Path, temporal_address: str
) -> None:
    """Behind a proxy the Host is the public name; a cross-site page cannot send the token (no CORS is granted)."""
    digest = hashlib.sha256(TOKEN.encode()).hexdigest()
    tokens = [{"user_id": "alice", "token_sha256": digest}]
    config = make_config(home, temporal_address, api={"auth": "bearer", "tokens": tokens})
    async with serving_api(config, client) as url:
        headers = {"Authorization": f"Bearer {TOKEN}", "Host": "agents.example.com", "Origin": EVIL}
        async with httpx.AsyncClient(base_url=url, headers=headers) as api:
            thread_id = (await api.post("/threads", json={})).json()["thread_id"]
            sent = await api.post(f"/threads/{thread_id}/uploads", files={"files": ("a.txt", b"mine")})
            assert sent.status_code == 200, sent.text
            forwarded = await api.get(f"/threads/{thread_id}", headers={"X-Forwarded-For": "203.0.113.9"})
            assert forwarded.status_code == 200


def test_loopback_names() -> None:
    for host in ("localhost", "LocalHost", "127.0.0.1", "127.255.0.9", "::1", "[::1]", "::ffff:127.0.0.1"):
        assert is_loopback(host), host
    for host in ("localhost.evil.example", "0.0.0.0", "10.0.0.1", "::", "127.1", "evil.example", ""):
        assert not is_loopback(host), host
    assert host_of_authority("localhost:2024") == "localhost"
    assert host_of_authority("[::1]:2024") == "::1"
    assert host_of_authority("[::1]") == "::1"
    for malformed in ("[::1", "[::1]x", "::1", "localhost:port", "[::1]:"):
        assert host_of_authority(malformed) is None, malformed
