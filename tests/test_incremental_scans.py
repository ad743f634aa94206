"""Per-turn scans that read only what a growing conversation appended (``vocabulary.messages.extends``) give what a
scan of the whole conversation (a fresh instance) gives, and start over when the conversation did not only grow."""

from __future__ import annotations

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, RemoveMessage, ToolMessage

from middlewares._skill_context import SKILL_CONTEXT_ENTRY_KEY, SkillReads
from middlewares.input_sanitization import InputSanitizationMiddleware, last_genuine_user_index
from middlewares.tool_output_budget import ToolOutputBudgetMiddleware, ToolOutputConfig, over_budget
from vocabulary.delegation import SUBAGENT_STATUS_KEY
from vocabulary.delegation_ledger import DelegationLedger
from vocabulary.messages import REMOVE_ALL_MESSAGES, MessageMerger, add_messages, extends
from vocabulary.transcript import MessageHasher

RUN = "run-1"


def _task(call_id: str) -> AIMessage:
    args = {"description": f"job {call_id}", "subagent_type": "bash", "prompt": "go"}
    return AIMessage("", tool_calls=[{"name": "task", "args": args, "id": call_id}], id=f"ai-{call_id}")


def _result(call_id: str, status: str) -> ToolMessage:
    return ToolMessage(
        "done", tool_call_id=call_id, id=f"tm-{call_id}", additional_kwargs={SUBAGENT_STATUS_KEY: status}
    )


def _stamped(text: str) -> HumanMessage:
    return HumanMessage(text, id=f"h-{text}", additional_kwargs={"run_id": RUN})


def test_extends_means_the_same_objects_in_the_same_places() -> None:
    a, b, c = HumanMessage("a"), HumanMessage("b"), HumanMessage("c")
    assert extends([a, b, c], [a, b]) and extends([a, b], [a, b]) and extends([a], [])
    assert not extends([a], [a, b])
    assert not extends([a, c], [a, b])
    assert not extends([a, HumanMessage("b")], [a, b]), "an equal message is not the same one"


def test_the_ledger_reads_each_turn_as_a_whole_scan_would() -> None:
    older = [HumanMessage("before", id="h0"), _task("old")]  # a previous run's delegation: not this run's
    turns: list[list[BaseMessage]] = [[_stamped("go")], [_task("t1")], [_result("t1", "completed"), _task("t2")]]
    ledger, existing = DelegationLedger(RUN), []
    conversation: list[BaseMessage] = list(older)
    for step, appended in enumerate(turns):
        conversation = [*conversation, *appended]
        now = f"2026-12-02T00:00:0{step}"
        incremental = ledger.capture(conversation, existing, now=now)
        assert incremental == DelegationLedger(RUN).capture(conversation, existing, now=now)
        existing = [*existing, *incremental]
    assert [(e["id"], e["status"]) for e in existing] == [
        ("t1", "in_progress"),
        ("t1", "completed"),
        ("t2", "in_progress"),
    ]

    # A summary replaced the early messages: the list does not extend what was read, and the ledger starts over.
    summarized: list[BaseMessage] = [HumanMessage("summary", id="s"), *conversation[-2:]]
    now = "2026-12-02T00:00:09"
    assert ledger.capture(summarized, [], now=now) == DelegationLedger(RUN).capture(summarized, [], now=now)


def test_a_later_stamped_message_restarts_the_runs_messages_as_in_a_whole_scan() -> None:
    ledger = DelegationLedger(RUN)
    first: list[BaseMessage] = [_stamped("go"), _task("t1")]
    assert [e["id"] for e in ledger.capture(first, [], now="n")] == ["t1"]
    second = [*first, _stamped("again"), _task("t2")]
    assert ledger.capture(second, [], now="n") == DelegationLedger(RUN).capture(second, [], now="n")
    assert [e["id"] for e in ledger.capture(second, [], now="n")] == ["t2"]


def test_the_hasher_gives_a_growing_list_the_ids_a_fresh_hasher_gives_it() -> None:
    hasher = MessageHasher()
    conversation: list[BaseMessage] = [HumanMessage("a", id="a")]
    ids, bodies = hasher.hash(conversation)
    assert len(bodies) == 1
    conversation = [*conversation, AIMessage("b", id="b"), HumanMessage("c", id="c")]
    ids, bodies = hasher.hash(conversation)
    assert ids == MessageHasher().hash(conversation)[0]
    assert len(bodies) == 2, "only the appended messages are hashed"
    replaced: list[BaseMessage] = [HumanMessage("z", id="z"), *conversation[1:]]
    assert hasher.hash(replaced)[0] == MessageHasher().hash(replaced)[0]


SKILLS_ROOT = "/mnt/skills"


def _read(call_id: str, skill: str) -> AIMessage:
    args = {"path": f"{SKILLS_ROOT}/{skill}/SKILL.md"}
    return AIMessage("", tool_calls=[{"name": "read_file", "args": args, "id": call_id}], id=f"ai-{call_id}")


def _skill_result(call_id: str, skill: str, *, status: str = "success") -> ToolMessage:
    stamp = {"path": f"{SKILLS_ROOT}/{skill}/SKILL.md", "description": f"{skill} things"}
    return ToolMessage(
        "---",
        tool_call_id=call_id,
        id=f"tm-{call_id}",
        status=status,
        additional_kwargs={SKILL_CONTEXT_ENTRY_KEY: stamp},
    )


