"""ThreadState channels and reducers against DeerFlow's ``bytedance/deer-flow:
backend/packages/harness/deerflow/agents/thread_state.py``."""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from temporalio.contrib.pydantic import pydantic_data_converter

from vocabulary.messages import (
    REMOVE_ALL_MESSAGES,
    AIMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)
from vocabulary.state import (
    CHANNELS,
    DELEGATION_CAP,
    REDUCER_FIELDS,
    SKILL_CONTEXT_CAP,
    TERMINAL_DELEGATION_STATUSES,
    SandboxConflictError,
    ThreadState,
    apply_update,
    merge_artifacts,
    merge_delegations,
    merge_goal,
    merge_promoted,
    merge_sandbox,
    merge_skill_context,
    merge_todos,
    merge_viewed_images,
)

PROPERTY = settings(max_examples=100, deadline=None)


def id_source() -> Callable[[], str]:
    counter = itertools.count()
    return lambda: f"gen-{next(counter)}"


def delegation(entry_id: str, status: str = "in_progress", **fields: Any) -> dict[str, Any]:
    return {
        "id": entry_id,
        "description": f"task {entry_id}",
        "subagent_type": "general-purpose",
        "status": status,
        "created_at": f"t-{entry_id}",
        **fields,
    }


def skill(path: str, name: str = "s", description: str = "d", loaded_at: int = 0) -> dict[str, Any]:
    return {"name": name, "path": path, "description": description, "loaded_at": loaded_at}


# --- channel contract -----------------------------------------------------------------------------------


def test_reducer_fields_match_deerflows_contract() -> None:
    """DeerFlow pins THREAD_STATE_REDUCER_FIELDS in test_thread_state_reducers.py."""
    assert {
        "messages",
        "sandbox",
        "artifacts",
        "todos",
        "goal",
        "viewed_images",
        "promoted",
        "delegations",
        "skill_context",
        "approvals",  # hartflow's own: tool approvals by request id (vocabulary/approvals.py)
    } == REDUCER_FIELDS
    assert REDUCER_FIELDS < CHANNELS
    assert {"thread_data", "title", "uploaded_files", "summary_text", "background_tasks"} == CHANNELS - REDUCER_FIELDS


# --- sandbox --------------------------------------------------------------------------------------------


def test_sandbox_none_update_keeps_and_none_state_takes_the_update() -> None:
    current = {"sandbox_id": "a"}

    assert merge_sandbox(current, None) is current
    assert merge_sandbox(None, current) is current
    assert merge_sandbox(None, None) is None


def test_sandbox_same_id_keeps_the_existing_value() -> None:
    current = {"sandbox_id": "a"}

    assert merge_sandbox(current, {"sandbox_id": "a"}) is current


@pytest.mark.parametrize(
    ("existing", "new", "shown"),
    [
        ({"sandbox_id": "a"}, {"sandbox_id": "b"}, "'a' != 'b'"),
        # DeerFlow only special-cases a None *value*: a None id next to a real one is still a conflict.
        ({"sandbox_id": None}, {"sandbox_id": "b"}, "None != 'b'"),
        ({"sandbox_id": "a"}, {}, "'a' != None"),
    ],
)
def test_sandbox_conflicting_ids_raise(existing: dict[str, Any], new: dict[str, Any], shown: str) -> None:
    with pytest.raises(SandboxConflictError, match=re.escape(f"Conflicting sandbox state updates: {shown}")):
        merge_sandbox(existing, new)


def test_sandbox_conflict_through_apply_update_is_a_value_error_and_leaves_the_state_alone() -> None:
    state = ThreadState(sandbox={"sandbox_id": "a"})

    with pytest.raises(ValueError, match="Conflicting sandbox state updates"):
        apply_update(state, {"sandbox": {"sandbox_id": "b"}}, new_id=id_source())

    assert state.sandbox == {"sandbox_id": "a"}


# --- the other reducers ---------------------------------------------------------------------------------


def test_artifacts_concatenate_and_dedupe_in_first_seen_order() -> None:
    assert merge_artifacts(["a", "b"], ["b", "c", "a", "d", "c"]) == ["a", "b", "c", "d"]
    assert merge_artifacts(["a"], None) == ["a"]
    assert merge_artifacts(["a"], []) == ["a"]


def test_todos_none_keeps_and_an_empty_list_clears() -> None:
    todos = [{"content": "x", "status": "pending"}]

    assert merge_todos(todos, None) == todos
    assert merge_todos(todos, []) == []
    assert merge_todos(None, todos) == todos
    assert merge_todos(todos, [{"content": "y", "status": "completed"}]) == [{"content": "y", "status": "completed"}]


