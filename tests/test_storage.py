"""Thread state, memory, uploads and the thread lifecycle on both storage backends (the filesystem home and a
real S3 server, SeaweedFS): the conditional-write commit, runs whose worker stores on S3 while the CLI reads
back, ``hartflow threads list|delete``, bad storage config failing at worker start, and an S3 outage mid-run."""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from temporalio.client import Client, WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.memory_store import load_memory, save_memory
from activities.storage import ObjectStore, StorageConfigError
from activities.storage.payloads import encode_segment
from activities.thread_store import MIN_KEPT_VERSIONS, ObjectThreadStore, ThreadConflictError, ThreadStoreActivities
from tests.support import start_run
from tests.support.faults import completed_attempts
from vocabulary.contracts import RUN_CLOSE, ThreadCommitInput, ThreadRef
from vocabulary.messages import HumanMessage
from vocabulary.state import ThreadState
from vocabulary.workflow_ids import run_workflow_id
from workers.cli import run_command
from workers.config import HartflowConfig, open_object_store
from workers.devserver import free_port, port_answers
from workers.testing import (
    answer,
    ask_clarification,
    calls,
    make_config,
    running_worker,
    settle,
    tool_call,
    unique,
    write_script,
)
from workers.testing.s3 import S3Server
from workers.worker import thread_store


