"""ReadBeforeWrite, pinned to DeerFlow's behaviour (``bytedance/deer-flow:
backend/tests/test_read_before_write_middleware.py``): the hook with a stub sandbox, the hash activity on a real
local sandbox, the chain wiring, and a real run where a write to an existing file is blocked until the model reads
it."""

from __future__ import annotations

import asyncio
import hashlib
import posixpath
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from temporalio.client import Client
from temporalio.testing import ActivityEnvironment

from activities.sandbox.local import LocalSandboxProvider
from activities.tools import ToolActivities
from middlewares._tool_meta import TOOL_META_KEY
from middlewares.base import Command, ToolCallRequest, ToolResult
from middlewares.chain import build_subagent_chain, describe, runtime_base
from middlewares.read_before_write import BLOCK_MESSAGE, READ_MARK_KEY, ReadBeforeWriteMiddleware
from middlewares.run_settings import RunSettings
from tests.support import StubRunContext, activity_error, start_run, thread_state
from vocabulary.contracts import SANDBOX_FILE_HASH, FileHashInput, FileHashResult, ThreadRef
from vocabulary.state import ThreadState
from workers.testing import answer, calls, make_config, running_worker, settle, tool_call, unique, write_script

PATH = "/mnt/user-data/outputs/report.md"


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _ctx(files: dict[str, Any]) -> StubRunContext:
    """A run context whose hash activity reads ``files`` (a value that is an exception: the read fails)."""

    async def file_hash(arg: FileHashInput) -> FileHashResult:
        value = files.get(posixpath.normpath(arg.path))
        if isinstance(value, Exception):
            raise activity_error(value, SANDBOX_FILE_HASH)  # the activity failed for good
        return FileHashResult(None if value is None else _sha(value), sandbox_id="sb-1")

    return StubRunContext(activities={SANDBOX_FILE_HASH: file_hash})


def _request(
    ctx: StubRunContext, name: str, args: dict[str, Any], messages: list[Any] | None = None
) -> ToolCallRequest:
    call = {"name": name, "args": {"description": "d", **args}, "id": "call-1"}
    return ToolCallRequest(call, None, ThreadState(messages=messages or []), ctx)


def _marked_read(path: str, content: str, call_id: str = "r1") -> ToolMessage:
    mark = {"path": path, "hash": _sha(content)}
    return ToolMessage(content[:20], tool_call_id=call_id, name="read_file", additional_kwargs={READ_MARK_KEY: mark})


def _returning(message: ToolMessage) -> Any:
    ran: list[ToolCallRequest] = []

    async def handler(request: ToolCallRequest) -> ToolResult:
        ran.append(request)
        return message

    handler.ran = ran  # type: ignore[attr-defined]
    return handler


async def _never(request: ToolCallRequest) -> ToolResult:
    raise AssertionError("a blocked write must not run")


def _ok(name: str = "write_file") -> ToolMessage:
    return ToolMessage("OK", tool_call_id="call-1", name=name)


# -- read marks ------------------------------------------------------------------------------------------


async def test_a_successful_read_stamps_the_hash_of_the_whole_file() -> None:
    ctx = _ctx({PATH: "line1\nline2\nline3"})
    request = _request(ctx, "read_file", {"path": PATH, "start_line": 3, "end_line": 3})
    result = await ReadBeforeWriteMiddleware().wrap_tool_call(
        request, _returning(ToolMessage("line3", tool_call_id="call-1"))
    )
    assert isinstance(result, ToolMessage)
    assert result.additional_kwargs[READ_MARK_KEY] == {"path": PATH, "hash": _sha("line1\nline2\nline3")}
    assert [(name, summary) for name, _, summary in ctx.calls] == [
        (SANDBOX_FILE_HASH, f"ReadBeforeWrite.wrap_tool_call · hash {PATH}")
    ]


@pytest.mark.parametrize(
    ("files", "status"),
    [
        ({PATH: "v1"}, "error"),  # the read failed: no mark
        ({PATH: RuntimeError("sandbox down")}, "success"),  # the hash failed: no mark
        ({}, "success"),  # the file is gone by the time it is hashed (or unreadable: DeerFlow's "Error:" reads)
    ],
)
async def test_no_mark_without_a_successful_read_and_hash(files: dict[str, Any], status: str) -> None:
    read = ToolMessage("v1", tool_call_id="call-1", name="read_file", status=status)  # type: ignore[arg-type]
    request = _request(_ctx(files), "read_file", {"path": PATH})
    result = await ReadBeforeWriteMiddleware().wrap_tool_call(request, _returning(read))
    assert isinstance(result, ToolMessage) and READ_MARK_KEY not in result.additional_kwargs


