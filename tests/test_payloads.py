"""Payloads never hit Temporal's limits, and a turn's history cost does not grow with the conversation.

Large values leave history through the claim check (``activities/storage/payloads.py``) on both backends; the
model's message list travels as a content-addressed reference (``vocabulary/transcript.py``,
``activities/transcripts.py``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from activities.storage.filesystem import FilesystemObjectStore
from activities.storage.payloads import PAYLOAD_PREFIX, thread_payload_keys
from activities.transcripts import TranscriptError, TranscriptStore, thread_blob_prefix
from tests.support import start_run
from vocabulary.contracts import ThreadRef
from vocabulary.state import ThreadState
from vocabulary.transcript import (
    FULL_MANIFEST_EVERY,
    MessageHasher,
    TranscriptCursor,
    canonical_json,
    preamble_json,
    sha256_hex,
)
from vocabulary.workflow_ids import run_workflow_id
from workers.config import HartflowConfig, open_object_store
from workers.payloads import client_for, data_converter_for
from workers.testing import answer, calls, make_config, running_worker, tool_call, unique, write_script
from workers.testing.history import chain_histories, external_size, payloads_in, turn_costs
from workers.worker import thread_store
from workflows.run import RunView

THREAD = ThreadRef("default", "t-1")
BIG = 20 * 1024 * 1024


# Each test has its own user: the memory workflow (one per user) then reads only this test's payloads.


@pytest.fixture(params=["filesystem", "s3"])
def storage(request: pytest.FixtureRequest) -> dict[str, Any]:
    """``storage`` overrides for each backend (S3: this test's bucket on the session's SeaweedFS)."""
    if request.param == "filesystem":
        return {}
    overrides: dict[str, Any] = request.getfixturevalue("s3_storage")
    return overrides


def _history_payloads(runs: list[list[Any]]) -> list[Any]:
    return [payload for events in runs for event in events for payload in payloads_in(event)]


def _assert_claim_checked(runs: list[list[Any]], config: HartflowConfig) -> None:
    """No payload in history reaches the threshold, and some value did go to external storage."""
    payloads = _history_payloads(runs)
    threshold = config.storage.payload_threshold_bytes
    assert max(payload.ByteSize() for payload in payloads) < threshold
    assert any(external_size(payload) >= threshold for payload in payloads)


# -- the transcript reference (pure) --------------------------------------------------------------------


def test_a_reference_carries_only_what_the_previous_request_did_not() -> None:
    first = [SystemMessage("sys"), HumanMessage("hi", id="h1")]
    ref, cursor = TranscriptCursor().reference(THREAD, first)
    assert ref.base is None and ref.keep == 0 and len(ref.append) == 2
    assert set(ref.bodies) == set(ref.append)
    second = [*first, AIMessage("hello", id="a1"), HumanMessage("more", id="h2")]
    ref2, cursor2 = cursor.reference(THREAD, second)
    assert (ref2.base, ref2.keep) == (cursor.manifest, 2)
    assert [json.loads(ref2.bodies[i])["data"]["content"] for i in ref2.append] == ["hello", "more"]
    assert ref2.digest == cursor2.manifest != cursor.manifest
    # An overlay that changes an early message re-sends from there on, but only bodies the store lacks.
    edited = [SystemMessage("sys 2"), *second[1:]]
    ref3, _ = cursor2.reference(THREAD, edited)
    assert ref3.keep == 0 and ref3.base is None and len(ref3.append) == 4
    assert list(ref3.bodies) == [sha256_hex(canonical_json(edited[0]))]


def test_a_turn_hashes_only_new_messages_and_resends_bodies_a_failed_call_may_not_have_stored() -> None:
    hasher = MessageHasher()
    first = [HumanMessage("hi", id="h1")]
    ids, fresh = hasher.hash(first)
    assert list(fresh) == ids
    second = [*first, AIMessage("hello", id="a1")]
    ids2, fresh2 = hasher.hash(second)
    assert ids2[0] == ids[0] and list(fresh2) == [ids2[1]]  # the kept message was not serialised again
    # The call carrying ``second`` failed: the cursor stays where it was, and the next reference re-sends the
    # bodies of messages the hasher had already seen.
    ref, _ = TranscriptCursor().reference(THREAD, second, hasher)
    assert set(ref.bodies) == set(ids2) and ref.bodies[ids2[0]] == canonical_json(first[0])


def test_the_blob_store_resolves_references_and_rejects_what_does_not_add_up(tmp_path: Path) -> None:
    store = FilesystemObjectStore(tmp_path)
    messages = [
        SystemMessage("sys"),
        HumanMessage("hi", id="h1", additional_kwargs={"files": ["a.txt"]}),
        AIMessage("", id="a1", tool_calls=[{"name": "ls", "args": {"path": "/"}, "id": "c1"}]),
        ToolMessage("x", tool_call_id="c1", name="ls", id="t1", artifact={"k": [1]}),
    ]
    ref, cursor = TranscriptCursor().reference(THREAD, messages[:2])
    assert TranscriptStore(store).resolve(ref) == messages[:2]
    ref2, _ = cursor.reference(THREAD, messages)
    # A cold process (no cache) resolves the base manifest and the old bodies from storage.
    assert TranscriptStore(store).resolve(ref2) == messages
    assert len(list(store.list(thread_blob_prefix(THREAD) + "msg/"))) == 4

    bad_digest = ref2.__class__(**{**ref2.__dict__, "digest": "0" * 64})
    with pytest.raises(TranscriptError, match="do not add up"):
        TranscriptStore(store).resolve(bad_digest)
    forged = ref2.__class__(**{**ref2.__dict__, "bodies": dict.fromkeys(ref2.bodies, '{"type":"human"}')})
    with pytest.raises(TranscriptError, match="does not match its id"):
        TranscriptStore(store).resolve(forged)
    missing = ref2.__class__(**{**ref2.__dict__, "base": "f" * 64})
    with pytest.raises(TranscriptError, match="missing"):
        TranscriptStore(store).resolve(missing)


def test_the_system_message_and_tools_go_once_by_hash_and_resolve_on_a_cold_worker(tmp_path: Path) -> None:
    store = FilesystemObjectStore(tmp_path)
    tools = [{"type": "function", "function": {"name": "ls", "parameters": {"type": "object", "properties": {}}}}]
    preamble = preamble_json(SystemMessage("sys"), tools)
    ref, cursor = TranscriptCursor().reference(THREAD, [HumanMessage("hi", id="h1")], preamble=preamble)
    assert ref.preamble == sha256_hex(preamble) and ref.preamble_body == preamble
    TranscriptStore(store).resolve(ref)
    assert TranscriptStore(store).preamble(ref) == (SystemMessage("sys"), tools)
    ref2, cursor2 = cursor.reference(THREAD, [HumanMessage("hi", id="h1"), AIMessage("a", id="a1")], preamble=preamble)
    assert ref2.preamble == ref.preamble and ref2.preamble_body is None  # the store has it: only the hash travels
    assert TranscriptStore(store).preamble(ref2) == (SystemMessage("sys"), tools)  # cold: read from the blob
    changed = preamble_json(SystemMessage("sys 2"), tools)
    ref3, _ = cursor2.reference(THREAD, [HumanMessage("hi", id="h1")], preamble=changed)
    assert ref3.preamble_body == changed
    forged = ref3.__class__(**{**ref3.__dict__, "preamble_body": preamble})
    with pytest.raises(TranscriptError, match="preamble does not match"):
        TranscriptStore(store).preamble(forged)


class CountingStore(FilesystemObjectStore):
    """Counts the reads and writes that reach the store."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.touched: list[str] = []

    def get(self, key: str) -> bytes | None:
        self.touched.append(f"get {key}")
        return super().get(key)

    def put(self, key: str, data: bytes, *, if_absent: bool = False) -> None:
        self.touched.append(f"put {key}")
        super().put(key, data, if_absent=if_absent)