def test_goal_none_keeps_anything_else_replaces() -> None:
    goal = {"objective": "ship", "status": "active"}

    assert merge_goal(goal, None) is goal
    assert merge_goal(goal, {"objective": "rest", "status": "active"}) == {"objective": "rest", "status": "active"}


def test_viewed_images_merge_by_path_and_an_empty_dict_clears() -> None:
    seen = {"/a.png": {"mime_type": "image/png", "size": 1, "actual_path": "/h/a.png"}}
    newer = {"/a.png": {"mime_type": "image/png", "size": 2, "actual_path": "/h/a.png"}}
    other = {"/b.jpg": {"mime_type": "image/jpeg", "size": 3, "actual_path": "/h/b.jpg"}}

    assert merge_viewed_images(seen, None) == seen
    assert merge_viewed_images(seen, {}) == {}
    assert merge_viewed_images(seen, {**newer, **other}) == {**newer, **other}


def test_promoted_empty_keeps() -> None:
    current = {"catalog_hash": "h1", "names": ["a"]}

    assert merge_promoted(current, None) is current
    assert merge_promoted(current, {}) is current


def test_promoted_hash_change_replaces_and_same_hash_unions() -> None:
    current = {"catalog_hash": "h1", "names": ["a", "b"]}

    assert merge_promoted(current, {"catalog_hash": "h1", "names": ["b", "c", "c"]}) == {
        "catalog_hash": "h1",
        "names": ["a", "b", "c"],
    }
    assert merge_promoted(current, {"catalog_hash": "h2", "names": ["c", "c", "d"]}) == {
        "catalog_hash": "h2",
        "names": ["c", "d"],
    }
    assert merge_promoted(None, {"catalog_hash": "h1", "names": ["x", "x"]}) == {"catalog_hash": "h1", "names": ["x"]}


def test_delegations_new_ids_append_and_the_latest_entry_wins_in_its_first_seen_position() -> None:
    ledger = [delegation("1"), delegation("2")]

    merged = merge_delegations(ledger, [delegation("3"), delegation("1", "completed", result_brief="done")])

    assert [(e["id"], e["status"]) for e in merged] == [("1", "completed"), ("2", "in_progress"), ("3", "in_progress")]
    assert merged[0]["result_brief"] == "done"


def test_delegations_latest_entry_replaces_the_whole_entry() -> None:
    ledger = [delegation("1", result_ref="r1")]

    (entry,) = merge_delegations(ledger, [delegation("1", "running")])

    assert "result_ref" not in entry


@pytest.mark.parametrize("terminal", sorted(TERMINAL_DELEGATION_STATUSES))
def test_delegations_terminal_status_is_never_downgraded(terminal: str) -> None:
    ledger = [delegation("1", terminal, result_brief="final")]

    assert merge_delegations(ledger, [delegation("1", "in_progress", description="stale")]) == ledger


def test_delegations_terminal_statuses_are_deerflows_subagent_statuses() -> None:
    assert {"completed", "failed", "cancelled", "timed_out", "polling_timed_out"} == TERMINAL_DELEGATION_STATUSES


def test_delegations_one_terminal_status_may_replace_another() -> None:
    (entry,) = merge_delegations([delegation("1", "timed_out")], [delegation("1", "completed")])

    assert entry["status"] == "completed"


def test_delegations_keep_the_first_created_at_and_fill_a_missing_run_id() -> None:
    ledger = [delegation("1", created_at="first", run_id="run-1")]

    (kept,) = merge_delegations(ledger, [delegation("1", "completed", created_at="later")])
    (explicit,) = merge_delegations(ledger, [delegation("1", "completed", run_id="run-2")])

    assert (kept["created_at"], kept["run_id"]) == ("first", "run-1")
    # As in DeerFlow: an update that names its own run_id keeps it (only the created_at is pinned).
    assert (explicit["created_at"], explicit["run_id"]) == ("first", "run-2")


def test_delegations_cap_keeps_the_most_recent_fifty() -> None:
    ledger = [delegation(str(i)) for i in range(45)]

    merged = merge_delegations(ledger, [delegation(str(i)) for i in range(45, 60)] + [delegation("0", "completed")])

    assert len(merged) == DELEGATION_CAP == 50
    # Updating entry 0 does not move it: it was first seen earliest, so it is the one dropped first.
    assert [e["id"] for e in merged] == [str(i) for i in range(10, 60)]