async def test_a_read_answered_with_a_command_gets_the_mark_on_its_tool_message() -> None:
    read = ToolMessage("v1", tool_call_id="call-1", name="read_file")
    request = _request(_ctx({PATH: "v1"}), "read_file", {"path": PATH})
    result = await ReadBeforeWriteMiddleware().wrap_tool_call(request, _returning(Command({"messages": [read]})))  # type: ignore[arg-type]
    assert isinstance(result, Command)
    assert result.update["messages"][0].additional_kwargs[READ_MARK_KEY]["hash"] == _sha("v1")


async def test_other_tools_pass_untouched_without_a_hash() -> None:
    ctx = _ctx({})
    sentinel = ToolMessage("ok", tool_call_id="call-1", name="bash")
    assert (
        await ReadBeforeWriteMiddleware().wrap_tool_call(_request(ctx, "bash", {"command": "ls"}), _returning(sentinel))
        is sentinel
    )
    assert ctx.calls == []


# -- the write gate --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("write_file", {"content": "v2"}),
        ("write_file", {"content": "more", "append": True}),
        ("str_replace", {"old_str": "v1", "new_str": "v2"}),
    ],
)
async def test_modifying_an_existing_file_without_a_read_is_blocked_with_deerflows_text(
    name: str, args: dict[str, Any]
) -> None:
    request = _request(_ctx({PATH: "v1"}), name, {"path": PATH, **args})
    result = await ReadBeforeWriteMiddleware().wrap_tool_call(request, _never)
    assert isinstance(result, ToolMessage)
    assert (result.status, result.tool_call_id, result.name) == ("error", "call-1", name)
    assert result.content == (
        f"Error: {name} blocked — {PATH} already exists and you have not read its current version. "
        "Any write invalidates earlier reads, so re-read before every modification. "
        "Call read_file on it (a ranged read of the relevant section is enough, e.g. the last ~30 lines "
        "before an append), check what is already there, then retry."
    )
    assert result.content == BLOCK_MESSAGE.format(tool_name=name, path=PATH)
    assert result.additional_kwargs[TOOL_META_KEY]["recoverable_by_model"] is True


@pytest.mark.parametrize(
    ("files", "messages"),
    [
        ({}, []),  # a new file: write_file creates it, str_replace reports its own error
        ({PATH: RuntimeError("sandbox hiccup")}, []),  # the gate cannot look: fail-open
        ({PATH: "v1"}, [HumanMessage("hi"), AIMessage(""), _marked_read(PATH, "v1")]),  # a fresh mark
        ({PATH: "v2"}, [_marked_read(PATH, "v1", "r1"), _marked_read(PATH, "v2", "r2")]),  # the newest mark wins
    ],
)
async def test_writes_that_pass_the_gate(files: dict[str, Any], messages: list[Any]) -> None:
    handler = _returning(_ok())
    request = _request(_ctx(files), "write_file", {"path": PATH, "content": "v3"}, messages)
    result = await ReadBeforeWriteMiddleware().wrap_tool_call(request, handler)
    assert isinstance(result, ToolMessage) and result.status != "error"
    assert len(handler.ran) == 1


async def test_paths_are_compared_normalised() -> None:
    handler = _returning(_ok())
    request = _request(
        _ctx({PATH: "v1"}),
        "write_file",
        {"path": "/mnt/user-data/outputs/../outputs/report.md", "content": "v2"},
        [_marked_read(PATH, "v1")],
    )
    result = await ReadBeforeWriteMiddleware().wrap_tool_call(request, handler)
    assert isinstance(result, ToolMessage) and result.status != "error"


@pytest.mark.parametrize(
    ("files", "messages"),
    [
        ({PATH: "v2"}, [_marked_read(PATH, "v1")]),  # the file changed since it was read
        ({PATH: "v1"}, [HumanMessage("Here is a summary of the conversation to date: ...", name="summary")]),
    ],
)
async def test_a_stale_or_summarised_away_mark_blocks(files: dict[str, Any], messages: list[Any]) -> None:
    request = _request(_ctx(files), "write_file", {"path": PATH, "content": "v3", "append": True}, messages)
    result = await ReadBeforeWriteMiddleware().wrap_tool_call(request, _never)
    assert isinstance(result, ToolMessage) and result.status == "error"


async def test_parallel_appends_on_one_mark_let_exactly_one_land() -> None:
    files = {PATH: "v1"}
    ctx, middleware = _ctx(files), ReadBeforeWriteMiddleware()
    marks = [_marked_read(PATH, "v1")]

    def append(suffix: str) -> Any:
        async def handler(request: ToolCallRequest) -> ToolResult:
            await asyncio.sleep(0)  # yield to the other call, as an activity would
            files[PATH] += suffix
            return _ok()

        return handler

    results = await asyncio.gather(
        *(
            middleware.wrap_tool_call(
                _request(ctx, "write_file", {"path": PATH, "content": s, "append": True}, marks), append(s)
            )
            for s in "AB"
        )
    )
    assert sorted(str(getattr(r, "status", "")) for r in results) == ["error", "success"]
    assert files[PATH] in ("v1A", "v1B")