def test_the_usual_turn_resolves_from_memory_and_anything_else_is_left_to_the_store(tmp_path: Path) -> None:
    """The model activity resolves a request on the event loop only when it needs nothing from the store (no
    thread for the usual turn); what it would read or write, or a request bringing many bodies, goes to a thread."""
    store = CountingStore(tmp_path)
    worker = TranscriptStore(store)
    preamble = preamble_json(SystemMessage("sys"), [])
    messages: list[Any] = [HumanMessage("hi", id="h1")]
    ref, cursor = TranscriptCursor().reference(THREAD, messages, preamble=preamble)
    # The first request writes its preamble: not from memory.
    assert worker.from_memory(ref, lambda: (worker.messages(ref), worker.preamble(ref))) is None
    assert store.touched == []
    worker.resolve(ref)
    worker.preamble(ref)

    messages = [*messages, AIMessage("a", id="a1"), HumanMessage("more", id="h2")]
    ref2, cursor = cursor.reference(THREAD, messages, preamble=preamble)
    store.touched.clear()
    resolved = worker.from_memory(ref2, lambda: (worker.messages(ref2), worker.preamble(ref2)))
    assert resolved == (messages, (SystemMessage("sys"), [])) and store.touched == []

    # Another worker holds none of it: it would read the base manifest, so the store is left to a thread.
    other = TranscriptStore(store)
    assert other.from_memory(ref2, lambda: other.messages(ref2)) is None and store.touched == []
    assert other.messages(ref2) == messages

    # A request bringing many new bodies (a run's first on a long thread) is not checked on the event loop.
    long = [*messages, *(HumanMessage(f"m{n}", id=f"m{n}") for n in range(20))]
    ref3, _ = cursor.reference(THREAD, long, preamble=preamble)
    assert worker.from_memory(ref3, lambda: worker.messages(ref3)) is None
    # A reference that does not add up is refused from memory as from the store.
    forged = ref2.__class__(**{**ref2.__dict__, "digest": "0" * 64})
    with pytest.raises(TranscriptError, match="do not add up"):
        worker.from_memory(forged, lambda: worker.messages(forged))