def test_delegations_empty_update_keeps() -> None:
    ledger = [delegation("1")]

    assert merge_delegations(ledger, None) is ledger
    assert merge_delegations(ledger, []) is ledger


def test_skill_context_dedupes_by_path_and_a_reread_refreshes_recency() -> None:
    current = [skill("/a", loaded_at=1), skill("/b", loaded_at=2)]

    merged = merge_skill_context(current, [skill("/a", description="new", loaded_at=3), skill("/c", loaded_at=4)])

    assert [(e["path"], e["loaded_at"]) for e in merged] == [("/b", 2), ("/a", 3), ("/c", 4)]
    assert merged[1]["description"] == "new"


def test_skill_context_caps_at_the_eight_most_recent() -> None:
    merged = merge_skill_context([skill(f"/{i}") for i in range(6)], [skill(f"/{i}") for i in range(6, 10)])

    assert len(merged) == SKILL_CONTEXT_CAP == 8
    assert [e["path"] for e in merged] == [f"/{i}" for i in range(2, 10)]


def test_skill_context_entries_are_normalised_references() -> None:
    raw = {"path": "/mnt/skills/public/x/SKILL.md", "name": None, "description": "a\n\n  b " + "c" * 600, "body": "…"}

    (entry,) = merge_skill_context([], [raw])
    (other,) = merge_skill_context([], [{"path": "/p", "loaded_at": "soon"}])

    assert set(entry) == {"name", "path", "description", "loaded_at"}
    assert entry["name"] == ""
    assert entry["description"].startswith("a b c")
    assert len(entry["description"]) == 500
    assert (other["description"], other["loaded_at"]) == ("", 0)


def test_skill_context_empty_update_keeps() -> None:
    current = [skill("/a")]

    assert merge_skill_context(current, None) == current
    assert merge_skill_context(current, []) == current


# --- apply_update ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("channel", "value"),
    [
        ("title", "A title"),
        ("title", None),
        ("summary_text", "so far"),
        ("thread_data", {"workspace_path": "/w", "uploads_path": "/u", "outputs_path": "/o"}),
        ("uploaded_files", []),
        ("background_tasks", [{"task_id": "t", "task_name": "n", "status": "running", "updated_at": "now"}]),
    ],
)
def test_channels_without_a_reducer_are_last_write_wins(channel: str, value: Any) -> None:
    state = ThreadState(
        title="old",
        summary_text="old",
        thread_data={"workspace_path": "/old"},
        uploaded_files=[{"filename": "a.txt"}],
        background_tasks=[{"task_id": "old"}],
    )

    assert getattr(apply_update(state, {channel: value}, new_id=id_source()), channel) == value


def test_apply_update_rejects_unknown_channels() -> None:
    with pytest.raises(ValueError, match=re.escape("state update names unknown channel(s): bogus, other")):
        apply_update(ThreadState(), {"other": 1, "title": "t", "bogus": 2}, new_id=id_source())


def test_apply_update_ignores_jump_to() -> None:
    state = ThreadState(title="t")

    after = apply_update(state, {"jump_to": "model", "title": "u"}, new_id=id_source())

    assert after.title == "u"
    # model_copy does not validate, so a leaked control key would sit on the instance unnoticed by ==.
    assert not hasattr(after, "jump_to")


def test_apply_update_with_nothing_returns_the_state() -> None:
    state = ThreadState(title="t")

    assert apply_update(state, None, new_id=id_source()) is state
    assert apply_update(state, {}, new_id=id_source()) is state


def test_apply_update_merges_every_channel_and_leaves_the_input_alone() -> None:
    state = ThreadState(
        messages=[HumanMessage("q", id="1")],
        artifacts=["/a"],
        todos=[{"content": "x", "status": "pending"}],
        viewed_images={"/a.png": {"mime_type": "image/png", "size": 1, "actual_path": "/h"}},
        delegations=[delegation("1")],
    )
    before = state.model_dump()

    after = apply_update(
        state,
        {
            "messages": [AIMessage("a")],
            "artifacts": ["/b", "/a"],
            "todos": None,
            "viewed_images": {},
            "delegations": [delegation("1", "completed")],
            "sandbox": {"sandbox_id": "local:u:t"},
        },
        new_id=id_source(),
    )

    assert state.model_dump() == before
    assert [m.id for m in after.messages] == ["1", "gen-0"]
    assert after.artifacts == ["/a", "/b"]
    assert after.todos == [{"content": "x", "status": "pending"}]
    assert after.viewed_images == {}
    assert after.delegations[0]["status"] == "completed"
    assert after.sandbox == {"sandbox_id": "local:u:t"}