async def test_a_read_is_marked_with_the_version_it_showed_while_a_write_waits() -> None:
    files = {PATH: "v1"}
    ctx, middleware = _ctx(files), ReadBeforeWriteMiddleware()

    async def read(request: ToolCallRequest) -> ToolResult:
        shown = files[PATH]
        await asyncio.sleep(0)
        return ToolMessage(shown, tool_call_id="r-call", name="read_file")

    async def write(request: ToolCallRequest) -> ToolResult:
        files[PATH] = "v2"
        return _ok()

    read_result, _ = await asyncio.gather(
        middleware.wrap_tool_call(_request(ctx, "read_file", {"path": PATH}), read),
        middleware.wrap_tool_call(
            _request(ctx, "write_file", {"path": PATH, "content": "v2"}, [_marked_read(PATH, "v1")]), write
        ),
    )
    assert isinstance(read_result, ToolMessage)
    assert read_result.additional_kwargs[READ_MARK_KEY]["hash"] == _sha(str(read_result.content))


async def test_a_run_from_before_the_patch_replays_without_the_gate() -> None:
    class Unpatched(StubRunContext):
        def patched(self, patch_id: str) -> bool:
            return False

    ctx = Unpatched()
    handler = _returning(_ok())
    result = await ReadBeforeWriteMiddleware().wrap_tool_call(
        _request(ctx, "write_file", {"path": PATH, "content": "x"}), handler
    )
    assert result.status != "error" and ctx.calls == []  # type: ignore[union-attr]


# -- wiring and the activity -------------------------------------------------------------------------------


def test_on_by_default_between_sandbox_audit_and_tool_error_handling_for_lead_and_subagents() -> None:
    names = describe(runtime_base(RunSettings(), include_uploads=True))
    assert names.index("SandboxAudit") < names.index("ReadBeforeWrite") < names.index("ToolErrorHandling")
    assert "ReadBeforeWrite" in describe(build_subagent_chain(RunSettings()))
    off = RunSettings.model_validate({"middlewares": {"read_before_write": {"enabled": False}}})
    assert "ReadBeforeWrite" not in describe(runtime_base(off, include_uploads=True))


async def test_the_hash_activity_reads_the_whole_file_in_the_threads_sandbox(tmp_path: Path) -> None:
    provider = LocalSandboxProvider(tmp_path)
    activities = ToolActivities(provider)
    thread = ThreadRef("default", unique("thread"))
    sandbox_id = provider.acquire(thread.user_id, thread.thread_id)
    sandbox = provider.get(sandbox_id)
    assert sandbox is not None
    sandbox.write_file(PATH, "a\r\nb\n")
    env = ActivityEnvironment()
    found = await env.run(activities.file_hash, FileHashInput(thread, PATH, sandbox_id=sandbox_id))
    assert found == FileHashResult(_sha("a\r\nb\n"), sandbox_id=sandbox_id, sandbox_needs_release=False)
    missing = await env.run(activities.file_hash, FileHashInput(thread, "/mnt/user-data/outputs/none.md", sandbox_id))
    assert missing == FileHashResult(None, sandbox_id=sandbox_id, sandbox_needs_release=False)


# -- a real run -------------------------------------------------------------------------------------------


async def test_a_run_must_read_an_existing_file_before_each_modification(
    client: Client, home: Path, temporal_address: str
) -> None:
    config = make_config(home, temporal_address)
    thread_id = unique("thread")
    script = [
        calls(tool_call("write_file", "w1", path=PATH, content="# Report\n")),  # new: allowed
        calls(tool_call("write_file", "w2", path=PATH, content="more\n", append=True)),  # not read: blocked
        calls(tool_call("read_file", "r1", path=PATH, start_line=1, end_line=1)),
        calls(tool_call("write_file", "w3", path=PATH, content="more\n", append=True)),  # read: allowed
        calls(tool_call("str_replace", "s1", path=PATH, old_str="more", new_str="less")),  # the write staled it
        answer("done"),
    ]
    async with running_worker(client, config):
        handle = await start_run(client, config, "write", model=write_script(home, script), thread_id=thread_id)
        view = await settle(handle)
    assert view.status == "completed"
    results = {m["tool_call_id"]: m for m in thread_state(home, thread_id)["messages"] if m.get("type") == "tool"}
    assert results["w1"]["content"] == "OK" and results["w3"]["content"] == "OK"
    assert results["w2"]["content"] == BLOCK_MESSAGE.format(tool_name="write_file", path=PATH)
    assert results["s1"]["content"] == BLOCK_MESSAGE.format(tool_name="str_replace", path=PATH)
    assert results["r1"]["additional_kwargs"][READ_MARK_KEY] == {"path": PATH, "hash": _sha("# Report\n")}