def test_manifests_are_deltas_chained_to_a_periodic_full_one_and_a_cold_read_follows_the_chain(
    tmp_path: Path,
) -> None:
    store = FilesystemObjectStore(tmp_path)
    writer = TranscriptStore(store)
    messages: list[Any] = []
    cursor = TranscriptCursor()
    refs = []
    for turn in range(FULL_MANIFEST_EVERY + 5):
        messages = [*messages, HumanMessage(f"turn {turn}", id=f"h{turn}")]
        ref, cursor = cursor.reference(THREAD, messages, preamble=preamble_json(None, []))
        assert writer.resolve(ref) == messages
        refs.append(ref)
    assert [ref.depth for ref in refs[:3]] == [0, 1, 2] and refs[FULL_MANIFEST_EVERY].depth == 0
    manifests = {info.key.rsplit("/", 1)[1]: info for info in store.list(thread_blob_prefix(THREAD) + "manifest/")}
    fulls = sorted(name for name in manifests if name.endswith(".txt"))
    assert fulls == sorted([f"{refs[0].digest}.txt", f"{refs[FULL_MANIFEST_EVERY].digest}.txt"])
    # A delta holds what its request added, not the whole list.
    assert store.get(thread_blob_prefix(THREAD) + f"manifest/{refs[30].digest}.delta") == (
        f"{refs[29].digest} 30 {refs[29].depth}\n{refs[30].append[0]}".encode()
    )
    cursor_messages = messages
    # A cold worker resolves the next request through the chain (30 deltas back to the first full manifest).
    messages = [*messages[:31], AIMessage("edited", id="x")]
    last = refs[30]
    ref, _ = TranscriptCursor(last.digest, cursor.ids[:31], last.depth).reference(
        THREAD, messages, preamble=preamble_json(None, [])
    )
    assert ref.base_depth == 30 and TranscriptStore(store).resolve(ref) == messages
    # The same worker builds on the list it resolved last, also when an overlay changed an early message.
    overlay = [*cursor_messages[:20], AIMessage("summary", id="s"), *cursor_messages[21:]]
    ref_overlay, _ = cursor.reference(THREAD, overlay, preamble=preamble_json(None, []))
    assert ref_overlay.keep == 20 and writer.resolve(ref_overlay) == overlay
    # A delta whose list does not hash to its name is refused.
    key = thread_blob_prefix(THREAD) + f"manifest/{refs[30].digest}.delta"
    path = tmp_path / key
    path.write_text(path.read_text().replace(refs[30].append[0], refs[0].append[0]))
    with pytest.raises(TranscriptError, match="does not add up"):
        TranscriptStore(store).resolve(ref)


