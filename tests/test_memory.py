"""Memory: what a run enqueues, how an extraction updates the document, and the debounced per-user workflow."""

from __future__ import annotations

import functools
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.exceptions import ApplicationError

from activities.memory_queue import MemoryQueueActivities
from activities.memory_store import load_memory
from activities.storage.filesystem import FilesystemObjectStore
from middlewares.memory import MemoryConfig, MemoryMiddleware, filter_messages_for_memory
from tests.support import StubRunContext, activity_error, start_run, wait_for_history_event
from vocabulary.contracts import (
    MEMORY_ENQUEUE,
    MEMORY_WORKFLOW_ID_PREFIX,
    MODEL_INVOKE,
    MemoryEnqueueInput,
    MemoryUpdateSettings,
    ModelCallInput,
)
from vocabulary.state import ThreadState
from workers.testing import answer, make_config, running_worker, settle, unique, write_script
from workers.testing.history import history_events, replay, scheduled_inputs
from workflows.memory_update import (
    MESSAGE_MAX_CHARS,
    MemoryUpdateError,
    apply_update,
    format_conversation,
    parse_update,
    update_prompt,
)

REPLY = {
    "hide_from_ui": True,
    "human_input_response": {
        "version": 1,
        "kind": "human_input_response",
        "source": "ask_clarification",
        "request_id": "r1",
        "response_kind": "text",
        "value": "Rust",
    },
}
SETTINGS = MemoryUpdateSettings(model="scripted:x", fact_confidence_threshold=0.7, max_facts=3)


def _conversation() -> list[BaseMessage]:
    return [
        SystemMessage("<system-reminder>date</system-reminder>", id="X"),
        HumanMessage("<memory>old</memory>", id="X__memory", additional_kwargs={"hide_from_ui": True}),
        HumanMessage("I write Go at Acme", id="X__user"),
        AIMessage("", id="a1", tool_calls=[{"name": "ls", "args": {}, "id": "c1"}]),
        ToolMessage("files", tool_call_id="c1", id="t1"),
        AIMessage("Nice, Go it is.", id="a2"),
        HumanMessage("Which language next?", id="h2"),
        AIMessage("", id="a3", tool_calls=[{"name": "ask_clarification", "args": {}, "id": "q1"}]),
        HumanMessage("Rust", id="reply", additional_kwargs=REPLY),
        HumanMessage("<current_uploads>\nreport.pdf\n</current_uploads>\n\n", id="h3"),
        AIMessage("I see an upload.", id="a4"),
        HumanMessage("<current_uploads>x</current_uploads>\n\nSummarise it", id="h4"),
        AIMessage("Summary.", id="a5"),
    ]


def test_only_user_turns_and_final_answers_are_remembered() -> None:
    kept = filter_messages_for_memory(_conversation())
    assert [m.id for m in kept] == ["X__user", "a2", "h2", "reply", "h4", "a5"]
    assert kept[-2].content == "Summarise it", "upload blocks are stripped"


class Queue:
    def __init__(self, failure: BaseException | None = None) -> None:
        self.failure = failure
        self.inputs: list[MemoryEnqueueInput] = []

    async def __call__(self, arg: MemoryEnqueueInput) -> None:
        self.inputs.append(arg)
        if self.failure is not None:
            raise self.failure


async def _after_agent(messages: list[BaseMessage], queue: Queue, **config: Any) -> None:
    ctx = StubRunContext(activities={MEMORY_ENQUEUE: queue}, user_id="alice")
    assert await MemoryMiddleware(MemoryConfig(**config)).after_agent(ThreadState(messages=messages), ctx) is None


async def test_the_run_enqueues_its_conversation_under_its_user() -> None:
    queue = Queue()
    await _after_agent(_conversation(), queue, debounce_seconds=2)
    [enqueued] = queue.inputs
    assert enqueued.user_id == "alice"
    item = enqueued.item
    assert (item.id, item.thread_id) == ("hartflow:alice:thread-1/run-1", "thread-1")
    assert [m.id for m in item.messages] == ["X__user", "a2", "h2", "reply", "h4", "a5"]
    assert item.settings == MemoryUpdateSettings(model="scripted:unused", debounce_seconds=2)


async def test_nothing_is_enqueued_when_disabled_or_without_an_exchange() -> None:
    queue = Queue()
    await _after_agent(_conversation(), queue, enabled=False)
    await _after_agent([HumanMessage("hi", id="h")], queue)
    await _after_agent([], queue)
    assert queue.inputs == []


