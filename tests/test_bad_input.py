"""Bad input is refused with exit code 2, one clear line on stderr, and nothing written (issue #9).

CLI cases go through the real entry point (``run_command``) against the session's dev server, with a real
``hartflow worker`` process serving this module's task queue. "Nothing written" is checked where it would
show: the storage home (thread folders, uploads, state), the server (no workflow for the thread) and, for
refused replies, the run's history (not one event more). Client-side cases (signals, updates, workflow
input) use the Temporal client directly, as a UI or another service would.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError, WorkflowUpdateFailedError
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from activities.uploads import UploadError, validate_upload_name
from tests.support import start_run, thread_state
from vocabulary.contracts import MODEL_INVOKE
from vocabulary.workflow_ids import run_workflow_id
from workers.cli import run_command
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
from workers.testing.history import history_events, scheduled_activities
from workers.testing.processes import env_worker_process
from workflows.run import ReplyInput, RunInput, RunView, RunWorkflow

USER = "default"  # the CLI's user: the config's user_id, unset

# -- fixtures: one worker process for the module, a clean CLI environment per test ----------------------------


@dataclass(frozen=True)
class CliWorker:
    home: Path
    task_queue: str
    address: str


@pytest.fixture(scope="module")
def cli_worker(tmp_path_factory: pytest.TempPathFactory, temporal_address: str) -> Iterator[CliWorker]:
    """A ``hartflow worker`` process for this module: starting one per test would dominate its run time."""
    home = tmp_path_factory.mktemp("bad-input") / "home"
    home.mkdir()
    worker = CliWorker(home, unique("bad-input"), temporal_address)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HARTFLOW_", "TEMPORAL_"))}
    with env_worker_process(env | _cli_settings(worker), home.parent, home.parent / "worker.log"):
        yield worker


def _cli_settings(worker: CliWorker) -> dict[str, str]:
    return {
        "TEMPORAL_ADDRESS": worker.address,
        "HARTFLOW_STORAGE__HOME": str(worker.home),
        "HARTFLOW_TEMPORAL__TASK_QUEUE": worker.task_queue,
        "HARTFLOW_SANDBOX__ALLOW_HOST_BASH": "true",
        "HARTFLOW_RUN__MODEL_CALL__HEARTBEAT_SECONDS": "2",
        # No memory extraction after the module's runs: it would write to the home while later tests watch it.
        "HARTFLOW_RUN__MIDDLEWARES__MEMORY__ENABLED": "false",
    }


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, cli_worker: CliWorker, tmp_path: Path) -> CliWorker:
    """The CLI's environment for one test: this module's worker, and a working directory without a config."""
    for name in list(os.environ):
        if name.startswith(("HARTFLOW_", "TEMPORAL_")):
            monkeypatch.delenv(name)
    for name, value in _cli_settings(cli_worker).items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)
    return cli_worker


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = run_command(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _refused(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """Run a command that must be refused; returns its one-line error."""
    code, out, err = _run(capsys, *args, "--json")
    assert code == 2, (out, err)
    assert err.startswith("hartflow: error: ") and err.count("\n") == 1, err
    assert json.loads(out)["error"] == err.removeprefix("hartflow: error: ").rstrip("\n")
    return err


def _files(home: Path) -> dict[str, tuple[int, int]]:
    """Every file under the storage home, with its size and modification time."""
    return {
        str(path.relative_to(home)): (path.stat().st_size, path.stat().st_mtime_ns)
        for path in home.rglob("*")
        if path.is_file()
    }


def _threads(home: Path) -> set[str]:
    return {str(path.relative_to(home)) for path in home.glob("users/*/threads/*")}


def _workflow_exists(worker: CliWorker, thread_id: str) -> bool:
    async def exists(client: Client, workflow_id: str) -> bool:
        try:
            await client.get_workflow_handle(workflow_id).describe()
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                return False
            raise
        return True

    async def any_run() -> bool:
        client = await Client.connect(worker.address)
        # Built by hand, not by run_workflow_id (which refuses these ids): no run may exist under either id.
        per_user, legacy = f"hartflow:{USER}:{thread_id}", f"hartflow-{thread_id}"
        return await exists(client, per_user) or await exists(client, legacy)

    return asyncio.run(any_run())


def _history(worker: CliWorker, thread_id: str) -> list[Any]:
    async def fetch() -> list[Any]:
        client = await Client.connect(worker.address)
        return await history_events(client.get_workflow_handle(run_workflow_id(USER, thread_id)))

    return asyncio.run(fetch())


def _result(worker: CliWorker, thread_id: str) -> RunView:
    async def wait() -> RunView:
        client = await Client.connect(worker.address, data_converter=pydantic_data_converter)
        return await client.get_workflow_handle(run_workflow_id(USER, thread_id), result_type=RunView).result()

    return asyncio.run(wait())


def _assert_nothing_started(cli: CliWorker, thread_id: str, threads_before: set[str]) -> None:
    assert _threads(cli.home) == threads_before, "no thread folder was created"
    assert not _workflow_exists(cli, thread_id), "no run was started"


# -- config, script and model spec ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("yaml_text", "problem"),
    [
        ("run:\n  recursion_limit: [1\n", "is not valid YAML at line 3"),
        ("- just\n- a list\n", "must be a mapping of keys to values"),
        ("run:\n  colour: blue\n", "unknown key 'run.colour'"),
        ("run:\n  recursion_limit: 0\n", "'run.recursion_limit': Input should be greater than or equal to 1"),
        ("run:\n  max_message_chars: many\n", "'run.max_message_chars': Input should be a valid integer"),
        ("sandbox:\n  provider: docker\n", "'sandbox.provider'"),
    ],
    ids=["malformed-yaml", "not-a-mapping", "unknown-key", "out-of-range", "wrong-type", "unknown-choice"],
)
def test_a_bad_config_is_refused(
    cli: CliWorker, capsys: pytest.CaptureFixture[str], tmp_path: Path, yaml_text: str, problem: str
) -> None:
    config = tmp_path / "hartflow.yaml"
    config.write_text(yaml_text)
    model = write_script(tmp_path, [answer("never")])
    threads = _threads(cli.home)
    thread_id = unique("t-config")
    err = _refused(capsys, "run", "hi", "--thread", thread_id, "--model", model, "--config", str(config))
    assert str(config) in err and problem in err
    _assert_nothing_started(cli, thread_id, threads)


@pytest.mark.parametrize(
    ("script_text", "problem"),
    [
        ('{"responses": [', "not valid JSON"),
        ('[{"content": "hi"}]', "the top level must be an object with a 'responses' list"),
        ('{"responses": {"content": "hi"}}', "'responses' must be a list"),
        ('{"responses": ["hi"]}', "responses[0]: an entry must be an object"),
        ('{"responses": [{"content": "x", "bogus": 1}]}', "responses[0]: unknown key 'bogus'"),
        ('{"responses": [{"tool_calls": [{"name": "bash", "args": "ls"}]}]}', "responses[0].tool_calls[0].args"),
        ('{"responses": [{"error": {"message": "boom"}}]}', "error needs 'status' or 'type'"),
    ],
    ids=["invalid-json", "top-level-list", "responses-object", "entry-string", "unknown-key", "args-string", "error"],
)
def test_a_malformed_script_is_refused(
    cli: CliWorker, capsys: pytest.CaptureFixture[str], tmp_path: Path, script_text: str, problem: str
) -> None:
    script = tmp_path / "script.json"
    script.write_text(script_text)
    threads = _threads(cli.home)
    thread_id = unique("t-script")
    err = _refused(capsys, "run", "hi", "--thread", thread_id, "--model", f"scripted:{script}")
    assert f"invalid script {script}" in err and problem in err
    _assert_nothing_started(cli, thread_id, threads)


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ("nosuch:model", "unknown model spec 'nosuch:model': expected scripted:PATH or openai:MODEL"),
        ("gpt-4o", "unknown model spec 'gpt-4o'"),
        ("openai:", "model spec 'openai:' is missing a model name"),
        ("scripted:", "model spec 'scripted:' is missing a script path"),
    ],
)
def test_an_unknown_model_spec_is_refused(
    cli: CliWorker, capsys: pytest.CaptureFixture[str], spec: str, problem: str
) -> None:
    threads = _threads(cli.home)
    thread_id = unique("t-model")
    err = _refused(capsys, "run", "hi", "--thread", thread_id, "--model", spec)
    assert problem in err
    _assert_nothing_started(cli, thread_id, threads)


# -- the message and the thread id ----------------------------------------------------------------------------


def test_an_oversized_message_is_refused(
    cli: CliWorker, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = write_script(tmp_path, [answer("never")])
    threads = _threads(cli.home)
    thread_id = unique("t-long")
    err = _refused(capsys, "run", "x" * 100_001, "--thread", thread_id, "--model", model)
    assert "the message is 100001 characters; the limit is 100000 (run.max_message_chars)" in err
    monkeypatch.setenv("HARTFLOW_RUN__MAX_MESSAGE_CHARS", "10")
    err = _refused(capsys, "run", "eleven char", "--thread", thread_id, "--model", model)
    assert "the message is 11 characters; the limit is 10 (run.max_message_chars)" in err
    _assert_nothing_started(cli, thread_id, threads)


BAD_THREAD_IDS = ["../x", "a/b", "t" * 65, "", "t1\n", "..", "a b"]


@pytest.mark.parametrize(
    "thread_id", BAD_THREAD_IDS, ids=["dotdot", "slash", "65-chars", "empty", "newline", "up", "space"]
)
def test_invalid_thread_ids_are_refused_by_every_command(
    cli: CliWorker, capsys: pytest.CaptureFixture[str], tmp_path: Path, thread_id: str
) -> None:
    model = write_script(tmp_path, [answer("never")])
    upload = tmp_path / "notes.txt"
    upload.write_text("notes")
    threads = _threads(cli.home)
    for args in (
        ["run", "hi", "--thread", thread_id, "--model", model],
        ["run", "hi", "--thread", thread_id, "--model", model, "--file", str(upload)],
        ["upload", thread_id, str(upload)],
        ["reply", thread_id, "blue"],
        ["status", thread_id],
        ["state", thread_id],
        ["cancel", thread_id],
        ["events", thread_id],
    ):
        err = _refused(capsys, *args)
        assert f"invalid thread id {thread_id!r}" in err, args
    if thread_id:  # an empty --thread filter means no filter
        assert f"invalid thread id {thread_id!r}" in _refused(capsys, "runs", "--thread", thread_id)
    _assert_nothing_started(cli, thread_id, threads)
    assert not (tmp_path / "x").exists() and not (cli.home / "users" / "default" / "x").exists()


# -- uploads ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["report..pdf", "..", "back\\slash.txt", "nul\0byte.txt", "invoice\u202etxt.exe", "new\nline.txt", "esc\x1b.txt"],
    ids=["dotdot", "up", "backslash", "nul", "bidi-override", "newline", "escape"],
)
def test_upload_names_with_dotdot_slash_or_nul_are_refused(
    cli: CliWorker, capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str
) -> None:
    good = tmp_path / "good.txt"
    good.write_text("fine")
    bad = str(tmp_path / name)
    if "\0" not in name and name != "..":  # those cannot be files: refused by the name before the file is looked at
        Path(bad).write_text("bad")
    model = write_script(tmp_path, [answer("never")])
    thread_id = unique("t-upload")
    threads = _threads(cli.home)
    before = _files(cli.home)
    # The good file comes first: every file is checked before the first copy, so it is not stored either.
    err = _refused(capsys, "upload", thread_id, str(good), bad)
    assert f"invalid upload name {name!r}" in err
    err = _refused(capsys, "run", "look", "--thread", thread_id, "--model", model, "--file", str(good), "--file", bad)
    assert f"invalid upload name {name!r}" in err
    assert _files(cli.home) == before
    _assert_nothing_started(cli, thread_id, threads)


def test_a_directory_is_not_an_upload(cli: CliWorker, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    folder = tmp_path / "folder"
    folder.mkdir()
    thread_id = unique("t-upload")
    threads = _threads(cli.home)
    err = _refused(capsys, "upload", thread_id, f"{folder}/")
    assert f"cannot upload {folder}: not a file" in err
    _assert_nothing_started(cli, thread_id, threads)


@pytest.mark.parametrize(
    "name",
    [
        "a/b",
        "../etc/passwd",
        "/abs",
        "x/..",
        "",
        ".",
        "dir\\file",
        "a\0b",
        "a" * 201,
        "é" * 101,
        "lone\ud800",
        "tab\t",
        "del\x7f",
        "c1\x85",
        "rlo\u202e",
        "lri\u2066",
        "pdi\u2069",
        "zwsp\u200b",
        "bom\ufeff",
        "ls\u2028",
    ],
)
def test_the_upload_name_rule_refuses_every_path_like_name(name: str) -> None:
    # Names arrive as path segments from the CLI, but other callers (an API) can hand in any string.
    with pytest.raises(UploadError, match="invalid upload name"):
        validate_upload_name(name)


# -- replies ------------------------------------------------------------------------------------------------


def test_a_reply_to_a_thread_without_a_run_is_refused(cli: CliWorker, capsys: pytest.CaptureFixture[str]) -> None:
    thread_id = unique("t-none")
    threads = _threads(cli.home)
    err = _refused(capsys, "reply", thread_id, "blue")
    assert f"unknown thread {thread_id}: no run has been started on it" in err
    _assert_nothing_started(cli, thread_id, threads)


def test_a_reply_to_a_completed_run_is_refused(
    cli: CliWorker, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    thread_id = unique("t-done")
    code, _, err = _run(capsys, "run", "hi", "--thread", thread_id, "--model", write_script(tmp_path, [answer("hi")]))
    assert code == 0, err
    history, files = len(_history(cli, thread_id)), _files(cli.home)
    for args in (["blue"], ["--option", "1"], ["blue", "--signal"]):
        err = _refused(capsys, "reply", thread_id, *args)
        assert f"no run is waiting on thread {thread_id}: its last run has ended" in err
    assert len(_history(cli, thread_id)) == history
    assert _files(cli.home) == files


def test_a_reply_to_a_running_run_is_refused(
    cli: CliWorker, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    thread_id = unique("t-running")
    # The model call waits for this file: the run is running, not waiting for input, until the test says so.
    release = tmp_path / "release"
    slow = write_script(tmp_path, [{**answer("late"), "wait_for_file": str(release)}])
    code, _, err = _run(capsys, "run", "hi", "--thread", thread_id, "--model", slow, "--detach")
    assert code == 0, err
    try:
        for args in (["blue"], ["blue", "--signal"], ["--option", "1"]):
            err = _refused(capsys, "reply", thread_id, *args)
            assert f"the run on thread {thread_id} is not waiting for input" in err
        kinds = {event.event_type for event in _history(cli, thread_id)}
        assert EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED not in kinds
        assert EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED not in kinds
    finally:
        release.touch()
    assert _result(cli, thread_id).final_message == "late", "the refused replies did not disturb the run"


def test_a_run_with_files_on_a_busy_thread_writes_nothing(
    cli: CliWorker, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    thread_id = unique("t-busy")
    release = tmp_path / "release"
    slow = write_script(tmp_path, [{**answer("late"), "wait_for_file": str(release)}])
    code, _, err = _run(capsys, "run", "hi", "--thread", thread_id, "--model", slow, "--detach")
    assert code == 0, err
    upload = tmp_path / "notes.txt"
    upload.write_text("not for the run in flight")
    try:
        err = _refused(capsys, "run", "again", "--thread", thread_id, "--model", slow, "--file", str(upload))
        assert f"thread {thread_id} is busy" in err
        copied = list(cli.home.glob(f"users/*/threads/{thread_id}/user-data/uploads/notes.txt"))
        assert not copied, "the refused run wrote into the uploads of the run in flight"
    finally:
        release.touch()
    assert _result(cli, thread_id).final_message == "late"


def test_replies_that_do_not_answer_the_pending_request_are_refused_without_a_trace(
    cli: CliWorker, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    thread_id = unique("t-paused")
    model = write_script(tmp_path, [ask_clarification(options=["red", "blue"]), answer("Blue it is.")])
    code, _, err = _run(capsys, "run", "paint it", "--thread", thread_id, "--model", model)
    assert code == 3, err
    history, files = len(_history(cli, thread_id)), _files(cli.home)
    for args, problem in (
        (["--option", "option-9"], "unknown option 'option-9'; offered: 1 (red), 2 (blue)"),
        (["--option", "3"], "unknown option '3'; offered: 1 (red), 2 (blue)"),
        (["--field", "colour=blue"], "reply refused: unknown field(s): colour"),
        (["--field", "novalue"], "--field expects name=value, got 'novalue'"),
        (["   "], "reply refused: the answer is empty"),
        ([], "reply refused: the answer is empty"),
        (["red", "--option", "1"], "reply refused: choose an option or answer in your own words, not both"),
    ):
        err = _refused(capsys, "reply", thread_id, *args)
        assert problem in err, args
    assert len(_history(cli, thread_id)) == history, "a refused reply leaves no history event"
    assert _files(cli.home) == files
    code, out, _ = _run(capsys, "status", thread_id, "--json")
    assert code == 0 and json.loads(out)["status"] == "awaiting_input"
    code, out, _ = _run(capsys, "reply", thread_id, "--option", "2", "--json")
    assert code == 0 and json.loads(out)["final_message"] == "Blue it is."


# -- the same rules for clients other than the CLI ------------------------------------------------------------


MALFORMED_SIGNALS: list[tuple[Any, str]] = [
    (42, "a reply is a string or an object, not int"),
    (3.5, "a reply is a string or an object, not float"),
    (None, "a reply is a string or an object, not NoneType"),
    (True, "a reply is a string or an object, not bool"),
    (["blue"], "a reply is a string or an object, not list"),
    ({"answer": 5}, "reply key 'answer' must be a string"),
    ({"option_id": 2}, "reply key 'option_id' must be a string"),
    ({"request_id": ["r"], "answer": "blue"}, "reply key 'request_id' must be a string"),
    ({"fields": "colour=blue"}, "reply key 'fields' must be an object of name → value"),
    ({"fields": {"colour": "blue"}}, "unknown field(s): colour"),
    ({"colour": "blue"}, "unknown reply key(s): colour"),
    ({"request_id": "clarification:other", "answer": "blue"}, "stale request_id 'clarification:other'"),
    ({"option_id": "option-9"}, "unknown option 'option-9'; offered: option-1, option-2"),
    ("   ", "the answer is empty"),
    ({}, "the answer is empty"),
]


async def test_malformed_signals_are_dropped_with_a_notice_and_the_run_keeps_waiting(
    client: Client, home: Path, temporal_address: str
) -> None:
    config = make_config(home, temporal_address)
    model = write_script(home, [ask_clarification(options=["red", "blue"]), answer("Blue it is.")])
    async with running_worker(client, config):
        handle = await start_run(client, config, "paint it", model=model)
        assert (await settle(handle)).status == "awaiting_input"
        for payload, notice in MALFORMED_SIGNALS:
            await handle.signal("clarification_reply", payload)
            # A query after the signal is answered by a workflow task that has seen the signal.
            view = await handle.query("status", result_type=RunView)
            details = (await handle.query("__temporal_workflow_metadata")).current_details
            assert view.status == "awaiting_input" and view.pending_input is not None, payload
            assert f"**Notice:** ignored a clarification_reply signal: {notice}" in details, payload
            assert "**Waiting for an answer:** Which colour?" in details

        await handle.signal("clarification_reply", {"option_id": "option-2"})
        final = await handle.result()
        events = await history_events(handle)
    assert final.status == "completed" and final.final_message == "Blue it is."
    signalled = [e for e in events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED]
    assert len(signalled) == len(MALFORMED_SIGNALS) + 1
    assert not [e for e in events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED]
    assert thread_state(home, final.thread_id)["messages"][-2]["content"] == (
        'For your clarification "Which colour?", my answer is: blue'
    )


async def test_an_update_with_an_unknown_option_is_rejected_without_a_history_event(
    client: Client, home: Path, temporal_address: str
) -> None:
    config = make_config(home, temporal_address)
    model = write_script(home, [ask_clarification(options=["red", "blue"]), answer("Blue it is.")])
    async with running_worker(client, config):
        handle = await start_run(client, config, "paint it", model=model)
        await settle(handle)
        before = await history_events(handle)
        for reply in (ReplyInput(option_id="option-3"), ReplyInput(option_id="blue"), ReplyInput(option_id="")):
            with pytest.raises(WorkflowUpdateFailedError) as failure:
                await handle.execute_update("reply", reply, result_type=RunView)
            assert f"unknown option {reply.option_id!r}; offered: option-1, option-2" in str(failure.value.cause)
        assert len(await history_events(handle)) == len(before)
        await handle.execute_update("reply", ReplyInput(option_id="option-2"), result_type=RunView)
        assert (await handle.result()).status == "completed"


CLIENT_BAD_INPUTS: list[tuple[dict[str, Any], str]] = [
    ({"message": "x" * 101}, "the message is 101 characters; the limit is 100 (run.max_message_chars)"),
    ({"message": " \n "}, "the message is empty"),
    ({"thread_id": "../etc"}, "invalid thread id '../etc'"),
    ({"thread_id": "t" * 65}, "invalid thread id"),
    ({"user_id": "a/b"}, "invalid user id 'a/b'"),
]


async def test_a_run_started_by_another_client_refuses_bad_input_before_writing_anything(
    client: Client, home: Path, temporal_address: str
) -> None:
    config = make_config(home, temporal_address, run={"max_message_chars": 100})
    model = write_script(home, [answer("never")])
    async with running_worker(client, config):
        for overrides, problem in CLIENT_BAD_INPUTS:
            run_input = replace(
                RunInput(thread_id=unique("t-client"), message="hi", model=model, settings=config.run), **overrides
            )
            handle = await client.start_workflow(
                RunWorkflow.run,
                run_input,
                id=unique("bad-client-input"),  # the thread id may be invalid: no run id derives from it
                task_queue=config.temporal.task_queue,
                # Only a safety net: without the check, a bad id would retry the state load forever.
                execution_timeout=timedelta(minutes=2),
            )
            with pytest.raises(WorkflowFailureError) as failure:
                await handle.result()
            events = await history_events(handle)
            cause = failure.value.cause
            assert isinstance(cause, ApplicationError) and cause.type == "BadInput" and cause.non_retryable
            assert problem in cause.message, overrides
            assert scheduled_activities(events) == [], "not even the thread state was loaded"
            assert not [e for e in events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED]
    assert not (home / "users").exists()


# -- tool calls whose arguments are not a JSON object ---------------------------------------------------------


def _raw_call(call_id: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "bash", "arguments": arguments}}


async def test_tool_calls_whose_arguments_are_not_a_json_object_are_answered_with_an_error_and_the_run_goes_on(
    client: Client, home: Path, temporal_address: str
) -> None:
    config = make_config(home, temporal_address)
    raw = [
        _raw_call("c-string", '"echo hi"'),
        _raw_call("c-list", '["echo", "hi"]'),
        _raw_call("c-number", "42"),
        _raw_call("c-broken", '{"command": "echo hi"'),
    ]
    broken_turn = {"content": "", "additional_kwargs": {"tool_calls": raw}}
    model = write_script(home, [broken_turn, answer("Sorry, here it is properly.")])
    async with running_worker(client, config):
        handle = await start_run(client, config, "say hi", model=model)
        final = await handle.result()
        events = await history_events(handle)
    assert final.status == "completed" and final.final_message == "Sorry, here it is properly."
    assert not [name for name, _ in scheduled_activities(events) if name == "tool.execute"], "nothing was executed"
    results = [m for m in thread_state(home, final.thread_id)["messages"] if m["type"] == "tool"]
    assert [(m["tool_call_id"], m["name"], m["status"]) for m in results] == [
        (call["id"], "bash", "error") for call in raw
    ]
    prefix = "[Tool call could not be executed because its arguments were invalid: "
    assert results[0]["content"] == prefix + "the arguments must be a JSON object, not a string]"
    assert results[1]["content"] == prefix + "the arguments must be a JSON object, not a list]"
    assert results[2]["content"] == prefix + "the arguments must be a JSON object, not a number]"
    assert results[3]["content"].startswith(prefix + "the arguments are not valid JSON: ")
    # The errors sit between the broken turn and the next model call, which therefore had them in its request.
    transcript = [m["type"] for m in thread_state(home, final.thread_id)["messages"] if m["type"] != "system"]
    assert transcript == ["human", "ai", "tool", "tool", "tool", "tool", "ai"]
    assert [name for name, _ in scheduled_activities(events)].count(MODEL_INVOKE) == 2


async def test_invalid_tool_calls_left_by_a_hard_stop_do_not_start_another_turn(
    client: Client, home: Path, temporal_address: str
) -> None:
    config = make_config(home, temporal_address)
    filtered = {
        **calls(tool_call("bash", "b1", command="echo hi")),
        "invalid_tool_calls": [{"name": "bash", "args": "[1]", "id": "bad1", "error": "not an object"}],
        "response_metadata": {"finish_reason": "content_filter"},
    }
    model = write_script(home, [filtered, answer("never asked")])
    async with running_worker(client, config):
        handle = await start_run(client, config, "say hi", model=model)
        final = await handle.result()
        events = await history_events(handle)
    assert final.stop_reason == "safety_capped"
    assert [name for name, _ in scheduled_activities(events)].count(MODEL_INVOKE) == 1
    assert not [m for m in thread_state(home, final.thread_id)["messages"] if m["type"] == "tool"]


def test_a_run_enqueued_on_a_busy_thread_waits_and_runs_after_it(
    cli: CliWorker, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``hartflow run --if-busy enqueue``: queued (``--detach``: at once, ``pending``), then run after the busy
    run; a second one sent without ``--detach`` follows its run to the end."""
    thread_id = unique("t-queue")
    release = tmp_path / "release"
    slow = write_script(tmp_path, [{**answer("late"), "wait_for_file": str(release)}])
    quick = write_script(tmp_path, [answer("next")])
    code, _, err = _run(capsys, "run", "hi", "--thread", thread_id, "--model", slow, "--detach")
    assert code == 0, err
    try:
        queued = ("--thread", thread_id, "--model", quick, "--if-busy", "enqueue", "--json")
        code, out, err = _run(capsys, "run", "two", *queued, "--detach")
        assert code == 0, err
        assert json.loads(out)["status"] == "pending" and json.loads(out)["place"] == 0
    finally:
        release.touch()
    code, out, err = _run(capsys, "run", "three", *queued)
    assert code == 0, err
    assert json.loads(out)["final_message"] == "next"
    messages = thread_state(cli.home, thread_id, USER)["messages"]
    assert [m["content"] for m in messages if m["type"] == "human"] == ["hi", "two", "three"]