def test_summarization_rewrite_through_apply_update() -> None:
    """Summarization's output: REMOVE_ALL_MESSAGES plus the preserved messages, and the summary outside messages."""
    state = ThreadState(
        messages=[HumanMessage("old", id="1"), AIMessage("old answer", id="2"), HumanMessage("latest", id="3")]
    )
    preserved = state.messages[2]

    after = apply_update(
        state,
        {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), preserved], "summary_text": "They talked."},
        new_id=id_source(),
    )

    assert after.messages == [preserved]
    assert after.summary_text == "They talked."


# --- JSON round trip ------------------------------------------------------------------------------------


def full_state() -> ThreadState:
    return ThreadState(
        messages=[
            SystemMessage("sys", id="s", additional_kwargs={"dynamic_context_reminder": True}),
            HumanMessage(
                [
                    {"type": "text", "text": "look"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}},
                ],
                id="h",
                name="alice",
                additional_kwargs={"hide_from_ui": True, "human_input_response": {"request_id": "r", "answer": "y"}},
            ),
            AIMessage(
                "",
                id="a",
                tool_calls=[{"name": "bash", "args": {"command": "ls"}, "id": "call-1"}],
                invalid_tool_calls=[{"name": "bad", "args": "{", "id": "call-2", "error": "not json"}],
                usage_metadata={"input_tokens": 10, "output_tokens": 5, "total_tokens": 15},
                response_metadata={"finish_reason": "tool_calls", "model_name": "scripted"},
                additional_kwargs={"deerflow_error_fallback": False},
            ),
            ToolMessage(
                "Error: nope",
                tool_call_id="call-1",
                id="t",
                name="bash",
                status="error",
                artifact={"exit_code": 1, "paths": ["/mnt/user-data/outputs/x"]},
                additional_kwargs={"deerflow_tool_meta": {"status": "error", "recoverable_by_model": True}},
            ),
        ],
        sandbox={"sandbox_id": "local:u:t"},
        thread_data={"workspace_path": "/w", "uploads_path": "/u", "outputs_path": "/o"},
        title="A thread",
        artifacts=["/mnt/user-data/outputs/x"],
        todos=[{"content": "x", "status": "in_progress"}],
        goal={"objective": "ship", "status": "active", "continuation_count": 0},
        uploaded_files=[{"filename": "a.txt", "size": 3}],
        viewed_images={"/a.png": {"mime_type": "image/png", "size": 1, "actual_path": "/h/a.png"}},
        promoted={"catalog_hash": "h1", "names": ["web_search"]},
        delegations=[delegation("1", "completed", run_id="run-1", result_brief="done")],
        skill_context=[skill("/mnt/skills/public/x/SKILL.md", loaded_at=3)],
        summary_text="so far",
        background_tasks=[{"task_id": "t", "task_name": "n", "status": "running", "updated_at": "now"}],
    )


def test_json_round_trip_keeps_every_message_type_and_channel() -> None:
    state = full_state()

    # The thread store writes json.dumps(state.model_dump(mode="json")) and reads it back with model_validate.
    restored = ThreadState.model_validate(json.loads(json.dumps(state.model_dump(mode="json"))))

    assert restored == state
    assert [type(m) for m in restored.messages] == [SystemMessage, HumanMessage, AIMessage, ToolMessage]
    ai, tool = restored.messages[2], restored.messages[3]
    assert isinstance(ai, AIMessage) and isinstance(tool, ToolMessage)
    assert ai.tool_calls[0]["args"] == {"command": "ls"}
    assert ai.invalid_tool_calls[0]["error"] == "not json"
    assert ai.usage_metadata == {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}
    assert (tool.status, tool.tool_call_id, tool.name) == ("error", "call-1", "bash")
    assert tool.artifact == {"exit_code": 1, "paths": ["/mnt/user-data/outputs/x"]}
    assert restored.messages[1].additional_kwargs["human_input_response"] == {"request_id": "r", "answer": "y"}


def test_temporal_payload_round_trip_keeps_the_state() -> None:
    """ThreadState also travels in workflow/activity payloads through the pydantic data converter."""
    state = full_state()
    converter = pydantic_data_converter.payload_converter

    (restored,) = converter.from_payloads(converter.to_payloads([state]), [ThreadState])

    assert restored == state


# --- properties -----------------------------------------------------------------------------------------

paths = st.sampled_from([f"/{c}" for c in "abcdefgh"])
artifact_lists = st.lists(paths, max_size=8)