def test_a_threads_payload_keys_are_its_runs_and_its_subagents_only(tmp_path: Path) -> None:
    store = FilesystemObjectStore(tmp_path)
    for workflow_id in ("hartflow-a", "hartflow-a-task-c1", "hartflow-ab", "hartflow-b"):
        store.put(f"{PAYLOAD_PREFIX}v0/ns/default/wt/HartflowRun/wi/{workflow_id}/ri/r1/d/sha256/00", b"x")
    keys = list(thread_payload_keys(store, "hartflow-a"))
    assert {key.split("/wi/")[1].split("/")[0] for key in keys} == {"hartflow-a", "hartflow-a-task-c1"}


# -- end to end, on both backends -----------------------------------------------------------------------


async def test_the_converter_claim_checks_from_the_threshold_on_and_reads_back(
    home: Path, temporal_address: str, storage: dict[str, Any]
) -> None:
    config = make_config(home, temporal_address, storage={**storage, "payload_threshold_bytes": 1024})
    converter = data_converter_for(config)
    small, big = "s" * 100, "b" * 5000
    payloads = await converter.encode([small, big])
    assert external_size(payloads[0]) == 0 and payloads[0].ByteSize() < 1024
    assert external_size(payloads[1]) > 5000 and payloads[1].ByteSize() < 1024
    assert await converter.decode(payloads, [str, str]) == [small, big]
    assert any(info.key.startswith(PAYLOAD_PREFIX) for info in open_object_store(config).list(PAYLOAD_PREFIX))
    # Without the driver a reference cannot be read: every client must use data_converter_for.
    with pytest.raises(RuntimeError, match="external storage is not configured"):
        await pydantic_data_converter.decode(payloads, [str, str])