def test_the_skill_reads_read_each_turn_as_a_whole_scan_would() -> None:
    def whole(messages: list[BaseMessage]) -> list[dict[str, object]]:
        return SkillReads(skills_root=SKILLS_ROOT, read_tool_names=("read_file",)).capture(messages)

    reads = SkillReads(skills_root=SKILLS_ROOT, read_tool_names=("read_file",))
    turns: list[list[BaseMessage]] = [
        [HumanMessage("go", id="h")],
        [_read("r1", "pdf"), _skill_result("r1", "pdf")],
        [_skill_result("r2", "csv")],  # its call comes later: a whole scan pairs them too
        [_read("r2", "csv"), _read("r3", "web"), _skill_result("r3", "web", status="error")],
        [_read("r1", "web")],  # the same call id again, another path: the later call wins, the pdf read no longer
    ]
    conversation: list[BaseMessage] = []
    seen = []
    for appended in turns:
        conversation = [*conversation, *appended]
        incremental = reads.capture(conversation)
        assert incremental == whole(conversation)
        seen.append([entry["name"] for entry in incremental])
    assert seen == [[], ["pdf"], ["pdf"], ["pdf", "csv"], ["csv"]]

    summarized: list[BaseMessage] = [HumanMessage("summary", id="s"), *conversation[-3:]]
    assert reads.capture(summarized) == whole(summarized)


def test_the_output_budget_checks_each_turn_as_a_whole_check_would() -> None:
    config = ToolOutputConfig(externalize_min_chars=0, fallback_max_chars=10)
    middleware = ToolOutputBudgetMiddleware(config)

    def tool(call_id: str, size: int) -> ToolMessage:
        return ToolMessage("x" * size, tool_call_id=call_id, id=f"tm-{call_id}", name="bash")

    turns: list[list[BaseMessage]] = [
        [HumanMessage("go", id="h")],
        [_read("r1", "pdf"), tool("r1", 5)],
        [AIMessage("", id="a2"), tool("r2", 50)],
    ]
    conversation: list[BaseMessage] = []
    for appended in turns:
        conversation = [*conversation, *appended]
        assert middleware._over_budget(conversation) == [over_budget(m, config) for m in conversation]
    assert middleware._over_budget(conversation)[-1], "the long output is over budget"
    cut: list[BaseMessage] = [tool("r3", 50), *conversation[1:]]
    assert middleware._over_budget(cut) == [over_budget(m, config) for m in cut]


def test_the_input_sanitization_finds_the_last_user_message_as_a_whole_scan_would() -> None:
    middleware = InputSanitizationMiddleware()
    hidden = HumanMessage("memory", id="hidden", additional_kwargs={"hide_from_ui": True})
    turns: list[list[BaseMessage]] = [
        [AIMessage("hello", id="a0")],  # no user message yet
        [HumanMessage("first", id="h1"), AIMessage("", id="a1")],
        [ToolMessage("out", tool_call_id="c1", id="t1"), hidden],  # a hidden message is not the user's
        [],
        [HumanMessage("second", id="h2")],
    ]
    conversation: list[BaseMessage] = []
    found = []
    for appended in turns:
        conversation = [*conversation, *appended]
        index = middleware._last_user_index(conversation)
        assert index == last_genuine_user_index(conversation)
        found.append(index)
    assert found == [None, 1, 1, 1, 5]
    replaced: list[BaseMessage] = [AIMessage("summary", id="s"), *conversation[-2:]]
    assert middleware._last_user_index(replaced) == last_genuine_user_index(replaced) == 2


def _named(messages: list[BaseMessage]) -> list[tuple[str | None, object]]:
    """Ids and contents, an id given by the merge itself shown as ``new``."""
    given = ("new-", "unused")
    return [("new" if (m.id or "").startswith(given) else m.id, m.content) for m in messages]


def test_a_run_s_merger_gives_what_add_messages_gives_merge_after_merge() -> None:
    """The run's ``messages`` reducer keeps its last result's id index; every kind of update (appends, a replace by
    id, a removal, a message without an id, REMOVE_ALL_MESSAGES, a list changed in place, another conversation)
    merges exactly as ``add_messages`` does from scratch."""
    merger = MessageMerger()
    ids = iter(range(1_000))

    def new_id() -> str:
        return f"new-{next(ids)}"

    a, b = HumanMessage("a", id="a"), AIMessage("b", id="b")
    steps: list[tuple[list[BaseMessage] | None, list[BaseMessage] | BaseMessage]] = [
        (None, [a, b]),
        (None, ToolMessage("t", tool_call_id="c1", id="t")),
        (None, AIMessage("b again", id="b")),  # replaces b in place
        (None, [HumanMessage("no id"), AIMessage("c", id="c")]),
        (None, RemoveMessage(id="t")),
        (None, AIMessage("d", id="d")),
        ([HumanMessage("elsewhere", id="x")], AIMessage("y", id="y")),  # not what the merger merged last
        (None, [RemoveMessage(id=REMOVE_ALL_MESSAGES), HumanMessage("summary", id="s")]),
        (None, AIMessage("e", id="e")),
    ]
    state: list[BaseMessage] = []
    for other, update in steps:
        left = other if other is not None else state
        expected = add_messages(left, update, new_id=lambda: "unused")
        state = merger(left, update, new_id=new_id)
        assert _named(state) == _named(expected)
    changed = list(state)
    changed[0] = HumanMessage("replaced in place", id="z")  # a list changed in place no longer extends the last result
    assert merger(changed, AIMessage("f", id="f"), new_id=new_id) == add_messages(
        changed, AIMessage("f", id="f"), new_id=new_id
    )
    appended = merger(state, [], new_id=new_id)
    appended.append(AIMessage("g", id="g"))  # appended in place: indexed as new
    assert [m.id for m in merger(appended, AIMessage("g2", id="g"), new_id=new_id)] == [
        m.id for m in add_messages(appended, AIMessage("g2", id="g"), new_id=new_id)
    ]