@pytest.fixture(params=["filesystem", "s3"])
def storage_backend(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The ``storage`` overrides for ``make_config`` of each backend (S3: this test's own bucket)."""
    if request.param == "s3":
        overrides: dict[str, Any] = request.getfixturevalue("s3_storage")
        return overrides
    return {"backend": "filesystem"}


@pytest.fixture
def objects(home: Path, storage_backend: dict[str, Any], temporal_address: str) -> ObjectStore:
    store = open_object_store(make_config(home, temporal_address, storage=storage_backend))
    store.check()
    return store


def _state(text: str) -> ThreadState:
    return ThreadState(messages=[HumanMessage(content=text, id=f"h-{text}")])


def _texts(store: ObjectThreadStore, thread: ThreadRef) -> list[str]:
    return [str(m.content) for m in store.load(thread).state.messages]


# -- the thread store ---------------------------------------------------------------------------------------


def test_commit_is_a_compare_and_swap_and_a_retried_commit_is_idempotent(objects: ObjectStore) -> None:
    store, thread = ObjectThreadStore(objects, kept_versions=MIN_KEPT_VERSIONS), ThreadRef("default", unique("t"))
    assert (store.load(thread).version, store.exists(thread)) == (0, False)

    assert store.commit(thread, _state("one"), expected_version=0, run_id="run-a") == 1
    # The same commit again (a worker that died before reporting it): recognised, not applied twice.
    assert store.commit(thread, _state("one"), expected_version=0, run_id="run-a") == 1
    with pytest.raises(ThreadConflictError, match="is at version 1, but this commit was based on version 0"):
        store.commit(thread, _state("other"), expected_version=0, run_id="run-b")
    assert store.commit(thread, _state("two"), expected_version=1, run_id="run-a") == 2
    assert store.exists(thread) and store.load(thread).version == 2 and _texts(store, thread) == ["two"]

    newest = 2 + MIN_KEPT_VERSIONS + 2
    for version in range(2, newest):
        store.commit(thread, _state(f"v{version + 1}"), expected_version=version, run_id="run-a")
    assert store.versions(thread) == list(range(newest - MIN_KEPT_VERSIONS + 1, newest + 1)), "old versions pruned"
    assert _texts(store, thread) == [f"v{newest}"]


def test_a_retried_commit_writes_nothing_and_a_different_commit_on_the_same_base_is_a_conflict(
    objects: ObjectStore,
) -> None:
    """Same run, same base version: only the same state is a retry. A different state is what a stray copy of the
    run (an orphaned coroutine acting for it) would write first; the run's real commit must not be taken for a
    retry of it, or the run would report success while its reply and answer were never stored."""
    store, thread = ObjectThreadStore(objects), ThreadRef("default", unique("t"))
    store.commit(thread, _state("base"), expected_version=0, run_id="run-a")
    assert store.commit(thread, _state("paused"), expected_version=1, run_id="run-a") == 2
    written = store.record(thread)

    assert store.commit(thread, _state("paused"), expected_version=1, run_id="run-a") == 2
    assert store.versions(thread) == [1, 2] and store.record(thread) == written, "the retry wrote nothing"

    with pytest.raises(ThreadConflictError, match="already committed by run run-a from version 1 with other content"):
        store.commit(thread, _state("answered"), expected_version=1, run_id="run-a")
    with pytest.raises(ApplicationError) as raised:
        ActivityEnvironment().run(
            ThreadStoreActivities(store).commit, ThreadCommitInput(thread, _state("answered"), 1, "run-a")
        )
    assert (raised.value.type, raised.value.non_retryable) == ("ThreadConflict", True)
    assert store.versions(thread) == [1, 2] and store.record(thread) == written


def test_a_version_stored_before_state_digests_is_still_recognised_by_its_state(objects: ObjectStore) -> None:
    store, thread = ObjectThreadStore(objects), ThreadRef("default", unique("t"))
    record = {
        "version": 1,
        "commit": {"run_id": "run-a", "from_version": 0},
        "state": _state("one").model_dump(mode="json"),
    }
    objects.put(f"{store.thread_prefix(thread)}state/v{1:010d}.json", json.dumps(record).encode())
    assert store.commit(thread, _state("one"), expected_version=0, run_id="run-a") == 1
    with pytest.raises(ThreadConflictError, match="with other content"):
        store.commit(thread, _state("two"), expected_version=0, run_id="run-a")
    assert store.versions(thread) == [1] and _texts(store, thread) == ["one"]


def test_the_conflict_is_a_non_retryable_activity_error_and_storage_is_not_touched(objects: ObjectStore) -> None:
    store, thread = ObjectThreadStore(objects), ThreadRef("default", unique("t"))
    store.commit(thread, _state("winner"), expected_version=0, run_id="run-a")
    activities = ThreadStoreActivities(store)
    with pytest.raises(ApplicationError) as raised:
        ActivityEnvironment().run(activities.commit, ThreadCommitInput(thread, _state("loser"), 0, "run-b"))
    assert (raised.value.type, raised.value.non_retryable) == ("ThreadConflict", True)
    assert _texts(store, thread) == ["winner"] and store.versions(thread) == [1]


def test_racing_committers_one_wins_the_others_get_a_conflict_and_nothing_is_lost(objects: ObjectStore) -> None:
    store, thread = ObjectThreadStore(objects), ThreadRef("default", unique("t"))
    store.commit(thread, _state("base"), expected_version=0, run_id="run-0")
    racers = 8
    start = threading.Barrier(racers)
    results: dict[int, int | str] = {}

    def commit(index: int) -> None:
        start.wait()
        try:
            results[index] = store.commit(thread, _state(f"racer-{index}"), expected_version=1, run_id=f"run-{index}")
        except ThreadConflictError as exc:
            results[index] = str(exc)

    workers = [threading.Thread(target=commit, args=(i,)) for i in range(racers)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    winners = [i for i, result in results.items() if result == 2]
    assert len(winners) == 1, results
    assert all("another run committed in between" in str(r) for i, r in results.items() if i not in winners)
    assert store.load(thread).version == 2 and _texts(store, thread) == [f"racer-{winners[0]}"]
    # The winner's base is still there: the loser can reload and commit on top of it.
    assert store.commit(thread, _state("after"), expected_version=2, run_id="run-late") == 3


def test_writes_into_a_folder_a_concurrent_delete_empties_are_never_lost(objects: ObjectStore) -> None:
    """Found by ``bench.history_size``: a live-token batch written while a later call deleted the last batch of
    an earlier one failed with ENOENT on the filesystem store (the delete prunes the folders it leaves empty, and
    removed the one the write had just made). Object storage has no folders: a put never depends on a delete."""
    folder = f"race/{unique('f')}"
    rounds = 300
    start = threading.Barrier(2)
    failures: list[BaseException] = []

    def churn(name: str) -> None:
        start.wait()
        for index in range(rounds):
            key = f"{folder}/sub/{name}-{index}"
            try:
                objects.put(key, b"x")
                if objects.get(key) != b"x":
                    failures.append(AssertionError(f"{key} was lost"))
                objects.delete(key)
            except Exception as exc:
                failures.append(exc)

    threads = [threading.Thread(target=churn, args=(name,)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert list(objects.list(folder)) == []


def test_a_thread_committed_before_versioned_state_still_loads_and_moves_over(objects: ObjectStore) -> None:
    store, thread = ObjectThreadStore(objects), ThreadRef("default", unique("t"))
    legacy = {"version": 4, "commit": {"run_id": "old", "from_version": 3}, "state": _state("old").model_dump()}
    legacy_key = f"{store.thread_prefix(thread)}state.json"
    objects.put(legacy_key, json.dumps(legacy).encode())
    assert store.exists(thread) and store.load(thread).version == 4 and _texts(store, thread) == ["old"]
    with pytest.raises(ThreadConflictError):
        store.commit(thread, _state("stale"), expected_version=3, run_id="run-x")
    assert store.commit(thread, _state("new"), expected_version=4, run_id="run-x") == 5
    assert _texts(store, thread) == ["new"] and objects.get(legacy_key) is None


def test_memory_round_trips_on_the_object_store(objects: ObjectStore) -> None:
    user = unique("user")
    save_memory(objects, user, {"version": "1.0", "facts": [{"content": "likes tea"}]})
    assert objects.exists(f"users/{user}/memory.json")
    assert load_memory(objects, user)["facts"] == [{"content": "likes tea"}]


# -- runs and the CLI ---------------------------------------------------------------------------------------


def _config_file(directory: Path, config: HartflowConfig, storage: dict[str, Any]) -> str:
    """A hartflow.yaml for CLI commands that see what ``config``'s worker sees."""
    path = directory / f"{unique('hartflow')}.yaml"
    data = {
        "storage": {"home": str(config.home), **storage},
        "temporal": {"address": config.temporal.address, "task_queue": config.temporal.task_queue},
    }
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return str(path)


async def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    # A thread of its own: async commands run their own event loop (asyncio.run), as in a real process.
    code = await asyncio.to_thread(run_command, list(args))
    out, err = capsys.readouterr()
    return code, out, err


# A question without options, under a fresh call id each time.
MISSING_INFO: dict[str, Any] = {"call_id": None, "clarification_type": "missing_info"}


def _files_under(path: Path) -> list[Path]:
    return [p for p in path.rglob("*") if p.is_file()] if path.exists() else []


async def test_a_run_on_an_s3_worker_is_read_back_by_the_cli_from_s3(
    client: Client, home: Path, temporal_address: str, s3_storage: dict[str, Any], tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    config = make_config(home, temporal_address, storage=s3_storage)
    upload = tmp_path / "brief.txt"
    upload.write_text("the brief")
    cli_config = _config_file(tmp_path, config, s3_storage)
    thread = unique("thread")
    code, out, err = await _cli(capsys, "upload", thread, str(upload), "--json", "--config", cli_config)
    assert code == 0, err
    model = write_script(tmp_path, [answer("All done.")])
    async with running_worker(client, config):
        view = await settle(await start_run(client, config, "hello", model=model, thread_id=thread))
    assert view.status == "completed"

    code, out, err = await _cli(capsys, "state", thread, "--json", "--config", cli_config)
    assert code == 0, err
    state = json.loads(out)
    assert state["version"] == 1
    assert [(m["type"], m["text"]) for m in state["messages"]][-1] == ("ai", "All done.")
    objects = open_object_store(config)
    assert objects.get(f"users/default/threads/{thread}/user-data/uploads/brief.txt") == b"the brief"
    assert [i.key.rsplit("/", 1)[1] for i in objects.list(f"users/default/threads/{thread}/state/")] == [
        "v0000000001.json"
    ]
    assert _files_under(home / "users") == [], "with the s3 backend nothing is stored under the home"


async def test_threads_list_and_delete_on_both_backends_refusing_a_paused_run(
    client: Client, home: Path, temporal_address: str, storage_backend: dict[str, Any], tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    config = make_config(home, temporal_address, storage=storage_backend)
    cli_config = _config_file(tmp_path, config, storage_backend)
    done, paused = unique("done"), unique("paused")
    (tmp_path / "notes.txt").write_text("notes")
    assert (await _cli(capsys, "upload", done, str(tmp_path / "notes.txt"), "--config", cli_config))[0] == 0
    objects = open_object_store(config)
    # The claim-check payloads of each thread's runs (layout of activities/storage/payloads.py); a thread whose
    # id merely starts with the deleted one's keeps its own.
    payloads = "payloads/v0/ns/default/wt/HartflowRun/wi"
    done_runs = f"{payloads}/{encode_segment(run_workflow_id('default', done))}/ri"
    other_runs = f"{payloads}/{encode_segment(run_workflow_id('default', done + 'x'))}/ri"
    objects.put(f"{done_runs}/r1/d/sha256/aa", b"blob")  # a run Temporal no longer knows: still this thread's
    objects.put(f"{other_runs}/r2/d/sha256/bb", b"other thread's blob")
    async with running_worker(client, config):
        finished = await settle(
            await start_run(client, config, "hi", model=write_script(tmp_path, [answer("Hello!")]), thread_id=done)
        )
        waiting = await settle(
            await start_run(
                client,
                config,
                "deploy",
                model=write_script(tmp_path, [ask_clarification("Where?", **MISSING_INFO)]),
                thread_id=paused,
            )
        )
        assert (finished.status, waiting.status) == ("completed", "awaiting_input")

        code, out, err = await _cli(capsys, "threads", "list", "--json", "--config", cli_config)
        assert code == 0, err
        rows = {row["thread_id"]: row for row in json.loads(out)["threads"]}
        assert set(rows) == {done, paused}
        committed = len(ObjectThreadStore(objects).load(ThreadRef("default", done)).state.messages)
        assert (rows[done]["run_status"], rows[done]["version"], rows[done]["messages"]) == ("completed", 1, committed)
        assert rows[done]["updated"] and rows[paused]["run_status"] == "awaiting_input"

        code, out, err = await _cli(capsys, "threads", "delete", paused, "--yes", "--config", cli_config)
        assert code == 2 and f"thread {paused} is busy" in err and "awaiting_input" in err
        assert ObjectThreadStore(objects).exists(ThreadRef("default", paused)), "a refused delete removes nothing"
        code, out, err = await _cli(capsys, "threads", "delete", done, "--config", cli_config)
        assert code == 2 and "--yes" in err

        code, out, err = await _cli(capsys, "threads", "delete", done, "--yes", "--json", "--config", cli_config)
        assert code == 0, err
        deleted = json.loads(out)
        assert deleted["prefixes"][f"users/default/threads/{done}/"] >= 2  # the state version and the upload
        assert deleted["prefixes"][f"{done_runs}/r1/"] == 1
        assert list(objects.list(f"users/default/threads/{done}/")) == []
        assert objects.get(f"{other_runs}/r2/d/sha256/bb") == b"other thread's blob"
        assert not (home / "users/default/threads" / done).exists()

        code, out, err = await _cli(capsys, "state", done, "--config", cli_config)
        assert code == 2 and f"unknown thread {done}" in err
        code, out, err = await _cli(capsys, "threads", "delete", done, "--yes", "--config", cli_config)
        assert code == 2 and f"unknown thread {done}" in err
        code, out, err = await _cli(capsys, "threads", "list", "--json", "--config", cli_config)
        assert [row["thread_id"] for row in json.loads(out)["threads"]] == [paused]
        code, out, err = await _cli(capsys, "threads", "delete", "../x", "--yes", "--config", cli_config)
        assert code == 2 and "invalid thread id" in err
        await client.get_workflow_handle(run_workflow_id("default", paused)).cancel()


@pytest.mark.parametrize(
    ("broken", "setting"),
    [
        ({"endpoint_url": "http://127.0.0.1:1"}, "storage.s3.endpoint_url"),
        ({"bucket": "no-such-bucket"}, "storage.s3.bucket"),
        ({"secret_access_key": "not-the-secret"}, "storage.s3.secret_access_key"),
    ],
)
async def test_a_bad_storage_config_stops_the_worker_at_start_naming_the_setting(
    home: Path, temporal_address: str, s3_storage: dict[str, Any], tmp_path: Path,
    capsys: pytest.CaptureFixture[str], broken: dict[str, str], setting: str,
) -> None:  # fmt: skip
    storage = {**s3_storage, "s3": {**s3_storage["s3"], **broken}}
    cli_config = _config_file(tmp_path, make_config(home, temporal_address, storage=storage), storage)
    code, _, err = await _cli(capsys, "worker", "--config", cli_config)
    assert code == 2
    [line] = err.strip().splitlines()
    assert line.startswith(f"hartflow: error: {setting}"), line


def test_the_embedded_stack_with_bad_storage_exits_2_and_leaves_no_server_running(
    home: Path, s3_storage: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    for name in list(os.environ):
        if name.startswith("HARTFLOW_") or name == "TEMPORAL_ADDRESS":
            monkeypatch.delenv(name)
    port = free_port()
    storage = {**s3_storage, "s3": {**s3_storage["s3"], "bucket": "no-such-bucket"}}
    path = tmp_path / "hartflow.yaml"
    temporal = {"embedded_port": port, "embedded_ui_port": free_port()}
    data = {"storage": {"home": str(home), **storage}, "temporal": temporal}
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    model = write_script(tmp_path, [answer("never")])
    code = run_command(["run", "hi", "--model", model, "--config", str(path)])
    err = capsys.readouterr().err
    assert code == 2 and "hartflow: error: storage.s3.bucket" in err, err
    assert (home / "temporal.db").exists(), "the embedded server had started"
    assert not port_answers("127.0.0.1", port), "the embedded server was stopped"


async def _until(condition: Callable[[], Awaitable[bool]], timeout: float = 120) -> None:
    async def poll() -> None:
        while not await condition():
            await asyncio.sleep(0.2)

    await asyncio.wait_for(poll(), timeout)


async def _commit_attempt(handle: WorkflowHandle[Any, Any]) -> int:
    """The attempt the run's pending final commit (``run.close``: commit, then archive) is on (0: none pending)."""
    description = await handle.describe()
    for pending in description.raw_description.pending_activities:
        if pending.activity_type.name == RUN_CLOSE.name:
            return int(pending.attempt)
    return 0


async def test_s3_down_in_the_middle_of_a_run_the_run_waits_and_completes_with_its_state_intact(
    client: Client, home: Path, temporal_address: str, s3_server: S3Server, s3_storage: dict[str, Any],
    tmp_path: Path,
) -> None:  # fmt: skip
    config = make_config(home, temporal_address, storage=s3_storage)
    thread = unique("outage")
    ref = ThreadRef("default", thread)
    objects = open_object_store(config)
    gate = tmp_path / "answer-now"
    final = {**answer("Deploying to eu-west."), "wait_for_file": str(gate)}
    model = write_script(tmp_path, [ask_clarification("Which region?", **MISSING_INFO), final])
    manifests = f"users/default/threads/{thread}/blobs/manifest/"

    async def manifest_count() -> int:
        return len(await asyncio.to_thread(lambda: list(objects.list(manifests))))

    async with running_worker(client, config):
        handle = await start_run(client, config, "deploy it", model=model, thread_id=thread)
        assert (await settle(handle)).status == "awaiting_input"
        assert thread_store(config).load(ref).version == 1
        requests_so_far = await manifest_count()

        await handle.signal("clarification_reply", "eu-west")
        # The second model call has stored its request's messages (its transcript manifest) and now waits for the
        # gate: from here on, only the final commit needs storage.
        await _until(lambda: _at_least(manifest_count, requests_so_far + 1))
        async with s3_server.down():
            gate.touch()
            # The commit fails and is retried with backoff (1 s, 2 s, 4 s, 8 s): its fifth attempt starts ~15 s
            # after the first, so S3 stays down for longer than that.
            await _until(lambda: _at_least(lambda: _commit_attempt(handle), 5))
            assert _unreachable(config)
        view = await settle(handle)
    assert view.status == "completed" and view.final_message == "Deploying to eu-west."
    snapshot = thread_store(config).load(ref)
    assert snapshot.version == 2
    texts = [(m.type, str(m.content)) for m in snapshot.state.messages]
    assert ("human", "deploy it") in texts and texts[-1] == ("ai", "Deploying to eu-west.")
    assert any("eu-west" in text for kind, text in texts if kind == "human"), texts


def _unreachable(config: HartflowConfig) -> bool:
    """The storage of ``config`` really is down (so the commit retries are what the run waits on)."""
    try:
        open_object_store(config).check()
    except StorageConfigError:
        return True
    return False


async def _at_least(value: Callable[[], Awaitable[int]], minimum: int) -> bool:
    return await value() >= minimum


async def _logged(caplog: pytest.LogCaptureFixture, text: str) -> bool:
    return any(text in record.getMessage() for record in caplog.records)


async def test_s3_down_across_a_tool_call_and_the_next_model_call_waits_without_rerunning_or_spending_retries(
    client: Client, home: Path, temporal_address: str, s3_server: S3Server, s3_storage: dict[str, Any],
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    """Once a tool has run, its file changes wait for storage (failing would run the tool again); the next model
    call waits for its messages' blobs (failing would spend the model's retry budget)."""
    caplog.set_level("WARNING", logger="activities.storage")
    config = make_config(home, temporal_address, storage=s3_storage)
    thread = unique("outage-tool")
    gate, runs = tmp_path / "tool-may-finish", tmp_path / "tool-runs"
    command = (
        f"echo run >> {runs}; while [ ! -f {gate} ]; do sleep 0.05; done; echo made > /mnt/user-data/outputs/made.txt"
    )
    model = write_script(tmp_path, [calls(tool_call("bash", command=command)), answer("Made it.")])
    async with running_worker(client, config):
        handle = await start_run(client, config, "make a file", model=model, thread_id=thread)
        await _until(lambda: asyncio.to_thread(runs.exists))
        async with s3_server.down():
            gate.touch()
            await _until(lambda: _logged(caplog, "storing the tool's file changes: storage unavailable"))
            # The gate stays open: the tool is finished; what waits now is its push (and then the model call).
        view = await settle(handle)
    assert view.status == "completed" and view.final_message == "Made it."
    assert runs.read_text().splitlines() == ["run"]  # the tool ran exactly once
    events = [e async for e in handle.fetch_history_events()]
    attempts = [attempt for _, attempt, _ in completed_attempts(events)]
    assert attempts and set(attempts) == {1}, attempts  # nothing was retried: the outage was waited out in place
    objects = open_object_store(config)
    assert objects.get(f"users/default/threads/{thread}/user-data/outputs/made.txt") == b"made\n"


async def test_s3_down_around_a_model_call_the_call_waits_for_its_messages_instead_of_failing(
    client: Client, home: Path, temporal_address: str, s3_server: S3Server, s3_storage: dict[str, Any],
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    """The request's messages are read before the model call (from this worker's cache, here) and stored beside it:
    whichever meets the outage waits it out, and the answer comes once they are stored."""
    caplog.set_level("WARNING", logger="activities.storage")
    config = make_config(home, temporal_address, storage=s3_storage)
    thread = unique("outage-model")
    script = [ask_clarification("Which region?", **MISSING_INFO), answer("Deploying to eu-west.")]
    model = write_script(tmp_path, script)
    async with running_worker(client, config):
        handle = await start_run(client, config, "deploy it", model=model, thread_id=thread)
        assert (await settle(handle)).status == "awaiting_input"
        async with s3_server.down():
            await handle.signal("clarification_reply", "eu-west")
            await _until(lambda: _logged(caplog, "the request's messages: storage unavailable"))
        view = await settle(handle)
    assert view.status == "completed" and view.final_message == "Deploying to eu-west."
    events = [e async for e in handle.fetch_history_events()]
    # No model attempt was spent on the outage.
    assert [attempt for _, attempt, _ in completed_attempts(events, "model.invoke")] == [1, 1]


async def test_s3_down_while_a_cold_worker_replays_a_claim_checked_input_the_task_waits_instead_of_failing(
    client: Client, home: Path, temporal_address: str, s3_server: S3Server, s3_storage: dict[str, Any],
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    """A workflow task that must read a claim-checked payload while S3 is down waits for it: failing would log the
    SDK's "Failed handling activation" traceback and be retried by the server anyway."""
    caplog.set_level("WARNING", logger="activities.storage")
    config = make_config(home, temporal_address, storage={**s3_storage, "payload_threshold_bytes": 1024})
    prompt = "deploy it: " + "p" * 5000  # the run's input is claim-checked
    script = [ask_clarification("Which region?", **MISSING_INFO), answer("Deploying to eu-west.")]
    model = write_script(tmp_path, script)
    async with running_worker(client, config):
        handle = await start_run(client, config, prompt, model=model, thread_id=unique("outage-replay"))
        assert (await settle(handle)).status == "awaiting_input"
    async with running_worker(client, config):  # cold: the reply's task replays the history, input included
        async with s3_server.down():
            await handle.signal("clarification_reply", "eu-west")
            await _until(lambda: _logged(caplog, "reading payload"))
        view = await settle(handle)
    assert view.status == "completed" and view.final_message == "Deploying to eu-west."
    failed = [r.getMessage() for r in caplog.records if "Failed handling activation" in r.getMessage()]
    assert not failed, failed
