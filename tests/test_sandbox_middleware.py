"""Sandbox: the lazily acquired id is persisted into thread state, eager mode acquires in before_agent, and
every run — completed, failed or cancelled — releases the sandbox exactly once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import ToolMessage
from temporalio.client import Client, WorkflowFailureError

from activities.sandbox.local import LocalSandboxProvider
from middlewares.base import Command, ToolCallRequest, ToolResult
from middlewares.sandbox import SandboxConfig, SandboxMiddleware
from tests.support import StubRunContext, start_run, thread_state
from tests.support.faults import wait_for_exit
from vocabulary.contracts import (
    SANDBOX_ACQUIRE,
    SANDBOX_RELEASE,
    SandboxAcquireInput,
    SandboxAcquireResult,
    SandboxReleaseInput,
)
from vocabulary.state import SandboxConflictError, ThreadState, apply_update
from workers.testing import answer, calls, make_config, running_worker, settle, tool_call, write_script
from workers.testing.history import history_events, scheduled_activities
from workers.testing.processes import wait_for_file

# -- unit: the hooks -------------------------------------------------------------------------------------


def _ctx() -> StubRunContext:
    async def acquire(arg: SandboxAcquireInput) -> SandboxAcquireResult:
        return SandboxAcquireResult(f"local:{arg.thread.user_id}:{arg.thread.thread_id}")

    async def release(arg: SandboxReleaseInput) -> None:
        return None

    return StubRunContext(activities={SANDBOX_ACQUIRE: acquire, SANDBOX_RELEASE: release})


def _with_sandbox(sandbox_id: str | None) -> ThreadState:
    return ThreadState(sandbox={"sandbox_id": sandbox_id} if sandbox_id else None)


def _tool(*, acquires: str | None, result: ToolResult | None = None):  # type: ignore[no-untyped-def]
    """A tool handler that, like the run's tool executor, reports the sandbox it acquired in the request's lease."""

    async def handler(request: ToolCallRequest) -> ToolResult:
        assert request.sandbox is not None, "Sandbox hands its lease down the request"
        request.sandbox.reported(acquires)
        return result or ToolMessage("ok", tool_call_id=request.call_id, name=request.name, id="m1")

    return handler


def _request(ctx: StubRunContext, state: ThreadState) -> ToolCallRequest:
    return ToolCallRequest({"name": "bash", "id": "c1", "args": {"command": "ls"}}, None, state, ctx)


async def test_lazy_mode_does_nothing_before_the_agent() -> None:
    ctx = _ctx()
    assert await SandboxMiddleware().before_agent(ThreadState(), ctx) is None
    assert ctx.calls == []


async def test_eager_mode_acquires_before_the_agent() -> None:
    ctx, middleware = _ctx(), SandboxMiddleware(SandboxConfig(lazy_init=False))
    update = await middleware.before_agent(ThreadState(), ctx)
    assert update == {"sandbox": {"sandbox_id": "local:default:thread-1"}}
    assert middleware.lease.sandbox_id == "local:default:thread-1"
    assert [(name, summary) for name, _, summary in ctx.calls] == [(SANDBOX_ACQUIRE, "Sandbox.before_agent · acquire")]


async def test_eager_mode_keeps_a_sandbox_the_thread_already_has() -> None:
    ctx = _ctx()
    assert await SandboxMiddleware(SandboxConfig(lazy_init=False)).before_agent(_with_sandbox("sb-1"), ctx) is None
    assert ctx.calls == []


async def test_a_lazily_acquired_id_is_written_to_state_with_the_message() -> None:
    ctx = _ctx()
    result = await SandboxMiddleware().wrap_tool_call(_request(ctx, ThreadState()), _tool(acquires="sb-1"))
    assert isinstance(result, Command)
    assert result.update["sandbox"] == {"sandbox_id": "sb-1"}
    [message] = result.update["messages"]
    assert isinstance(message, ToolMessage) and message.id == "m1"


async def test_nothing_is_written_when_the_state_already_had_the_id() -> None:
    ctx, middleware = _ctx(), SandboxMiddleware()
    middleware.lease.sandbox_id = "sb-1"
    result = await middleware.wrap_tool_call(_request(ctx, _with_sandbox("sb-1")), _tool(acquires="sb-1"))
    assert isinstance(result, ToolMessage)


async def test_nothing_is_written_when_no_sandbox_was_acquired() -> None:
    ctx = _ctx()
    result = await SandboxMiddleware().wrap_tool_call(_request(ctx, ThreadState()), _tool(acquires=None))
    assert isinstance(result, ToolMessage)


async def test_a_command_result_gets_the_id_merged_and_keeps_everything_else() -> None:
    ctx = _ctx()
    command = Command(
        update={"messages": [ToolMessage("q", tool_call_id="c1")], "artifacts": ["/a"]}, interrupt={"q": 1}
    )
    result = await SandboxMiddleware().wrap_tool_call(
        _request(ctx, ThreadState()), _tool(acquires="sb-1", result=command)
    )
    assert isinstance(result, Command)
    assert result.update["sandbox"] == {"sandbox_id": "sb-1"}
    assert result.update["artifacts"] == ["/a"] and result.update["messages"] == command.update["messages"]
    assert result.interrupt == {"q": 1}


def test_parallel_calls_writing_the_same_id_merge_and_different_ids_conflict() -> None:
    same = [{"sandbox": {"sandbox_id": "sb-1"}}, {"sandbox": {"sandbox_id": "sb-1"}}]
    state = ThreadState()
    for update in same:
        state = apply_update(state, update, new_id=lambda: "x")
    assert state.sandbox == {"sandbox_id": "sb-1"}
    with pytest.raises(SandboxConflictError):
        apply_update(state, {"sandbox": {"sandbox_id": "sb-2"}}, new_id=lambda: "x")


@pytest.mark.parametrize(
    ("state_id", "lease_id", "released"),
    [("sb-state", "sb-lease", "sb-state"), (None, "sb-lease", "sb-lease"), (None, None, None)],
)
async def test_after_agent_releases_the_state_id_else_the_lease_id(
    state_id: str | None, lease_id: str | None, released: str | None
) -> None:
    ctx, middleware = _ctx(), SandboxMiddleware()
    middleware.lease.sandbox_id = lease_id
    assert await middleware.after_agent(_with_sandbox(state_id), ctx) is None
    expected = [(SANDBOX_RELEASE, released, "Sandbox.after_agent · release")] if released else []
    assert [(name, arg.sandbox_id, summary) for name, arg, summary in ctx.calls] == expected


async def test_release_happens_once_per_run() -> None:
    ctx, middleware = _ctx(), SandboxMiddleware()
    await middleware.after_agent(_with_sandbox("sb-1"), ctx)
    await middleware.after_agent(_with_sandbox("sb-1"), ctx)
    assert len(ctx.calls) == 1


@pytest.mark.parametrize("unreported", [True, False])
async def test_without_an_id_after_agent_releases_by_thread_only_when_an_acquire_went_unreported(
    unreported: bool,
) -> None:
    """A tool activity cancelled (or failed) during the run's first sandbox call may have created the sandbox
    but never reported its id: the run marks that (``SandboxLease.unreported``) and after_agent releases by thread."""
    ctx, middleware = _ctx(), SandboxMiddleware()
    middleware.lease.unreported = unreported
    await middleware.after_agent(ThreadState(), ctx)
    expected = [(SANDBOX_RELEASE, None, "Sandbox.after_agent · release (by thread)")] if unreported else []
    assert [(name, arg.sandbox_id, summary) for name, arg, summary in ctx.calls] == expected


async def test_a_known_id_wins_over_an_unreported_acquire() -> None:
    ctx, middleware = _ctx(), SandboxMiddleware()
    middleware.lease.unreported = True
    await middleware.after_agent(_with_sandbox("sb-1"), ctx)
    assert [(name, arg.sandbox_id) for name, arg, _ in ctx.calls] == [(SANDBOX_RELEASE, "sb-1")]


async def test_no_release_when_this_runs_tools_said_the_provider_holds_nothing() -> None:
    """The local provider's sandbox is the thread's folders: its tool results say a release frees nothing, and
    the run skips the activity. An id this run's tools did not vouch for (the state's, another one) is released."""
    ctx, middleware = _ctx(), SandboxMiddleware()
    middleware.lease.reported("local:default:t1", needs_release=False)
    await middleware.after_agent(_with_sandbox("local:default:t1"), ctx)
    assert ctx.calls == []
    await middleware.after_agent(_with_sandbox("sb-other"), ctx)
    assert [(name, arg.sandbox_id) for name, arg, _ in ctx.calls] == [(SANDBOX_RELEASE, "sb-other")]


# -- on real runs ----------------------------------------------------------------------------------------


@pytest.fixture
def provider_holds_the_sandbox(monkeypatch: pytest.MonkeyPatch) -> None:
    """The release is a compensation for providers that hold a resource per sandbox (a Kubernetes pod:
    ``tests/test_kubernetes_sandbox.py`` and ``tests/test_faults.py`` release real ones on kmock). These runs check
    that every way a run ends takes that path, on the local provider told to say it holds its sandboxes."""
    monkeypatch.setattr(LocalSandboxProvider, "needs_release", True)


def _state(home: Path, thread_id: str) -> dict[str, Any]:
    return thread_state(home, thread_id)


def _releases(activities: list[tuple[str, str]]) -> list[str]:
    return [summary for name, summary in activities if name == "sandbox.release"]


async def _bash_run(client: Client, home: Path, temporal_address: str) -> list[tuple[str, str]]:
    """A completed run whose one tool call used the sandbox (its id persisted in state); its activities."""
    config = make_config(home, temporal_address)
    model = write_script(home, [calls(tool_call("bash", "b1", command="echo hi")), answer("done")])
    async with running_worker(client, config):
        handle = await start_run(client, config, "say hi", model=model)
        view = await settle(handle)
        activities = scheduled_activities(await history_events(handle))
    assert view.status == "completed"
    assert _state(home, view.thread_id)["sandbox"] == {"sandbox_id": f"local:default:{view.thread_id}"}
    return activities


async def test_a_run_on_the_local_provider_persists_the_id_and_releases_nothing(
    client: Client, home: Path, temporal_address: str
) -> None:
    assert _releases(await _bash_run(client, home, temporal_address)) == []


@pytest.mark.usefixtures("provider_holds_the_sandbox")
async def test_a_completed_run_persists_the_id_and_releases_it(
    client: Client, home: Path, temporal_address: str
) -> None:
    activities = await _bash_run(client, home, temporal_address)
    assert _releases(activities) == ["Sandbox.after_agent · release"]
    names = [name for name, _ in activities]
    assert names.index("sandbox.release") > max(i for i, n in enumerate(names) if n in ("tool.execute", "model.invoke"))
    assert "sandbox.acquire" not in names, "lazy mode acquires inside the tool activity"


@pytest.mark.usefixtures("provider_holds_the_sandbox")
async def test_a_failed_run_releases_too(client: Client, home: Path, temporal_address: str) -> None:
    extensions = ["tests.support.failing_middlewares:FailOnFinalAnswer"]
    config = make_config(home, temporal_address, run={"extensions": extensions})
    model = write_script(home, [calls(tool_call("bash", "b1", command="echo hi")), answer("done")])
    async with running_worker(client, config):
        handle = await start_run(client, config, "say hi", model=model)
        view = await settle(handle)
        with pytest.raises(WorkflowFailureError):
            await handle.result()
        activities = scheduled_activities(await history_events(handle))
    assert view.status == "error"
    assert _state(home, view.thread_id)["sandbox"] == {"sandbox_id": f"local:default:{view.thread_id}"}
    assert _releases(activities) == ["Sandbox.after_agent · release"]


@pytest.mark.usefixtures("provider_holds_the_sandbox")
async def test_a_cancelled_run_releases_too(client: Client, home: Path, temporal_address: str) -> None:
    config = make_config(home, temporal_address)
    ask = tool_call("ask_clarification", "ask1", question="Which colour?", clarification_type="approach_choice")
    model = write_script(home, [calls(tool_call("bash", "b1", command="echo hi")), calls(ask), answer("never")])
    async with running_worker(client, config):
        handle = await start_run(client, config, "paint", model=model)
        paused = await settle(handle)
        before_cancel = _releases(scheduled_activities(await history_events(handle)))
        await handle.cancel()
        with pytest.raises(WorkflowFailureError):
            await handle.result()
        activities = scheduled_activities(await history_events(handle))
    assert paused.status == "awaiting_input" and before_cancel == []
    assert _releases(activities) == ["Sandbox.after_agent · release"]
    assert _state(home, paused.thread_id)["sandbox"] == {"sandbox_id": f"local:default:{paused.thread_id}"}


async def test_a_run_cancelled_in_a_bash_call_stops_the_command(
    client: Client, home: Path, temporal_address: str
) -> None:
    """The tool activity runs bash in a thread, which cancelling the activity does not stop: the sandbox kills
    the command's process group, or the cancelled run would leave it running (until the bash timeout)."""
    config = make_config(home, temporal_address)
    pid_file = home / "command.pid"
    hang = tool_call("bash", "b1", command=f"echo $$ > {pid_file}; sleep 3600")
    async with running_worker(client, config):
        handle = await start_run(client, config, "hang", model=write_script(home, [calls(hang), answer("never")]))
        await wait_for_file(pid_file)
        await handle.cancel()
        with pytest.raises(WorkflowFailureError):
            await handle.result()
        await wait_for_exit(int(pid_file.read_text()))


async def test_eager_mode_acquires_before_the_agent_on_a_real_run(
    client: Client, home: Path, temporal_address: str
) -> None:
    config = make_config(home, temporal_address, run={"middlewares": {"sandbox": {"lazy_init": False}}})
    async with running_worker(client, config):
        handle = await start_run(client, config, "hi", model=write_script(home, [answer("hello")]))
        view = await settle(handle)
        activities = scheduled_activities(await history_events(handle))
    assert view.status == "completed"
    names = [name for name, _ in activities]
    assert ("sandbox.acquire", "Sandbox.before_agent · acquire") in activities
    assert names.index("sandbox.acquire") < names.index("model.invoke") < names.index("sandbox.release")
    assert _state(home, view.thread_id)["sandbox"] == {"sandbox_id": f"local:default:{view.thread_id}"}
    assert (home / "users/default/threads" / view.thread_id / "user-data/workspace").is_dir()


def test_the_config_rejects_unknown_keys() -> None:
    with pytest.raises(ValueError, match="lazy"):
        SandboxConfig.model_validate({"lazy": False})