@PROPERTY
@given(existing=artifact_lists, new=artifact_lists)
def test_artifacts_merge_is_an_order_preserving_deduped_concatenation(existing: list[str], new: list[str]) -> None:
    current = list(dict.fromkeys(existing))

    merged = merge_artifacts(current, new)

    assert merged == [p for i, p in enumerate(current + new) if p not in (current + new)[:i]]
    assert merge_artifacts(merged, new) == merged
    assert merge_artifacts(merged, merged) == merged


names = st.lists(st.sampled_from(["a", "b", "c", "d", "e"]), max_size=5)


@PROPERTY
@given(start=names, first=names, second=names)
def test_promoted_union_within_a_hash_is_commutative(start: list[str], first: list[str], second: list[str]) -> None:
    existing = merge_promoted(None, {"catalog_hash": "h", "names": start})

    one_way = merge_promoted(
        merge_promoted(existing, {"catalog_hash": "h", "names": first}), {"catalog_hash": "h", "names": second}
    )
    other_way = merge_promoted(
        merge_promoted(existing, {"catalog_hash": "h", "names": second}), {"catalog_hash": "h", "names": first}
    )

    assert one_way is not None and other_way is not None
    assert set(one_way["names"]) == set(other_way["names"]) == {*start, *first, *second}
    assert len(one_way["names"]) == len(set(one_way["names"]))
    assert one_way["catalog_hash"] == other_way["catalog_hash"] == "h"


@PROPERTY
@given(start=names, new=names)
def test_promoted_hash_change_drops_stale_names(start: list[str], new: list[str]) -> None:
    existing = merge_promoted(None, {"catalog_hash": "h1", "names": start})

    assert merge_promoted(existing, {"catalog_hash": "h2", "names": new}) == {
        "catalog_hash": "h2",
        "names": list(dict.fromkeys(new)),
    }


STATUSES = [*sorted(TERMINAL_DELEGATION_STATUSES), "in_progress", "running", "pending"]


@st.composite
def delegation_updates(draw: st.DrawFn) -> list[dict[str, Any]]:
    entries = []
    for _ in range(draw(st.integers(min_value=0, max_value=20))):
        entry_id = str(draw(st.integers(min_value=0, max_value=79)))
        entries.append(
            delegation(
                entry_id,
                draw(st.sampled_from(STATUSES)),
                created_at=draw(st.sampled_from(["t1", "t2", "t3"])),
                **({"run_id": draw(st.sampled_from(["r1", "r2"]))} if draw(st.booleans()) else {}),
            )
        )
    return entries


@PROPERTY
@given(updates=st.lists(delegation_updates(), max_size=10))
def test_delegation_ledger_laws(updates: list[list[dict[str, Any]]]) -> None:
    ledger: list[dict[str, Any]] = []
    for update in updates:
        before = {e["id"]: e for e in ledger}
        order_before = [e["id"] for e in ledger]

        ledger = merge_delegations(ledger, update)

        assert len(ledger) <= DELEGATION_CAP
        ids = [e["id"] for e in ledger]
        assert len(set(ids)) == len(ids)
        # Entries that survive keep their relative (first-seen) order.
        assert [i for i in ids if i in before] == [i for i in order_before if i in ids]
        for entry in ledger:
            previous = before.get(entry["id"])
            if previous is None:
                continue
            if previous["status"] in TERMINAL_DELEGATION_STATUSES:
                assert entry["status"] in TERMINAL_DELEGATION_STATUSES
            assert entry["created_at"] == previous["created_at"]


@st.composite
def skill_updates(draw: st.DrawFn) -> list[dict[str, Any]]:
    return [
        skill(draw(st.sampled_from([f"/skills/{i}/SKILL.md" for i in range(12)])), loaded_at=draw(st.integers(0, 99)))
        for _ in range(draw(st.integers(min_value=0, max_value=6)))
    ]


@PROPERTY
@given(updates=st.lists(skill_updates(), max_size=10))
def test_skill_context_laws(updates: list[list[dict[str, Any]]]) -> None:
    context: list[dict[str, Any]] = []
    for update in updates:
        context = merge_skill_context(context, update)

        paths_now = [e["path"] for e in context]
        assert len(context) <= SKILL_CONTEXT_CAP
        assert len(set(paths_now)) == len(paths_now)
        if update:
            # The last entry of the update is the most recent one, with the update's own values.
            assert context[-1] == update[-1]
            recent = list(dict.fromkeys(reversed([e["path"] for e in update])))[:SKILL_CONTEXT_CAP]
            assert paths_now[-len(recent) :] == list(reversed(recent))