async def test_a_failed_enqueue_does_not_fail_the_run() -> None:
    queue = Queue(activity_error(RuntimeError("server unavailable"), MEMORY_ENQUEUE))
    await _after_agent(_conversation(), queue, model="openai:small")
    assert queue.inputs[0].item.settings.model == "openai:small"


# -- the updater -------------------------------------------------------------------------------------------------


def test_the_conversation_is_formatted_escaped_and_cut() -> None:
    messages: list[BaseMessage] = [
        HumanMessage("<uploaded_files>a.pdf</uploaded_files>\n", id="u"),
        HumanMessage("close </conversation> now", id="h"),
        AIMessage("y" * (MESSAGE_MAX_CHARS + 5), id="a"),
    ]
    assert format_conversation(messages) == (
        f"User: close &lt;/conversation&gt; now\n\nAssistant: {'y' * MESSAGE_MAX_CHARS}..."
    )
    prompt = update_prompt({"facts": [{"content": "<b>"}]}, messages)
    assert '"content": "&lt;b&gt;"' in prompt and "<conversation>\nUser: close" in prompt
    assert prompt.endswith("Return ONLY valid JSON, no explanation or markdown.")


def test_the_update_is_found_in_a_chatty_answer() -> None:
    update = {"user": {}, "history": {}, "newFacts": [], "factsToRemove": []}
    assert parse_update(f"Sure! ```json\n{json.dumps(update)}\n```") == update
    with pytest.raises(MemoryUpdateError):
        parse_update('{"newFacts": []} and nothing else')


def test_applying_an_update() -> None:
    memory = {
        "user": {"workContext": {"summary": "old", "updatedAt": "t0"}},
        "history": {},
        "facts": [
            {"id": "fact_old", "content": "Uses Go", "category": "knowledge", "confidence": 0.9},
            {"id": "fact_gone", "content": "Lives in Paris", "category": "context", "confidence": 0.8},
        ],
    }
    update = {
        "user": {
            "workContext": {"summary": "Backend engineer at Acme", "shouldUpdate": True},
            "topOfMind": {"summary": "ignored", "shouldUpdate": False},
        },
        "history": {"recentMonths": {"summary": "Learning Rust", "shouldUpdate": True}},
        "newFacts": [
            {"content": " Learning Rust ", "category": "goal", "confidence": 0.95},
            {"content": "uses go", "category": "knowledge", "confidence": 0.99},
            {"content": "Maybe likes tea", "category": "preference", "confidence": 0.5},
            {"content": "Wrote C before", "category": "correction", "confidence": "0.75", "sourceError": "said Java"},
            {"content": "Prefers vim", "category": "preference", "confidence": 0.71},
        ],
        "factsToRemove": ["fact_gone"],
    }
    ids = iter(["aaaa1111", "bbbb2222", "cccc3333"])
    result = apply_update(memory, update, now="T1", new_id=lambda: next(ids), source="thread-9", settings=SETTINGS)
    assert result["user"]["workContext"] == {"summary": "Backend engineer at Acme", "updatedAt": "T1"}
    assert "topOfMind" not in result["user"]
    assert result["history"]["recentMonths"] == {"summary": "Learning Rust", "updatedAt": "T1"}
    assert result["lastUpdated"] == "T1"
    facts = {f["content"]: f for f in result["facts"]}
    # Below the threshold and case-insensitive duplicates are dropped; max_facts keeps the most confident.
    assert list(facts) == ["Learning Rust", "Uses Go", "Wrote C before"]
    assert facts["Learning Rust"] == {
        "id": "fact_aaaa1111",
        "content": "Learning Rust",
        "category": "goal",
        "confidence": 0.95,
        "createdAt": "T1",
        "source": "thread-9",
    }
    assert facts["Wrote C before"]["sourceError"] == "said Java"
    assert memory["facts"][1]["id"] == "fact_gone", "the input document is not changed"


def test_a_malformed_update_changes_nothing_but_the_timestamp() -> None:
    malformed = {"user": "x", "history": None, "newFacts": 5, "factsToRemove": "fact_1"}
    memory = {"user": [], "facts": {"not": "a list"}}
    result = apply_update(memory, malformed, now="T", new_id=lambda: "x", source="t", settings=SETTINGS)
    assert result == {"user": {}, "history": {}, "facts": [], "lastUpdated": "T"}


# -- the memory workflow on a real server ----------------------------------------------------------------------

FACTS = {
    "user": {"workContext": {"summary": "Go developer at Acme", "shouldUpdate": True}},
    "history": {},
    "newFacts": [{"content": "Writes Go at Acme", "category": "context", "confidence": 0.95}],
    "factsToRemove": [],
}


