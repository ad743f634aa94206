"""Bad input to ``hartflow serve`` is a clear 4xx ``{"detail": one line}`` with nothing written, never a 500 or a
dropped connection (issue 24): JSON nested too deep or holding lone surrogates, malformed parts of a run
request, numeric ids ``int()`` refuses, upload names a filesystem cannot hold or that show as another name,
oversized replies, scripted models outside the scripts folder; and the races: many clients resuming one pause
(one wins, the others get 409), a cancel that must reach only its own run, and thread search whose cost
follows its page, not the number of threads.

A real uvicorn on loopback with a worker; requests are plain HTTP (httpx) so the bodies are exactly what a
hostile client would send. Every response is checked for the one-line JSON detail, and the server's error log
for tracebacks."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import Client

from activities.uploads import MAX_UPLOAD_NAME_BYTES
from tests.support import model_specs, worker_and_api
from vocabulary.workflow_ids import run_workflow_id
from workers.api import runs, status
from workers.config import HartflowConfig, open_object_store
from workers.testing import answer, calls, make_config, tool_call, unique, write_script

MAX_MESSAGE_CHARS = 2000


def user(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


def ask(options: list[str]) -> dict[str, Any]:
    args = {"question": "Which colour?", "clarification_type": "approach_choice", "options": options}
    return calls(tool_call("ask_clarification", unique("call"), **args))


@pytest.fixture
def scripts(tmp_path: Path) -> Path:
    folder = tmp_path / "scripts"
    folder.mkdir()
    return folder


@pytest.fixture
def api_config(home: Path, temporal_address: str, scripts: Path) -> HartflowConfig:
    return make_config(
        home, temporal_address, model=write_script(scripts, [answer("first answer")]),
        run={"max_message_chars": MAX_MESSAGE_CHARS},
        api=model_specs(scripts),
    )  # fmt: skip


class _ServerErrors(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def server_errors() -> Iterator[_ServerErrors]:
    """Errors the server logs (uvicorn logs every unhandled exception with its traceback): none is allowed."""
    handler = _ServerErrors()
    loggers = [logging.getLogger(name) for name in ("uvicorn.error", "hartflow.api", "fastapi")]
    for logger in loggers:
        logger.addHandler(handler)
    yield handler
    for logger in loggers:
        logger.removeHandler(handler)
    assert [r.getMessage() for r in handler.records] == []


@pytest.fixture
async def url(api_config: HartflowConfig, client: Client, server_errors: _ServerErrors) -> AsyncIterator[str]:
    async with worker_and_api(api_config, client) as base:
        yield base


@pytest.fixture
async def api(url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        yield http


def stored(config: HartflowConfig) -> set[str]:
    return {info.key for info in open_object_store(config).list("users/")}


def refused(response: httpx.Response, code: int = 422) -> str:
    """The one-line detail of a refusal with status ``code``."""
    assert response.status_code == code, (response.status_code, response.text)
    detail = response.json()["detail"]
    assert isinstance(detail, str) and detail and "\n" not in detail, detail
    return detail


def raw_json(text: str) -> dict[str, Any]:
    """A JSON body sent byte for byte (``json=`` would refuse to encode a lone surrogate client-side)."""
    return {"content": text.encode("utf-8"), "headers": {"content-type": "application/json"}}


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth):
        value = {"a": value}
    return value


def multipart(names: list[str]) -> dict[str, Any]:
    """Files under exactly these names (httpx would percent-encode control characters in a file name)."""
    boundary = b"hartflow-boundary"
    parts = [
        b"--"
        + boundary
        + b'\r\nContent-Disposition: form-data; name="files"; filename="'
        + name.encode()
        + b'"\r\nContent-Type: application/octet-stream\r\n\r\nx\r\n'
        for name in names
    ]
    content = b"".join(parts) + b"--" + boundary + b"--\r\n"
    return {"content": content, "headers": {"content-type": f"multipart/form-data; boundary={boundary.decode()}"}}


async def new_thread(api: httpx.AsyncClient) -> str:
    created = await api.post("/threads", json={})
    assert created.status_code == 200, created.text
    thread_id: str = created.json()["thread_id"]
    return thread_id


async def test_deep_json_is_refused_before_anything_is_written(
    api: httpx.AsyncClient, api_config: HartflowConfig
) -> None:
    thread_id = await new_thread(api)
    before = stored(api_config)
    deep = nested(300)
    for method, path, body in [
        ("POST", "/threads", {"metadata": deep}),
        ("PATCH", f"/threads/{thread_id}", {"metadata": deep}),
        ("POST", "/threads/search", {"metadata": deep}),
        ("POST", f"/threads/{thread_id}/runs", {"input": {"messages": [{"role": "user", "content": "hi"}], "x": deep}}),
        ("POST", f"/threads/{thread_id}/runs", {"input": user("hi"), "config": {"configurable": deep}}),
        ("POST", f"/threads/{thread_id}/runs", {"input": user("hi"), "context": deep}),
        ("POST", f"/threads/{thread_id}/runs", {"input": user("hi"), "metadata": deep}),
        ("POST", f"/threads/{thread_id}/runs/wait", {"command": {"resume": {"fields": deep}}}),
        ("POST", "/assistants/search", {"metadata": deep}),
    ]:
        detail = refused(await api.request(method, path, json=body))
        assert "nested deeper than" in detail, (path, detail)
    assert stored(api_config) == before
    searched = await api.post("/threads/search", json={})
    assert searched.status_code == 200 and thread_id in [t["thread_id"] for t in searched.json()]


async def test_lone_surrogates_are_refused_anywhere_in_json(api: httpx.AsyncClient, api_config: HartflowConfig) -> None:
    thread_id = await new_thread(api)
    before = stored(api_config)
    for path, body in [
        ("/threads", '{"thread_id": "\\ud800"}'),
        ("/threads", '{"metadata": {"k": "\\ud800"}}'),
        ("/threads", '{"metadata": {"\\udfff": 1}}'),
        ("/threads/search", '{"ids": ["\\ud800"]}'),
        (f"/threads/{thread_id}/runs", '{"input": {"messages": [{"role": "user", "content": "\\ud800"}]}}'),
        (f"/threads/{thread_id}/runs", '{"assistant_id": "\\ud800", "input": {"messages": []}}'),
        (f"/threads/{thread_id}/runs/stream", '{"stream_mode": ["\\ud800"]}'),
    ]:
        refused(await api.post(path, **raw_json(body)))
    assert stored(api_config) == before


async def test_malformed_run_parts_are_422(api: httpx.AsyncClient, api_config: HartflowConfig) -> None:
    thread_id = await new_thread(api)
    before = stored(api_config)
    for body, where in [
        ({"input": user("hi"), "config": {"configurable": 3}}, "configurable"),
        ({"input": user("hi"), "config": {"configurable": ["model_name"]}}, "configurable"),
        ({"input": {"messages": [{"role": "user", "content": "hi", "additional_kwargs": 3}]}}, "additional_kwargs"),
        (
            {
                "input": {
                    "messages": [{"role": "user", "content": "hi", "additional_kwargs": {"human_input_response": "x"}}]
                }
            },
            "human_input_response",
        ),
        ({"input": {"messages": "hi"}}, "messages"),
        ({"command": {"resume": {"fields": 3}}}, "resume.fields"),
        ({"command": {"resume": {"answer": 3}}}, "resume.answer"),
        ({"command": {"resume": ["a"]}}, "resume"),
    ]:
        assert where in refused(await api.post(f"/threads/{thread_id}/runs", json=body)), body
    assert stored(api_config) == before


async def test_ids_int_refuses_are_not_found_or_422(api: httpx.AsyncClient) -> None:
    thread_id = await new_thread(api)
    for checkpoint in ("v²", "v١", "v" + "1" * 5000, "v-1", "v"):
        refused(await api.get(f"/threads/{thread_id}/state/{checkpoint}"), 404)
    run = await api.post(f"/threads/{thread_id}/runs/wait", json={"input": user("hi")})
    assert run.status_code == 200, run.text
    run_id = run.headers["content-location"].rsplit("/", 1)[-1]
    for event_id in (b"1" * 5000, b"1-" + b"2" * 5000, "²".encode("latin-1"), "١-1".encode()):
        response = await api.get(f"/threads/{thread_id}/runs/{run_id}/stream", headers={"Last-Event-ID": event_id})
        assert "Last-Event-ID" in refused(response)


async def test_upload_names_a_filesystem_cannot_hold_or_that_hide_characters_are_422(
    api: httpx.AsyncClient, api_config: HartflowConfig
) -> None:
    thread_id = await new_thread(api)
    before = stored(api_config)
    longest = "é" * (MAX_UPLOAD_NAME_BYTES // 2)
    for name in (
        "a" * 213 + ".txt",
        "é" * 120,
        "bidi\u202etxt.exe",
        "iso\u2066late.txt",
        "tab\there.txt",
        "esc\x1b[31m.txt",
        "del\x7f.txt",
        "line\u2028sep.txt",
        "zero\u200bwidth.txt",
    ):
        response = await api.post(f"/threads/{thread_id}/uploads", **multipart(["fine.txt", name]))
        assert "invalid upload name" in refused(response), name
    assert stored(api_config) == before
    sent = await api.post(f"/threads/{thread_id}/uploads", files={"files": (longest, b"ok")})
    assert sent.status_code == 200, sent.text
    assert (await api.delete(f"/threads/{thread_id}/uploads/{longest}")).status_code == 200


async def test_scripted_models_only_from_the_scripts_folder(
    api: httpx.AsyncClient, api_config: HartflowConfig, scripts: Path, tmp_path: Path
) -> None:
    """A caller may not make the server read its files: the refusal is the same for a file that exists (with
    content or not valid as a script) and one that does not."""
    thread_id = await new_thread(api)
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps({"responses": [answer("read from outside")]}))
    (scripts / "link.json").symlink_to(outside)
    before = stored(api_config)
    details = set()
    for spec in (
        "scripted:/etc/passwd",
        "scripted:/etc/no-such-file",
        f"scripted:{outside}",
        "scripted:../outside.json",
        "scripted:link.json",
        f"scripted:{scripts}",
        "scripted:",
    ):
        response = await api.post(
            f"/threads/{thread_id}/runs", json={"input": user("hi"), "context": {"model_name": spec}}
        )
        details.add(refused(response))
    assert len(details) == 1 and "model_scripts_dir" in details.pop()
    assert stored(api_config) == before
    inside = write_script(scripts, [answer("from the scripts folder")], name="mine.json")
    for spec in (inside, "scripted:mine.json"):
        final = await api.post(
            f"/threads/{thread_id}/runs/wait", json={"input": user("hi"), "context": {"model_name": spec}}
        )
        assert final.json()["messages"][-1]["content"] == "from the scripts folder", final.text


async def _pause(api: httpx.AsyncClient, scripts: Path, after_reply: dict[str, Any]) -> str:
    thread_id = await new_thread(api)
    script = write_script(scripts, [ask(["red", "blue"]), after_reply])
    paused = await api.post(
        f"/threads/{thread_id}/runs/wait", json={"input": user("pick"), "context": {"model_name": script}}
    )
    assert paused.status_code == 200 and paused.json()["__interrupt__"], paused.text
    return thread_id


async def test_a_reply_is_bounded_like_a_message(api: httpx.AsyncClient, scripts: Path, client: Client) -> None:
    thread_id = await _pause(api, scripts, answer("done"))
    handle = client.get_workflow_handle(run_workflow_id("default", thread_id))
    events = len([e async for e in handle.fetch_history_events()])
    long = "x" * (MAX_MESSAGE_CHARS + 1)
    for body in (
        {"command": {"resume": long}},
        {"command": {"resume": {"answer": long}}},
        {"command": {"resume": {"fields": {"colour": long}}}},
        {"input": user(long)},
    ):
        assert "max_message_chars" in refused(await api.post(f"/threads/{thread_id}/runs", json=body)), body
    assert len([e async for e in handle.fetch_history_events()]) == events  # no update reached the run
    assert (await api.get(f"/threads/{thread_id}")).json()["status"] == "interrupted"
    final = await api.post(f"/threads/{thread_id}/runs/wait", json={"command": {"resume": "x" * MAX_MESSAGE_CHARS}})
    assert final.json()["messages"][-1]["content"] == "done", final.text


async def test_parallel_resumes_of_one_pause_one_wins_the_others_conflict(
    api: httpx.AsyncClient, scripts: Path, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    thread_id = await _pause(api, scripts, {"content": "resumed once", "wait_for_file": str(release)})
    answers = await asyncio.gather(
        *(api.post(f"/threads/{thread_id}/runs", json={"command": {"resume": f"answer {n}"}}) for n in range(50))
    )
    codes = sorted(response.status_code for response in answers)
    assert codes == [200] + [409] * 49, [(r.status_code, r.text) for r in answers if r.status_code not in (200, 409)]
    for response in answers:
        if response.status_code == 409:
            refused(response, 409)
    release.write_text("go")
    (winner,) = [r.json() for r in answers if r.status_code == 200]
    joined = await api.get(f"/threads/{thread_id}/runs/{winner['run_id']}/join")
    messages = joined.json()["messages"]
    assert messages[-1]["content"] == "resumed once"
    assert sum("answer " in str(m["content"]) for m in messages if m["type"] == "human") == 1
    late = await api.post(f"/threads/{thread_id}/runs", json={"command": {"resume": "too late"}})
    refused(late, 400)  # the thread is idle again: nothing to resume


async def test_a_cancel_reaches_only_its_own_run(
    api: httpx.AsyncClient, scripts: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run's status is read, then the cancel is sent: a newer run of the thread that started in between
    must not be the one cancelled (the workflow id names the thread, not the run)."""
    thread_id = await new_thread(api)
    first = await api.post(f"/threads/{thread_id}/runs/wait", json={"input": user("one")})
    old_run = first.headers["content-location"].rsplit("/", 1)[-1]
    release = tmp_path / "release"
    slow = write_script(scripts, [{"content": "second", "wait_for_file": str(release)}])
    newer = await api.post(f"/threads/{thread_id}/runs", json={"input": user("two"), "context": {"model_name": slow}})
    assert newer.status_code == 200, newer.text

    async def read_just_before_the_newer_run(*_: Any) -> str:
        return "running"  # what the old run's status read as, a moment before the newer run started

    monkeypatch.setattr(runs, "_status_of", read_just_before_the_newer_run)
    refused(await api.post(f"/threads/{thread_id}/runs/{old_run}/cancel"), 409)
    monkeypatch.undo()
    assert (await api.get(f"/threads/{thread_id}/runs/{newer.json()['run_id']}")).json()["status"] == "running"
    release.write_text("go")
    done = await api.get(f"/threads/{thread_id}/runs/{newer.json()['run_id']}/join")
    assert done.json()["messages"][-1]["content"] == "second"


async def test_search_builds_views_only_for_its_page(api: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch) -> None:
    tag = unique("tag")
    made = [(await api.post("/threads", json={"metadata": {"tag": tag}})).json()["thread_id"] for _ in range(6)]
    for _ in range(3):
        await api.post("/threads", json={"metadata": {"tag": "other"}})
    described: list[str] = []
    chain = status.chain

    async def counted(client: Client, thread: Any) -> status.Chain:
        described.append(thread.thread_id)
        return await chain(client, thread)

    monkeypatch.setattr(status, "chain", counted)
    page = (await api.post("/threads/search", json={"metadata": {"tag": tag}, "limit": 2, "offset": 1})).json()
    assert [t["thread_id"] for t in page] == made[::-1][1:3]  # newest first
    assert sorted(described) == sorted(made[::-1][1:3])
    described.clear()
    idle = (await api.post("/threads/search", json={"metadata": {"tag": tag}, "status": "idle", "limit": 2})).json()
    assert [t["thread_id"] for t in idle] == made[::-1][:2]
    assert len(described) == 2  # the status filter stops once the page is full
