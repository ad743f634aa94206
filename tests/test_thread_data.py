"""ThreadData: id validation, thread_data paths, the run stamp on the user's message, lazy vs eager folders."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from temporalio.client import Client

from activities.thread_data import ThreadDataActivities
from middlewares.thread_data import ThreadDataConfig, ThreadDataMiddleware
from tests.support import StubRunContext, start_run, thread_state
from vocabulary.contracts import THREAD_ENSURE_DIRS, ThreadDirsInput, ThreadDirsResult, ThreadRef
from vocabulary.paths import InvalidIdError, thread_dir, user_data_dirs
from vocabulary.state import ThreadState
from workers.testing import answer, make_config, running_worker, settle, write_script

PATHS = {
    "workspace_path": "users/default/threads/thread-1/user-data/workspace",
    "uploads_path": "users/default/threads/thread-1/user-data/uploads",
    "outputs_path": "users/default/threads/thread-1/user-data/outputs",
}


@pytest.mark.parametrize("thread_id", ["", "../etc", "a/b", "a b", "x" * 65, "a.b", "ü", "t1\n"])
def test_thread_ids_that_are_no_safe_path_segment_are_refused(thread_id: str) -> None:
    with pytest.raises(InvalidIdError, match="invalid thread id"):
        user_data_dirs("default", thread_id)


@pytest.mark.parametrize("user_id", ["", "..", "a/b", "a:b", "x" * 129, "u\n"])
def test_user_ids_that_are_no_safe_path_segment_are_refused(user_id: str) -> None:
    with pytest.raises(InvalidIdError, match="invalid user id"):
        thread_dir(user_id, "thread-1")


def test_paths_are_user_scoped_and_relative_to_the_home() -> None:
    assert user_data_dirs("default", "thread-1") == PATHS
    assert thread_dir("alice_1", "T-" + "x" * 62) == f"users/alice_1/threads/T-{'x' * 62}"


async def test_lazy_before_agent_computes_paths_and_stamps_the_user_message_without_io() -> None:
    ctx = StubRunContext()  # no activities: any I/O would fail
    message = HumanMessage("hello", id="h1", additional_kwargs={"files": ["a.txt"]})
    update = await ThreadDataMiddleware().before_agent(ThreadState(messages=[message]), ctx)
    assert update is not None and update["thread_data"] == PATHS
    [stamped] = update["messages"]
    assert stamped.id == "h1" and stamped.content == "hello" and stamped.name == "user-input"
    assert stamped.additional_kwargs == {
        "files": ["a.txt"],
        "run_id": "run-1",
        "timestamp": StubRunContext.NOW.isoformat(),
    }
    assert message.name is None and "run_id" not in message.additional_kwargs  # the state's message is untouched
    assert ctx.calls == []


async def test_an_existing_name_is_kept_and_only_a_last_human_message_is_stamped() -> None:
    ctx = StubRunContext()
    named = HumanMessage("hi", id="h1", name="alice")
    update = await ThreadDataMiddleware().before_agent(ThreadState(messages=[named]), ctx)
    assert update is not None and update["messages"][0].name == "alice"
    after_ai = ThreadState(messages=[named, AIMessage("answer", id="a1")])
    assert await ThreadDataMiddleware().before_agent(after_ai, ctx) == {"thread_data": PATHS}
    assert await ThreadDataMiddleware().before_agent(ThreadState(), ctx) == {"thread_data": PATHS}


async def test_eager_before_agent_creates_the_folders_through_an_activity() -> None:
    async def ensure_dirs(arg: ThreadDirsInput) -> ThreadDirsResult:
        return ThreadDirsResult(list(PATHS.values()))

    ctx = StubRunContext(activities={THREAD_ENSURE_DIRS: ensure_dirs})
    await ThreadDataMiddleware(ThreadDataConfig(lazy_init=False)).before_agent(ThreadState(), ctx)
    assert [(name, arg) for name, arg, _ in ctx.calls] == [(THREAD_ENSURE_DIRS, ThreadDirsInput(ctx.thread))]


async def test_a_bad_thread_id_fails_before_anything_is_written() -> None:
    ctx = StubRunContext(thread_id="../../etc")
    with pytest.raises(InvalidIdError):
        await ThreadDataMiddleware(ThreadDataConfig(lazy_init=False)).before_agent(ThreadState(), ctx)
    assert ctx.calls == []


def test_ensure_dirs_activity_creates_world_writable_folders(tmp_path: Path) -> None:
    result = ThreadDataActivities(tmp_path).ensure_dirs(ThreadDirsInput(ThreadRef("default", "thread-1")))
    assert result.created == list(PATHS.values())
    for relative in PATHS.values():
        folder = tmp_path / relative
        assert folder.is_dir() and stat.S_IMODE(folder.stat().st_mode) == 0o777


@pytest.mark.parametrize("lazy", [True, False])
async def test_runs_stamp_the_message_and_create_folders_only_when_eager(
    client: Client, home: Path, temporal_address: str, lazy: bool
) -> None:
    config = make_config(home, temporal_address, run={"middlewares": {"thread_data": {"lazy_init": lazy}}})
    async with running_worker(client, config):
        handle = await start_run(client, config, "hi", model=write_script(home, [answer("hello")]))
        view = await settle(handle)
    assert view.status == "completed"
    state = thread_state(home, view.thread_id)
    prefix = f"users/default/threads/{view.thread_id}/user-data"
    assert state["thread_data"] == {f"{d}_path": f"{prefix}/{d}" for d in ("workspace", "uploads", "outputs")}
    # Later before_agent hooks may add hidden context around it (DynamicContext's ID swap): find it by text.
    [human] = [m for m in state["messages"] if m["type"] == "human" and m["content"] == "hi"]
    assert human["name"] == "user-input" and human["additional_kwargs"]["run_id"] == view.run_id
    assert human["additional_kwargs"]["timestamp"].endswith("+00:00")
    assert (home / "users/default/threads" / view.thread_id / "user-data").exists() is not lazy