async def test_a_20_mb_value_goes_through_every_path_on_both_backends(
    client: Client, temporal_address: str, home: Path, tmp_path: Path, storage: dict[str, Any]
) -> None:
    """20 MB as a tool call's argument (model result → tool input → next model request), a 20 MB file's output
    (cut by bash, saved by ToolOutputBudget), and a 20 MB answer (state commit, run result, status query)."""
    # Production heartbeat timeouts (30 s): parsing a 40 MB script and 20 MB messages on a loaded machine can hold
    # a worker's event loop past the suite's 5 s.
    beats = {"heartbeat_seconds": 30}
    run = {"model_call": beats, "tool_call": beats}
    config = make_config(home, temporal_address, storage=storage, user_id=unique("user"), run=run)
    big = "0123456789abcdef" * (BIG // 16)
    model = write_script(
        tmp_path,
        [
            calls(tool_call("write_file", path="/mnt/user-data/outputs/big.txt", content=big, append=True)),
            calls(tool_call("bash", command="cat /mnt/user-data/outputs/big.txt")),
            answer(big),
        ],
    )
    # The status query after the run closed replays its whole history in one activation, serializing the 20 MB
    # state for each activity that took it in the workflow thread (payload conversion runs there); on a loaded
    # 2-core machine that outlasted the SDK's fixed 2 s deadlock detector (TMPRL1101 answered the query, in CI).
    # Blocking workflow code is not what this test is about: debug_mode turns that wall-clock check off.
    async with running_worker(client, config, debug_mode=True):
        handle = await start_run(client, config, "write it", model=model)
        view = await handle.result()
        assert view.status == "completed" and view.final_message == big
        status = await handle.query("status", result_type=RunView)
        assert status.final_message == big
    outputs = home / "users" / config.user_id / "threads" / view.thread_id / "user-data/outputs"
    assert (outputs / "big.txt").stat().st_size == BIG

    snapshot = thread_store(config).load(ThreadRef(config.user_id, view.thread_id))
    tool_messages = [m for m in snapshot.state.messages if isinstance(m, ToolMessage)]
    assert tool_messages[0].content == "OK"
    # bash cut the output to 20,000 chars; ToolOutputBudget saved those through its activity, kept a preview.
    assert str(tool_messages[1].content).startswith("[Full bash output saved to")
    assert snapshot.state.messages[-1].content == big

    runs = await chain_histories(client_for(client, config), handle.id, handle.first_execution_run_id or "")
    _assert_claim_checked(runs, config)
    objects = open_object_store(config)
    keys = list(thread_payload_keys(objects, run_workflow_id(config.user_id, view.thread_id)))
    assert keys and all(key.startswith(PAYLOAD_PREFIX) for key in keys)
    assert max(objects.head(key).size for key in keys) > BIG  # type: ignore[union-attr]


def _long_thread(count: int) -> ThreadState:
    messages: list[Any] = []
    for index in range(count // 2):
        messages.append(HumanMessage(f"question {index}: " + "q" * 400, id=f"h{index}"))
        messages.append(AIMessage(f"answer {index}: " + "a" * 400, id=f"a{index}"))
    return ThreadState(messages=messages)


async def test_a_turn_on_a_2000_message_thread_completes_on_both_backends(
    client: Client, temporal_address: str, home: Path, tmp_path: Path, storage: dict[str, Any]
) -> None:
    config = make_config(home, temporal_address, storage=storage, user_id=unique("user"))
    thread = unique("thread")
    ref = ThreadRef(config.user_id, thread)
    thread_store(config).commit(ref, _long_thread(2000), expected_version=0, run_id="seed")
    model = write_script(tmp_path, [calls(tool_call("ls", path="/mnt/user-data")), answer("done")])
    async with running_worker(client, config):
        handle = await start_run(client, config, "one more", model=model, thread_id=thread)
        view = await handle.result()
    assert view.status == "completed" and view.final_message == "done"
    messages = thread_store(config).load(ref).state.messages
    # The 2,000 seeded messages, then this turn's (the user's, the tool call and result, the answer, and
    # whatever the lead chain injects).
    assert [m.id for m in messages[:2000:1999]] == ["h0", "a999"] and messages[-1].content == "done"
    assert len(messages) >= 2004

    runs = await chain_histories(client_for(client, config), handle.id, handle.first_execution_run_id or "")
    _assert_claim_checked(runs, config)
    # The second model call sent only the two new messages: its input stayed small and inline.
    inputs = [
        event.activity_task_scheduled_event_attributes.input
        for events in runs
        for event in events
        if event.activity_task_scheduled_event_attributes.activity_type.name == "model.invoke"
    ]
    assert len(inputs) == 2
    assert external_size(inputs[0].payloads[0]) > 2000 * 400
    assert external_size(inputs[1].payloads[0]) == 0 and inputs[1].ByteSize() < 20_000
    blobs = open_object_store(config)
    assert len(list(blobs.list(thread_blob_prefix(ref) + "msg/"))) >= 2003


# -- flat history per turn ------------------------------------------------------------------------------


async def test_history_bytes_per_turn_stay_flat_over_200_turns(
    client: Client, temporal_address: str, home: Path, tmp_path: Path
) -> None:
    turns = 210
    # The same tool call 200 times is exactly what LoopDetection stops; this test is about history, not loops.
    run = {"recursion_limit": turns + 10, "middlewares": {"loop_detection": {"enabled": False}}}
    config = make_config(home, temporal_address, run=run, user_id=unique("user"))
    script = [calls(tool_call("ls", path="/mnt/user-data")) for _ in range(turns - 1)] + [answer("done")]
    model = write_script(tmp_path, script)
    async with running_worker(client, config):
        handle = await start_run(client, config, "go", model=model)
        view = await handle.result()
    assert view.status == "completed" and view.turns == turns

    runs = await chain_histories(client_for(client, config), handle.id, handle.first_execution_run_id or "")
    assert len(runs) > 3  # the session server suggests continue-as-new after 150 events
    costs = {cost.turn: cost for cost in turn_costs(runs)}
    early = costs[min(turn for turn in costs if turn >= 10)]
    late = costs[min(turn for turn in costs if turn >= 200)]
    assert late.bytes <= 1.5 * early.bytes, (early, late)
    assert late.events == early.events
    assert all(cost.external_bytes == 0 for cost in costs.values())