def _scheduled(events: list[Any], activity: str) -> list[Any]:
    return [
        e
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == activity
    ]


async def test_three_quick_runs_are_debounced_into_one_extraction_that_dynamic_context_injects(
    client: Client, home: Path, temporal_address: str
) -> None:
    user = unique("user")
    config = make_config(home, temporal_address, user_id=user, run={"middlewares": {"memory": {"debounce_seconds": 5}}})
    model = write_script(home, [answer("noted"), {"for": "memory", "content": json.dumps(FACTS)}])
    memory = client.get_workflow_handle(f"{MEMORY_WORKFLOW_ID_PREFIX}{user}")
    async with running_worker(client, config):
        thread = unique("thread")
        runs = []
        for text in ("I write Go", "at Acme", "every day"):
            handle = await start_run(client, config, text, model=model, thread_id=thread)
            view = await settle(handle)
            assert view.status == "completed"
            runs.append(handle)
        # The runs are over; the extraction waits for 5 quiet seconds.
        saved = await wait_for_history_event(
            memory,
            lambda e: (
                e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
                and e.activity_task_scheduled_event_attributes.activity_type.name == "memory.save"
            ),
        )
        await wait_for_history_event(
            memory,
            lambda e: (
                e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
                and e.activity_task_completed_event_attributes.scheduled_event_id == saved.event_id
            ),
        )
        events = await history_events(memory)
        extractions = await scheduled_inputs(client, events, MODEL_INVOKE, ModelCallInput)
        last_run_closed = (await runs[-1].describe()).close_time
        # A new thread of the same user starts with the memory DynamicContext reads.
        fresh = await start_run(client, config, "hello again", model=model)
        assert (await settle(fresh)).status == "completed"
        [first_call] = await scheduled_inputs(client, await history_events(fresh), MODEL_INVOKE, ModelCallInput)
        await memory.terminate("test finished")

    [extraction] = extractions
    assert (extraction.purpose, extraction.call_index) == ("memory", 0)
    prompt = str(extraction.messages[0].content)
    assert all(f"User: {text}" in prompt for text in ("I write Go", "at Acme", "every day"))
    assert len(_scheduled(events, "memory.read")) == 2, "read for the prompt, again before the save (edits meanwhile)"
    for store_call in (*_scheduled(events, "memory.read"), *_scheduled(events, "memory.save")):
        # An S3 outage is waited out (up to an hour), not turned into a lost extraction after a few attempts.
        attributes = store_call.activity_task_scheduled_event_attributes
        assert attributes.retry_policy.maximum_attempts == 0
        assert attributes.schedule_to_close_timeout.ToTimedelta() == timedelta(hours=1)
    assert last_run_closed is not None
    assert _scheduled(events, MODEL_INVOKE)[0].event_time.ToDatetime(last_run_closed.tzinfo) > last_run_closed, (
        "the runs never waited for the extraction"
    )

    stored = load_memory(FilesystemObjectStore(home), user)
    assert [f["content"] for f in stored["facts"]] == ["Writes Go at Acme"]
    assert stored["user"]["workContext"]["summary"] == "Go developer at Acme"
    injected = [str(m.content) for m in first_call.messages if "<memory>" in str(m.content)]
    assert injected and "Writes Go at Acme" in injected[0]


async def test_a_memory_queue_that_refuses_leaves_the_run_completed(
    client: Client, home: Path, temporal_address: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real run whose ``memory.enqueue`` (a local activity) fails for good: memory is best-effort, so the run
    completes with its answer committed, and its history replays. A local activity's failure reaches the workflow
    as the bare ``ApplicationError``, not an ``ActivityError`` (``middlewares/context.py``, ``call``)."""

    @functools.wraps(MemoryQueueActivities.enqueue)
    async def refuses(self: MemoryQueueActivities, input: MemoryEnqueueInput) -> None:
        raise ApplicationError("the memory queue refused the item", non_retryable=True)

    monkeypatch.setattr(MemoryQueueActivities, "enqueue", refuses)
    config = make_config(home, temporal_address)
    async with running_worker(client, config):
        handle = await start_run(client, config, "hello", model=write_script(home, [answer("hi")]))
        view = await settle(handle)
        await replay(client, handle)
        events = await history_events(handle)
    assert (view.status, view.final_message) == ("completed", "hi")
    refused = [
        e.marker_recorded_event_attributes
        for e in events
        if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
        and "memory.enqueue" in str(e.marker_recorded_event_attributes.details)
    ]
    assert len(refused) == 1 and refused[0].failure.message == "the memory queue refused the item"
